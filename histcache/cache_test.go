package histcache

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/convoy-im/convoy/internal/testsvc"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
)

var bg = context.Background()

func newClient(t testing.TB, addr string) *redis.Client {
	rdb := redis.NewClient(&redis.Options{
		Addr:                  addr,
		ContextTimeoutEnabled: true,
		DialTimeout:           time.Second,
		PoolSize:              32,
	})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// testOpts keeps the protocol's clocks short so tests do not sleep long.
func testOpts() Options {
	return Options{MarkerTTL: 100 * time.Millisecond, Timeout: time.Second, HotReads: -1}
}

func setup(t testing.TB, opt Options) (*Cache, *testsvc.Redis, *redis.Client) {
	t.Helper()
	r := testsvc.StartRedis(t)
	rdb := newClient(t, r.Addr())
	return New(rdb, opt, nil), r, rdb
}

func mkEntries(from, to uint64) []Entry {
	var es []Entry
	for s := from; s <= to; s++ {
		es = append(es, Entry{Seq: s, MsgID: 1000 + s, SenderUID: 7, MsgType: uint8(s % 3), CreatedMs: 1700000000000 + int64(s)})
	}
	return es
}

// warm creates the conversation's incarnation and waits out the young period.
func warm(t testing.TB, c *Cache, conv uint64) {
	t.Helper()
	c.BeginFill(bg, conv)
	time.Sleep(c.opt.MarkerTTL + 10*time.Millisecond)
}

func mustFill(t testing.TB, c *Cache, conv uint64, es []Entry, lo, hi uint64) {
	t.Helper()
	tok, err := c.BeginFill(bg, conv)
	if err != nil {
		t.Fatalf("BeginFill: %v", err)
	}
	ok, err := c.Fill(bg, conv, tok, es, lo, hi)
	if err != nil || !ok {
		t.Fatalf("Fill(%d..%d) installed=%v err=%v", lo, hi, ok, err)
	}
}

func desc(es []Entry) []Entry {
	es = slices.Clone(es)
	slices.Reverse(es)
	return es
}

func expectHit(t testing.TB, page []Entry, ok bool, err error, want []Entry) {
	t.Helper()
	if err != nil || !ok {
		t.Fatalf("want hit, got ok=%v err=%v", ok, err)
	}
	if !slices.Equal(page, want) && !(len(page) == 0 && len(want) == 0) {
		t.Fatalf("page\n got %v\nwant %v", page, want)
	}
}

func expectMiss(t testing.TB, page []Entry, ok bool, err error) {
	t.Helper()
	if ok {
		t.Fatalf("want miss, got hit %v", page)
	}
}

func counter(t testing.TB, c prometheus.Collector) float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 64)
	c.Collect(ch)
	close(ch)
	var sum float64
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			t.Fatal(err)
		}
		sum += d.GetCounter().GetValue()
	}
	return sum
}

func TestFillThenHit(t *testing.T) {
	c, _, _ := setup(t, testOpts())
	const conv = 42
	if _, err := c.BeginFill(bg, conv); !errors.Is(err, ErrNotFillable) {
		t.Fatalf("first BeginFill of a new incarnation: err=%v, want ErrNotFillable (young)", err)
	}
	page, ok, err := c.Before(bg, conv, 31, 20)
	expectMiss(t, page, ok, err)
	time.Sleep(c.opt.MarkerTTL + 10*time.Millisecond)

	all := mkEntries(1, 30)
	mustFill(t, c, conv, all, 0, NoUpperBound)
	page, ok, err = c.Before(bg, conv, 31, 20)
	expectHit(t, page, ok, err, desc(all[10:30]))
	page, ok, err = c.Before(bg, conv, NoUpperBound, 5)
	expectHit(t, page, ok, err, desc(all[25:30]))
	page, ok, err = c.Before(bg, conv, 5, 20) // short page, coverage from the start
	expectHit(t, page, ok, err, desc(all[0:4]))
	page, ok, err = c.After(bg, conv, 5, 10)
	expectHit(t, page, ok, err, all[5:15])
	page, ok, err = c.After(bg, conv, 30, 10)
	expectHit(t, page, ok, err, nil)
	e, found, ok, err := c.ByMsgID(bg, conv, 1017)
	if !ok || !found || e != all[16] || err != nil {
		t.Fatalf("ByMsgID(1017) = %v found=%v ok=%v err=%v", e, found, ok, err)
	}
	if _, found, ok, _ = c.ByMsgID(bg, conv, 99); !ok || found {
		t.Fatalf("ByMsgID(99) over full coverage: found=%v ok=%v, want certain absence", found, ok)
	}
	if _, ok, _ := c.Before(bg, conv, 31, 0); ok {
		t.Fatal("limit 0 served")
	}
}

