package shardgate

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/convoy-im/convoy/proxy/sqlerr"
	"github.com/convoy-im/convoy/router"
)

// Options bound the writes queued behind a hold.
type Options struct {
	// MaxWait bounds how long a write waits behind a hold (then 1205, the
	// lock wait timeout clients retry); MaxQueue bounds the writes queued
	// per held shard.
	MaxWait  time.Duration
	MaxQueue int
}

// Metrics is what the gates report (a nil *engine.Metrics reports
// nothing).
type Metrics interface {
	HoldQueued(delta float64)   // writes queued behind holds, now
	HoldWaited(d time.Duration) // how long a queued write waited
	HoldRefused(reason string)  // a write refused: queue_full, timeout, killed, unavailable, fenced
}

// Gates are one proxy's holds and write fences, one gate per shard.
type Gates struct {
	opt   Options
	m     Metrics
	gates [router.NumShards]gate
	// fence is the first of fences, the write fences up: while one is,
	// every sharded write is refused.
	fence   atomic.Pointer[WriteFence]
	fenceMu sync.Mutex
	fences  []*WriteFence
}

// gate is one shard's hold state.
type gate struct {
	active atomic.Int64
	hold   atomic.Pointer[ShardHold]
	mu     sync.Mutex // guards txns
	txns   map[*Txn]struct{}
}

// New returns the gates of a proxy, no shard held.
func New(opt Options, m Metrics) *Gates {
	return &Gates{opt: opt, m: m}
}

// Admit waits until none of shards is held and counts a write on each of
// them; Leave gives them back. stop (a KILL of the session) ends a wait at
// once, the write not admitted. A write fence refuses it.
func (g *Gates) Admit(shards []router.Shard, stop <-chan struct{}) error {
	var deadline time.Time
retry:
	for i, sh := range shards {
		gt := &g.gates[sh]
		gt.active.Add(1)
		if h := gt.hold.Load(); h != nil {
			g.Leave(shards[:i+1])
			if err := h.wait(&deadline, stop); err != nil {
				return err
			}
			goto retry
		}
	}
	// After counting, as for holds: either Fence sees this write running,
	// or the write sees the fence.
	if f := g.fence.Load(); f != nil {
		g.Leave(shards)
		g.m.HoldRefused("fenced")
		return f.err
	}
	return nil
}

// Leave uncounts a write on shards and tells a Hold waiting on them.
func (g *Gates) Leave(shards []router.Shard) {
	for _, sh := range shards {
		gt := &g.gates[sh]
		gt.active.Add(-1)
		if h := gt.hold.Load(); h != nil {
			h.kickDrain()
		}
	}
}

// Active is the number of writes counted on shard sh.
func (g *Gates) Active(sh router.Shard) int64 { return g.gates[sh].active.Load() }

// Held reports whether shard sh is held.
func (g *Gates) Held(sh router.Shard) bool { return g.gates[sh].hold.Load() != nil }

// Fenced reports whether a write fence is up.
func (g *Gates) Fenced() bool { return g.fence.Load() != nil }

// Txn is a transaction that wrote a shard: it keeps the count its first
// write took until it ends, and a hold past its deadline can fail it:
// at once when no statement of it is running (abort rolls it back and
// gives its connection back), else when the running one returns. Every
// later call of Enter answers the hold's error; the session then treats
// the transaction as aborted.
type Txn struct {
	gt    *gate
	abort func()

	mu   sync.Mutex
	busy bool  // a call is running
	err  error // the hold failed the transaction
	gone bool  // unregistered: ended, or rolled back for the hold
}

// Register counts a transaction that wrote shard sh (its first write was
// admitted) until it ends (Txn.End). abort rolls the transaction back and
// gives its connection back; the hold calls it, from another goroutine
// when the transaction is idle.
func (g *Gates) Register(sh router.Shard, abort func()) *Txn {
	gt := &g.gates[sh]
	t := &Txn{gt: gt, abort: abort}
	gt.mu.Lock()
	if gt.txns == nil {
		gt.txns = map[*Txn]struct{}{}
	}
	gt.txns[t] = struct{}{}
	gt.mu.Unlock()
	return t
}

func (gt *gate) unregister(t *Txn) {
	gt.mu.Lock()
	delete(gt.txns, t)
	gt.mu.Unlock()
	gt.active.Add(-1)
	if h := gt.hold.Load(); h != nil {
		h.kickDrain()
	}
}

// Enter starts a call on the transaction's connection; the hold's error
// if it failed the transaction.
func (t *Txn) Enter() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return t.err
	}
	t.busy = true
	return nil
}

// Exit ends a call Enter started; a transaction the hold failed meanwhile
// is rolled back now.
func (t *Txn) Exit() {
	t.mu.Lock()
	t.busy = false
	failed := t.err != nil && !t.gone
	if failed {
		t.gone = true
	}
	t.mu.Unlock()
	if failed {
		t.abort()
		t.gt.unregister(t)
	}
}

