package migrate

import (
	"context"
	"testing"
	"time"

	"github.com/convoy-im/convoy/internal/testsvc"
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
