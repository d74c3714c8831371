package engine

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/convoy-im/convoy/proxy/sqlerr"
	"github.com/convoy-im/convoy/rewrite"
	"github.com/convoy-im/convoy/router"
)

// The migration hold (docs/design.md §5, step 6): while a shard's writes switch to
// another datasource, every proxy stops sending them, queues new ones in
// arrival order and lets the transactions open on the shard end. The lock
// protocol around it (etcd, acknowledgements, when to release) is
// routecfg's LockFollower; this file is the engine's share, reached through
// Engine.Hold.
//
// The hot path is one atomic add and one atomic load per shard a write
// touches (admit): no lock, nothing global. A shard's gate counts the
// writes that may reach a datasource (active); Hold publishes itself on the
// gate, then waits for active to drain. A writer increments active before
// it looks for a hold and Hold publishes before it reads active, so (the
// atomics being sequentially consistent) either the writer sees the hold
// and backs off into the queue, or Hold sees the writer and waits for it.
//
// What counts as active:
//   - an autocommit write, from admission until its last backend reply
//     (multi-shard writes: on every shard, until their COMMITs);
//   - a transaction that wrote the shard, from its first write until it
//     ends: its connection is then a txnConn, through which the hold can
//     fail it. Its later statements are never queued (a queue inside a
//     transaction would hold its row locks for the queue's wait).
//
//   - a transaction's locking read (SELECT ... FOR UPDATE / LOCK IN SHARE
//     MODE) counts as its first write: its row locks are a write's. Were
//     it not counted, a switch could deadlock with the row locks: the
//     transaction's next write queued behind the hold while holding its
//     lock, an autocommit write admitted before the hold waiting for that
//     lock, and the hold waiting for that write.
//
// Plain reads are never held, and a transaction that has only read its
// shard that way does not count: the switch does not wait for it, and if
// the shard moved, its next statement rolls it back (Session.checkPinned)
// instead of running on the old side. Statements touching many shards
// wait like a
// single-shard write on each held shard they touch, after releasing the
// others (so a wide write never keeps a held shard's Hold waiting while it
// waits itself); DDL fans out to every shard, so it waits for every held
// shard (and, running, keeps a Hold waiting until Hold's deadline: a
// switch during a long ALTER aborts and is retried).

// gate is one shard's hold state.
type gate struct {
	active atomic.Int64
	hold   atomic.Pointer[ShardHold]
	mu     sync.Mutex // guards txns
	txns   map[*txnConn]struct{}
}

// allShards is what DDL admits: it writes every physical table.
var allShards = func() []router.Shard {
	out := make([]router.Shard, router.NumShards)
	for i := range out {
		out[i] = router.Shard(i)
	}
	return out
}()

// writeShards returns the shards a sharded write will send statements to,
// computed before any route is read: routing must happen after a held
// shard is released, under the routes then served. nil: nothing to admit
// (not a write, or a statement the routing step refuses anyway, which it
// then does with its own message).
func (s *Session) writeShards(pl *plan, args []any) []router.Shard {
	a := pl.A
	var vals []rewrite.Value
	switch a.Kind {
	case rewrite.KindDDL:
		return allShards
	case rewrite.KindInsert:
		vals = a.InsertRows // no MaxInList here: an INSERT has no such bound
	case rewrite.KindUpdate, rewrite.KindDelete, rewrite.KindSelect: // the select: a locking read in a transaction
		if !a.HasKey || len(a.Keys) > s.e.opt.MaxInList {
			return nil
		}
		vals = a.Keys
	default:
		return nil
	}
	if len(vals) == 1 {
		// The common write: no allocation on its path.
		k, err := keyOf(vals[0], args)
		if err != nil {
			return nil
		}
		s.oneShard[0] = router.ShardOf(k)
		return s.oneShard[:]
	}
	shards, err := shardsOfValues(vals, args)
	if err != nil {
		return nil
	}
	return shards
}

