package histcache

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/convoy-im/convoy/internal/testsvc"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
)

var soak = flag.Duration("histcache.soak", 0, "run the model-based concurrency test for this long instead of 20k reads")

// refConv is the reference "MySQL" of one conversation: multi-version, so a
// reader can ask what any query returned at every version it overlapped.
// seq allocation is separate from commit, as with im_conv_seq: commits can
// land out of seq order and a rollback leaves a gap.
type refConv struct {
	mu      sync.Mutex
	nextSeq uint64
	ver     uint64    // bumped by every commit and recall
	rows    []*refRow // committed rows, by seq
	byMsg   map[uint64]*refRow
}

type refRow struct {
	e          Entry
	born, died uint64 // versions; died 0 = alive
}

func (r *refRow) visible(v uint64) bool { return r.born <= v && (r.died == 0 || r.died > v) }

var msgIDs atomic.Uint64

func (c *refConv) alloc(n int) []Entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	es := make([]Entry, n)
	for i := range es {
		c.nextSeq++
		es[i] = Entry{Seq: c.nextSeq, MsgID: msgIDs.Add(1), SenderUID: uint64(rand.IntN(100)), MsgType: uint8(rand.IntN(4)), CreatedMs: time.Now().UnixMilli()}
	}
	return es
}

func (c *refConv) commit(es []Entry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ver++
	for _, e := range es {
		row := &refRow{e: e, born: c.ver}
		i := sort.Search(len(c.rows), func(i int) bool { return c.rows[i].e.Seq >= e.Seq })
		c.rows = slices.Insert(c.rows, i, row)
		c.byMsg[e.MsgID] = row
	}
}

// recall deletes one recent live row; false if none.
func (c *refConv) recall() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for try := 0; try < 5 && len(c.rows) > 0; try++ {
		row := c.rows[len(c.rows)-1-rand.IntN(min(len(c.rows), 600))]
		if row.died == 0 {
			c.ver++
			row.died = c.ver
			return true
		}
	}
	return false
}

// query answers one read at version v; call with mu held.
func (c *refConv) query(v uint64, q query) []Entry {
	var out []Entry
	switch q.op {
	case opBefore:
		i := sort.Search(len(c.rows), func(i int) bool { return c.rows[i].e.Seq >= q.cursor })
		for i--; i >= 0 && len(out) < q.limit; i-- {
			if c.rows[i].visible(v) {
				out = append(out, c.rows[i].e)
			}
		}
	case opAfter:
		i := sort.Search(len(c.rows), func(i int) bool { return c.rows[i].e.Seq > q.cursor })
		for ; i < len(c.rows) && len(out) < q.limit; i++ {
			if c.rows[i].visible(v) {
				out = append(out, c.rows[i].e)
			}
		}
	case opMsgID:
		if row := c.byMsg[q.cursor]; row != nil && row.visible(v) {
			out = append(out, row.e)
		}
	}
	return out
}

type query struct {
	op     byte
	cursor uint64
	limit  int
}

func (q query) run(ctx context.Context, c *Cache, conv uint64) ([]Entry, bool, error) {
	switch q.op {
	case opBefore:
		return c.Before(ctx, conv, q.cursor, q.limit)
	case opAfter:
		return c.After(ctx, conv, q.cursor, q.limit)
	}
	e, found, ok, err := c.ByMsgID(ctx, conv, q.cursor)
	if found {
		return []Entry{e}, ok, err
	}
	return nil, ok, err
}

type modelConfig struct {
	writers, readers, instances, convs int
	reads                              int64
	duration                           time.Duration
	rollbackP, recallP                 float64
	crashEvery                         int64   // every n-th committed write dies before EndWrite
	rogueP                             float64 // writes that skip the protocol entirely (negative control)
	flushEvery                         time.Duration
	killEvery                          time.Duration
	pauseEvery, pauseFor               time.Duration // SIGSTOP Redis (a hung server)
	tune                               func(*Options)
}

type modelStats struct {
	reads, hits, hotHits, misses, errs, mismatches atomic.Int64
	fillsTried, fillsInstalled                     atomic.Int64
	writes, crashes, leaseViolations               atomic.Int64
	flushes, kills, pauses, lruHits                atomic.Int64
	breakerOpened                                  atomic.Int64
	firstMismatch                                  atomic.Pointer[string]
}

