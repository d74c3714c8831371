package histcache

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/convoy-im/convoy/internal/testsvc"
)

// TestBreakerStateMachine drives the breaker with a fake clock and probes
// run by hand: threshold and minimum outage, reset by a success, no probe
// before the back-off, one probe at a time, doubling back-off up to the
// cap, a timer starting the probe without traffic, closing, settling.
func TestBreakerStateMachine(t *testing.T) {
	now := time.Unix(1000, 0)
	var spawned []func()
	var timers []time.Duration
	var probeErr error
	var log []transition
	b := newBreaker(3, 50*time.Millisecond, 100*time.Millisecond, 350*time.Millisecond, 500*time.Millisecond,
		func() error { return probeErr }, func(tr transition) { log = append(log, tr) })
	b.now = func() time.Time { return now }
	b.spawn = func(f func()) { spawned = append(spawned, f) }
	b.after = func(d time.Duration, _ func()) { timers = append(timers, d) }
	fail := errors.New("i/o timeout")
	want := func(s breakerState, probes int) {
		t.Helper()
		if b.current() != s || len(spawned) != probes {
			t.Fatalf("state %v with %d probes started, want %v with %d", b.current(), len(spawned), s, probes)
		}
	}

	b.done(fail)
	now = now.Add(time.Second)
	b.done(fail)
	b.done(nil) // a success in between: not consecutive
	b.done(fail)
	b.done(fail)
	now = now.Add(40 * time.Millisecond)
	b.done(fail) // three in a row, but a 40 ms stall is waited out
	if !b.allow() {
		t.Fatal("closed breaker refused a call")
	}
	want(stateClosed, 0)
	now = now.Add(10 * time.Millisecond)
	b.done(fail)
	want(stateOpen, 0)
	if len(log) != 1 || log[0].to != stateOpen || log[0].failures != 4 || !errors.Is(log[0].err, fail) || log[0].wait != 100*time.Millisecond {
		t.Fatalf("opening transition %+v", log)
	}
	b.done(fail) // late failures of calls in flight change nothing
	want(stateOpen, 0)

	now = now.Add(99 * time.Millisecond)
	if b.allow() {
		t.Fatal("open breaker let a call through")
	}
	b.timer() // a timer that fires early does nothing either
	want(stateOpen, 0)
	now = now.Add(time.Millisecond)
	for range 3 {
		if b.allow() {
			t.Fatal("half-open breaker let a client call through")
		}
	}
	want(stateHalfOpen, 1) // one probe, however many calls arrive
	b.done(nil)            // a late success of an old call does not close it
	want(stateHalfOpen, 1)

	probeErr = fail
	spawned[0]()
	want(stateOpen, 1)
	now = now.Add(199 * time.Millisecond) // back-off doubled: 200 ms
	b.allow()
	want(stateOpen, 1)
	now = now.Add(time.Millisecond)
	b.allow()
	want(stateHalfOpen, 2)
	spawned[1]()
	if w := log[len(log)-1].wait; w != 350*time.Millisecond {
		t.Fatalf("back-off after the second failed probe %v, want the 350ms cap", w)
	}
	now = now.Add(350 * time.Millisecond)
	b.timer() // no traffic: the timer starts the probe
	want(stateHalfOpen, 3)
	probeErr = nil
	spawned[2]()
	want(stateClosed, 3)
	last := log[len(log)-1]
	if last.to != stateClosed || last.probes != 3 || last.openFor != 650*time.Millisecond {
		t.Fatalf("closing transition %+v, want 3 probes and 650ms open", last)
	}
	if !slices.Equal(timers, []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 350 * time.Millisecond}) {
		t.Fatalf("timers %v, want one per back-off", timers)
	}
	// Closed: calls go through at once, reads only after settle.
	if !b.allow() || b.serving() {
		t.Fatal("just closed: calls refused or reads served")
	}
	now = now.Add(500 * time.Millisecond)
	if !b.serving() {
		t.Fatal("reads not served after settle")
	}
	var path []string
	for _, tr := range log {
		path = append(path, tr.to.String())
	}
	if !slices.Equal(path, []string{"open", "half_open", "open", "half_open", "open", "half_open", "closed"}) {
		t.Fatalf("transitions %v", path)
	}
	// Closed again with a fresh count: two failures do not reopen it.
	b.done(fail)
	now = now.Add(time.Second)
	b.done(fail)
	want(stateClosed, 3)

	// Refused connections: nothing can land late, no minimum outage.
	refused := newBreaker(3, time.Hour, time.Second, time.Second, 0, nil, nil)
	refused.after = func(time.Duration, func()) {}
	refused.unsent = func(err error) bool { return err == errCut }
	refused.done(errCut)
	refused.done(errCut)
	refused.done(fail) // one that may have reached Redis: wait for the minimum outage
	refused.done(errCut)
	if refused.current() != stateClosed {
		t.Fatal("opened before the minimum outage after a failure that may have reached Redis")
	}
	refused.done(nil)
	for range 3 {
		refused.done(errCut)
	}
	if refused.current() != stateOpen {
		t.Fatal("three refused connections in a row did not open it")
	}

	never := newBreaker(-1, 0, time.Second, time.Second, 0, nil, nil)
	for range 100 {
		never.done(fail)
	}
	if !never.allow() {
		t.Fatal("a breaker with a negative threshold opened")
	}
}