// admitWrite waits until the shards pl writes are not held, and counts the
// statement on them. The returned shards are given back by endWrite.
func (s *Session) admitWrite(pl *plan, args []any) ([]router.Shard, error) {
	return s.admitShards(s.writeShards(pl, args))
}

// admitShards is admitWrite for a write on shards.
func (s *Session) admitShards(shards []router.Shard) ([]router.Shard, error) {
	if len(shards) == 0 {
		return nil, nil
	}
	if _, ok := s.txn.conn.(*txnConn); ok && len(shards) == 1 && int(shards[0]) == s.txn.pin {
		// The transaction already counts on its shard: it is never queued.
		return nil, nil
	}
	var deadline time.Time
retry:
	for i, sh := range shards {
		g := &s.e.gates[sh]
		g.active.Add(1)
		if h := g.hold.Load(); h != nil {
			s.e.leave(shards[:i+1])
			if err := h.wait(&deadline, s.interrupt); err != nil {
				return nil, err
			}
			goto retry
		}
	}
	// After counting, as for holds: either Fence sees this write running,
	// or the write sees the fence.
	if f := s.e.fence.Load(); f != nil {
		s.e.leave(shards)
		s.e.metrics.refuseHeld("fenced")
		return nil, f.err
	}
	return shards, nil
}

// endWrite ends a write admitted on shards. A transaction that wrote its
// shard keeps counting there until it ends: its connection becomes a
// txnConn.
func (s *Session) endWrite(shards []router.Shard) {
	if len(shards) == 0 {
		return
	}
	if len(shards) == 1 && s.txn.conn != nil && s.txn.pin == int(shards[0]) {
		if _, ok := s.txn.conn.(*txnConn); !ok {
			s.txn.conn = s.e.gates[shards[0]].register(s.txn.conn)
			return
		}
	}
	s.e.leave(shards)
}

// leave uncounts a write on shards and tells a Hold waiting on them.
func (e *Engine) leave(shards []router.Shard) {
	for _, sh := range shards {
		g := &e.gates[sh]
		g.active.Add(-1)
		if h := g.hold.Load(); h != nil {
			h.kickDrain()
		}
	}
}

// register turns a transaction's connection into one the hold can fail;
// the transaction keeps the count its first write took until it ends.
func (g *gate) register(c Conn) *txnConn {
	t := &txnConn{Conn: c, ds: c.Datasource(), g: g}
	g.mu.Lock()
	if g.txns == nil {
		g.txns = map[*txnConn]struct{}{}
	}
	g.txns[t] = struct{}{}
	g.mu.Unlock()
	return t
}

func (g *gate) unregister(t *txnConn) {
	g.mu.Lock()
	delete(g.txns, t)
	g.mu.Unlock()
	g.active.Add(-1)
	if h := g.hold.Load(); h != nil {
		h.kickDrain()
	}
}

// ShardHold is one shard held by Engine.Hold (routecfg's ShardHold).
type ShardHold struct {
	e     *Engine
	shard router.Shard
	drain chan struct{} // a write on the shard ended (capacity 1)

	mu       sync.Mutex
	queue    []chan struct{} // waiting writes in arrival order; nil: gave up
	queued   int
	failErr  error
	released bool
}

// Hold stops the shard's new writes (they queue, in arrival order, bounded
// by Options.HoldMaxWait and HoldMaxQueue) and returns once every write
// already admitted has finished and every transaction that wrote the shard
// has ended. When ctx ends first, the transactions still open on the shard
// are failed: an idle one is rolled back at once, one inside a statement
// when that statement returns; their clients get an error on their next
// statement. If a write is still running then (an autocommit statement, or
// a statement of a failed transaction, which may be its COMMIT), Hold
// cannot promise that nothing more lands on the shard: it releases and
// returns an error (the switch aborts; routecfg retries).
func (e *Engine) Hold(ctx context.Context, shard int) (*ShardHold, error) {
	if shard < 0 || shard >= router.NumShards {
		return nil, fmt.Errorf("engine: hold: no shard %d", shard)
	}
	g := &e.gates[shard]
	h := &ShardHold{e: e, shard: router.Shard(shard), drain: make(chan struct{}, 1)}
	if !g.hold.CompareAndSwap(nil, h) {
		return nil, fmt.Errorf("engine: shard %d is already held", shard)
	}
	for g.active.Load() > 0 {
		select {
		case <-h.drain:
		case <-ctx.Done():
			n := g.failTxns(h.shard)
			if g.active.Load() == 0 {
				return h, nil
			}
			h.Release()
			return nil, fmt.Errorf("engine: shard %s: writes still running when the hold's time ran out (%d open transactions failed): nothing held", h.shard, n)
		}
	}
	return h, nil
}