func TestBelowCoverage(t *testing.T) {
	c, _, _ := setup(t, testOpts())
	const conv = 7
	warm(t, c, conv)
	all := mkEntries(1, 30)
	mustFill(t, c, conv, all[10:], 11, NoUpperBound) // proves [11, inf)

	page, ok, err := c.Before(bg, conv, 31, 20)
	expectHit(t, page, ok, err, desc(all[10:30]))
	page, ok, err = c.Before(bg, conv, 15, 10) // needs 5..14, has 11..14
	expectMiss(t, page, ok, err)
	page, ok, err = c.After(bg, conv, 5, 3)
	expectMiss(t, page, ok, err)
	page, ok, err = c.After(bg, conv, 10, 3)
	expectHit(t, page, ok, err, all[10:13])
	if _, _, ok, _ := c.ByMsgID(bg, conv, 99); ok {
		t.Fatal("absence claimed over partial coverage")
	}

	// A bounded fill that does not touch the coverage is useless.
	tok, _ := c.BeginFill(bg, conv)
	if ok, err := c.Fill(bg, conv, tok, all[0:5], 1, 5); ok || err != nil {
		t.Fatalf("unanchored fill installed=%v err=%v", ok, err)
	}
	// An adjacent one extends it downwards.
	tok, _ = c.BeginFill(bg, conv)
	if ok, err := c.Fill(bg, conv, tok, all[0:10], 0, 10); !ok || err != nil {
		t.Fatalf("adjacent fill installed=%v err=%v", ok, err)
	}
	page, ok, err = c.Before(bg, conv, 15, 10)
	expectHit(t, page, ok, err, desc(all[4:14]))

	// Caller bugs are reported, not installed.
	tok, _ = c.BeginFill(bg, conv)
	if _, err := c.Fill(bg, conv, tok, all[0:5], 3, 5); !errors.Is(err, ErrBadFill) {
		t.Fatalf("entry below lo: err=%v", err)
	}
}

func TestPendingMarkerMisses(t *testing.T) {
	c, _, _ := setup(t, testOpts())
	const conv = 9
	warm(t, c, conv)
	all := mkEntries(1, 10)
	mustFill(t, c, conv, all, 0, NoUpperBound)

	tok, err := c.BeginWrite(bg, conv)
	if err != nil {
		t.Fatal(err)
	}
	page, ok, err := c.Before(bg, conv, 100, 5)
	expectMiss(t, page, ok, err)
	if _, err := c.BeginFill(bg, conv); !errors.Is(err, ErrNotFillable) {
		t.Fatalf("BeginFill with a pending write: %v", err)
	}
	e11 := mkEntries(11, 11)
	if err := c.EndWrite(bg, conv, tok, e11); err != nil {
		t.Fatal(err)
	}
	page, ok, err = c.Before(bg, conv, 100, 3)
	expectHit(t, page, ok, err, desc(append(all[8:], e11...)))

	// A rollback releases the marker and changes nothing.
	tok, _ = c.BeginWrite(bg, conv)
	if _, ok, _ := c.After(bg, conv, 0, 3); ok {
		t.Fatal("hit while pending")
	}
	if err := c.AbortWrite(bg, conv, tok); err != nil {
		t.Fatal(err)
	}
	page, ok, err = c.After(bg, conv, 9, 5)
	expectHit(t, page, ok, err, append(all[9:], e11...))
}

func TestStaleMarkerInvalidates(t *testing.T) {
	c, _, rdb := setup(t, testOpts())
	const conv = 11
	warm(t, c, conv)
	mustFill(t, c, conv, mkEntries(1, 10), 0, NoUpperBound)

	tok, _ := c.BeginWrite(bg, conv) // the writer "dies" after its commit
	time.Sleep(c.opt.MarkerTTL + 20*time.Millisecond)
	inv := counter(t, c.m.invalidations)
	page, ok, err := c.Before(bg, conv, 100, 5)
	expectMiss(t, page, ok, err)
	if got := counter(t, c.m.invalidations) - inv; got != 1 {
		t.Fatalf("stale marker caused %v invalidations, want 1", got)
	}
	if n, _ := rdb.Exists(bg, keysOf(conv).zset).Result(); n != 0 {
		t.Fatal("ZSet survived a stale marker")
	}
	if lo, _ := rdb.HExists(bg, keysOf(conv).meta, "lo").Result(); lo {
		t.Fatal("coverage survived a stale marker")
	}
	// The conversation is fillable again at once (the marker is gone).
	mustFill(t, c, conv, mkEntries(1, 11), 0, NoUpperBound)
	// The late writer's EndWrite finds its marker gone: it must not trust
	// the range and invalidates.
	if err := c.EndWrite(bg, conv, tok, mkEntries(11, 11)); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := c.Before(bg, conv, 100, 5); ok {
		t.Fatal("hit after an EndWrite whose lease was lost")
	}
}