func runModel(t *testing.T, cfg modelConfig) *modelStats {
	r := testsvc.StartRedis(t)
	opt := Options{MarkerTTL: 150 * time.Millisecond, CoverageTTL: 3 * time.Second, Timeout: 2 * time.Second, HotReads: 20}
	if cfg.tune != nil {
		cfg.tune(&opt)
	}
	var caches []*Cache
	for range cfg.instances {
		caches = append(caches, New(newClient(t, r.Addr()), opt, nil))
	}
	refs := make([]*refConv, cfg.convs)
	for i := range refs {
		refs[i] = &refConv{byMsg: map[uint64]*refRow{}}
	}
	pick := func() uint64 { // conversation 0 is the very hot one
		if rand.IntN(2) == 0 {
			return 0
		}
		return uint64(rand.IntN(cfg.convs))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if cfg.duration > 0 {
		ctx, cancel = context.WithTimeout(ctx, cfg.duration)
		defer cancel()
	}
	st := &modelStats{}
	var wg sync.WaitGroup
	var writersWG sync.WaitGroup

	for w := range cfg.writers {
		writersWG.Add(1)
		go func() {
			defer writersWG.Done()
			c := caches[w%len(caches)]
			for ctx.Err() == nil {
				time.Sleep(time.Duration(rand.IntN(20000)) * time.Microsecond)
				conv := pick()
				ref := refs[conv]
				if rand.Float64() < cfg.rogueP {
					ref.commit(ref.alloc(1)) // no marker, no write-through
					continue
				}
				t0 := time.Now()
				tok, _ := c.BeginWrite(ctx, conv) // on error: go on, EndWrite invalidates
				if rand.Float64() < cfg.recallP {
					if ref.recall() && time.Since(t0) > opt.MarkerTTL {
						st.leaseViolations.Add(1)
					}
					c.Invalidate(ctx, conv)
					c.AbortWrite(ctx, conv, tok)
					continue
				}
				es := ref.alloc(1 + rand.IntN(3))
				time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
				if rand.Float64() < cfg.rollbackP {
					c.AbortWrite(ctx, conv, tok)
					continue
				}
				ref.commit(es)
				n := st.writes.Add(1)
				if time.Since(t0) > opt.MarkerTTL {
					st.leaseViolations.Add(1)
				}
				time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
				if cfg.crashEvery > 0 && n%cfg.crashEvery == 0 {
					st.crashes.Add(1) // died after commit: no EndWrite
					continue
				}
				c.EndWrite(ctx, conv, tok, es)
			}
		}()
	}

	if cfg.pauseEvery > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				time.Sleep(cfg.pauseEvery/2 + time.Duration(rand.Int64N(int64(cfg.pauseEvery))))
				r.Pause()
				time.Sleep(cfg.pauseFor)
				r.Resume()
				st.pauses.Add(1)
			}
		}()
	}
	if cfg.flushEvery > 0 || cfg.killEvery > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			admin := redis.NewClient(&redis.Options{Addr: r.Addr()})
			defer admin.Close()
			lastKill := time.Now()
			for ctx.Err() == nil {
				every := cfg.flushEvery
				if every == 0 {
					every = cfg.killEvery
				}
				time.Sleep(every/2 + time.Duration(rand.Int64N(int64(every))))
				if cfg.killEvery > 0 && time.Since(lastKill) > cfg.killEvery {
					r.Kill()
					time.Sleep(50 * time.Millisecond)
					r.Start()
					st.kills.Add(1)
					lastKill = time.Now()
				} else if cfg.flushEvery > 0 && admin.FlushAll(ctx).Err() == nil {
					st.flushes.Add(1)
				}
			}
		}()
	}

	for rd := range cfg.readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := caches[rd%len(caches)]
			for ctx.Err() == nil && (cfg.duration > 0 || st.reads.Load() < cfg.reads) {
				conv := pick()
				ref := refs[conv]
				ref.mu.Lock()
				top := ref.nextSeq
				var anyMsg uint64
				if n := len(ref.rows); n > 0 {
					anyMsg = ref.rows[n-1-rand.IntN(min(n, 700))].e.MsgID
				}
				vA := ref.ver
				ref.mu.Unlock()
				var q query
				switch x := rand.IntN(10); {
				case x < 4:
					q = query{op: opBefore, cursor: top + 1, limit: 20} // first screen
				case x < 6:
					q = query{op: opBefore, cursor: top - min(top, uint64(rand.IntN(700))), limit: 1 + rand.IntN(50)}
				case x < 9:
					q = query{op: opAfter, cursor: top - min(top, uint64(rand.IntN(700))), limit: 1 + rand.IntN(50)}
				default:
					q = query{op: opMsgID, cursor: anyMsg + uint64(rand.IntN(2)), limit: 1}
				}
				page, ok, err := q.run(ctx, c, conv)
				st.reads.Add(1)
				if err != nil {
					st.errs.Add(1)
					time.Sleep(time.Millisecond) // Redis out of reach: do not spin
				}
				if ok {
					st.hits.Add(1)
					if conv == 0 {
						st.hotHits.Add(1)
					}
					ref.mu.Lock()
					vB := ref.ver
					match := false
					var want []Entry
					for v := vA; v <= vB && !match; v++ {
						want = ref.query(v, q)
						match = slices.Equal(page, want) || (len(page) == 0 && len(want) == 0)
					}
					ref.mu.Unlock()
					if !match {
						st.mismatches.Add(1)
						msg := fmt.Sprintf("conv %d %c cursor=%d limit=%d versions %d..%d:\n got %v\nwant %v", conv, q.op, q.cursor, q.limit, vA, vB, page, want)
						st.firstMismatch.CompareAndSwap(nil, &msg)
					}
					continue
				}
				st.misses.Add(1)
				if rand.IntN(3) == 0 {
					// Not every miss fills (the engine may skip it, or the
					// proxy dies first): a dropped-but-not-refilled state must
					// stay visible to other readers for a while.
					continue
				}
				tok, err := c.BeginFill(ctx, conv)
				if err != nil {
					continue
				}
				// "Read MySQL": either the recent range (the engine's fill
				// policy) or the page the client asked for.
				var es []Entry
				var lo, hi uint64
				ref.mu.Lock()
				v := ref.ver
				if q.op == opMsgID || rand.IntN(4) > 0 {
					k := 50 + rand.IntN(550)
					es = ref.query(v, query{op: opBefore, cursor: NoUpperBound, limit: k})
					lo, hi = 0, NoUpperBound
					if len(es) == k {
						lo = es[k-1].Seq
					}
				} else {
					es = ref.query(v, q)
					switch {
					case q.op == opBefore && q.cursor == 0:
						ref.mu.Unlock()
						continue
					case q.op == opBefore:
						lo, hi = 0, q.cursor-1
						if len(es) == q.limit {
							lo = es[len(es)-1].Seq
						}
					default:
						lo, hi = q.cursor+1, NoUpperBound
						if len(es) == q.limit {
							hi = es[len(es)-1].Seq
						}
					}
				}
				ref.mu.Unlock()
				st.fillsTried.Add(1)
				installed, err := c.Fill(ctx, conv, tok, es, lo, hi)
				if errors.Is(err, ErrBadFill) {
					t.Errorf("fill: %v", err)
				}
				if installed {
					st.fillsInstalled.Add(1)
				}
			}
			if cfg.duration == 0 {
				cancel() // enough reads: stop the writers too
			}
		}()
	}
	wg.Wait()
	cancel()
	writersWG.Wait()
	t.Logf("reads %d: hits %d (%.1f%%, hot conv %d), misses %d, errors %d, mismatches %d; fills %d/%d installed; writes %d, crashes %d, lease violations %d; flushes %d, kills %d",
		st.reads.Load(), st.hits.Load(), 100*float64(st.hits.Load())/float64(max(1, st.reads.Load())), st.hotHits.Load(),
		st.misses.Load(), st.errs.Load(), st.mismatches.Load(), st.fillsInstalled.Load(), st.fillsTried.Load(),
		st.writes.Load(), st.crashes.Load(), st.leaseViolations.Load(), st.flushes.Load(), st.kills.Load())
	reasons := map[string]float64{}
	for _, c := range caches {
		ch := make(chan prometheus.Metric, 256)
		c.m.misses.Collect(ch)
		close(ch)
		for m := range ch {
			var d dto.Metric
			m.Write(&d)
			reasons[d.GetLabel()[0].GetValue()+"/"+d.GetLabel()[1].GetValue()] += d.GetCounter().GetValue()
		}
	}
	var lru, opened float64
	for _, c := range caches {
		lru += counter(t, c.m.lruHits)
		ch := make(chan prometheus.Metric, 8)
		c.m.breakerTransitions.WithLabelValues("open").Collect(ch)
		close(ch)
		var d dto.Metric
		(<-ch).Write(&d)
		opened += d.GetCounter().GetValue()
	}
	st.lruHits.Store(int64(lru))
	st.breakerOpened.Store(int64(opened))
	t.Logf("misses by op/reason: %v; LRU hits %v; pauses %d, breaker openings %v", reasons, lru, st.pauses.Load(), opened)
	return st
}