// TestUnrepairedSet: a conversation is owed an invalidation once an
// unmarked write of it has ended (not before: the commit may still be
// coming), a repair covers only the notes made before it started, a write
// never ended is given up after the lease, and past the bound the whole
// tier is owed a reset.
func TestUnrepairedSet(t *testing.T) {
	now := time.Unix(1000, 0)
	u := newUnrepaired(3, time.Second)
	u.now = func() time.Time { return now }
	resets := 0
	u.onAll = func() { resets++ }
	todo := func() []uint64 {
		all, convs, _ := u.todo()
		if all {
			t.Fatal("reset owed")
		}
		slices.Sort(convs)
		return convs
	}
	if u.has(1) || u.pending() {
		t.Fatal("empty set has something")
	}
	u.begin(1)
	if !u.has(1) || u.has(2) || len(todo()) != 0 {
		t.Fatalf("in flight: has(1)=%v has(2)=%v todo %v", u.has(1), u.has(2), todo())
	}
	u.end(1)
	u.mark(2)
	if got := todo(); !slices.Equal(got, []uint64{1, 2}) {
		t.Fatalf("todo %v, want [1 2]", got)
	}
	_, convs, seq := u.todo()
	u.mark(2) // noted after the repair started: stays
	u.repaired(false, convs, seq)
	if u.has(1) || !u.has(2) {
		t.Fatalf("after repair: has(1)=%v has(2)=%v", u.has(1), u.has(2))
	}
	_, convs, seq = u.todo()
	u.repaired(false, convs, seq)
	if u.has(2) || u.pending() {
		t.Fatal("conv 2 still owed")
	}

	u.begin(5) // its caller never ends it
	if len(todo()) != 0 {
		t.Fatal("in-flight write repairable before the lease")
	}
	now = now.Add(1001 * time.Millisecond)
	if got := todo(); !slices.Equal(got, []uint64{5}) {
		t.Fatalf("after the lease: todo %v", got)
	}
	_, convs, seq = u.todo()
	u.repaired(false, convs, seq)
	if u.has(5) {
		t.Fatal("conv 5 still owed after the lease and a repair")
	}
	u.end(5) // a very late end owes again
	if !u.has(5) {
		t.Fatal("a late end was forgotten")
	}
	_, convs, seq = u.todo()
	u.repaired(false, convs, seq)

	// Bound: 3 conversations; the 4th asks for a reset. A write in flight
	// is kept (its end comes later and owes again).
	u.begin(10)
	for c := uint64(11); c <= 13; c++ {
		u.mark(c)
	}
	all, _, seq := u.todo()
	if !all || resets != 1 || !u.has(999) {
		t.Fatalf("past the bound: all=%v resets=%d has(999)=%v", all, resets, u.has(999))
	}
	if n, _ := u.size(); n != 1 {
		t.Fatalf("%d conversations kept past the bound, want the one in flight", n)
	}
	u.end(10)
	u.repaired(true, nil, seq)
	if u.has(999) || !u.has(10) {
		t.Fatalf("after the reset: has(999)=%v has(10)=%v (its end came after the reset began)", u.has(999), u.has(10))
	}
}

