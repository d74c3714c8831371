package cold_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"

	"github.com/convoy-im/convoy/cold"
	"github.com/convoy-im/convoy/internal/testsvc"
)

// BenchmarkColdTier archives benchConvs x benchPerConv messages from a real
// MariaDB (bodies random bytes of 50-300, as encrypted payloads are) into
// one file with the default layout and reports:
//   - size: bytes per archived message in Parquet and in InnoDB
//     (data_length + index_length of conv_msg and msg_content after
//     ANALYZE TABLE, over the same rows);
//   - size also reports the Writer's rate (rows/s, one goroutine) and
//     verify/<store> the rate of Verify (read back, decode, digest);
//   - page/<store>/warm: p50/p99 of a 20-message scroll-up page with the
//     file's footer cached; page/<store>/cold-footer: with a new Reader
//     each time (footer and page index read first).
//
// go test ./cold -run '^$' -bench ColdTier -benchtime 2000x
func BenchmarkColdTier(b *testing.B) {
	const benchConvs, benchPerConv = 500, 100
	db := testsvc.StartMariaDB(b)
	db.Exec(b, "CREATE DATABASE coldbench", `CREATE TABLE coldbench.conv_msg (
  conv_id BIGINT UNSIGNED NOT NULL, seq BIGINT UNSIGNED NOT NULL, msg_id BIGINT UNSIGNED NOT NULL,
  sender_uid BIGINT UNSIGNED NOT NULL, msg_type TINYINT UNSIGNED NOT NULL, created_at DATETIME(3) NOT NULL,
  PRIMARY KEY (conv_id, seq), UNIQUE KEY uk_msg (msg_id)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`,
		`CREATE TABLE coldbench.msg_content (
  msg_id BIGINT UNSIGNED NOT NULL, conv_id BIGINT UNSIGNED NOT NULL, sender_uid BIGINT UNSIGNED NOT NULL,
  msg_type TINYINT UNSIGNED NOT NULL, content VARBINARY(4096) NOT NULL, created_at DATETIME(3) NOT NULL,
  PRIMARY KEY (msg_id), KEY idx_conv (conv_id, created_at)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`)
	rng := rand.New(rand.NewPCG(1, 2))
	msgID := uint64(1 << 40)
	var m, c []string
	flush := func() {
		if len(m) > 0 {
			db.Exec(b, "INSERT INTO coldbench.conv_msg VALUES "+strings.Join(m, ","),
				"INSERT INTO coldbench.msg_content VALUES "+strings.Join(c, ","))
		}
		m, c = m[:0], c[:0]
	}
	for conv := uint64(1); conv <= benchConvs; conv++ {
		for seq := uint64(1); seq <= benchPerConv; seq++ {
			msgID += 1 + rng.Uint64N(1000)
			body := make([]byte, 50+rng.IntN(251))
			for i := range body {
				body[i] = byte(rng.Uint32())
			}
			at := time.Date(2025, 5, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(conv*benchPerConv+seq) * 1700 * time.Millisecond).Format("2006-01-02 15:04:05.000")
			sender := 1_000_000 + conv*7 + seq%3
			m = append(m, fmt.Sprintf("(%d,%d,%d,%d,1,'%s')", conv*7919, seq, msgID, sender, at))
			c = append(c, fmt.Sprintf("(%d,%d,%d,1,X'%x','%s')", msgID, conv*7919, sender, body, at))
			if len(m) == 1000 {
				flush()
			}
		}
	}
	flush()
	db.Exec(b, "ANALYZE TABLE coldbench.conv_msg, coldbench.msg_content")

	conn, err := client.Connect(db.Addr(), "root", "", "coldbench")
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	msg := textQuery(b, conn, "SELECT * FROM conv_msg ORDER BY conv_id, seq")
	content := textQuery(b, conn, "SELECT * FROM msg_content")
	bodies := map[string][][]byte{}
	for _, r := range content.rows {
		bodies[string(r[0])] = r
	}
	rows := make([]cold.Row, 0, len(msg.rows))
	for _, r := range msg.rows {
		rows = append(rows, cold.Row{Msg: r, Content: bodies[string(r[2])]})
	}
	tables := cold.Tables{Msg: msg.cols, Content: content.cols}
	day := time.Date(2025, 5, 1, 0, 0, 0, 0, time.UTC)
	start := time.Now()
	data, info := writeFile(b, tables, day, rows, cold.WriterOptions{})
	writeTime := time.Since(start)
	info.Key = cold.ObjectKey("bench", 1, day, 0)
	n := float64(len(rows))
	sizes := textQuery(b, conn, "SELECT SUM(data_length), SUM(index_length) FROM information_schema.TABLES WHERE table_schema='coldbench'")
	var innoData, innoIndex float64
	fmt.Sscan(string(sizes.rows[0][0]), &innoData)
	fmt.Sscan(string(sizes.rows[0][1]), &innoIndex)

	b.Run("size", func(b *testing.B) {
		for range b.N {
		}
		b.ReportMetric(float64(len(data))/n, "parquet-B/msg")
		b.ReportMetric(innoData/n, "innodb-data-B/msg")
		b.ReportMetric((innoData+innoIndex)/n, "innodb-total-B/msg")
		b.ReportMetric(n/writeTime.Seconds(), "write-rows/s")
	})

	ctx := context.Background()
	s3 := testsvc.StartS3(b)
	for _, st := range []struct{ name, url string }{{"file", "file://" + b.TempDir()}, {"s3", s3.URL("bench")}} {
		store, err := cold.OpenStore(ctx, st.url)
		if err != nil {
			b.Fatal(err)
		}
		if err := store.PutIfAbsent(ctx, info.Key, data); err != nil {
			b.Fatal(err)
		}
		b.Run("verify/"+st.name, func(b *testing.B) {
			start := time.Now()
			for range b.N {
				if err := cold.Verify(ctx, store, info.Key, info); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(n*float64(b.N)/time.Since(start).Seconds(), "verify-rows/s")
		})
		cat := cold.NewMemCatalog()
		cat.Add(info)
		for _, mode := range []string{"warm", "cold-footer"} {
			b.Run("page/"+st.name+"/"+mode, func(b *testing.B) {
				counted := &countingStore{Store: store}
				r := cold.NewReader(counted, cat, cold.ReaderOptions{})
				lat := make([]time.Duration, 0, b.N)
				b.ResetTimer()
				for range b.N {
					if mode == "cold-footer" {
						r = cold.NewReader(counted, cat, cold.ReaderOptions{})
					}
					conv := (1 + rng.Uint64N(benchConvs)) * 7919
					before := 21 + rng.Uint64N(benchPerConv-19)
					start := time.Now()
					p, err := r.Before(ctx, conv, before, 20)
					lat = append(lat, time.Since(start))
					if err != nil || len(p.Rows) != 20 {
						b.Fatalf("page: %v, %d rows", err, len(p.Rows))
					}
				}
				slices.Sort(lat)
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
				b.ReportMetric(float64(counted.reads.Load())/float64(b.N), "reads/page")
				b.ReportMetric(float64(counted.bytes.Load())/float64(b.N), "B-read/page")
			})
		}
		store.Close()
	}
}

// countingStore counts range reads and their bytes (Size calls are HEADs,
// not counted).
type countingStore struct {
	cold.Store
	reads, bytes atomic.Int64
}

func (s *countingStore) ReadRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	b, err := s.Store.ReadRange(ctx, key, off, n)
	s.reads.Add(1)
	s.bytes.Add(int64(len(b)))
	return b, err
}

