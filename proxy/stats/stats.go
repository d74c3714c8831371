// Package stats keeps sliding-window statistics per logical shard: QPS, read
// and write latency percentiles and error counts over the last minute (by
// default), for SHOW SHARD STATS and the expansion triggers of SHOW SHARD
// HEALTH. It is pure Go: no I/O, no goroutines, no locks.
//
// # Layout
//
// Each shard owns a ring of one-second slots, allocated on the shard's first
// Record (so idle shards cost one nil pointer). A slot holds, for reads and
// writes separately, an error counter and a latency histogram of atomic
// uint32 counters in fixed log-scale buckets. Record adds to the slot of the
// current second; a slot still holding an older second is reset first by
// whichever Record arrives there first. Queries sum the slots whose second is
// inside the window, so nothing has to expire old data: a slot that is too
// old is simply ignored.
//
// # Latency buckets and accuracy
//
// Buckets are geometric with ratio 2^(1/4) (four per power of two) from
// 2^13 ns (8.192 µs) to 2^33 ns (8.59 s), plus one underflow and one
// overflow bucket. A percentile is the nearest-rank quantile of the recorded
// durations, reported as the geometric midpoint of its bucket, so for a true
// quantile q in [8.192 µs, 8.59 s] the reported value p satisfies
// |p - q| / q <= 2^(1/8) - 1 < 9.1%. Durations below the range are reported
// as 8.192 µs, durations above it as 8.59 s.
//
// # Time and accuracy at second boundaries
//
// Seconds are counted from New on the monotonic clock (time.Time.Sub), so a
// wall-clock step does not shift the window. The window covers the slot of
// the current second and the window/1s - 1 whole seconds before it; QPS
// divides by the time actually covered (at least 1 s, and never more than
// the time since New). Concurrent Records in the same second never lose a
// count. Only a Record stalled for about a whole window between reading the
// clock and adding (its slot meanwhile reused for a newer second) may be
// dropped or counted in that newer second.
//
// # Cost
//
// Record is lock-free and allocation-free after a shard's first statement:
// one clock read, two atomic loads and one or two atomic adds. A busy shard
// holds window/1s slots of 2 x 83 counters: about 40 KB with the default
// 60 s window, so at most about 40 MB with all 1024 shards active.
package stats

import (
	"math"
	"math/bits"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/convoy-im/convoy/router"
)

// DefaultWindow is the window New uses for a non-positive duration.
const DefaultWindow = 60 * time.Second

// Bucket layout: index 0 is underflow (< 2^minExp ns), 1..nLog the log
// buckets, nLog+1 overflow (>= 2^maxExp ns).
const (
	minExp     = 13 // 8.192 µs
	maxExp     = 33 // 8.59 s
	perOctave  = 4
	nLog       = (maxExp - minExp) * perOctave
	nBuckets   = nLog + 2
	overflowIx = nLog + 1
)

// MaxRelativeError is the bound on |reported - true| / true for a
// percentile whose true value lies in [MinLatency, MaxLatency].
var MaxRelativeError = math.Pow(2, 1.0/(2*perOctave)) - 1

// Range of latencies reported within MaxRelativeError; values outside are
// clamped to it.
const (
	MinLatency = time.Duration(1) << minExp
	MaxLatency = time.Duration(1) << maxExp
)

// Within one octave [2^e, 2^(e+1)), the mantissa v<<(63-e) lies in
// [2^63, 2^64); these are 2^63 * 2^(k/4) for k = 1..3, the inner bucket
// edges.
var quarterEdges = [perOctave - 1]uint64{
	uint64(math.Ldexp(math.Pow(2, 0.25), 63)),
	uint64(math.Ldexp(math.Sqrt2, 63)),
	uint64(math.Ldexp(math.Pow(2, 0.75), 63)),
}

// bucketOf maps a duration to its bucket index.
func bucketOf(d time.Duration) int {
	if d < MinLatency {
		return 0
	}
	if d >= MaxLatency {
		return overflowIx
	}
	v := uint64(d)
	e := bits.Len64(v) - 1 // minExp <= e < maxExp
	m := v << (63 - e)
	sub := 0
	if m >= quarterEdges[1] {
		sub = 2
	}
	if m >= quarterEdges[sub] {
		sub++
	}
	return 1 + (e-minExp)*perOctave + sub
}

// bucketValue is the value reported for a percentile falling in bucket i.
func bucketValue(i int) time.Duration {
	switch {
	case i <= 0:
		return MinLatency
	case i >= overflowIx:
		return MaxLatency
	}
	// Bucket i covers [2^(minExp + (i-1)/4), 2^(minExp + i/4)); its geometric
	// midpoint is 2^(minExp + (i-0.5)/4).
	return time.Duration(math.Round(math.Exp2(minExp + (float64(i)-0.5)/perOctave)))
}

// Slot second sentinels: a slot never written, and a slot being reset.
const (
	secEmpty     = -1
	secResetting = -2
)