func TestFillRejectedAfterConcurrentWrite(t *testing.T) {
	c, _, _ := setup(t, testOpts())
	const conv = 13
	warm(t, c, conv)
	for _, tc := range []struct {
		name    string
		between func()
	}{
		{"end_write", func() {
			tok, _ := c.BeginWrite(bg, conv)
			c.EndWrite(bg, conv, tok, mkEntries(11, 11))
		}},
		{"abort_write", func() {
			tok, _ := c.BeginWrite(bg, conv)
			c.AbortWrite(bg, conv, tok)
		}},
		{"invalidate", func() { c.Invalidate(bg, conv) }},
		{"pending", func() { c.BeginWrite(bg, conv) }}, // last: leaves its marker
	} {
		name, between := tc.name, tc.between
		c.Invalidate(bg, conv)
		tok, err := c.BeginFill(bg, conv)
		if err != nil {
			t.Fatalf("%s: BeginFill: %v", name, err)
		}
		between()
		if ok, err := c.Fill(bg, conv, tok, mkEntries(1, 10), 0, NoUpperBound); ok || err != nil {
			t.Fatalf("%s between BeginFill and Fill: installed=%v err=%v", name, ok, err)
		}
		if _, ok, _ := c.Before(bg, conv, 100, 5); ok {
			t.Fatalf("%s: hit after a rejected fill", name)
		}
	}
}

