package search

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/convoy-im/convoy/internal/testsvc"
)

var benchDocs = flag.Int("search.bench.docs", 1_000_000, "messages indexed by the engine benchmarks")

// benchEngine indexes *benchDocs generated messages into eng in batches of
// 5,000 (as the feed writes them), then runs 2,000 searches as users do
// (a third in one conversation, the rest over 100 conversations, LIMIT
// 20), and reports the index rate and the search latency percentiles.
// Run: make bench-search (go test -run x -bench Search -benchtime 1x ./search/).
func benchEngine(b *testing.B, eng Engine) {
	ctx := context.Background()
	g := newCorpusGen(42)
	n := *benchDocs
	nconv := n / 50
	convs := make([]uint64, nconv)
	for i := range convs {
		convs[i] = 5_000_000 + uint64(i)*7919
	}
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	samples := make([]string, 0, 4096)
	t0 := time.Now()
	const batch = 5000
	docs := make([]Doc, 0, batch)
	for i := range n {
		d := Doc{Hit: Hit{MsgID: 1<<40 + uint64(i), ConvID: convs[g.r.IntN(nconv)], Seq: uint64(i), MsgType: 1, CreatedMs: base + int64(i)*100}, Text: g.text()}
		if len(samples) < cap(samples) && i%(n/cap(samples)+1) == 0 {
			samples = append(samples, d.Text)
		}
		docs = append(docs, d)
		if len(docs) == batch || i == n-1 {
			if err := eng.Apply(ctx, "bench", Batch{Upserts: docs}, strconv.Itoa(i)); err != nil {
				b.Fatal(err)
			}
			docs = docs[:0]
		}
	}
	took := time.Since(t0)
	rate := float64(n) / took.Seconds()
	var lat []time.Duration
	hits := 0
	for i := range 2000 {
		q := Query{Text: g.query(samples[g.r.IntN(len(samples))]), Limit: 20}
		if i%3 == 0 {
			q.Convs = []uint64{convs[g.r.IntN(nconv)]}
		} else {
			for range 100 {
				q.Convs = append(q.Convs, convs[g.r.IntN(nconv)])
			}
		}
		t := time.Now()
		hs, err := eng.Search(ctx, q)
		if err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t))
		if len(hs) > 0 {
			hits++
		}
	}
	slices.Sort(lat)
	p50, p99 := lat[len(lat)/2], lat[len(lat)*99/100]
	b.ReportMetric(rate, "msgs/s")
	b.ReportMetric(float64(p50.Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(p99.Microseconds())/1000, "p99-ms")
	fmt.Printf("%d messages indexed in %s (%.0f msgs/s); 2000 searches (%d with hits): p50 %s, p99 %s\n",
		n, took.Round(time.Millisecond), rate, hits, p50.Round(10*time.Microsecond), p99.Round(10*time.Microsecond))
}

func BenchmarkSearchBleve(b *testing.B) {
	for range b.N {
		eng, err := OpenBleve(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		benchEngine(b, eng)
		eng.Close()
	}
}

func BenchmarkSearchSphinx(b *testing.B) {
	for range b.N {
		eng, err := OpenSphinx(SphinxConfig{Partitions: testsvc.StartSphinx(b, 2).Addrs()})
		if err != nil {
			b.Fatal(err)
		}
		benchEngine(b, eng)
		eng.Close()
	}
}
