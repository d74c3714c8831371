package stats

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/convoy-im/convoy/router"
)

// fakeClock is a settable clock safe for concurrent reads.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC).UnixNano())
	return c
}
func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

func TestBucketEdges(t *testing.T) {
	// Buckets are monotonic, contiguous, and each bucket's reported value
	// is within the stated bound of every duration mapped to it.
	prev := 0
	for d := time.Duration(1); d < 2*MaxLatency; d = d*101/100 + 1 {
		b := bucketOf(d)
		if b < prev {
			t.Fatalf("bucketOf(%v) = %d < bucketOf of a smaller duration (%d)", d, b, prev)
		}
		if b > prev+1 {
			t.Fatalf("bucketOf skips from %d to %d at %v", prev, b, d)
		}
		prev = b
		if d >= MinLatency && d < MaxLatency {
			if err := relErr(bucketValue(b), d); err > MaxRelativeError+1e-9 {
				t.Fatalf("bucket %d reports %v for %v: error %.4f > %.4f", b, bucketValue(b), d, err, MaxRelativeError)
			}
		}
	}
	if prev != overflowIx {
		t.Fatalf("largest bucket reached %d, want overflow %d", prev, overflowIx)
	}
	// Exact edges: 2^13 ns opens bucket 1, 2^14 ns opens bucket 5.
	for d, want := range map[time.Duration]int{
		MinLatency - 1: 0, MinLatency: 1, 2*MinLatency - 1: 4, 2 * MinLatency: 5,
		MaxLatency - 1: nLog, MaxLatency: overflowIx, time.Hour: overflowIx, 0: 0, -5: 0,
	} {
		if got := bucketOf(d); got != want {
			t.Errorf("bucketOf(%d ns) = %d, want %d", d, got, want)
		}
	}
	if MaxRelativeError > 0.10 {
		t.Errorf("MaxRelativeError = %v, want <= 10%%", MaxRelativeError)
	}
}

func relErr(got, want time.Duration) float64 {
	return math.Abs(float64(got)-float64(want)) / float64(want)
}

func TestQPSAndExpiry(t *testing.T) {
	c := newFakeClock()
	w := New(10*time.Second, c.Now)

	// 10 s of traffic on shard 441: 50 reads and 10 writes per second, one
	// failed write per second; shard 7 gets a single read in the first second.
	w.Record(7, false, time.Millisecond, false)
	for sec := 0; sec < 10; sec++ {
		for i := 0; i < 50; i++ {
			w.Record(441, false, 2*time.Millisecond, false)
		}
		for i := 0; i < 10; i++ {
			w.Record(441, true, 20*time.Millisecond, i == 0)
		}
		c.Advance(time.Second)
	}
	// Now 10.0 s after New: the window holds seconds 1..10 (10 is the
	// current, empty one), i.e. 9 full seconds of traffic over 9 s covered.
	st := w.Shard(441)
	if st.Reads != 450 || st.Writes != 90 || st.Errors != 9 {
		t.Fatalf("Shard(441) = %+v, want 450 reads, 90 writes, 9 errors (second 0 expired)", st)
	}
	if math.Abs(st.QPS-60) > 1e-9 {
		t.Errorf("QPS = %v, want 60", st.QPS)
	}
	if relErr(st.ReadP50, 2*time.Millisecond) > MaxRelativeError || relErr(st.WriteP99, 20*time.Millisecond) > MaxRelativeError {
		t.Errorf("percentiles %v / %v, want ~2ms / ~20ms", st.ReadP50, st.WriteP99)
	}
	if st := w.Shard(7); st.Reads != 0 || st.QPS != 0 || st.ReadP50 != 0 {
		t.Errorf("shard 7's only read (second 0) should have expired: %+v", st)
	}
	all := w.All()
	if len(all) != 1 || all[0].Shard != 441 {
		t.Fatalf("All() = %+v, want only shard 441", all)
	}

	// Half a second later the covered span is 9.5 s.
	c.Advance(500 * time.Millisecond)
	if st := w.Shard(441); math.Abs(st.QPS-540/9.5) > 1e-9 {
		t.Errorf("QPS at 10.5 s = %v, want %v", st.QPS, 540/9.5)
	}

	// Reads recorded now land in the current second and count at once.
	w.Record(441, false, time.Millisecond, true)
	if st := w.Shard(441); st.Reads != 451 || st.Errors != 10 {
		t.Errorf("after a read in the current second: %+v", st)
	}

	// Slots are reused: after 5 more seconds of one write/s, the earliest
	// seconds are gone and only seconds 6..15 count.
	for i := 0; i < 5; i++ {
		c.Advance(time.Second)
		w.Record(441, true, time.Millisecond, false)
	}
	st = w.Shard(441)
	if st.Reads != 4*50+1 || st.Writes != 4*10+5 {
		t.Errorf("after rotation: reads %d writes %d, want %d and %d", st.Reads, st.Writes, 4*50+1, 4*10+5)
	}

	// Everything expires after a whole window of silence.
	c.Advance(10 * time.Second)
	if st := w.Shard(441); st.Reads+st.Writes+st.Errors != 0 || st.QPS != 0 {
		t.Errorf("after a silent window: %+v", st)
	}
	if all := w.All(); len(all) != 0 {
		t.Errorf("All() after a silent window = %+v", all)
	}
}

