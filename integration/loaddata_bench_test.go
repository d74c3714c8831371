package integration

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	sqldriver "github.com/go-sql-driver/mysql"

	"github.com/convoy-im/convoy/internal/testsvc"
	"github.com/convoy-im/convoy/router"
)

// BenchmarkLoadDataLocal (docs/sql-reference.md): a conv_msg import of
// LOAD_BENCH_ROWS rows (default 1,000,000; 20,000 conversations) in one
// LOAD DATA LOCAL INFILE through Convoy, against the same rows loaded
// straight into the same physical tables (the file split by physical table
// beforehand, outside the timing, one LOAD DATA LOCAL per table), on the
// same servers in one run. Reports rows/s of both and their ratio.
//
//	go test -run '^$' -bench BenchmarkLoadDataLocal -benchtime 1x -timeout 30m ./integration/
func BenchmarkLoadDataLocal(b *testing.B) {
	rows := 1_000_000
	if v := os.Getenv("LOAD_BENCH_ROWS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			b.Fatal(err)
		}
		rows = n
	}
	s := newStack(b)
	ctx := context.Background()
	snap, err := router.NewSnapshot(testLayout(s.ds[0], s.ds[1]))
	if err != nil {
		b.Fatal(err)
	}
	// The file, and its split by physical table.
	var whole strings.Builder
	parts := map[router.Physical]*strings.Builder{}
	const convs = 20_000
	for i := range rows {
		conv := uint64(1 + i%convs)
		seq := 1 + i/convs
		line := fmt.Sprintf("%d\t%d\t%d\t%d\t1\t2026-03-%02d %02d:%02d:%02d.%03d\n", conv, seq, conv*1_000_000+uint64(seq), 1+i%97, 1+i%28, i%24, i%60, (i/60)%60, i%1000)
		whole.WriteString(line)
		p := snap.Physical("conv_msg", router.ShardOf(conv))
		if parts[p] == nil {
			parts[p] = &strings.Builder{}
		}
		parts[p].WriteString(line)
	}
	file := whole.String()
	b.Logf("%d rows, %.1f MiB, %d physical tables", rows, float64(len(file))/(1<<20), len(parts))
	sqldriver.RegisterReaderHandler("bench", func() io.Reader { return strings.NewReader(file) })
	b.Cleanup(func() { sqldriver.DeregisterReaderHandler("bench") })

	truncate := func() {
		for _, m := range s.ds {
			db := m.Open(b, "")
			for p := range parts {
				if p.Datasource == dsName(s, m) {
					if _, err := db.ExecContext(ctx, "TRUNCATE TABLE "+p.Database+"."+p.Table); err != nil {
						b.Fatal(err)
					}
				}
			}
		}
	}
	countAll := func() int {
		var total int
		for p := range parts {
			var n int
			if err := dsOf(s, p.Datasource).Open(b, "").QueryRowContext(ctx, "SELECT COUNT(*) FROM "+p.Database+"."+p.Table).Scan(&n); err != nil {
				b.Fatal(err)
			}
			total += n
		}
		return total
	}

	b.ResetTimer()
	var direct, convoy time.Duration
	for range b.N {
		truncate()
		start := time.Now()
		for p, sb := range parts {
			name := "bench-" + p.Database + "-" + p.Table
			data := sb.String()
			sqldriver.RegisterReaderHandler(name, func() io.Reader { return strings.NewReader(data) })
			db := dsOf(s, p.Datasource).Open(b, "")
			if _, err := db.ExecContext(ctx, "LOAD DATA LOCAL INFILE 'Reader::"+name+"' INTO TABLE "+p.Database+"."+p.Table); err != nil {
				b.Fatal(err)
			}
			sqldriver.DeregisterReaderHandler(name)
		}
		direct += time.Since(start)
		if n := countAll(); n != rows {
			b.Fatalf("direct load: %d rows, want %d", n, rows)
		}

		truncate()
		db := s.convoy.open(b, "convoy", "convoy", "im")
		start = time.Now()
		var r sql.Result
		if r, err = db.ExecContext(ctx, "LOAD DATA LOCAL INFILE 'Reader::bench' INTO TABLE conv_msg"); err != nil {
			b.Fatal(err)
		}
		convoy += time.Since(start)
		if n, _ := r.RowsAffected(); n != int64(rows) {
			b.Fatalf("through Convoy: %d rows affected, want %d", n, rows)
		}
		if n := countAll(); n != rows {
			b.Fatalf("through Convoy: %d rows on the physical tables, want %d", n, rows)
		}
	}
	per := func(d time.Duration) float64 { return float64(rows) * float64(b.N) / d.Seconds() }
	b.ReportMetric(per(direct), "direct_rows/s")
	b.ReportMetric(per(convoy), "convoy_rows/s")
	b.ReportMetric(convoy.Seconds()/direct.Seconds(), "time_ratio")
	b.ReportMetric(0, "ns/op")
}

// dsOf is the stack's server of datasource name ("ds0", "ds1").
func dsOf(s *stack, name string) *testsvc.MariaDB {
	i, err := strconv.Atoi(strings.TrimPrefix(name, "ds"))
	if err != nil || i < 0 || i >= len(s.ds) {
		panic("no datasource " + name)
	}
	return s.ds[i]
}

func dsName(s *stack, m *testsvc.MariaDB) string {
	for i, d := range s.ds {
		if d == m {
			return fmt.Sprintf("ds%d", i)
		}
	}
	return ""
}
