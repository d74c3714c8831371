package integration

import (
	"bytes"
	"context"
	"database/sql"
	"flag"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"

	"github.com/convoy-im/convoy/internal/testsvc"
)

var (
	hotPages = flag.Int("hot.pages", 100000, "compared history pages the hot-tier soak must reach")
	hotSoak  = flag.Duration("hot.soak", 0, "run the hot-tier soak for this long instead (e.g. 30m)")
)

func hotTierYAML(r *testsvc.Redis) string {
	return fmt.Sprintf("hot_tier: {enabled: true, addrs: [%q], marker_ttl: 1s, timeout: 200ms}", r.Addr())
}

const firstScreen = "SELECT seq, msg_id, sender_uid, msg_type, created_at FROM conv_msg WHERE conv_id = ? AND seq < ? ORDER BY seq DESC LIMIT 20"

// TestHotTierServesExactBytes: a history page served from Redis is
// byte-for-byte the page MySQL serves (text and binary protocol), writes go
// through, updates invalidate, and a dead Redis is invisible to clients.
func TestHotTierServesExactBytes(t *testing.T) {
	s := newStack(t)
	r := testsvc.StartRedis(t)
	p := startConvoy(t, s.etcd.Endpoints(), hotTierYAML(r))
	db := p.open(t, "convoy", "convoy", "im")
	const conv = 9000
	for i := 0; i < 30; i++ {
		mustExec(t, db, "INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (?, ?, 5, 1, NOW(3))", conv, 900000+i)
	}
	mustExec(t, db, "INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (?, 900100, 5, 2, '2026-03-01 00:00:00')", conv)
	cv, err := client.Connect(p.addr, "convoy", "convoy", "im", func(c *client.Conn) error { return c.SetCollation("utf8mb4_general_ci") })
	if err != nil {
		t.Fatal(err)
	}
	defer cv.Close()
	hot := func() float64 { return metricValue(t, scrape(t, p.metrics), `convoy_statements_total{class="hot"}`) }
	stmt, err := cv.Prepare(firstScreen)
	if err != nil {
		t.Fatal(err)
	}
	defer stmt.Close()
	textQ := strings.Replace(strings.Replace(firstScreen, "?", fmt.Sprint(conv), 1), "?", "100", 1)
	page := func(bin bool) ([][]byte, bool) {
		before := hot()
		var rows [][]byte
		if bin {
			res, err := stmt.Execute(conv, 100)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range res.RowDatas {
				rows = append(rows, bytes.Clone(r))
			}
		} else {
			res, err := cv.Execute(textQ)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range res.RowDatas {
				rows = append(rows, bytes.Clone(r))
			}
		}
		return rows, hot() > before
	}
	for _, bin := range []bool{false, true} {
		fromMySQL, wasHot := page(bin)
		if wasHot || len(fromMySQL) != 20 {
			t.Fatalf("bin=%v: first read hot=%v rows=%d", bin, wasHot, len(fromMySQL))
		}
		var fromRedis [][]byte
		waitFor(t, "a page served from the hot tier", 5*time.Second, func() bool {
			fromRedis, wasHot = page(bin)
			return wasHot
		})
		if !reflect.DeepEqual(fromMySQL, fromRedis) {
			t.Fatalf("bin=%v: hot page differs from MySQL's bytes\nmysql: %q\nredis: %q", bin, fromMySQL[:2], fromRedis[:2])
		}
	}
	// Write-through: the next first screen (served hot) has the new message.
	mustExec(t, db, "INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (?, 900200, 6, 3, NOW(3))", conv)
	rows, wasHot := page(false)
	if !wasHot || !bytes.Contains(rows[0], []byte("900200")) {
		t.Errorf("after an insert: hot=%v first row %q", wasHot, rows[0])
	}
	// An update invalidates: the page shows it (from MySQL, then hot again).
	mustExec(t, db, "UPDATE conv_msg SET msg_type = 7 WHERE conv_id = ? AND msg_id = 900200", conv)
	rows, _ = page(false)
	if !bytes.Contains(rows[0], []byte("\x017")) {
		t.Errorf("after an update: first row %q", rows[0])
	}
	// Redis down: reads fall back to MySQL, no client error.
	r.Kill()
	for i := 0; i < 20; i++ {
		got, _ := page(i%2 == 0)
		if len(got) != 20 {
			t.Fatalf("with Redis down: %d rows", len(got))
		}
	}
	mustExec(t, db, "INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (?, 900300, 6, 3, NOW(3))", conv)
	r.Start()
	waitFor(t, "hot reads after Redis came back", 15*time.Second, func() bool {
		rows, wasHot := page(false)
		return wasHot && bytes.Contains(rows[0], []byte("900300"))
	})
}