func TestEndWriteTrimTTLMaxSeq(t *testing.T) {
	opt := testOpts()
	opt.TTL = time.Hour
	c, _, rdb := setup(t, opt)
	const conv = 15
	warm(t, c, conv)
	mustFill(t, c, conv, mkEntries(1, 450), 0, NoUpperBound)
	k := keysOf(conv)
	for s := uint64(451); s+9 <= 630; s += 10 {
		tok, err := c.BeginWrite(bg, conv)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.EndWrite(bg, conv, tok, mkEntries(s, s+9)); err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := rdb.ZCard(bg, k.zset).Result(); n != 500 {
		t.Fatalf("ZCARD=%d, want 500", n)
	}
	if m, _ := rdb.Get(bg, k.maxseq).Result(); m != "630" {
		t.Fatalf("maxseq=%q, want 630", m)
	}
	all := mkEntries(1, 630)
	page, ok, err := c.Before(bg, conv, 631, 500)
	expectHit(t, page, ok, err, desc(all[130:630]))
	page, ok, err = c.Before(bg, conv, 200, 70) // 131..199 cached, 130 trimmed
	expectMiss(t, page, ok, err)
	page, ok, err = c.After(bg, conv, 130, 3)
	expectHit(t, page, ok, err, all[130:133])
	for _, key := range []string{k.zset, k.meta} {
		if ttl, _ := rdb.TTL(bg, key).Result(); ttl <= 59*time.Minute || ttl > time.Hour {
			t.Fatalf("TTL(%s)=%v, want about 1h", key, ttl)
		}
	}
	var mem []string
	mem, _ = rdb.ZRangeArgs(bg, redis.ZRangeArgs{Key: k.zset, Start: "630", Stop: "630", ByScore: true}).Result()
	if len(mem) != 1 || mem[0] != "1630:7:0:1700000000630" {
		t.Fatalf("member of seq 630 = %v", mem)
	}
}

func TestRecallInvalidates(t *testing.T) {
	c, _, _ := setup(t, testOpts())
	const conv = 17
	warm(t, c, conv)
	mustFill(t, c, conv, mkEntries(1, 10), 0, NoUpperBound)
	tok, _ := c.BeginWrite(bg, conv)
	// ... DELETE FROM conv_msg WHERE seq = 5, commit ...
	if err := c.Invalidate(bg, conv); err != nil {
		t.Fatal(err)
	}
	c.AbortWrite(bg, conv, tok)
	if _, ok, _ := c.Before(bg, conv, 100, 5); ok {
		t.Fatal("hit after recall")
	}
	rest := slices.Delete(mkEntries(1, 10), 4, 5)
	mustFill(t, c, conv, rest, 0, NoUpperBound)
	page, ok, err := c.Before(bg, conv, 7, 3)
	expectHit(t, page, ok, err, []Entry{rest[4], rest[3], rest[2]})
}

func TestLostZSetIsAMiss(t *testing.T) {
	c, _, rdb := setup(t, testOpts())
	const conv = 19
	warm(t, c, conv)
	mustFill(t, c, conv, mkEntries(1, 10), 0, NoUpperBound)
	rdb.Del(bg, keysOf(conv).zset) // evicted, say
	page, ok, err := c.Before(bg, conv, 100, 5)
	expectMiss(t, page, ok, err)
}

func TestCoverageExpires(t *testing.T) {
	opt := testOpts()
	opt.CoverageTTL = 300 * time.Millisecond
	c, _, _ := setup(t, opt)
	const conv = 21
	warm(t, c, conv)
	mustFill(t, c, conv, mkEntries(1, 10), 0, NoUpperBound)
	if _, ok, _ := c.Before(bg, conv, 100, 5); !ok {
		t.Fatal("miss right after fill")
	}
	time.Sleep(opt.CoverageTTL)
	if _, ok, _ := c.Before(bg, conv, 100, 5); ok {
		t.Fatal("hit on expired coverage")
	}
	mustFill(t, c, conv, mkEntries(1, 10), 0, NoUpperBound)
	if _, ok, _ := c.Before(bg, conv, 100, 5); !ok {
		t.Fatal("miss after refill")
	}
}

func TestFlushAllThenRefill(t *testing.T) {
	c, r, _ := setup(t, testOpts())
	const conv = 23
	warm(t, c, conv)
	mustFill(t, c, conv, mkEntries(1, 10), 0, NoUpperBound)
	tok, _ := c.BeginWrite(bg, conv) // in flight across the flush
	r.FlushAll(t)
	page, ok, err := c.Before(bg, conv, 100, 5)
	expectMiss(t, page, ok, err)
	// A writer may have lost its marker in the flush: no fill until MarkerTTL.
	if _, err := c.BeginFill(bg, conv); !errors.Is(err, ErrNotFillable) {
		t.Fatalf("BeginFill right after FLUSHALL: %v", err)
	}
	if err := c.EndWrite(bg, conv, tok, mkEntries(11, 11)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(c.opt.MarkerTTL + 10*time.Millisecond)
	all := mkEntries(1, 11)
	mustFill(t, c, conv, all, 0, NoUpperBound)
	page, ok, err = c.Before(bg, conv, 100, 3)
	expectHit(t, page, ok, err, desc(all[8:]))
}

func TestRedisDownBoundedAndRecovers(t *testing.T) {
	opt := testOpts()
	opt.Timeout = 50 * time.Millisecond
	opt.BreakerSettle = -1
	c, r, _ := setup(t, opt)
	const conv = 25
	warm(t, c, conv)
	mustFill(t, c, conv, mkEntries(1, 10), 0, NoUpperBound)
	r.Kill()
	calls := map[string]func() error{
		"before": func() error { _, ok, err := c.Before(bg, conv, 100, 5); return missErr(ok, err) },
		"after":  func() error { _, ok, err := c.After(bg, conv, 0, 5); return missErr(ok, err) },
		"msgid": func() error {
			_, _, ok, err := c.ByMsgID(bg, conv, 1001)
			return missErr(ok, err)
		},
		"begin_fill":  func() error { _, err := c.BeginFill(bg, conv); return err },
		"begin_write": func() error { _, err := c.BeginWrite(bg, conv); return err },
		"end_write":   func() error { return c.EndWrite(bg, conv, WriteToken{id: "x"}, mkEntries(11, 11)) },
		"invalidate":  func() error { return c.Invalidate(bg, conv) },
	}
	for name, call := range calls {
		t0 := time.Now()
		err := call()
		if d := time.Since(t0); d > opt.Timeout+50*time.Millisecond {
			t.Errorf("%s with Redis down took %v (timeout %v)", name, d, opt.Timeout)
		}
		if err == nil {
			t.Errorf("%s with Redis down: no error", name)
		}
	}
	r.Start() // empty dataset, same port
	// Fillable again within 5 s. A whole fill is retried, not just its
	// BeginFill: the first calls after the restart load the scripts again,
	// which a loaded machine (load average 16 seen in CI) can take past the
	// 50 ms timeout.
	all := mkEntries(1, 11)
	deadline := time.Now().Add(5 * time.Second)
	for {
		tok, err := c.BeginFill(bg, conv)
		installed := false
		if err == nil {
			installed, err = c.Fill(bg, conv, tok, all, 0, NoUpperBound)
		}
		if err == nil && installed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not fillable 5 s after restart: installed %v, %v", installed, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	page, ok, err := c.Before(bg, conv, 100, 3)
	expectHit(t, page, ok, err, desc(all[8:]))
}

func missErr(ok bool, err error) error {
	if ok {
		return errors.New("hit")
	}
	return err
}

// A Redis that accepts connections and never answers (hung, SIGSTOPped,
// black-holed): the per-call Timeout must still bound every call.
func TestHungRedisBounded(t *testing.T) {
	addr := testsvc.Blackhole(t)
	opt := testOpts()
	opt.Timeout = 50 * time.Millisecond
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer rdb.Close()
	c := New(rdb, opt, nil)
	for i := range 3 {
		t0 := time.Now()
		_, ok, err := c.Before(bg, 1, 100, 20)
		if d := time.Since(t0); d > 150*time.Millisecond || ok || err == nil {
			t.Fatalf("call %d: %v ok=%v err=%v", i, d, ok, err)
		}
	}
}

// Two proxy instances share Redis; the first serves a hot conversation from
// its LRU. A write through the second must be visible to the first at once.
func TestHotLRUNeverStale(t *testing.T) {
	opt := testOpts()
	opt.HotReads = 5
	opt.LRUTTL = time.Minute // the epoch check, not the TTL, must keep it exact
	reg := prometheus.NewRegistry()
	c1, r, _ := setup(t, opt)
	c1 = New(c1.rdb, opt, reg)
	c2 := New(newClient(t, r.Addr()), opt, nil)
	const conv = 27
	warm(t, c1, conv)
	all := mkEntries(1, 30)
	mustFill(t, c1, conv, all, 0, NoUpperBound)
	for range 20 {
		page, ok, err := c1.Before(bg, conv, NoUpperBound, 20)
		expectHit(t, page, ok, err, desc(all[10:]))
	}
	if n := counter(t, c1.m.lruHits); n < 10 {
		t.Fatalf("lru hits %v after 20 hot reads, want >= 10", n)
	}
	tok, _ := c2.BeginWrite(bg, conv)
	e31 := mkEntries(31, 31)
	if err := c2.EndWrite(bg, conv, tok, e31); err != nil {
		t.Fatal(err)
	}
	all = append(all, e31...)
	page, ok, err := c1.Before(bg, conv, NoUpperBound, 20)
	expectHit(t, page, ok, err, desc(all[11:]))
	mf, err := reg.Gather()
	if err != nil || len(mf) == 0 {
		t.Fatalf("gather: %d families, %v", len(mf), err)
	}
}

func TestEncodeDecode(t *testing.T) {
	for _, e := range []Entry{
		{Seq: 1, MsgID: 2, SenderUID: 3, MsgType: 4, CreatedMs: 5},
		{Seq: MaxSeq, MsgID: 1<<64 - 1, SenderUID: 1<<64 - 1, MsgType: 255, CreatedMs: -1},
	} {
		got, err := decode(encode(e), strconv.FormatUint(e.Seq, 10))
		if err != nil || got != e {
			t.Fatalf("round trip %v -> %v, %v", e, got, err)
		}
	}
	if _, err := decode("1:2:3", "1"); err == nil {
		t.Fatal("short member accepted")
	}
}

func TestInvalidateAll(t *testing.T) {
	c, _, _ := setup(t, testOpts())
	for _, conv := range []uint64{1, 2, 18446744073709551615} {
		warm(t, c, conv)
		mustFill(t, c, conv, mkEntries(1, 30), 0, NoUpperBound)
		if _, ok, err := c.Before(bg, conv, 31, 10); !ok || err != nil {
			t.Fatalf("conv %d not cached before InvalidateAll: %v", conv, err)
		}
	}
	if err := c.InvalidateAll(bg); err != nil {
		t.Fatal(err)
	}
	for _, conv := range []uint64{1, 2, 18446744073709551615} {
		if _, ok, _ := c.Before(bg, conv, 31, 10); ok {
			t.Errorf("conv %d still served after InvalidateAll", conv)
		}
	}
}
