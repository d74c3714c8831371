package migrate

import (
	"context"
	"testing"
	"time"

	"github.com/convoy-im/convoy/internal/testsvc"
	"github.com/convoy-im/convoy/router"
)

// BenchmarkMigration measures one shard's conv_msg table (100,000 rows of
// the IM schema, about 80 bytes each) moving between two MariaDBs on this
// machine: the copy unthrottled and at the seed's 2000 rows/s (how close
// the limiter holds it), and the checksum of the copied table. Each
// reports rows/s; run with -benchtime=1x (one pass is the measurement):
//
//	go test -run '^$' -bench BenchmarkMigration -benchtime=1x ./migrate/
func BenchmarkMigration(b *testing.B) {
	const rows = 100_000
	src, dst := testsvc.StartMariaDB(b), testsvc.StartMariaDB(b)
	sdb, ddb := src.Open(b, ""), dst.Open(b, "")
	for _, m := range []*testsvc.MariaDB{src, dst} {
		m.Exec(b, "CREATE DATABASE im_0", imTable(b, "conv_msg", "im_0", "conv_msg_0000"))
	}
	src.Exec(b, "INSERT INTO im_0.conv_msg_0000 (conv_id, seq, msg_id, sender_uid, msg_type, created_at) "+
		"SELECT seq DIV 100, seq MOD 100, seq, seq MOD 977, 1, '2026-01-02 03:04:05.678' FROM im_0.seq_1_to_100000")
	ctx := context.Background()
	s, d := Side{DB: sdb, Database: "im_0", Table: "conv_msg_0000"}, Side{DB: ddb, Database: "im_0", Table: "conv_msg_0000"}
	copyOnce := func(b *testing.B, rate float64, limit int64) time.Duration {
		b.Helper()
		dst.Exec(b, "TRUNCATE im_0.conv_msg_0000")
		c, err := NewCopier(ctx, s, d, nil, WithRate(rate))
		if err != nil {
			b.Fatal(err)
		}
		snap, err := OpenSnapshot(ctx, sdb)
		if err != nil {
			b.Fatal(err)
		}
		defer snap.Close()
		runCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		start := time.Now()
		if limit > 0 {
			// Stop a throttled copy after limit rows: the rate is what
			// matters, not the whole table.
			go func() {
				for c.Progress().Rows < limit && runCtx.Err() == nil {
					time.Sleep(20 * time.Millisecond)
				}
				cancel()
			}()
		}
		ck, err := c.Run(runCtx, snap, Checkpoint{}, nil)
		if err != nil && runCtx.Err() == nil {
			b.Fatal(err)
		}
		if limit == 0 && ck.Rows != rows {
			b.Fatalf("copied %d rows, want %d", ck.Rows, rows)
		}
		return time.Since(start)
	}
	b.Run("copy-unthrottled", func(b *testing.B) {
		for range b.N {
			el := copyOnce(b, 0, 0)
			b.ReportMetric(rows/el.Seconds(), "rows/s")
		}
	})
	b.Run("copy-at-2000", func(b *testing.B) {
		for range b.N {
			const n = 20_000 // 10 s at 2000 rows/s
			el := copyOnce(b, 2000, n)
			b.ReportMetric(n/el.Seconds(), "rows/s")
		}
	})
	b.Run("checksum", func(b *testing.B) {
		copyOnce(b, 0, 0)
		for range b.N {
			c, err := NewChecksummer(ctx, s, d, nil)
			if err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			st, err := c.Run(ctx, ChecksumState{}, nil)
			if err != nil || !st.Equal() {
				b.Fatalf("checksum %+v, %v", st, err)
			}
			b.ReportMetric(rows/time.Since(start).Seconds(), "rows/s")
		}
	})
}

// BenchmarkStorageFence measures what the storage fence (fence.go) costs a
// write of a table that carries its triggers: single-row autocommit
// INSERTs of conv_msg rows (the common write) into a table with the fence
// triggers and into an identical one without, interleaved in rounds of 200
// in one run, so both see the same machine. Reports µs per insert for
// each, and their ratio:
//
//	go test -run '^$' -bench BenchmarkStorageFence -benchtime=1x ./migrate/
func BenchmarkStorageFence(b *testing.B) {
	m := testsvc.StartMariaDB(b)
	db := m.Open(b, "")
	db.SetMaxOpenConns(1)
	m.Exec(b, "CREATE DATABASE fb", imTable(b, "conv_msg", "fb", "plain"), imTable(b, "conv_msg", "fb", "fenced"))
	ctx := context.Background()
	if err := ensureFenceTable(ctx, db, "fb"); err != nil {
		b.Fatal(err)
	}
	f, err := FilterFor("conv_msg", 0)
	if err != nil {
		b.Fatal(err)
	}
	if err := installFence(ctx, Side{DB: db, Database: "fb", Table: "fenced"}, f); err != nil {
		b.Fatal(err)
	}
	// One shard fenced, the writes on others: the price the live shards of
	// a shared table pay.
	if _, err := setFence(ctx, db, fenceChange{database: "fb", shard: 1, fenced: true, movedTo: "elsewhere"}, nil); err != nil {
		b.Fatal(err)
	}
	const rounds, perRound = 25, 200
	for range b.N {
		var took [2]time.Duration
		id := uint64(0)
		for r := range rounds {
			for i, table := range []string{"plain", "fenced"} {
				start := time.Now()
				for range perRound {
					id++
					conv := id%5000 + 2
					for router.ShardOf(conv) == 1 {
						conv += 5000
					}
					if _, err := db.ExecContext(ctx, "INSERT INTO fb."+table+" (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES (?, ?, ?, 7, 1, NOW(3))",
						conv, uint64(r)*perRound+id, id); err != nil {
						b.Fatal(err)
					}
				}
				took[i] += time.Since(start)
			}
		}
		n := float64(rounds * perRound)
		plain, fenced := took[0].Seconds()/n*1e6, took[1].Seconds()/n*1e6
		b.ReportMetric(plain, "plain-µs/insert")
		b.ReportMetric(fenced, "fenced-µs/insert")
		b.ReportMetric(fenced/plain, "fenced/plain")
	}
}

