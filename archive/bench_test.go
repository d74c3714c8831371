package archive

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/convoy-im/convoy/cold"
	"github.com/convoy-im/convoy/router"
)

// BenchmarkArchive archives one shard's 40,000 messages (200
// conversations, bodies of 100-300 random bytes as encrypted payloads
// are, over 20 days) unthrottled to file://, deletes their warm rows, and
// reports both rates and the bytes per message in Parquet against
// InnoDB's (data and indexes of conv_msg and msg_content after ANALYZE
// TABLE), and the keys its day scans read per archived row: scan=daily
// keeps no later day's keys (ScanKeys 1: a pass over the table per day,
// the archiver before archivePass), scan=passes the default. Run with
// -benchtime 1x: one iteration is the whole shard.
func BenchmarkArchive(b *testing.B) {
	s := startServices(b)
	b.Run("scan=daily", func(b *testing.B) { benchArchive(b, s, 1) })
	b.Run("scan=passes", func(b *testing.B) { benchArchive(b, s, 0) })
}

func benchArchive(b *testing.B, s *services, scanKeys int) {
	m, err := NewMetrics(nil)
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < b.N; i++ {
		f := newEmptyFixture(b, s, "file")
		const convs, per = 200, 200
		fillRandom(b, f, convs, per, 2*time.Hour, 2*time.Hour, rand.New(rand.NewPCG(1, uint64(i))))
		rows := convs * per
		f.svc.db.Exec(b, "ANALYZE TABLE "+f.dbName+".conv_msg_0000, "+f.dbName+".msg_content_0000")
		_, st := f.query("SELECT SUM(data_length + index_length) FROM information_schema.tables WHERE table_schema = '" + f.dbName + "'")
		var innodb int64
		fmt.Sscan(string(st[0][0]), &innodb)
		a := f.archiver(func(c *Config) { c.PartRows, c.ChunkRows, c.ScanRows, c.ScanKeys, c.Metrics = 0, 0, 0, scanKeys, m })
		b.ResetTimer()
		t0 := time.Now()
		f.run(a)
		archiveSecs := time.Since(t0).Seconds()
		var parquet int64
		n := 0
		for _, r := range f.records() {
			parquet += r.Bytes
			n += int(r.Rows)
		}
		if n != rows {
			b.Fatalf("%d rows archived, want %d", n, rows)
		}
		a.cfg.DeleteAfter = time.Hour
		f.advance(2 * time.Hour)
		t0 = time.Now()
		f.run(a)
		deleteSecs := time.Since(t0).Seconds()
		b.StopTimer()
		if left := f.count("TRUE"); left != 0 {
			b.Fatalf("%d warm rows left", left)
		}
		b.ReportMetric(float64(rows)/archiveSecs, "archived_rows/s")
		b.ReportMetric(float64(rows)/deleteSecs, "deleted_rows/s")
		b.ReportMetric(float64(parquet)/float64(rows), "parquet_B/msg")
		b.ReportMetric(float64(innodb)/float64(rows), "innodb_B/msg")
		b.ReportMetric(testutil.ToFloat64(m.scans.WithLabelValues("conv_msg"))/float64((i+1)*rows), "keys_scanned/row")
	}
}

var footprintRows = flag.Int("archive.rows", 1_000_000, "BenchmarkArchiveEtcdFootprint: messages archived")

