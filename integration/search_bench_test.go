package integration

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/convoy-im/convoy/internal/testsvc"
)

// BenchmarkSearchIndexLag measures how long a message takes to become
// searchable through the index (its created_at is older than the fresh
// window, so only the index can find it) while writers send the IM mix
// through Convoy: messages (conv_msg + msg_content, half in one
// transaction), a history page read per message and an edit every tenth,
// at a fixed total rate. A prober sends a message with a unique word every
// 100 ms and searches for it every 10 ms until it is found. Run: make
// bench-search.
func BenchmarkSearchIndexLag(b *testing.B) {
	for _, engine := range []string{"bleve", "sphinx"} {
		b.Run(engine, func(b *testing.B) {
			for range b.N {
				benchIndexLag(b, engine, *lagRate, 20*time.Second)
			}
		})
	}
}

var lagRate = flag.Int("search.lag.rate", 300, "messages per second the writers of BenchmarkSearchIndexLag aim at")

func benchIndexLag(b *testing.B, engine string, rate int, d time.Duration) {
	s := newStack(b)
	cfg := fmt.Sprintf("search:\n  enabled: true\n  engine: bleve\n  dir: %s", b.TempDir())
	if engine == "sphinx" {
		cfg = fmt.Sprintf("search:\n  enabled: true\n  engine: sphinx\n  sphinx:\n    partitions: [%s]", strings.Join(testsvc.StartSphinx(b, 2).Addrs(), ", "))
	}
	p := startConvoy(b, s.etcd.Endpoints(), cfg)
	db := p.open(b, "convoy", "convoy", "im")
	db.SetMaxOpenConns(16)
	const uid = 77
	var convs []uint64
	for i := range 200 {
		c := uint64(10_000 + i*13)
		convs = append(convs, c)
		if _, err := db.Exec("INSERT INTO im_conv_member (uid, conv_id, updated_at) VALUES (?, ?, NOW(3))", uid, c); err != nil {
			b.Fatal(err)
		}
	}
	old := time.Now().Add(-time.Hour)
	var nextID atomic.Uint64
	nextID.Store(1 << 44)
	send := func(r *rand.Rand, conv uint64, text string) (uint64, error) {
		id := nextID.Add(1)
		at := old.Add(time.Duration(id%3_000_000) * time.Millisecond).UTC().Format("2006-01-02 15:04:05.000")
		if r.IntN(2) == 0 {
			tx, err := db.Begin()
			if err != nil {
				return 0, err
			}
			if _, err := tx.Exec("INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (?, ?, 1, 1, ?)", conv, id, at); err != nil {
				tx.Rollback()
				return 0, err
			}
			if _, err := tx.Exec("INSERT INTO msg_content (msg_id, conv_id, sender_uid, msg_type, content, created_at) VALUES (?, ?, 1, 1, ?, ?)", id, conv, []byte(text), at); err != nil {
				tx.Rollback()
				return 0, err
			}
			return id, tx.Commit()
		}
		if _, err := db.Exec("INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (?, ?, 1, 1, ?)", conv, id, at); err != nil {
			return 0, err
		}
		_, err := db.Exec("INSERT INTO msg_content (msg_id, conv_id, sender_uid, msg_type, content, created_at) VALUES (?, ?, 1, 1, ?, ?)", id, conv, []byte(text), at)
		return id, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wg sync.WaitGroup
	var sent, errs atomic.Int64
	const writers = 6
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 1))
			tick := time.NewTicker(time.Second * writers / time.Duration(rate))
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				conv := convs[r.IntN(len(convs))]
				id, err := send(r, conv, searchText(r))
				if err == nil {
					var rows *sql.Rows
					rows, err = db.Query("SELECT seq, msg_id, sender_uid, msg_type, created_at FROM conv_msg WHERE conv_id = ? AND seq < ? ORDER BY seq DESC LIMIT 20", conv, 1<<40)
					if err == nil {
						rows.Close()
					}
				}
				if err == nil && id%10 == 0 {
					_, err = db.Exec("UPDATE msg_content SET content = ? WHERE conv_id = ? AND msg_id = ?", []byte(searchText(r)), conv, id)
				}
				if err != nil {
					errs.Add(1)
					continue
				}
				sent.Add(1)
			}
		}()
	}
	var lags []time.Duration
	r := rand.New(rand.NewPCG(9, 9))
	t0 := time.Now()
	for i := 0; ctx.Err() == nil; i++ {
		word := fmt.Sprintf("lagprobe%d", i)
		start := time.Now()
		if _, err := send(r, convs[r.IntN(len(convs))], "探针 "+word); err != nil {
			b.Fatal(err)
		}
		for {
			var n int
			rows, err := db.Query("SELECT msg_id FROM msg_search WHERE uid = ? AND MATCH(text) AGAINST (?) LIMIT 5", uid, word)
			if err != nil {
				b.Fatal(err)
			}
			for rows.Next() {
				n++
			}
			rows.Close()
			if n > 0 {
				lags = append(lags, time.Since(start))
				break
			}
			if time.Since(start) > 30*time.Second {
				b.Fatalf("%s never became searchable", word)
			}
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	el := time.Since(t0)
	slices.Sort(lags)
	p50, p99 := lags[len(lags)/2], lags[len(lags)*99/100]
	b.ReportMetric(float64(sent.Load())/el.Seconds(), "msgs/s")
	b.ReportMetric(float64(p50.Milliseconds()), "lag-p50-ms")
	b.ReportMetric(float64(p99.Milliseconds()), "lag-p99-ms")
	fmt.Printf("%s: %d messages in %s (%.0f/s, %d errors), %d probes: index lag p50 %s p99 %s max %s\n", engine, sent.Load(), el.Round(time.Second),
		float64(sent.Load())/el.Seconds(), errs.Load(), len(lags), p50.Round(time.Millisecond), p99.Round(time.Millisecond), lags[len(lags)-1].Round(time.Millisecond))
}