func TestEarlyQPS(t *testing.T) {
	// Before a whole window has passed, QPS divides by the time since New
	// (at least 1 s), not by the window length.
	c := newFakeClock()
	w := New(0, c.Now) // default 60 s
	if w.Window() != DefaultWindow {
		t.Fatalf("Window() = %v, want %v", w.Window(), DefaultWindow)
	}
	for i := 0; i < 300; i++ {
		w.Record(1, i%2 == 0, time.Millisecond, false)
	}
	if st := w.Shard(1); st.QPS != 300 {
		t.Errorf("QPS right after New = %v, want 300 (span floored at 1 s)", st.QPS)
	}
	c.Advance(3 * time.Second)
	if st := w.Shard(1); st.QPS != 100 {
		t.Errorf("QPS 3 s after New = %v, want 100", st.QPS)
	}
	if New(1500*time.Millisecond, c.Now).Window() != 2*time.Second {
		t.Error("a 1.5 s window is not rounded up to 2 s")
	}
}

func TestPercentiles(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	dists := map[string]func() time.Duration{
		"constant 3ms": func() time.Duration { return 3 * time.Millisecond },
		"uniform 1..100ms": func() time.Duration {
			return time.Millisecond + time.Duration(rng.Int64N(int64(99*time.Millisecond)))
		},
		"lognormal median 2ms": func() time.Duration {
			return time.Duration(2e6 * math.Exp(rng.NormFloat64()))
		},
		"bimodal 200us / 80ms": func() time.Duration {
			if rng.IntN(100) < 97 {
				return 200*time.Microsecond + time.Duration(rng.Int64N(50000))
			}
			return 80*time.Millisecond + time.Duration(rng.Int64N(int64(10*time.Millisecond)))
		},
	}
	for name, gen := range dists {
		t.Run(name, func(t *testing.T) {
			c := newFakeClock()
			w := New(5*time.Second, c.Now)
			var reads, writes []time.Duration
			for sec := 0; sec < 4; sec++ {
				for i := 0; i < 5000; i++ {
					d := gen()
					write := i%4 == 0
					if write {
						writes = append(writes, d)
					} else {
						reads = append(reads, d)
					}
					w.Record(300, write, d, false)
				}
				c.Advance(time.Second)
			}
			st := w.Shard(300)
			for _, tc := range []struct {
				name string
				got  time.Duration
				all  []time.Duration
				q    float64
			}{
				{"read P50", st.ReadP50, reads, 0.50}, {"read P99", st.ReadP99, reads, 0.99},
				{"write P50", st.WriteP50, writes, 0.50}, {"write P99", st.WriteP99, writes, 0.99},
			} {
				want := nearestRank(tc.all, tc.q)
				if e := relErr(tc.got, want); e > MaxRelativeError+1e-9 {
					t.Errorf("%s = %v, true %v: error %.3f > bound %.3f", tc.name, tc.got, want, e, MaxRelativeError)
				}
			}
		})
	}
	// Out of range values are clamped, not dropped.
	w := New(time.Second, newFakeClock().Now)
	w.Record(0, true, time.Nanosecond, false)
	w.Record(0, true, time.Minute, false)
	if st := w.Shard(0); st.WriteP50 != MinLatency || st.WriteP99 != MaxLatency || st.Writes != 2 {
		t.Errorf("clamping: %+v, want P50 %v P99 %v", st, MinLatency, MaxLatency)
	}
}

func nearestRank(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[int(math.Ceil(q*float64(len(s))))-1]
}

func TestConcurrent(t *testing.T) {
	// Many goroutines record on overlapping shards while the clock moves
	// and readers query; all counts within the window must add up.
	c := newFakeClock()
	w := New(time.Minute, c.Now)
	const goroutines, perG = 8, 20000
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var readerWG sync.WaitGroup
	readerWG.Add(1)
	go func() { // concurrent queries
		defer readerWG.Done()
		for {
			select {
			case <-stop:
				return
			default:
				_ = w.All()
				_ = w.Shard(3)
			}
		}
	}()
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < perG; i++ {
				if g == 0 && i%2000 == 0 {
					c.Advance(time.Second) // 10 rotations, all inside the window
				}
				w.Record(router.Shard(i%4), i%3 == 0, time.Duration(i%1000)*time.Microsecond, i%10 == 0)
			}
		}(g)
	}
	wg.Wait()
	close(stop)
	readerWG.Wait()

	var total, errs int64
	for _, st := range w.All() {
		total += st.Reads + st.Writes
		errs += st.Errors
	}
	// A record racing a slot reset may be counted in the next second, but
	// within one window nothing is lost.
	if total != goroutines*perG || errs != goroutines*perG/10 {
		t.Errorf("total %d errors %d, want %d and %d", total, errs, goroutines*perG, goroutines*perG/10)
	}
}