// BenchmarkSparsePage (docs/design.md §9-10): a 20-message scroll-up page of a
// conversation with one message a day, so each message is in its own
// daily file (each file also holds 30 busier conversations), from a store
// that adds 30 ms to every request (slowStore): the files read one after another
// (parallel 1, the reader before docs/design.md §9-10) against the default (8 at
// once, the fewest that can fill the page). cold-footer uses a new
// Reader per page (the footer and page index of every file read too, as
// for a shard's first read); warm keeps them.
//
//	go test ./cold -run '^$' -bench SparsePage -benchtime 10x
func BenchmarkSparsePage(b *testing.B) {
	const days, busy, delay = 40, 30, 30 * time.Millisecond
	f := startFixture(b)
	ctx := context.Background()
	base, err := cold.OpenStore(ctx, "file://"+b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer base.Close()
	const sparse = uint64(5000)
	cat := cold.NewMemCatalog()
	msgID := uint64(1 << 40)
	row := func(conv, seq uint64, at string) cold.Row {
		msgID++
		id := fmt.Sprint(msgID)
		return cold.Row{
			Msg:     [][]byte{[]byte(fmt.Sprint(conv)), []byte(fmt.Sprint(seq)), []byte(id), []byte("7001"), []byte("1"), []byte(at)},
			Content: [][]byte{[]byte(id), []byte(fmt.Sprint(conv)), []byte("7001"), []byte("1"), []byte("hello there"), []byte(at)},
		}
	}
	for d := range days {
		day := time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC).AddDate(0, 0, d)
		at := day.Add(10 * time.Hour).Format("2006-01-02 15:04:05.000")
		var rows []cold.Row
		for c := uint64(1); c <= busy; c++ {
			for k := uint64(1); k <= 20; k++ {
				rows = append(rows, row(c, uint64(d)*20+k, at))
			}
		}
		rows = append(rows, row(sparse, uint64(d)+1, at))
		data, info := writeFile(b, f.tables, day, rows, cold.WriterOptions{})
		info.Key = cold.ObjectKey("sparse", 441, day, 0)
		if err := base.PutIfAbsent(ctx, info.Key, data); err != nil {
			b.Fatal(err)
		}
		cat.Add(info)
	}
	for _, mode := range []string{"cold-footer", "warm"} {
		for _, parallel := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/parallel-%d", mode, parallel), func(b *testing.B) {
				store := &countingStore{Store: &slowStore{Store: base, delay: delay}} // every key is slow
				opt := cold.ReaderOptions{Parallel: parallel}
				r := cold.NewReader(store, cat, opt)
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
						r = cold.NewReader(store, cat, opt)
					}
					start := time.Now()
					p, err := r.Before(ctx, sparse, days+1, 20)
					lat = append(lat, time.Since(start))
					if err != nil || len(p.Rows) != 20 || p.Rows[0].Seq != days || p.Rows[19].Seq != days-19 {
						b.Fatalf("page: %v, %d rows", err, len(p.Rows))
					}
				}
				slices.Sort(lat)
				b.ReportMetric(float64(lat[len(lat)/2].Milliseconds()), "p50-ms")
				b.ReportMetric(float64(lat[len(lat)*99/100].Milliseconds()), "p99-ms")
				b.ReportMetric(float64(store.reads.Load())/float64(b.N), "reads/page")
			})
		}
	}
}