// BenchmarkCopyThrottle shows the copy's throttle on harm (throttle.go)
// at work: one shard's copy at 5000 rows/s while, from the 4th to the
// 10th second, a load of bulk inserts into another table of the source
// slows its commits down. The line is three times the source's probe p95
// measured idle before the run (this machine's storage keeps even a bulk
// load's commits under the seed's 50 ms: the default line never trips
// here). It reports the copy's rows/s before, during and after the load,
// the line, and the source's probe p95 during the load:
//
//	go test -run '^$' -bench BenchmarkCopyThrottle -benchtime=1x ./migrate/
func BenchmarkCopyThrottle(b *testing.B) {
	src, dst := testsvc.StartMariaDB(b), testsvc.StartMariaDB(b)
	sdb, ddb := src.Open(b, ""), dst.Open(b, "")
	for _, m := range []*testsvc.MariaDB{src, dst} {
		m.Exec(b, "CREATE DATABASE im_0", imTable(b, "conv_msg", "im_0", "conv_msg_0000"),
			"CREATE TABLE im_0."+HeartbeatTable+" (job VARCHAR(64) NOT NULL, side VARCHAR(8) NOT NULL, at DATETIME(6) NOT NULL, PRIMARY KEY (job, side))")
	}
	src.Exec(b, "INSERT INTO im_0.conv_msg_0000 (conv_id, seq, msg_id, sender_uid, msg_type, created_at) "+
		"SELECT seq DIV 100, seq MOD 100, seq, seq MOD 977, 1, '2026-01-02 03:04:05.678' FROM im_0.seq_1_to_200000",
		"CREATE TABLE im_0.load (id BIGINT AUTO_INCREMENT PRIMARY KEY, pad VARCHAR(255))")
	ctx := context.Background()
	for range b.N {
		dst.Exec(b, "TRUNCATE im_0.conv_msg_0000")
		s, d := Side{DB: sdb, Database: "im_0", Table: "conv_msg_0000"}, Side{DB: ddb, Database: "im_0", Table: "conv_msg_0000"}
		c, err := NewCopier(ctx, s, d, nil, WithRate(5000))
		if err != nil {
			b.Fatal(err)
		}
		snap, err := OpenSnapshot(ctx, sdb)
		if err != nil {
			b.Fatal(err)
		}
		runCtx, cancel := context.WithCancel(ctx)
		probe := heartbeat(sdb, "im_0", "bench", "source")
		var idle []time.Duration
		for range 20 {
			d, err := probe(ctx)
			if err != nil {
				b.Fatal(err)
			}
			idle = append(idle, d)
			time.Sleep(50 * time.Millisecond)
		}
		line := max(3*percentileOf(idle, 0.95), 2*time.Millisecond)
		th := newThrottle(line, probe, heartbeat(ddb, "im_0", "bench", "target"))
		var p95 []time.Duration
		go th.run(runCtx, func() {
			f, _ := th.state()
			c.limiter.SetRate(5000 * f)
		})
		done := make(chan error, 1)
		go func() { _, err := c.Run(runCtx, snap, Checkpoint{}, nil); done <- err }()
		rowsAt := func() int64 { return c.Progress().Rows }
		phase := func(d time.Duration) float64 {
			r0, t0 := rowsAt(), time.Now()
			time.Sleep(d)
			return float64(rowsAt()-r0) / time.Since(t0).Seconds()
		}
		before := phase(3 * time.Second)
		loadCtx, stopLoad := context.WithCancel(ctx)
		for range 6 {
			go func() {
				for loadCtx.Err() == nil {
					_, _ = sdb.ExecContext(loadCtx, "INSERT INTO im_0.load (pad) SELECT REPEAT('x', 200) FROM im_0.seq_1_to_20000")
				}
			}()
		}
		go func() {
			for loadCtx.Err() == nil {
				th.mu.Lock()
				p95 = append(p95, percentileOf(th.lat[0], 0.95))
				th.mu.Unlock()
				time.Sleep(500 * time.Millisecond)
			}
		}()
		time.Sleep(time.Second) // the throttle's reaction time
		during := phase(5 * time.Second)
		stopLoad()
		time.Sleep(3 * time.Second) // the load's last statements, the recovery
		after := phase(3 * time.Second)
		cancel()
		<-done
		snap.Close()
		b.ReportMetric(before, "before-rows/s")
		b.ReportMetric(during, "during-rows/s")
		b.ReportMetric(after, "after-rows/s")
		b.ReportMetric(float64(percentileOf(p95, 0.5))/1e6, "load-probe-p95-ms")
		b.ReportMetric(float64(line)/1e6, "line-ms")
	}
}