type kindSlot struct {
	errors  atomic.Uint32
	buckets [nBuckets]atomic.Uint32
}

type slot struct {
	sec   atomic.Int64 // second (since New) the counters belong to
	kinds [2]kindSlot  // 0 read, 1 write
}

type ring struct {
	slots []slot
}

// Window holds sliding-window statistics for every logical shard. It is safe
// for concurrent use.
type Window struct {
	now    func() time.Time // nil: time.Since(base), which reads only the monotonic clock
	base   time.Time        // second 0; carries the monotonic reading of time.Now
	nSlots int64
	shards [router.NumShards]atomic.Pointer[ring]
}

// New returns a Window over the last window of time (rounded up to whole
// seconds, at least 1 s; DefaultWindow when window <= 0) in 1 s slots. now is
// the clock, for tests; nil means time.Now.
func New(window time.Duration, now func() time.Time) *Window {
	if window <= 0 {
		window = DefaultWindow
	}
	n := int64((window + time.Second - 1) / time.Second)
	if now == nil {
		return &Window{base: time.Now(), nSlots: n}
	}
	return &Window{now: now, base: now(), nSlots: n}
}

// Window is the length of the window, in whole seconds.
func (w *Window) Window() time.Duration { return time.Duration(w.nSlots) * time.Second }

// second is the current second since New, and the elapsed time.
func (w *Window) second() (int64, time.Duration) {
	var el time.Duration
	if w.now == nil {
		// Half the cost of time.Now: one clock read instead of two.
		el = time.Since(w.base)
	} else {
		el = w.now().Sub(w.base)
	}
	if el < 0 {
		el = 0 // a fake clock set before New
	}
	return int64(el / time.Second), el
}

func (w *Window) ring(s router.Shard) *ring {
	p := &w.shards[s]
	if r := p.Load(); r != nil {
		return r
	}
	r := &ring{slots: make([]slot, w.nSlots)}
	for i := range r.slots {
		r.slots[i].sec.Store(secEmpty)
	}
	if p.CompareAndSwap(nil, r) {
		return r
	}
	return p.Load()
}

// Record counts one statement on shard s: a write or a read, its latency d,
// and whether it failed. It never blocks and does not allocate (except once,
// on a shard's first statement). Out-of-range shards are ignored.
func (w *Window) Record(s router.Shard, write bool, d time.Duration, failed bool) {
	if int(s) >= router.NumShards {
		return
	}
	sec, _ := w.second()
	sl := &w.ring(s).slots[sec%w.nSlots]
	if cur := sl.sec.Load(); cur != sec && !sl.advance(cur, sec) {
		return
	}
	k := &sl.kinds[0]
	if write {
		k = &sl.kinds[1]
	}
	k.buckets[bucketOf(d)].Add(1)
	if failed {
		k.errors.Add(1)
	}
}

// advance makes the slot hold second sec, resetting its counters if it held
// an older one. It returns false when the slot already holds a newer second
// (the caller was delayed by a whole window): the record is dropped.
func (sl *slot) advance(cur, sec int64) bool {
	for {
		switch {
		case cur == sec:
			return true
		case cur == secResetting:
			runtime.Gosched() // another Record is zeroing ~700 bytes
		case cur > sec:
			return false
		case sl.sec.CompareAndSwap(cur, secResetting):
			for k := range sl.kinds {
				ks := &sl.kinds[k]
				ks.errors.Store(0)
				for i := range ks.buckets {
					ks.buckets[i].Store(0)
				}
			}
			sl.sec.Store(sec)
			return true
		}
		cur = sl.sec.Load()
	}
}

// ShardStats is one shard's activity over the window.
type ShardStats struct {
	Shard router.Shard
	// QPS is statements (reads + writes) per second over the time covered.
	QPS float64
	// Reads, Writes and Errors count statements in the window; Errors
	// counts failed reads and writes.
	Reads, Writes, Errors int64
	// Latency percentiles (nearest rank) by kind; 0 when the kind had no
	// statements. Accurate within MaxRelativeError (see the package doc).
	ReadP50, ReadP99, WriteP50, WriteP99 time.Duration
}

type kindTotals struct {
	count   uint64
	errors  uint64
	buckets [nBuckets]uint64
}

// collect sums the shard's slots inside the window. ok is false when the
// shard has no statement in it.
func (w *Window) collect(r *ring, sec int64) (t [2]kindTotals, ok bool) {
	oldest := sec - w.nSlots + 1
	for i := range r.slots {
		sl := &r.slots[i]
		// Retry if the slot is reset while being read (a seqlock on sec).
		for attempt := 0; attempt < 3; attempt++ {
			s0 := sl.sec.Load()
			if s0 < 0 || s0 < oldest || s0 > sec {
				break // empty, resetting, outside the window
			}
			var part [2]kindTotals
			for k := range sl.kinds {
				ks, pt := &sl.kinds[k], &part[k]
				pt.errors = uint64(ks.errors.Load())
				for b := range ks.buckets {
					n := uint64(ks.buckets[b].Load())
					pt.buckets[b] = n
					pt.count += n
				}
			}
			if sl.sec.Load() != s0 {
				continue
			}
			for k := range t {
				t[k].count += part[k].count
				t[k].errors += part[k].errors
				for b := range t[k].buckets {
					t[k].buckets[b] += part[k].buckets[b]
				}
			}
			break
		}
	}
	return t, t[0].count+t[1].count > 0
}

