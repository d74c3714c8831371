package backend

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"go.uber.org/zap"
)

// State is what the health checker last concluded about a datasource.
type State int32

const (
	StateUp   State = iota // answering
	StateDown              // refusing or resetting connections
	StateHung              // accepting connections but not answering
)

func (s State) String() string {
	switch s {
	case StateUp:
		return "up"
	case StateDown:
		return "down"
	case StateHung:
		return "hung"
	}
	return fmt.Sprintf("state(%d)", int32(s))
}

// Health is a point-in-time view of one datasource's breaker.
type Health struct {
	State     State
	Since     time.Time     // when it entered State
	LastError string        // the failure that opened the breaker (or the last probe failure)
	RTT       time.Duration // of the last successful probe
	CheckedAt time.Time     // when the last probe ended
}

// OutageError is what a statement gets, at once, while its datasource is
// marked down or hung: nothing is sent to it until a probe answers again.
type OutageError struct {
	Datasource string
	State      State
	Since      time.Time
	Err        error // the failure that opened the breaker
}

func (e *OutageError) Error() string {
	return fmt.Sprintf("datasource %s is unavailable (%s since %s, %s): %v", e.Datasource, e.State,
		e.Since.Format("15:04:05.000"), time.Since(e.Since).Round(100*time.Millisecond), cause(e.Err))
}

func (e *OutageError) Unwrap() error { return e.Err }

// TimeoutError is a statement the datasource did not finish within the
// statement timeout. The connection was dropped, so the server rolls back
// what is still open on it; a statement that commits by itself (autocommit)
// may or may not have committed.
type TimeoutError struct {
	Datasource string
	Timeout    time.Duration
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("Query execution was interrupted (max_statement_time exceeded): datasource %s did not answer within the statement timeout (%s); the backend connection was dropped, and if the statement was a write its outcome is unknown",
		e.Datasource, e.Timeout)
}

// Claims on a running command (wire.busy): the watchdog or the health
// checker gave up on it and expired the socket's deadlines.
const (
	claimTimeout = -1 // it ran past the statement timeout
	claimOutage  = -2 // its datasource was marked down or hung meanwhile
	claimKilled  = -3 // KILL of its client connection (Interrupt)
)

// errInterrupted is what the wire returns once its command was claimed;
// Conn.check replaces it by the claim's own error.
var errInterrupted = errors.New("statement interrupted")

// expired is a deadline in the past: set on a socket, it fails the blocked
// read or write at once.
var expired = time.Unix(1, 0)

// interrupt claims the command that started at start (wire.busy) and fails
// its blocked read or write; false if the command ended meanwhile.
func (c *Conn) interrupt(start, claim int64) bool {
	if start <= 0 || !c.w.busy.CompareAndSwap(start, claim) {
		return false
	}
	_ = c.w.nc.SetDeadline(expired)
	return true
}

// claimed turns a claim into the error the statement reports.
func (c *Conn) claimed(claim int64) error {
	switch claim {
	case claimTimeout:
		return &TimeoutError{Datasource: c.pool.ds.Name, Timeout: time.Duration(c.limit.Load())}
	case claimKilled:
		return &KilledError{Datasource: c.pool.ds.Name}
	}
	b := c.pool.br
	b.mu.Lock()
	st, why := State(b.state.Load()), cause(b.lastErr)
	b.mu.Unlock()
	return &UnavailableError{Datasource: c.pool.ds.Name, Err: fmt.Errorf(
		"statement interrupted: the datasource was marked %s (%v); if the statement was a write its outcome is unknown", st, why)}
}