// fail is the hold's side: see Txn.
func (t *Txn) fail(err error) {
	t.mu.Lock()
	if t.gone || t.err != nil {
		t.mu.Unlock()
		return
	}
	t.err = err
	idle := !t.busy
	if idle {
		t.gone = true
	}
	t.mu.Unlock()
	if idle {
		// Nothing more can reach the shard through it; the ROLLBACK only
		// frees its row locks (which reverse replication would wait on),
		// so the hold need not wait for it.
		go t.abort()
		t.gt.unregister(t)
	}
}

// End ends the transaction's count on its shard: release gives its
// connection back first. Nothing when the hold already ended it.
func (t *Txn) End(release func()) {
	t.mu.Lock()
	if t.gone {
		t.mu.Unlock()
		return
	}
	t.gone = true
	t.mu.Unlock()
	release()
	t.gt.unregister(t)
}

// ShardHold is one shard held by Gates.Hold (coord's ShardHold).
type ShardHold struct {
	g     *Gates
	shard router.Shard
	drain chan struct{} // a write on the shard ended (capacity 1)

	mu       sync.Mutex
	queue    []chan struct{} // waiting writes in arrival order; nil: gave up
	queued   int
	failErr  error
	released bool
}

// Hold stops the shard's new writes (they queue, in arrival order, bounded
// by Options) and returns once every write already admitted has finished
// and every transaction that wrote the shard has ended. When ctx ends
// first, the transactions still open on the shard are failed: an idle one
// is rolled back at once, one inside a statement when that statement
// returns; their clients get an error on their next statement. If a write
// is still running then (an autocommit statement, or a statement of a
// failed transaction, which may be its COMMIT), Hold cannot promise that
// nothing more lands on the shard: it releases and returns an error (the
// switch aborts; coord retries).
func (g *Gates) Hold(ctx context.Context, shard int) (*ShardHold, error) {
	if shard < 0 || shard >= router.NumShards {
		return nil, fmt.Errorf("engine: hold: no shard %d", shard)
	}
	gt := &g.gates[shard]
	h := &ShardHold{g: g, shard: router.Shard(shard), drain: make(chan struct{}, 1)}
	if !gt.hold.CompareAndSwap(nil, h) {
		return nil, fmt.Errorf("engine: shard %d is already held", shard)
	}
	for gt.active.Load() > 0 {
		select {
		case <-h.drain:
		case <-ctx.Done():
			n := gt.failTxns(h.shard)
			if gt.active.Load() == 0 {
				return h, nil
			}
			h.Release()
			return nil, fmt.Errorf("engine: shard %s: writes still running when the hold's time ran out (%d open transactions failed): nothing held", h.shard, n)
		}
	}
	return h, nil
}

// failTxns fails the transactions open on the shard; it returns how many.
func (gt *gate) failTxns(sh router.Shard) int {
	return gt.failTxnsWith(sqlerr.Errorf(sqlerr.TxnRolledBack, "Deadlock found when trying to get lock; try restarting transaction: shard %s is held for a migration switch and the transaction did not end in time; it was rolled back", sh))
}

func (gt *gate) failTxnsWith(err error) int {
	gt.mu.Lock()
	ts := make([]*Txn, 0, len(gt.txns))
	for t := range gt.txns {
		ts = append(ts, t)
	}
	gt.mu.Unlock()
	for _, t := range ts {
		t.fail(err)
	}
	return len(ts)
}

// Queued is the number of writes waiting behind the hold.
func (h *ShardHold) Queued() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.queued
}

func (h *ShardHold) kickDrain() {
	select {
	case h.drain <- struct{}{}:
	default:
	}
}

// wait queues a write until the hold ends. deadline is the write's time
// limit, set at its first wait and kept across holds; stop (a KILL of the
// session) ends the wait at once, the write not sent.
func (h *ShardHold) wait(deadline *time.Time, stop <-chan struct{}) error {
	opt, m := h.g.opt, h.g.m
	h.mu.Lock()
	switch {
	case h.released:
		h.mu.Unlock()
		return nil
	case h.failErr != nil:
		h.mu.Unlock()
		m.HoldRefused("unavailable")
		return h.failErr
	case h.queued >= opt.MaxQueue:
		h.mu.Unlock()
		m.HoldRefused("queue_full")
		return sqlerr.Errorf(sqlerr.ShardHeld, "Lock wait timeout exceeded: shard %s is held for a migration switch and %d writes are already queued for it (migration.hold_max_queue); retry the statement", h.shard, opt.MaxQueue)
	}
	start := time.Now()
	if deadline.IsZero() {
		*deadline = start.Add(opt.MaxWait)
	}
	ch := make(chan struct{})
	at := len(h.queue)
	h.queue = append(h.queue, ch)
	h.queued++
	h.mu.Unlock()
	m.HoldQueued(1)
	defer m.HoldQueued(-1)
	t := time.NewTimer(time.Until(*deadline))
	defer t.Stop()
	leave := func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.released || h.failErr != nil {
			return false // woken meanwhile
		}
		h.queue[at] = nil
		h.queued--
		m.HoldWaited(time.Since(start))
		return true
	}
	select {
	case <-ch:
	case <-t.C:
		if leave() {
			m.HoldRefused("timeout")
			return sqlerr.Errorf(sqlerr.ShardHeld, "Lock wait timeout exceeded: shard %s is held for a migration switch; the write waited %s (migration.hold_max_wait); retry the statement", h.shard, opt.MaxWait)
		}
	case <-stop:
		if leave() {
			m.HoldRefused("killed")
			return sqlerr.Errorf(sqlerr.QueryInterrupted, "Query execution was interrupted: KILL while the write waited for a migration switch of shard %s; nothing was written", h.shard)
		}
	}
	m.HoldWaited(time.Since(start))
	h.mu.Lock()
	err := h.failErr
	h.mu.Unlock()
	if err != nil {
		m.HoldRefused("unavailable")
	}
	return err
}