// percentile is the nearest-rank q-quantile of the histogram.
func (k *kindTotals) percentile(q float64) time.Duration {
	return percentile(k.buckets[:], k.count, q)
}

// percentile is the nearest-rank q-quantile of count durations counted in
// buckets.
func percentile(buckets []uint64, count uint64, q float64) time.Duration {
	if count == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(count)))
	if rank < 1 {
		rank = 1
	}
	var cum uint64
	for i, n := range buckets {
		cum += n
		if cum >= rank {
			return bucketValue(i)
		}
	}
	return bucketValue(overflowIx)
}

// covered is the time the window's slots span now: from the start of the
// oldest slot in the window (or New) to now, at least 1 s.
func (w *Window) covered(sec int64, elapsed time.Duration) time.Duration {
	start := time.Duration(max(sec-w.nSlots+1, 0)) * time.Second
	return max(elapsed-start, time.Second)
}

func (w *Window) stats(s router.Shard, t *[2]kindTotals, span time.Duration) ShardStats {
	st := ShardStats{
		Shard:  s,
		Reads:  int64(t[0].count),
		Writes: int64(t[1].count),
		Errors: int64(t[0].errors + t[1].errors),
	}
	st.QPS = float64(st.Reads+st.Writes) / span.Seconds()
	st.ReadP50, st.ReadP99 = t[0].percentile(0.50), t[0].percentile(0.99)
	st.WriteP50, st.WriteP99 = t[1].percentile(0.50), t[1].percentile(0.99)
	return st
}

// Shard returns shard s's statistics over the window (zero counts when it
// had no traffic).
func (w *Window) Shard(s router.Shard) ShardStats {
	if int(s) >= router.NumShards {
		return ShardStats{Shard: s}
	}
	r := w.shards[s].Load()
	if r == nil {
		return ShardStats{Shard: s}
	}
	sec, el := w.second()
	t, _ := w.collect(r, sec)
	return w.stats(s, &t, w.covered(sec, el))
}

// All returns the statistics of every shard with at least one statement in
// the window, sorted by shard. It reads every active shard's ring (a few
// milliseconds with all shards active): meant for admin commands, not the
// statement path.
func (w *Window) All() []ShardStats {
	sec, el := w.second()
	span := w.covered(sec, el)
	var out []ShardStats
	for s := range w.shards {
		r := w.shards[s].Load()
		if r == nil {
			continue
		}
		if t, ok := w.collect(r, sec); ok {
			out = append(out, w.stats(router.Shard(s), &t, span))
		}
	}
	return out
}

// Summary is one kind's statements of a shard over the window in a form
// that adds up across windows and processes (the bucket layout is fixed):
// a migration's read ramp sums every proxy's (SHOW MIGRATIONS).
type Summary struct {
	Count  uint64 `json:"n"`
	Errors uint64 `json:"err,omitempty"`
	// Buckets are the latency counts by bucket index, trailing zeros
	// dropped.
	Buckets []uint64 `json:"b,omitempty"`
}

// Summary returns shard s's reads (write false) or writes over the window.
func (w *Window) Summary(s router.Shard, write bool) Summary {
	if int(s) >= router.NumShards {
		return Summary{}
	}
	r := w.shards[s].Load()
	if r == nil {
		return Summary{}
	}
	sec, _ := w.second()
	t, _ := w.collect(r, sec)
	k := &t[0]
	if write {
		k = &t[1]
	}
	n := len(k.buckets)
	for n > 0 && k.buckets[n-1] == 0 {
		n--
	}
	return Summary{Count: k.count, Errors: k.errors, Buckets: append([]uint64(nil), k.buckets[:n]...)}
}

// Add adds o's statements to s.
func (s *Summary) Add(o Summary) {
	s.Count += o.Count
	s.Errors += o.Errors
	if len(o.Buckets) > len(s.Buckets) {
		s.Buckets = append(s.Buckets, make([]uint64, len(o.Buckets)-len(s.Buckets))...)
	}
	for i, n := range o.Buckets {
		s.Buckets[i] += n
	}
}

// Percentile is the nearest-rank q-quantile of the latencies, within
// MaxRelativeError like ShardStats' (0 without statements).
func (s Summary) Percentile(q float64) time.Duration {
	return percentile(s.Buckets, s.Count, q)
}