// cause is err without the UnavailableError around it, for messages that
// name the datasource already.
func cause(err error) error {
	var ue *UnavailableError
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// SetTimeout bounds each command on c until Release (0: none) instead of
// the statement timeout: admin directives keep theirs short.
func (c *Conn) SetTimeout(d time.Duration) { c.limit.Store(int64(d)) }

// breaker is one datasource's circuit breaker. It is closed (StateUp) while
// the datasource answers; the health checker opens it (down or hung) when a
// probe fails, and closes it with the first probe that succeeds. While it
// is open, Acquire fails at once with an OutageError.
type breaker struct {
	state atomic.Int32 // a State; read on every Acquire
	// lastOK is when a statement last got an answer (unix ns, updated at
	// most every okEvery): a probe that times out while statements are
	// answered means a busy server, not a hung one.
	lastOK atomic.Int64
	kick   chan struct{} // a statement failed: probe now (capacity 1)

	mu      sync.Mutex
	since   time.Time // entered the current state
	outage  time.Time // the current outage began (open only)
	lastErr error
	rtt     time.Duration
	checked time.Time
	// tripped is closed when the breaker opens, waking statements that
	// wait for a pool slot; a new one is made when it closes.
	tripped chan struct{}
}

const okEvery = int64(10 * time.Millisecond)

func newBreaker() *breaker {
	return &breaker{kick: make(chan struct{}, 1), tripped: make(chan struct{}), since: time.Now()}
}

// ok records that the datasource answered a statement.
func (b *breaker) ok() {
	now := time.Now().UnixNano()
	if now-b.lastOK.Load() > okEvery {
		b.lastOK.Store(now)
	}
}

// suspect asks for a probe now (a statement failed on the network).
func (b *breaker) suspect() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

func (b *breaker) open() bool { return State(b.state.Load()) != StateUp }

// refuse returns the error of an open breaker, nil when it is closed.
func (b *breaker) refuse(ds string) error {
	if !b.open() {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	st := State(b.state.Load())
	if st == StateUp {
		return nil
	}
	return &OutageError{Datasource: ds, State: st, Since: b.since, Err: b.lastErr}
}

func (b *breaker) trippedC() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.tripped
}

// Health reports the datasource's breaker.
func (p *Pool) Health() Health {
	b := p.br
	b.mu.Lock()
	defer b.mu.Unlock()
	h := Health{State: State(b.state.Load()), Since: b.since, RTT: b.rtt, CheckedAt: b.checked}
	if b.lastErr != nil {
		h.LastError = b.lastErr.Error()
	}
	return h
}

// openProbeGap is the pause between probes while the breaker is open, and
// the least time between two probes asked for by failing statements: a
// refused dial costs nothing, and recovery is noticed within it.
const openProbeGap = 100 * time.Millisecond

// check is the health checker of one pool: a probe every HealthInterval
// while the datasource is up (at once when a statement failed on the
// network), every openProbeGap while it is not. It keeps one connection of
// its own, outside the pool, so a full pool never delays it. It returns
// when ctx is canceled (Pool.Close).
func (p *Pool) check(ctx context.Context) {
	defer close(p.checkDone)
	var w *wire
	defer func() {
		if w != nil {
			w.quit()
		}
	}()
	wait := time.NewTimer(0)
	defer wait.Stop()
	for {
		kick := p.br.kick
		if p.br.open() {
			kick = nil // probing every openProbeGap anyway
		}
		select {
		case <-ctx.Done():
			return
		case <-wait.C:
		case <-kick:
		}
		start := time.Now()
		rtt, err := p.probe(ctx, &w)
		if ctx.Err() != nil {
			return
		}
		p.settle(start, rtt, err)
		// A kick from before the probe ended is answered by it. Later ones
		// start the next probe, but not sooner than openProbeGap.
		select {
		case <-p.br.kick:
		default:
		}
		next := p.opt.HealthInterval
		if p.br.open() {
			next = openProbeGap
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(openProbeGap):
		}
		wait.Reset(max(next-openProbeGap, 0))
	}
}

// probe pings the datasource on the checker's connection *w, dialing one
// first if needed, each step bounded by HealthTimeout. A server error
// packet (too many connections, access denied) is an answer: the server is
// up, whatever else is wrong.
func (p *Pool) probe(ctx context.Context, w **wire) (time.Duration, error) {
	start := time.Now()
	if *w == nil {
		nc, _, err := p.connect(ctx, p.opt.HealthTimeout, false, 0)
		if err != nil {
			if IsServerError(err) {
				return time.Since(start), nil
			}
			return 0, err
		}
		*w = newWire(nc, p.opt.HealthTimeout, p.opt.HealthTimeout)
	}
	err := ping(ctx, *w)
	if err != nil && !IsServerError(err) {
		(*w).quit()
		*w = nil
		if timedOut(err) {
			err = fmt.Errorf("no answer to a health probe within %s (%w)", p.opt.HealthTimeout, err)
		}
		return 0, &UnavailableError{Datasource: p.ds.Name, Err: err}
	}
	return time.Since(start), nil
}

// ping sends COM_PING on w with fresh deadlines (w's timeouts); canceling
// ctx fails it at once.
func ping(ctx context.Context, w *wire) error {
	w.readBy, w.writeBy = time.Time{}, time.Time{}
	defer context.AfterFunc(ctx, func() { _ = w.nc.SetDeadline(expired) })()
	return w.simple(mysql.COM_PING, "")
}

// Probe checks the datasource live, bounded by timeout: a new connection
// (outside the pool) and a COM_PING. It returns the time both took.
func (p *Pool) Probe(ctx context.Context, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	nc, _, err := p.connect(ctx, timeout, false, 0)
	if err == nil {
		w := newWire(nc, timeout, timeout)
		defer w.quit()
		err = ping(ctx, w)
	}
	switch {
	case err != nil && timedOut(err):
		return 0, fmt.Errorf("no answer within %s", timeout.Round(time.Millisecond))
	case err != nil:
		return 0, cause(err)
	}
	return time.Since(start), nil
}

// timedOut reports a failure to get any answer in time (rather than a
// refused or reset connection).
func timedOut(err error) bool {
	var te interface{ Timeout() bool }
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) ||
		(errors.As(err, &te) && te.Timeout())
}

