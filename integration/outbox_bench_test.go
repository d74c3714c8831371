package integration

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/convoy-im/convoy/router"
)

// BenchmarkOutboxSendPath measures the seed's send path (a message, its
// body and an inbox row for each of 20 members, over both datasources)
// through one Convoy, side by side in one run (make bench-outbox):
//
//   - outbox: one outbox transaction (convoy_txn = 'outbox'), the inbox
//     rows delivered after COMMIT by the elected worker;
//   - per-shard: what an application does without it: the message's
//     transaction, then one transaction per member shard (BEGIN, INSERT,
//     COMMIT);
//   - autocommit: the inbox rows as one autocommit multi-row INSERT, which
//     Convoy splits per shard (no atomicity: a failure half way leaves some
//     shards written).
//
// Each mode runs paced (8 senders, 40 sends/s in all: 800 inbox rows/s,
// within what the outbox delivers on 2 cores) and then flat out (8
// senders for 10 s). Reported: sends per second and their latency; for the
// outbox the delivery lag an application sees, from COMMIT until the last
// member's row is readable (sampled), and the rate the backlog of the
// flat-out run drains at.
func BenchmarkOutboxSendPath(b *testing.B) {
	s := newStack(b)
	const members, senders, paced = 20, 8, 40
	d := 10 * time.Second
	var next atomic.Uint64
	next.Store(50_000_000)
	admin := s.convoy.open(b, "convoy", "convoy", "im")
	for _, load := range []string{"paced", "flat-out"} {
		for _, mode := range []string{"outbox", "per-shard", "autocommit"} {
			b.Run(load+"/"+mode, func(b *testing.B) {
				dsn := s.convoy.dsn("app", "app secret", "im") + "&interpolateParams=true"
				if mode == "outbox" {
					dsn += "&convoy_txn=%27outbox%27"
				}
				db := openDSN(b, dsn)
				db.SetMaxIdleConns(senders)
				reader := openDSN(b, s.convoy.dsn("app", "app secret", "im"))
				var lagMu sync.Mutex
				var lags []time.Duration
				var sampling sync.WaitGroup
				// The lag is sampled on every 2nd paced send, polled every
				// 2 ms; flat out (lags of seconds) every 20th, every 20 ms.
				interval, sampleEvery, poll := time.Duration(0), uint64(20), 20*time.Millisecond
				if load == "paced" {
					interval, sampleEvery, poll = time.Second*senders/paced, 2, 2*time.Millisecond
				}
				b.ResetTimer()
				began := time.Now()
				lat := pacedLatencies(b, senders, d, interval, func(i int) error {
					id := next.Add(1)
					conv := 900_000 + uint64(i%64) + uint64(len(mode))*1000
					uids := make([]uint64, members)
					for k := range uids {
						uids[k] = id*members + uint64(k)
					}
					if err := benchSend(db, mode, conv, id, uids); err != nil {
						return err
					}
					if mode == "outbox" && id%sampleEvery == 0 {
						committed := time.Now()
						sampling.Add(1)
						go func() {
							defer sampling.Done()
							last := uids[len(uids)-1]
							for deadline := committed.Add(5 * time.Minute); time.Now().Before(deadline); time.Sleep(poll) {
								var n int
								if err := reader.QueryRow("SELECT COUNT(*) FROM im_inbox WHERE uid = ? AND msg_id = ?", last, id).Scan(&n); err == nil && n == 1 {
									lagMu.Lock()
									lags = append(lags, time.Since(committed))
									lagMu.Unlock()
									return
								}
							}
						}()
					}
					return nil
				})
				b.StopTimer()
				reportLatencies(b, "send-", d, lat)
				if mode != "outbox" {
					return
				}
				waitFor(b, "the outbox drained", 5*time.Minute, func() bool { return outboxCounts(b, admin) == [2]int{} })
				if load == "flat-out" {
					b.ReportMetric(float64(len(lat)*members)/time.Since(began).Seconds(), "delivered-entries/s")
				}
				sampling.Wait()
				sort.Slice(lags, func(i, j int) bool { return lags[i] < lags[j] })
				if len(lags) == 0 {
					b.Fatal("no delivery was seen")
				}
				b.ReportMetric(float64(lags[len(lags)/2].Milliseconds()), "lag-p50-ms")
				b.ReportMetric(float64(lags[len(lags)*99/100].Milliseconds()), "lag-p99-ms")
			})
		}
	}
}

// benchSend sends one message the way mode says.
func benchSend(db *sql.DB, mode string, conv, id uint64, uids []uint64) error {
	ctx := context.Background()
	var q strings.Builder
	rows := func(us []uint64) string {
		q.Reset()
		q.WriteString("INSERT INTO im_inbox (uid, conv_id, seq, msg_id, send_time) VALUES ")
		for i, u := range us {
			if i > 0 {
				q.WriteString(",")
			}
			fmt.Fprintf(&q, "(%d,%d,%d,%d,NOW(3))", u, conv, id, id)
		}
		return q.String()
	}
	message := func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, "INSERT INTO conv_msg (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES (?, ?, ?, 1, 1, NOW(3))", conv, id, id); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, "INSERT INTO msg_content (msg_id, conv_id, sender_uid, msg_type, content, created_at) VALUES (?, ?, 1, 1, 'hello', NOW(3))", id, conv)
		return err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := message(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if mode == "outbox" {
		if _, err := tx.ExecContext(ctx, rows(uids)); err != nil {
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	if mode == "autocommit" {
		_, err := db.ExecContext(ctx, rows(uids))
		return err
	}
	byShard := map[router.Shard][]uint64{}
	for _, u := range uids {
		byShard[router.ShardOf(u)] = append(byShard[router.ShardOf(u)], u)
	}
	for _, us := range byShard {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, rows(us)); err != nil {
			_ = tx.Rollback()
			return err
		}
		if err := tx.Commit(); err != nil {
			return err
		}
	}
	return nil
}

// pacedLatencies runs op from senders goroutines for d (i numbers the
// calls, distinct across goroutines), each sending every interval
// (staggered; 0: back to back), and returns their latencies, sorted; any
// error fails the benchmark. Paced, it is an open loop: a send's latency
// counts from when it was due, so a send that had to wait for the one
// before it counts that wait too.
func pacedLatencies(b *testing.B, senders int, d, interval time.Duration, op func(i int) error) []time.Duration {
	var mu sync.Mutex
	var lat []time.Duration
	var errs []error
	var wg sync.WaitGroup
	start := time.Now()
	stop := start.Add(d)
	for c := 0; c < senders; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			var mine []time.Duration
			for k := 0; ; k++ {
				due := time.Now()
				if interval > 0 {
					due = start.Add(time.Duration(k)*interval + time.Duration(c)*interval/time.Duration(senders))
					time.Sleep(time.Until(due))
				}
				if due.After(stop) {
					break
				}
				if err := op(c*1_000_000 + k); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					continue
				}
				mine = append(mine, time.Since(due))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}(c)
	}
	wg.Wait()
	if len(errs) > 0 {
		b.Fatalf("%d errors; first: %v", len(errs), errs[0])
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return lat
}