// partition cuts one Cache off Redis (every command fails at once) while
// other clients still reach it, and counts the commands sent.
type partition struct {
	cut   atomic.Bool
	calls atomic.Int64
}

var errCut = errors.New("partitioned")

func (p *partition) DialHook(next redis.DialHook) redis.DialHook { return next }

func (p *partition) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		p.calls.Add(1)
		if p.cut.Load() {
			cmd.SetErr(errCut)
			return errCut
		}
		return next(ctx, cmd)
	}
}

func (p *partition) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		p.calls.Add(1)
		if p.cut.Load() {
			for _, c := range cmds {
				c.SetErr(errCut)
			}
			return errCut
		}
		return next(ctx, cmds)
	}
}

// twoProxies starts Redis and two caches on it, as two proxies: a behind
// a partition switch, b always connected.
func twoProxies(t testing.TB, opt Options) (a, b *Cache, cut *partition) {
	t.Helper()
	r := testsvc.StartRedis(t)
	cut = &partition{}
	rdbA := newClient(t, r.Addr())
	rdbA.AddHook(cut)
	return New(rdbA, opt, nil), New(newClient(t, r.Addr()), opt, nil), cut
}

func gauge(t testing.TB, g prometheus.Gauge) float64 {
	t.Helper()
	var d dto.Metric
	if err := g.Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.GetGauge().GetValue()
}

// waitClosed polls a until its breaker has closed (the probe runs on the
// first call after the back-off).
func waitClosed(t testing.TB, a *Cache, conv uint64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for a.br.current() != stateClosed {
		if time.Now().After(deadline) {
			t.Fatalf("breaker still %v 5 s after Redis came back", a.br.current())
		}
		a.Before(bg, conv, 1, 1)
		time.Sleep(5 * time.Millisecond)
	}
}

// TestDialFailed: a refused connection (Redis down) is told apart from a
// timeout (Redis perhaps only slow), with the client options of cmd/convoy
// (with go-redis's default retries the refusal turns into the deadline).
func TestDialFailed(t *testing.T) {
	r := testsvc.StartRedis(t)
	addr := r.Addr()
	r.Kill()
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: 1, DialerRetries: 1})
	defer rdb.Close()
	c := New(rdb, Options{Timeout: 50 * time.Millisecond}, nil)
	_, _, err := c.Before(bg, 1, 100, 20)
	if !dialFailed(err) {
		t.Fatalf("refused connection not recognised: %v", err)
	}
	hung := redis.NewClient(&redis.Options{Addr: testsvc.Blackhole(t), ContextTimeoutEnabled: true, MaxRetries: 1, DialerRetries: 1})
	defer hung.Close()
	c = New(hung, Options{Timeout: 50 * time.Millisecond}, nil)
	if _, _, err := c.Before(bg, 1, 100, 20); err == nil || dialFailed(err) {
		t.Fatalf("a hung Redis's timeout taken for a refused connection: %v", err)
	}
}