// TestModelConcurrency: writers (with rollbacks, recalls, crashes after
// commit, out-of-order commits), readers that fill on miss, three proxy
// instances on one Redis, FLUSHALLs and Redis restarts. Every hit is
// compared with the reference at each version the read overlapped.
func TestModelConcurrency(t *testing.T) {
	cfg := modelConfig{writers: 6, readers: 8, instances: 3, convs: 5, reads: 30000,
		crashEvery: 150, rollbackP: 0.05, recallP: 0.02, flushEvery: 2 * time.Second, killEvery: 4 * time.Second}
	if *soak > 0 {
		cfg.duration = *soak
	}
	st := runModel(t, cfg)
	if m := st.mismatches.Load(); m > 0 {
		if v := st.leaseViolations.Load(); v > 0 {
			t.Logf("%d writers committed later than MarkerTTL after BeginWrite (the protocol's assumption was broken by the test machine)", v)
		}
		t.Fatalf("%d hits differed from the reference; first:\n%s", m, *st.firstMismatch.Load())
	}
	// Not vacuous: the cache must actually serve, fill and exercise the paths.
	if ratio := float64(st.hits.Load()) / float64(st.reads.Load()); ratio < 0.25 || st.hotHits.Load() < 500 || st.lruHits.Load() == 0 {
		t.Fatalf("hit ratio %.2f, hot hits %d, LRU hits %d: the test proves nothing if the cache always misses", ratio, st.hotHits.Load(), st.lruHits.Load())
	}
	if st.fillsInstalled.Load() == 0 || st.crashes.Load() == 0 {
		t.Fatalf("paths not exercised: fills installed %d, crashes %d", st.fillsInstalled.Load(), st.crashes.Load())
	}
}