// failTxns fails the transactions open on the shard; it returns how many.
func (g *gate) failTxns(sh router.Shard) int {
	return g.failTxnsWith(sqlerr.Errorf(sqlerr.TxnRolledBack, "Deadlock found when trying to get lock; try restarting transaction: shard %s is held for a migration switch and the transaction did not end in time; it was rolled back", sh))
}

func (g *gate) failTxnsWith(err error) int {
	g.mu.Lock()
	ts := make([]*txnConn, 0, len(g.txns))
	for t := range g.txns {
		ts = append(ts, t)
	}
	g.mu.Unlock()
	for _, t := range ts {
		t.fail(err)
	}
	return len(ts)
}

// WriteFence refuses every sharded write while it is up (Engine.Fence).
type WriteFence struct {
	e   *Engine
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
func (e *Engine) Fence(ctx context.Context, err error) (*WriteFence, int) {
	f := &WriteFence{e: e, err: sqlerr.Errorf(sqlerr.ShardUnavailable, "%v", err)}
	e.fenceMu.Lock()
	e.fences = append(e.fences, f)
	e.fence.Store(e.fences[0])
	e.fenceMu.Unlock()
	failed := false
	for {
		running := int64(0)
		for i := range e.gates {
			running += e.gates[i].active.Load()
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
			for i := range e.gates {
				e.gates[i].failTxnsWith(rolled)
			}
			failed = true // count what is left once (an idle one unregisters at once)
		case <-time.After(fencePoll):
		}
	}
}

// Lift takes the fence down (idempotent); writes go on under the routes
// served now, unless another fence is up.
func (f *WriteFence) Lift() {
	e := f.e
	e.fenceMu.Lock()
	defer e.fenceMu.Unlock()
	for i, o := range e.fences {
		if o == f {
			e.fences = append(e.fences[:i], e.fences[i+1:]...)
			break
		}
	}
	if len(e.fences) > 0 {
		e.fence.Store(e.fences[0])
	} else {
		e.fence.Store(nil)
	}
}

func (h *ShardHold) kickDrain() {
	select {
	case h.drain <- struct{}{}:
	default:
	}
}

// wait queues a write until the hold ends. deadline is the write's time
// limit, set at its first wait and kept across holds; a KILL of the
// session (stop) ends the wait at once, the write not sent.
func (h *ShardHold) wait(deadline *time.Time, stop <-chan struct{}) error {
	opt, m := h.e.opt, h.e.metrics
	h.mu.Lock()
	switch {
	case h.released:
		h.mu.Unlock()
		return nil
	case h.failErr != nil:
		h.mu.Unlock()
		m.refuseHeld("unavailable")
		return h.failErr
	case h.queued >= opt.HoldMaxQueue:
		h.mu.Unlock()
		m.refuseHeld("queue_full")
		return sqlerr.Errorf(sqlerr.ShardHeld, "Lock wait timeout exceeded: shard %s is held for a migration switch and %d writes are already queued for it (migration.hold_max_queue); retry the statement", h.shard, opt.HoldMaxQueue)
	}
	start := time.Now()
	if deadline.IsZero() {
		*deadline = start.Add(opt.HoldMaxWait)
	}
	ch := make(chan struct{})
	at := len(h.queue)
	h.queue = append(h.queue, ch)
	h.queued++
	h.mu.Unlock()
	m.queueHeld(1)
	defer m.queueHeld(-1)
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
		m.waitHeld(time.Since(start))
		return true
	}
	select {
	case <-ch:
	case <-t.C:
		if leave() {
			m.refuseHeld("timeout")
			return sqlerr.Errorf(sqlerr.ShardHeld, "Lock wait timeout exceeded: shard %s is held for a migration switch; the write waited %s (migration.hold_max_wait); retry the statement", h.shard, opt.HoldMaxWait)
		}
	case <-stop:
		if leave() {
			m.refuseHeld("killed")
			return sqlerr.Errorf(sqlerr.QueryInterrupted, "Query execution was interrupted: KILL while the write waited for a migration switch of shard %s; nothing was written", h.shard)
		}
	}
	m.waitHeld(time.Since(start))
	h.mu.Lock()
	err := h.failErr
	h.mu.Unlock()
	if err != nil {
		m.refuseHeld("unavailable")
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
	h.e.gates[h.shard].hold.CompareAndSwap(h, nil)
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

// txnConn is the backend connection of a transaction that wrote a held-able
// shard. A hold past its deadline fails the transaction through it: at
// once when no statement is running on it (rolled back, the connection
// returned), else when the running one returns. Every later call answers
// the hold's error; the session then treats the transaction as aborted.
type txnConn struct {
	Conn
	ds string
	g  *gate

	mu   sync.Mutex
	busy bool  // a call is running
	err  error // the hold failed the transaction
	gone bool  // unregistered: released, or rolled back for the hold
}

func (t *txnConn) Datasource() string { return t.ds }

func (t *txnConn) enter() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return t.err
	}
	t.busy = true
	return nil
}