// settle applies the outcome of a probe that started at start.
func (p *Pool) settle(start time.Time, rtt time.Duration, err error) {
	b := p.br
	to := StateUp
	if err != nil {
		to = StateDown
		if timedOut(err) {
			to = StateHung
		}
	}
	b.mu.Lock()
	b.checked = time.Now()
	from := State(b.state.Load())
	if err == nil {
		b.rtt = rtt
	} else {
		b.lastErr = err
	}
	if to == StateHung && from == StateUp && b.lastOK.Load() > start.UnixNano() {
		// Statements were answered while the probe waited: slow, not hung.
		b.mu.Unlock()
		p.log.Warn("health probe timed out while statements were answered; not marking the datasource hung",
			zap.String("datasource", p.ds.Name), zap.Error(err))
		return
	}
	if to == from {
		b.mu.Unlock()
		return
	}
	now := time.Now()
	b.state.Store(int32(to))
	b.since = now
	var outFor time.Duration
	switch {
	case to == StateUp:
		outFor = now.Sub(b.outage)
		b.tripped = make(chan struct{})
	case from == StateUp:
		b.outage = now
		close(b.tripped)
	}
	b.mu.Unlock()
	if p.onTransition != nil {
		p.onTransition(p.ds.Name, to)
	}
	if to == StateUp {
		p.log.Info("datasource back up", zap.String("datasource", p.ds.Name), zap.String("addr", p.ds.Addr),
			zap.String("was", from.String()), zap.Duration("out_for", outFor), zap.Duration("ping", rtt))
		return
	}
	if from == StateUp {
		// Nothing from before the outage is reused, and statements still
		// waiting on it are failed now rather than at their timeout.
		p.flush()
	}
	p.log.Error("datasource unavailable; its statements fail at once until a probe answers",
		zap.String("datasource", p.ds.Name), zap.String("addr", p.ds.Addr), zap.String("state", to.String()),
		zap.String("was", from.String()), zap.Error(err))
}

// flush closes the idle connections and interrupts the running ones of a
// datasource that was just marked down or hung. Connections from before are
// not pooled again (gen).
func (p *Pool) flush() {
	p.mu.Lock()
	p.gen++
	idle := append(p.idle[0], p.idle[1]...)
	p.idle = [2][]*Conn{}
	for c := range p.live {
		c.interrupt(c.w.busy.Load(), claimOutage)
	}
	p.mu.Unlock()
	for _, c := range idle {
		c.close()
		<-p.slots
	}
}

// expire interrupts the commands that have run longer than their
// connection's timeout, and re-expires the deadlines of those already
// claimed (a read that renewed its deadline just as it was claimed).
func (p *Pool) expire(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.live {
		start := c.w.busy.Load()
		switch {
		case start < 0:
			_ = c.w.nc.SetDeadline(expired)
		case start > 0:
			if limit := c.limit.Load(); limit > 0 && now.UnixNano()-start > limit && c.interrupt(start, claimTimeout) {
				// Dropping the socket does not stop the server: a write
				// waiting for a row lock would still commit once it gets
				// it, after its client was told it failed (and after a
				// migration fence the proxy already acknowledged).
				go p.killThread(c.id)
			}
		}
	}
}

// watchdogTick is how often the manager looks for commands past their
// timeout: a tenth of the statement timeout, within [10ms, 100ms].
func watchdogTick(statementTimeout time.Duration) time.Duration {
	return min(max(statementTimeout/10, 10*time.Millisecond), 100*time.Millisecond)
}