// TestModelDetectsUnprotectedWrites is the negative control: writers that
// commit without BeginWrite/EndWrite (the residual case of a proxy that
// cannot reach Redis at all) must be caught by the same checker.
func TestModelDetectsUnprotectedWrites(t *testing.T) {
	st := runModel(t, modelConfig{writers: 4, readers: 6, instances: 2, convs: 3, reads: 8000, rogueP: 0.2})
	if st.mismatches.Load() == 0 {
		t.Fatal("the checker found no stale page although 20% of writes bypassed the protocol")
	}
}

// TestModelRedisHung: the same checker while Redis is SIGSTOPped for
// 300 ms about every second (commands time out, then run late when it
// continues) with a short per-call timeout, so every instance's breaker
// opens and closes again and writers commit without markers meanwhile.
// Nothing stale may be served: the writers that got no marker are repaired
// before their instance serves again, and the other instances could not
// reach Redis either.
func TestModelRedisHung(t *testing.T) {
	cfg := modelConfig{writers: 6, readers: 8, instances: 3, convs: 5, duration: 5 * time.Second,
		rollbackP: 0.05, recallP: 0.02, pauseEvery: time.Second, pauseFor: 400 * time.Millisecond,
		tune: func(o *Options) {
			o.Timeout = 100 * time.Millisecond
			o.BreakerFailures = 3
			o.BreakerMinOutage = 100 * time.Millisecond
			o.BreakerBackoff = 50 * time.Millisecond
			o.BreakerBackoffMax = 100 * time.Millisecond
		}}
	if *soak > 0 {
		cfg.duration = *soak
	}
	st := runModel(t, cfg)
	if m := st.mismatches.Load(); m > 0 {
		t.Fatalf("%d hits differed from the reference; first:\n%s", m, *st.firstMismatch.Load())
	}
	// Hits scale with the machine's speed over the fixed duration (under a
	// loaded 2-core machine 2700 were seen where an idle one serves 6000+):
	// a thousand compared hits already prove the protocol held.
	if st.pauses.Load() == 0 || st.breakerOpened.Load() == 0 || st.hits.Load() < 1000 {
		t.Fatalf("not exercised: %d pauses, %d breaker openings, %d hits of %d reads", st.pauses.Load(), st.breakerOpened.Load(), st.hits.Load(), st.reads.Load())
	}
}