// TestBreakerPartition: proxy a loses Redis while b still reaches it. a's
// breaker opens after BreakerFailures calls, then a sends nothing at all;
// a write a commits meanwhile has no marker, so b serves the old page (the
// residual window of doc.go), a does not. When a reaches Redis again its
// probe invalidates that conversation before the breaker closes: from then
// on neither proxy serves the page without the row.
func TestBreakerPartition(t *testing.T) {
	opt := testOpts()
	opt.BreakerFailures = 3
	opt.BreakerMinOutage = -1
	opt.BreakerBackoff = 20 * time.Millisecond
	opt.BreakerBackoffMax = 40 * time.Millisecond
	opt.BreakerSettle = 50 * time.Millisecond
	core, logs := observer.New(zapcore.DebugLevel)
	opt.Log = zap.New(core)
	a, b, cut := twoProxies(t, opt)
	const conv, other = 31, 32
	all := mkEntries(1, 10)
	for _, c := range []uint64{conv, other} {
		warm(t, b, c)
		mustFill(t, b, c, all, 0, NoUpperBound)
	}

	cut.cut.Store(true)
	for i := range 3 {
		if _, ok, err := a.Before(bg, other, 100, 5); ok || !errors.Is(err, errCut) {
			t.Fatalf("call %d while cut: ok=%v err=%v", i, ok, err)
		}
	}
	if a.br.current() != stateOpen || gauge(t, a.m.breakerState) != 2 {
		t.Fatalf("after 3 failures the breaker is %v", a.br.current())
	}
	sent := cut.calls.Load()
	// A write through a while open: no Redis call, no marker.
	tok, err := a.BeginWrite(bg, conv)
	if !errors.Is(err, ErrBreakerOpen) {
		t.Fatalf("BeginWrite while open: %v", err)
	}
	e11 := mkEntries(11, 11) // committed to "MySQL" here
	if err := a.EndWrite(bg, conv, tok, e11); !errors.Is(err, ErrBreakerOpen) {
		t.Fatalf("EndWrite while open: %v", err)
	}
	if _, ok, _ := a.Before(bg, conv, 100, 5); ok {
		t.Fatal("a served a conversation it wrote without Redis")
	}
	if n := cut.calls.Load() - sent; n > 1 { // at most the probe
		t.Fatalf("%d Redis commands sent while the breaker was open", n)
	}
	if gauge(t, a.m.unrepaired) != 1 {
		t.Fatalf("unrepaired gauge %v, want 1", gauge(t, a.m.unrepaired))
	}
	// The residual window: b still serves the page without row 11.
	page, ok, err := b.Before(bg, conv, 100, 3)
	expectHit(t, page, ok, err, desc(all[7:]))

	cut.cut.Store(false)
	waitClosed(t, a, conv)
	if _, ok, _ := b.Before(bg, conv, 100, 3); ok {
		t.Fatal("b still serves the conversation a wrote while cut off, after a's breaker closed")
	}
	if gauge(t, a.m.unrepaired) != 0 {
		t.Fatalf("unrepaired gauge %v after the repair", gauge(t, a.m.unrepaired))
	}
	// Refilled from "MySQL" (which has row 11), both serve it.
	all = append(all, e11...)
	time.Sleep(opt.MarkerTTL) // a's BeginWrite never ran; nothing young, but be safe
	mustFill(t, b, conv, all, 0, NoUpperBound)
	for _, c := range []*Cache{a, b} {
		page, ok, err := c.Before(bg, conv, 100, 3)
		expectHit(t, page, ok, err, desc(all[8:]))
	}
	// The untouched conversation stayed cached through it all.
	page, ok, err = b.Before(bg, other, 100, 3)
	expectHit(t, page, ok, err, desc(mkEntries(8, 10)))

	var msgs []string
	for _, e := range logs.All() {
		if e.Level >= zapcore.InfoLevel {
			msgs = append(msgs, e.Message)
		}
	}
	if len(msgs) != 2 || !containsAll(logs.All()[0].ContextMap(), "failures", "error") {
		t.Fatalf("info+ log lines %q, want one at opening (with failures and error) and one at closing", msgs)
	}
	if _, ok := logs.FilterMessageSnippet("closed").All()[0].ContextMap()["open_for"]; !ok {
		t.Fatal("closing line without open_for")
	}
}

func containsAll(m map[string]any, keys ...string) bool {
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			return false
		}
	}
	return true
}