func (t *txnConn) exit() {
	t.mu.Lock()
	t.busy = false
	failed := t.err != nil && !t.gone
	if failed {
		t.gone = true
	}
	t.mu.Unlock()
	if failed {
		_, _ = t.Conn.Exec("ROLLBACK")
		t.Conn.Release()
		t.g.unregister(t)
	}
}

// fail is the hold's side: see txnConn.
func (t *txnConn) fail(err error) {
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
		c := t.Conn
		go func() {
			_, _ = c.Exec("ROLLBACK")
			c.Release()
		}()
		t.g.unregister(t)
	}
}

func (t *txnConn) Exec(sql string) (*mysql.Result, error) {
	if err := t.enter(); err != nil {
		return nil, err
	}
	defer t.exit()
	return t.Conn.Exec(sql)
}

func (t *txnConn) ExecMulti(sql string) ([]*mysql.Result, error) {
	if err := t.enter(); err != nil {
		return nil, err
	}
	defer t.exit()
	return t.Conn.ExecMulti(sql)
}

func (t *txnConn) ExecPrepared(sql string, args []any) (*mysql.Result, error) {
	if err := t.enter(); err != nil {
		return nil, err
	}
	defer t.exit()
	return t.Conn.ExecPrepared(sql, args)
}

func (t *txnConn) Describe(sql string) (int, []*mysql.Field, error) {
	if err := t.enter(); err != nil {
		return 0, nil, err
	}
	defer t.exit()
	return t.Conn.Describe(sql)
}

func (t *txnConn) UseDB(db string) error {
	if err := t.enter(); err != nil {
		return err
	}
	defer t.exit()
	return t.Conn.UseDB(db)
}

func (t *txnConn) SyncVars(want map[string]string) error {
	if err := t.enter(); err != nil {
		return err
	}
	defer t.exit()
	return t.Conn.SyncVars(want)
}

// Release ends the transaction's count on its shard.
func (t *txnConn) Release() {
	t.mu.Lock()
	if t.gone {
		t.mu.Unlock()
		return
	}
	t.gone = true
	t.mu.Unlock()
	t.Conn.Release()
	t.g.unregister(t)
}