// place is where a conversation's rows live: a plain connection to its
// datasource and the physical table, for reading "MariaDB directly".
type place struct {
	db    *sql.DB
	table string
}

// placesOf asks Convoy (SHOW SHARD FOR) where each conversation lives.
func placesOf(t *testing.T, s *stack, p *convoyProc, convs []int64) map[int64]place {
	t.Helper()
	direct := [2]*sql.DB{s.ds[0].Open(t, ""), s.ds[1].Open(t, "")}
	admin := p.open(t, "convoy", "convoy", "im")
	where := map[int64]place{}
	for _, c := range convs {
		rows := queryRows(t, admin, fmt.Sprintf("/*+ convoy SHOW SHARD FOR conv_id = %d */", c))
		ds := map[string]int{"ds0": 0, "ds1": 1}[rows[0][4]]
		where[c] = place{direct[ds], "`" + rows[0][5] + "`.`" + rows[0][6] + "`"}
	}
	return where
}

// historyPage is one page as text rows.
type historyPage [][]string

func readPage(ctx context.Context, db *sql.DB, q string, args ...any) (historyPage, error) {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out historyPage
	for rows.Next() {
		var a, b, c, d, e string
		if err := rows.Scan(&a, &b, &c, &d, &e); err != nil {
			return nil, err
		}
		out = append(out, []string{a, b, c, d, e})
	}
	return out, rows.Err()
}

func isPrefix(a, b historyPage) bool {
	if len(a) > len(b) {
		return false
	}
	for i := range a {
		if !reflect.DeepEqual(a[i], b[i]) {
			return false
		}
	}
	return true
}