// TestBreakerOverflowResets: past MaxUnrepaired conversations the proxy
// forgets them and owes the whole tier a reset; until that reset has run it
// serves nothing from Redis, and after it no proxy serves a page cached
// before it.
func TestBreakerOverflowResets(t *testing.T) {
	opt := testOpts()
	opt.BreakerFailures = 1
	opt.BreakerMinOutage = -1
	opt.BreakerBackoff = 20 * time.Millisecond
	opt.MaxUnrepaired = 2
	opt.BreakerSettle = -1
	a, b, cut := twoProxies(t, opt)
	const cached = 77
	warm(t, b, cached)
	mustFill(t, b, cached, mkEntries(1, 5), 0, NoUpperBound)
	cut.cut.Store(true)
	a.Before(bg, cached, 100, 1) // opens it
	for c := uint64(100); c < 105; c++ {
		tok, _ := a.BeginWrite(bg, c)
		a.EndWrite(bg, c, tok, mkEntries(1, 1))
	}
	if _, all := a.rep.size(); !all {
		t.Fatal("5 conversations with a bound of 2: no reset owed")
	}
	cut.cut.Store(false)
	waitClosed(t, a, cached)
	if _, ok, _ := b.Before(bg, cached, 100, 3); ok {
		t.Fatal("a conversation cached before the reset is still served")
	}
	if counter(t, a.m.resets) != 1 {
		t.Fatalf("resets_total %v", counter(t, a.m.resets))
	}
	time.Sleep(opt.MarkerTTL)
	mustFill(t, a, cached, mkEntries(1, 5), 0, NoUpperBound)
	if _, ok, _ := a.Before(bg, cached, 100, 3); !ok {
		t.Fatal("a does not serve from the tier after the reset")
	}
}

// TestFailedInvalidateKeepsMarker: an UPDATE's Invalidate fails (a timeout
// on a live Redis); its marker must stay, so other proxies miss until it
// expires and then drop the old page, instead of serving it once
// AbortWrite released the marker.
func TestFailedInvalidateKeepsMarker(t *testing.T) {
	opt := testOpts()
	opt.BreakerFailures = -1
	a, b, cut := twoProxies(t, opt)
	const conv = 90
	warm(t, b, conv)
	mustFill(t, b, conv, mkEntries(1, 5), 0, NoUpperBound)
	tok, err := a.BeginWrite(bg, conv)
	if err != nil {
		t.Fatal(err)
	}
	// the UPDATE commits; then a loses Redis for one call
	cut.cut.Store(true)
	if err := a.Invalidate(bg, conv); err == nil {
		t.Fatal("Invalidate succeeded through the cut")
	}
	cut.cut.Store(false)
	a.AbortWrite(bg, conv, tok)
	if _, ok, _ := b.Before(bg, conv, 100, 3); ok {
		t.Fatal("b serves the old page after a failed Invalidate")
	}
	// a repairs it in the background on its next successful call.
	deadline := time.Now().Add(3 * time.Second)
	for a.rep.has(conv) {
		if time.Now().After(deadline) {
			t.Fatal("conversation still owed an invalidation 3 s later")
		}
		a.Before(bg, 1, 100, 1)
		time.Sleep(20 * time.Millisecond)
	}
}

// TestHungRedisBreakerFast: against a Redis that never answers, only the
// first BreakerFailures calls wait out the timeout; every later one returns
// at once, probes included (they run in the background).
func TestHungRedisBreakerFast(t *testing.T) {
	addr := testsvc.Blackhole(t)
	opt := testOpts()
	opt.Timeout = 50 * time.Millisecond
	opt.BreakerMinOutage = 100 * time.Millisecond // reached at the 5th call in a row
	opt.BreakerBackoff = 50 * time.Millisecond
	opt.BreakerBackoffMax = 100 * time.Millisecond
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	defer rdb.Close()
	reg := prometheus.NewRegistry()
	c := New(rdb, opt, reg)
	var slow int
	var worst time.Duration
	t0 := time.Now()
	for time.Since(t0) < 900*time.Millisecond {
		t1 := time.Now()
		_, ok, err := c.Before(bg, 1, 100, 20)
		if ok || err == nil {
			t.Fatalf("hit or no error from a hung Redis: %v", err)
		}
		// A call that waited for the hung Redis took the whole timeout; one
		// the open breaker answered at once can still be scheduled late on
		// a loaded machine, but not by a whole timeout.
		if d := time.Since(t1); d >= opt.Timeout {
			slow++
		} else {
			worst = max(worst, d)
		}
	}
	if slow < c.opt.BreakerFailures || slow > c.opt.BreakerFailures+2 {
		t.Fatalf("%d calls waited for the hung Redis, want about %d (the threshold)", slow, c.opt.BreakerFailures)
	}
	if n := counter(t, c.m.breakerTransitions); n < 3 {
		t.Fatalf("%v transitions in 900 ms: the probe did not run", n)
	}
	t.Logf("fast calls at most %v", worst)
}