// Release lets the queued writes proceed in arrival order, each routed
// under the routes served now, then new ones. They are woken in that order
// and then run side by side, as they would have without the hold: a client
// has one statement queued at a time, so its own writes keep their order,
// and writes of different clients that waited together were concurrent
// (none was acknowledged before the other was sent); seq allocation orders
// them on the conversation's im_conv_seq row as always. Running them one
// after another instead would stretch the pause by the queue's length.
func (h *ShardHold) Release() {
	h.g.gates[h.shard].hold.CompareAndSwap(h, nil)
	h.mu.Lock()
	q := h.queue
	h.queue, h.queued, h.released = nil, 0, true
	h.mu.Unlock()
	for _, ch := range q {
		if ch != nil {
			close(ch)
		}
	}
}

// Fail answers the queued writes, and the shard's new writes until
// Release, with err (the proxy cannot tell which datasource is
// authoritative for the shard).
func (h *ShardHold) Fail(err error) {
	h.mu.Lock()
	if h.released || h.failErr != nil {
		h.mu.Unlock()
		return
	}
	h.failErr = sqlerr.Errorf(sqlerr.ShardUnavailable, "%v", err)
	q := h.queue
	h.queue, h.queued = nil, 0
	h.mu.Unlock()
	for _, ch := range q {
		if ch != nil {
			close(ch)
		}
	}
}

// WriteFence refuses every sharded write while it is up (Gates.Fence).
type WriteFence struct {
	g   *Gates
	err error
}

// fencePoll paces Fence's wait for the running writes: a fence is rare
// (a proxy that cannot prove its registration, or not registered yet), so
// it polls rather than costing every write a wake-up.
const fencePoll = 5 * time.Millisecond

// Fence refuses every write to a sharded table with err (wrapped as
// sqlerr.ShardUnavailable) until Lift, whichever shard and datasource: the
// proxy cannot prove it serves the current routes (its etcd registration
// may have expired, so a migration may have switched a shard without it;
// or it is not registered yet). Reads are served. It returns once no
// admitted write is running and no transaction that wrote a shard is
// open; when ctx ends first, those transactions are failed (rolled back,
// their clients told on their next statement), and it returns how many
// writes were still running (autocommit statements or a failed
// transaction's last one: they cannot be stopped from here; the
// datasources' storage fence refuses them on a side a switch left). The
// fence stays up either way: it never lets a queued or new write through.
func (g *Gates) Fence(ctx context.Context, err error) (*WriteFence, int) {
	f := &WriteFence{g: g, err: sqlerr.Errorf(sqlerr.ShardUnavailable, "%v", err)}
	g.fenceMu.Lock()
	g.fences = append(g.fences, f)
	g.fence.Store(g.fences[0])
	g.fenceMu.Unlock()
	failed := false
	for {
		running := int64(0)
		for i := range g.gates {
			running += g.gates[i].active.Load()
		}
		if running == 0 {
			return f, 0
		}
		if failed {
			return f, int(running)
		}
		select {
		case <-ctx.Done():
			rolled := sqlerr.Errorf(sqlerr.TxnRolledBack, "Deadlock found when trying to get lock; try restarting transaction: %v; the open transaction was rolled back", err)
			for i := range g.gates {
				g.gates[i].failTxnsWith(rolled)
			}
			failed = true // count what is left once (an idle one unregisters at once)
		case <-time.After(fencePoll):
		}
	}
}

// Lift takes the fence down (idempotent); writes go on under the routes
// served now, unless another fence is up.
func (f *WriteFence) Lift() {
	g := f.g
	g.fenceMu.Lock()
	defer g.fenceMu.Unlock()
	for i, o := range g.fences {
		if o == f {
			g.fences = append(g.fences[:i], g.fences[i+1:]...)
			break
		}
	}
	if len(g.fences) > 0 {
		g.fence.Store(g.fences[0])
	} else {
		g.fence.Store(nil)
	}
}