// TestHotTierSoak is the invariant under fire: two Convoy processes share
// one Redis; writers append messages (seq allocated by Convoy) and update
// some; readers compare every page Convoy returns with MariaDB read directly
// just before and just after; a Convoy process is SIGKILLed mid-write and
// Redis is restarted, repeatedly. 0 mismatches over -hot.pages pages.
func TestHotTierSoak(t *testing.T) {
	s := newStack(t)
	r := testsvc.StartRedis(t)
	a := startConvoy(t, s.etcd.Endpoints(), hotTierYAML(r))
	b := startConvoy(t, s.etcd.Endpoints(), hotTierYAML(r))
	// Direct reads go to the datasources; the test layout puts a conversation
	// on ds0 or ds1 by its shard. Reading through a plain connection per
	// datasource and the physical table keeps "MariaDB directly" literal.
	convs := []int64{1, 2, 3, 42, 77, 500, 9001, 123456, 31337, 8}
	mutating := map[int64]bool{3: true, 9001: true} // also updated: compared only when stable
	where := placesOf(t, s, a, convs)
	pools := func(p *convoyProc) [2]*sql.DB {
		return [2]*sql.DB{openDSN(t, p.dsn("app", "app secret", "im")+"&interpolateParams=true"), openDSN(t, p.dsn("app", "app secret", "im"))}
	}
	conns := [][2]*sql.DB{pools(a), pools(b)}
	for _, c := range convs { // some history before the readers start
		for i := 0; i < 30; i++ {
			mustExec(t, conns[0][1], "INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (?, ?, 1, 1, NOW(3))", c, c*1_000_000+int64(i))
		}
	}

	var compared, comparedB, mismatches, skipped, readErrs, writes atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	deadline := time.Now().Add(10 * time.Minute)
	if *hotSoak > 0 {
		deadline = time.Now().Add(*hotSoak)
	}
	done := func() bool {
		if *hotSoak > 0 {
			return time.Now().After(deadline)
		}
		return compared.Load() >= int64(*hotPages) || time.Now().After(deadline)
	}
	var wg sync.WaitGroup
	var msgID atomic.Int64
	msgID.Store(1 << 40)
	for w := 0; w < 3; w++ { // writers
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for ctx.Err() == nil {
				c := convs[rng.IntN(len(convs))]
				if rng.IntN(4) == 0 {
					c = 42 // a hot group
				}
				pool := conns[rng.IntN(2)][rng.IntN(2)]
				if mutating[c] && rng.IntN(3) == 0 {
					if _, err := pool.ExecContext(ctx, "UPDATE conv_msg SET msg_type = ? WHERE conv_id = ? AND seq = ?", rng.IntN(200), c, 1+rng.IntN(25)); err == nil {
						writes.Add(1)
					}
					continue
				}
				if _, err := pool.ExecContext(ctx, "INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (?, ?, ?, 1, NOW(3))", c, msgID.Add(1), w); err == nil {
					writes.Add(1)
				}
				time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
			}
		}(w)
	}
	for rd := 0; rd < 6; rd++ { // readers
		wg.Add(1)
		go func(rd int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(rd), 99))
			for !done() {
				c := convs[rng.IntN(len(convs))]
				if rng.IntN(3) == 0 {
					c = 42
				}
				pl := where[c]
				var maxSeq int64
				if err := pl.db.QueryRowContext(ctx, "SELECT COALESCE(MAX(seq), 0) FROM "+pl.table+" WHERE conv_id = ?", c).Scan(&maxSeq); err != nil {
					continue
				}
				var q, dq string
				var args []any
				before := true
				// Like clients: mostly the first screen, scrolling and catching up
				// near the newest messages, sometimes deep in history.
				recent := func(n int64) int64 { return max(0, maxSeq-rng.Int64N(n)) }
				switch k := rng.IntN(10); {
				case k < 5: // first screen
					args = []any{c, maxSeq + 1, 20}
				case k < 7: // scroll up
					args = []any{c, 1 + recent(300), 1 + rng.IntN(40)}
				case k < 9: // catch up after a reconnect
					before = false
					args = []any{c, recent(100), 1 + rng.IntN(60)}
				default: // deep history (MySQL)
					args = []any{c, 1 + rng.Int64N(maxSeq+1), 1 + rng.IntN(40)}
				}
				if before {
					q = "SELECT seq, msg_id, sender_uid, msg_type, created_at FROM conv_msg WHERE conv_id = ? AND seq < ? ORDER BY seq DESC LIMIT ?"
				} else {
					q = "SELECT seq, msg_id, sender_uid, msg_type, created_at FROM conv_msg WHERE conv_id = ? AND seq > ? ORDER BY seq ASC LIMIT ?"
				}
				dq = strings.Replace(q, "FROM conv_msg", "FROM "+pl.table, 1)
				m1, err1 := readPage(ctx, pl.db, dq, args...)
				via := rng.IntN(2)
				cp, errc := readPage(ctx, conns[via][rng.IntN(2)], q, args...)
				m2, err2 := readPage(ctx, pl.db, dq, args...)
				if err1 != nil || err2 != nil || errc != nil {
					readErrs.Add(1) // a killed proxy; not a comparison
					continue
				}
				ok := false
				switch {
				case mutating[c] && !reflect.DeepEqual(m1, m2):
					skipped.Add(1)
					continue
				case before || mutating[c]:
					ok = reflect.DeepEqual(cp, m1) // appends never change a page below the cursor
				default:
					ok = isPrefix(m1, cp) && isPrefix(cp, m2) // catch-up pages only grow
				}
				compared.Add(1)
				if via == 1 {
					comparedB.Add(1)
				}
				if !ok {
					if mismatches.Add(1) <= 5 {
						t.Errorf("conv %d before=%v args %v: convoy page differs\nbefore: %v\nconvoy: %v\nafter:  %v", c, before, args, m1, cp, m2)
					}
				}
			}
		}(rd)
	}
	// Faults: SIGKILL a Convoy mid-write, restart Redis.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; !done(); i++ {
			time.Sleep(3 * time.Second)
			if done() {
				return
			}
			if i%2 == 0 {
				// Only a is killed: b's counters then cover the whole run.
				a.kill()
				time.Sleep(200 * time.Millisecond)
				a.start(t)
			} else {
				r.Kill()
				time.Sleep(300 * time.Millisecond)
				r.Start()
			}
		}
	}()
	for !done() {
		time.Sleep(200 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	hits := metricValue(t, scrape(t, b.metrics), `convoy_statements_total{class="hot"}`)
	t.Logf("compared %d pages (%d skipped while a mutating conversation changed, %d read errors around kills), %d writes, %d mismatches; proxy b served %.0f of its %d compared pages from the hot tier",
		compared.Load(), skipped.Load(), readErrs.Load(), writes.Load(), mismatches.Load(), hits, comparedB.Load())
	if mismatches.Load() != 0 {
		t.Fatalf("%d pages served through Convoy differed from MariaDB", mismatches.Load())
	}
	if *hotSoak == 0 && compared.Load() < int64(*hotPages) {
		t.Fatalf("only %d pages compared before the time limit", compared.Load())
	}
	if hits < float64(comparedB.Load())/5 {
		t.Fatalf("only %.0f of %d pages hot-served by b: the soak did not exercise the hot tier", hits, comparedB.Load())
	}
}