// BenchmarkArchiveEtcdFootprint (docs/design.md §9-10) archives and deletes one
// shard's -archive.rows messages (default 1,000,000: 2,000 conversations,
// bodies of 100-300 random bytes, over ten days) unthrottled to file://,
// in parts of 2,000 rows and delete chunks of 500, and reports what etcd
// holds before and after: its keys, its database size (etcd's own figure,
// uncompacted during the run, then in use once compacted), and the writes
// the run made. The catalog
// lives in the store (one manifest per shard) and in the shard's database
// (read bounds, tombstones): etcd keeps the shard's job record and marker
// whatever the number of files. Run with -benchtime 1x.
func BenchmarkArchiveEtcdFootprint(b *testing.B) {
	s := startServices(b)
	ctx := context.Background()
	footprint := func() (keys, size, inUse, rev int64) {
		all, err := s.cli.Get(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithCountOnly())
		if err != nil {
			b.Fatal(err)
		}
		st, err := s.cli.Status(ctx, s.etcd.Endpoints()[0])
		if err != nil {
			b.Fatal(err)
		}
		return all.Count, st.DbSize, st.DbSizeInUse, all.Header.Revision
	}
	for i := 0; i < b.N; i++ {
		f := newEmptyFixture(b, s, "file")
		convs := 2000
		per := max(1, *footprintRows/convs)
		fillRandom(b, f, convs, per, 240*time.Hour/time.Duration(per), 0, rand.New(rand.NewPCG(2, uint64(i))))
		rows := convs * per
		a := f.archiver(func(c *Config) {
			c.PartRows, c.ChunkRows, c.ScanRows, c.ScanKeys = 2000, 500, 0, 0
			c.Log = zap.NewNop()
		})
		keys0, size0, _, rev0 := footprint()
		b.ResetTimer()
		t0 := time.Now()
		f.run(a)
		a.cfg.DeleteAfter = time.Hour
		f.advance(2 * time.Hour)
		f.run(a)
		secs := time.Since(t0).Seconds()
		b.StopTimer()
		if left := f.count("TRUE"); left != 0 {
			b.Fatalf("%d warm rows left", left)
		}
		keys1, size1, _, rev1 := footprint()
		// What stays once etcd compacts (auto-compaction does it hourly
		// where Convoy starts etcd): the live keys' values.
		if _, err := s.cli.Compact(ctx, rev1, clientv3.WithCompactPhysical()); err != nil {
			b.Fatal(err)
		}
		_, _, live, _ := footprint()
		recs := f.records()
		n := 0
		for _, r := range recs {
			n += int(r.Rows)
		}
		if n != rows {
			b.Fatalf("%d rows archived, want %d", n, rows)
		}
		b.ReportMetric(float64(rows), "rows")
		b.ReportMetric(float64(len(recs)), "files")
		b.ReportMetric(float64(rows)/secs, "rows/s")
		b.ReportMetric(float64(keys0), "etcd_keys_before")
		b.ReportMetric(float64(keys1), "etcd_keys_after")
		b.ReportMetric(float64(size0)/(1<<20), "etcd_MiB_before")
		b.ReportMetric(float64(size1)/(1<<20), "etcd_MiB_after")
		b.ReportMetric(float64(live)/(1<<10), "etcd_KiB_in_use_compacted")
		b.ReportMetric(float64(rev1-rev0), "etcd_writes")
	}
}

// fillRandom gives each of n conversations of the fixture's shard per
// messages, one every step (plus up to jitter), with bodies of 100-300
// random bytes as encrypted payloads are, 1000 rows a statement.
func fillRandom(b *testing.B, f *fixture, n, per int, step, jitter time.Duration, rng *rand.Rand) {
	var vals, bodies []string
	flush := func() {
		if len(vals) > 0 {
			f.svc.db.Exec(b, "INSERT INTO "+f.dbName+".conv_msg_0000 VALUES "+strings.Join(vals, ","),
				"INSERT INTO "+f.dbName+".msg_content_0000 VALUES "+strings.Join(bodies, ","))
		}
		vals, bodies = vals[:0], bodies[:0]
	}
	for _, c := range keysOfShard(router.Shard(f.shard), n, 1000) {
		for seq := uint64(1); seq <= uint64(per); seq++ {
			at := dataStart.Add(time.Duration(seq) * step)
			if jitter > 0 {
				at = at.Add(time.Duration(rng.Int64N(int64(jitter/time.Millisecond))) * time.Millisecond)
			}
			body := make([]byte, 100+rng.IntN(200))
			for j := range body {
				body[j] = byte(rng.UintN(256))
			}
			ts := at.Format("2006-01-02 15:04:05.000")
			vals = append(vals, fmt.Sprintf("(%d,%d,%d,%d,%d,'%s')", c, seq, c*100000+seq, 7000+rng.IntN(50), 1+rng.IntN(3), ts))
			bodies = append(bodies, fmt.Sprintf("(%d,%d,%d,%d,X'%x','%s')", c*100000+seq, c, 7000+rng.IntN(50), 1+rng.IntN(3), body, ts))
			if len(vals) == 1000 {
				flush()
			}
		}
	}
	flush()
}

// latencyStore adds delay to every read of the store (ReadRange, Size),
// as an object store across a network does, and counts them.
type latencyStore struct {
	cold.Store
	delay time.Duration
	reads atomic.Int64
}

func (s *latencyStore) ReadRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	s.reads.Add(1)
	time.Sleep(s.delay)
	return s.Store.ReadRange(ctx, key, off, n)
}

func (s *latencyStore) Size(ctx context.Context, key string) (int64, error) {
	s.reads.Add(1)
	time.Sleep(s.delay)
	return s.Store.Size(ctx, key)
}

