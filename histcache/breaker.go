package histcache

import (
	"sync"
	"sync/atomic"
	"time"
)

// breakerState says whether the hot tier sends calls to Redis. The values
// are the convoy_histcache_breaker_state gauge: higher is worse, so max()
// over proxies shows the worst one.
type breakerState int32

const (
	stateClosed   breakerState = iota // calls go to Redis
	stateHalfOpen                     // one probe is in flight; every other call is skipped
	stateOpen                         // calls are skipped until the back-off has passed
)

func (s breakerState) String() string {
	switch s {
	case stateClosed:
		return "closed"
	case stateHalfOpen:
		return "half_open"
	}
	return "open"
}

// transition is one change of the breaker's state, for metrics and the log.
type transition struct {
	from, to breakerState
	err      error         // the failure that opened it, or why a probe failed
	failures int           // consecutive failures that opened it
	openFor  time.Duration // on closing: since it opened
	probes   int           // probes run since it opened
	wait     time.Duration // on opening: back-off before the next probe
}

// breaker is the hot tier's circuit breaker. Closed, every call goes to
// Redis; threshold consecutive failures open it once the first of them is
// minOutage old (a stall shorter than that is waited out call by call, as
// without a breaker: the markers of the writes meanwhile are sent and land
// late, rather than not sent at all), or at once when none of them can
// have reached Redis (unsent: the connection was refused). Open, calls are
// skipped (the caller treats that as a Redis error: a miss, MySQL serves)
// until the back-off has passed; then one probe runs in the background
// (started by a timer, or by the first call after the back-off) and the
// state is half-open, still skipping calls, until the probe reports:
// success closes, failure opens again with the back-off doubled (up to
// maxWait). The probe is the cache's: a PING and the repair of what this
// proxy wrote while Redis was out of reach, so the breaker never closes
// over a conversation it would serve stale.
//
// After closing, reads are not served for settle (see serving): other
// proxies that wrote without Redis during the same outage repair at their
// next probe, at most maxWait after Redis answers again.
//
// Clients never wait for a probe; a Redis that is down or hung costs
// threshold calls of at most Options.Timeout each, then nothing.
type breaker struct {
	threshold        int // <= 0: never opens
	minOutage        time.Duration
	minWait, maxWait time.Duration
	settle           time.Duration
	unsent           func(error) bool // the call certainly did not reach Redis
	now              func() time.Time
	spawn            func(func())                // runs the probe (a goroutine; inline in tests)
	after            func(time.Duration, func()) // a timer (time.AfterFunc; by hand in tests)
	probe            func() error
	notify           func(transition)

	state   atomic.Int32 // breakerState; read without the lock on every call
	fails   atomic.Int32 // consecutive failures while closed
	streak  atomic.Int64 // unix ns of the first of them
	sure    atomic.Int32 // how many of them certainly did not reach Redis
	settled atomic.Int64 // unix ns from which reads are served again after a close

	mu       sync.Mutex
	openedAt time.Time
	retryAt  time.Time
	wait     time.Duration
	probes   int
}

func newBreaker(threshold int, minOutage, minWait, maxWait, settle time.Duration, probe func() error, notify func(transition)) *breaker {
	return &breaker{
		threshold: threshold, minOutage: minOutage, minWait: minWait, maxWait: max(minWait, maxWait), settle: settle,
		now: time.Now, spawn: func(f func()) { go f() }, after: func(d time.Duration, f func()) { time.AfterFunc(d, f) },
		probe: probe, notify: notify,
	}
}

func (b *breaker) current() breakerState { return breakerState(b.state.Load()) }

// allow reports whether a call may go to Redis now. While open it starts
// the probe once the back-off has passed; the call itself is still skipped.
func (b *breaker) allow() bool {
	if b.current() == stateClosed {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.probeIfDue()
	return b.current() == stateClosed
}

// serving reports whether reads may be served from Redis: closed, and not
// within settle of closing.
func (b *breaker) serving() bool {
	return b.allow() && (b.settle <= 0 || b.now().UnixNano() >= b.settled.Load())
}

// probeIfDue starts the probe when the back-off has passed; call with mu held.
func (b *breaker) probeIfDue() {
	if b.current() == stateOpen && !b.now().Before(b.retryAt) {
		b.set(transition{from: stateOpen, to: stateHalfOpen, probes: b.probes})
		b.spawn(b.runProbe)
	}
}

// timer runs when a back-off ends, so that the probe (and the repair it
// carries) does not wait for traffic.
func (b *breaker) timer() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.probeIfDue()
}

// done records the outcome of a call allow let through.
func (b *breaker) done(err error) {
	if err == nil {
		if b.fails.Load() != 0 {
			b.fails.Store(0)
		}
		return
	}
	n := int(b.fails.Add(1))
	now := b.now()
	if n == 1 {
		b.streak.Store(now.UnixNano())
		b.sure.Store(0)
	}
	sure := b.sure.Load()
	if b.unsent != nil && b.unsent(err) {
		sure = b.sure.Add(1)
	}
	if b.threshold <= 0 || n < b.threshold {
		return
	}
	if int(sure) < n && now.UnixNano()-b.streak.Load() < int64(b.minOutage) {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.current() != stateClosed {
		return // a call that was in flight when another one opened it
	}
	b.openedAt, b.wait, b.probes = now, b.minWait, 0
	b.retryAt = b.openedAt.Add(b.wait)
	b.set(transition{from: stateClosed, to: stateOpen, err: err, failures: n, wait: b.wait})
	b.after(b.wait, b.timer)
}

func (b *breaker) runProbe() {
	err := b.probe()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.probes++
	now := b.now()
	if err != nil {
		b.wait = min(2*b.wait, b.maxWait)
		b.retryAt = now.Add(b.wait)
		b.set(transition{from: stateHalfOpen, to: stateOpen, err: err, probes: b.probes, wait: b.wait})
		b.after(b.wait, b.timer)
		return
	}
	b.fails.Store(0)
	b.settled.Store(now.Add(b.settle).UnixNano())
	b.set(transition{from: stateHalfOpen, to: stateClosed, openFor: now.Sub(b.openedAt), probes: b.probes})
}

// set changes the state; call with mu held.
func (b *breaker) set(t transition) {
	b.state.Store(int32(t.to))
	if b.notify != nil {
		b.notify(t)
	}
}