func TestOutOfRangeShard(t *testing.T) {
	w := New(time.Second, nil)
	w.Record(router.NumShards, true, time.Millisecond, true) // ignored, no panic
	if st := w.Shard(router.NumShards); st.Writes != 0 {
		t.Errorf("out of range shard: %+v", st)
	}
	w.Record(router.NumShards-1, false, time.Millisecond, false)
	if all := w.All(); len(all) != 1 || all[0].Shard != router.NumShards-1 || all[0].Reads != 1 {
		t.Errorf("All() = %+v", all)
	}
}

func TestRecordDoesNotAllocate(t *testing.T) {
	w := New(time.Minute, nil)
	w.Record(5, true, time.Millisecond, false) // first use allocates the ring
	if n := testing.AllocsPerRun(1000, func() { w.Record(5, true, time.Millisecond, true) }); n != 0 {
		t.Errorf("Record allocates %v times per call", n)
	}
}

// warm allocates every shard's ring, which Record does once per shard, so
// the benchmarks measure the steady state.
func warm(w *Window) *Window {
	for s := 0; s < router.NumShards; s++ {
		w.Record(router.Shard(s), false, time.Millisecond, false)
	}
	return w
}

// BenchmarkRecord spreads statements over all 1024 shards, so most Records
// miss the CPU cache; BenchmarkRecordOneShard is the cache-hot case.
func BenchmarkRecord(b *testing.B) {
	w := warm(New(time.Minute, nil))
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		w.Record(router.Shard(i&1023), i&1 == 0, time.Duration(i&0xfffff)*time.Nanosecond, i&63 == 0)
		i++
	}
}

func BenchmarkRecordParallel(b *testing.B) {
	w := warm(New(time.Minute, nil))
	var seed atomic.Uint32
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := int(seed.Add(1)) * 7919
		for pb.Next() {
			w.Record(router.Shard(i&1023), i&1 == 0, time.Duration(i&0xfffff)*time.Nanosecond, false)
			i++
		}
	})
}

func BenchmarkAll(b *testing.B) {
	w := warm(New(time.Minute, nil))
	b.ReportAllocs()
	for b.Loop() {
		if len(w.All()) != router.NumShards {
			b.Fatal("shards missing")
		}
	}
}

// BenchmarkRecordFakeClock is Record without the clock read, to separate the
// clock's cost (which varies a lot between machines and VMs) from ours.
func BenchmarkRecordFakeClock(b *testing.B) {
	c := newFakeClock()
	w := warm(New(time.Minute, c.Now))
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		w.Record(router.Shard(i&1023), i&1 == 0, time.Duration(i&0xfffff)*time.Nanosecond, i&63 == 0)
		i++
	}
}

func BenchmarkRecordOneShard(b *testing.B) {
	w := New(time.Minute, nil)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		w.Record(441, i&1 == 0, time.Duration(i&0xfffff)*time.Nanosecond, false)
		i++
	}
}

// BenchmarkAllFullWindow is the worst case for All: every shard had traffic
// in every second of the window.
func BenchmarkAllFullWindow(b *testing.B) {
	c := newFakeClock()
	w := New(time.Minute, c.Now)
	for sec := 0; sec < 60; sec++ {
		warm(w)
		c.Advance(time.Second)
	}
	b.ReportAllocs()
	for b.Loop() {
		if len(w.All()) != router.NumShards {
			b.Fatal("shards missing")
		}
	}
}

// TestSummaryAddsUp: summaries of two windows (two proxies) added together
// give the counts and percentiles of one window that saw everything, and
// survive JSON (they are published through etcd).
func TestSummaryAddsUp(t *testing.T) {
	c := newFakeClock()
	a, b, all := New(time.Minute, c.Now), New(time.Minute, c.Now), New(time.Minute, c.Now)
	const sh = 7
	for i := range 300 {
		d := time.Duration(100+i*37) * time.Microsecond
		w := a
		if i%3 == 0 {
			w = b
		}
		failed := i%10 == 0
		w.Record(sh, false, d, failed)
		all.Record(sh, false, d, failed)
		a.Record(sh, true, time.Second, false) // writes are not reads
	}
	var sum Summary
	for _, w := range []*Window{a, b} {
		js, err := json.Marshal(w.Summary(sh, false))
		if err != nil {
			t.Fatal(err)
		}
		var s Summary
		if err := json.Unmarshal(js, &s); err != nil {
			t.Fatal(err)
		}
		sum.Add(s)
	}
	want := all.Summary(sh, false)
	if sum.Count != 300 || sum.Errors != 30 || want.Count != 300 || !slices.Equal(sum.Buckets, want.Buckets) {
		t.Fatalf("sum %+v, one window %+v", sum, want)
	}
	if sum.Percentile(0.99) != all.Shard(sh).ReadP99 || sum.Percentile(0.5) != all.Shard(sh).ReadP50 {
		t.Fatalf("P99 %s / P50 %s, one window %+v", sum.Percentile(0.99), sum.Percentile(0.5), all.Shard(sh))
	}
	if (Summary{}).Percentile(0.99) != 0 || a.Summary(8, false).Count != 0 {
		t.Fatal("an empty summary has a percentile or a count")
	}
}