// BenchmarkCompactedSparsePage (docs/design.md §9-10): a 20-message scroll-up page of
// a conversation with one message a day, read through the shard
// database's read bounds from a store that adds 30 ms to every request
// (a directory, and the S3 server process on loopback),
// with the archive as the archiver writes it (one file a day, 31 busier
// conversations in each) and after its compaction merged the month into
// one file. cold-footer uses a new Reader per page (every file's footer
// and page index read too, as for a shard's first read); warm keeps them.
//
//	go test ./archive -run '^$' -bench CompactedSparsePage -benchtime 20x
func BenchmarkCompactedSparsePage(b *testing.B) {
	const days, delay = 30, 30 * time.Millisecond
	s := startServices(b)
	for _, kind := range []string{"file", "s3"} {
		b.Run(kind, func(b *testing.B) {
			f := newEmptyFixture(b, s, kind)
			fillRandom(b, f, 31, 3*days, 8*time.Hour, time.Hour, rand.New(rand.NewPCG(5, 6)))
			sparse := keysOfShard(router.Shard(f.shard), 1, 900_000)[0]
			var sb strings.Builder
			for d := uint64(1); d <= days; d++ {
				at := dataStart.Add(time.Duration(d-1) * 24 * time.Hour).Add(12 * time.Hour).Format("2006-01-02 15:04:05.000")
				fmt.Fprintf(&sb, "INSERT INTO %s.conv_msg_0000 VALUES (%d,%d,%d,7001,1,'%s');\n", f.dbName, sparse, d, sparse*1000+d, at)
				fmt.Fprintf(&sb, "INSERT INTO %s.msg_content_0000 VALUES (%d,%d,7001,1,'hello there','%s');\n", f.dbName, sparse*1000+d, sparse, at)
			}
			f.svc.db.Exec(b, sb.String())
			a := f.archiver(func(c *Config) {
				c.PartRows, c.DeleteAfter, c.CompactBelow, c.Log = 20000, time.Hour, -1, zap.NewNop()
			})
			f.run(a)
			f.advance(2 * time.Hour)
			f.run(a)
			ctx := context.Background()
			store := &latencyStore{Store: f.store, delay: delay}
			pages := func(b *testing.B, mode string) {
				opt := cold.ReaderOptions{}
				r := cold.NewReader(store, f.readCatalog(nil), opt)
				if mode == "warm" {
					if _, err := r.Before(ctx, sparse, days+1, days); err != nil {
						b.Fatal(err)
					}
				}
				store.reads.Store(0)
				lat := make([]time.Duration, 0, b.N)
				b.ResetTimer()
				for range b.N {
					if mode == "cold-footer" {
						r = cold.NewReader(store, f.readCatalog(nil), opt)
					}
					start := time.Now()
					p, err := r.Before(ctx, sparse, days+1, 20)
					lat = append(lat, time.Since(start))
					if err != nil || len(p.Rows) != 20 || p.Rows[0].Seq != days || p.Rows[19].Seq != days-19 {
						b.Fatalf("page: %v, %d rows", err, len(p.Rows))
					}
				}
				b.StopTimer()
				slices.Sort(lat)
				b.ReportMetric(float64(lat[len(lat)/2].Milliseconds()), "p50-ms")
				b.ReportMetric(float64(lat[len(lat)*99/100].Milliseconds()), "p99-ms")
				b.ReportMetric(float64(store.reads.Load())/float64(b.N), "reads/page")
			}
			files := func() int {
				n := 0
				for _, r := range f.records() {
					if r.Kind == kindHistory && r.State != StateSuperseded {
						n++
					}
				}
				return n
			}
			daily := files()
			for _, mode := range []string{"cold-footer", "warm"} {
				b.Run("daily/"+mode, func(b *testing.B) {
					pages(b, mode)
					b.ReportMetric(float64(daily), "files")
				})
			}
			c := f.archiver(func(c *Config) {
				c.PartRows, c.CompactBelow, c.DeleteAfter, c.Log = DefaultPartRows, 0, time.Hour, zap.NewNop()
			})
			f.advance(time.Hour)
			f.run(c)
			compacted := files()
			if compacted >= daily {
				b.Fatalf("%d files after compaction, %d before", compacted, daily)
			}
			for _, mode := range []string{"cold-footer", "warm"} {
				b.Run("compacted/"+mode, func(b *testing.B) {
					pages(b, mode)
					b.ReportMetric(float64(compacted), "files")
				})
			}
		})
	}
}
