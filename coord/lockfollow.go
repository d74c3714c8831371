package coord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/convoy-im/convoy/routecfg"
)

// Migration lock, proxy side: a LockFollower in every proxy watches the
// cluster's migration locks and holds, acknowledges and releases shards
// through the engine's ShardHolder. The rules are in doc.go ("Migration
// lock").

// ErrShardUnavailable is wrapped by the errors a ShardHold's Fail receives:
// the proxy cannot prove which datasource is authoritative for the shard
// (a migration switch it held for is unresolved past its deadline, or its
// own registration may have expired), so it answers the shard's writes with
// an error rather than risk sending them to the wrong side.
var ErrShardUnavailable = errors.New("shard writes unavailable: a migration switch is unresolved")

// ShardHolder is what the engine gives the lock follower: it holds one
// shard's writes.
type ShardHolder interface {
	// Fence refuses every write to a sharded table, whatever shard, with
	// err (wrapping ErrShardUnavailable) until the fence's Lift; reads go
	// on. It returns once no admitted write is running; when ctx ends
	// first, it fails the transactions still open (their clients told)
	// and returns anyway: the fence stays up whatever is left running.
	Fence(ctx context.Context, err error) WriteFence
	// Hold stops sending new writes of shard to any datasource and queues
	// them in arrival order (bounded in time and length by the engine, with
	// a clear error past the bound), then lets the transactions already
	// open on the shard finish. It returns once no write of the shard can
	// reach a datasource until Release: when ctx ends first, it fails the
	// transactions still open on the shard (clearly, to their clients) and
	// returns holding, or returns an error with nothing held. The follower
	// retries a failed Hold while it still needs the shard held.
	Hold(ctx context.Context, shard int) (ShardHold, error)
}

// WriteFence is one Fence: Lift takes it down (idempotent).
type WriteFence interface{ Lift() }

// ShardHold is one held shard.
type ShardHold interface {
	// Release lets the queued writes, then new ones, proceed in order under
	// the routes the proxy serves now. The follower calls it only once
	// those routes are at least the version the switch produced (or the
	// switch ended without changing them). Called once.
	Release()
	// Fail answers the queued writes with err and refuses the shard's new
	// writes with err until Release: the proxy cannot tell which side is
	// authoritative. err wraps ErrShardUnavailable. Called at most once,
	// before Release (which may never come, e.g. at shutdown).
	Fail(err error)
}

const (
	// followTick paces deadline checks and the wait for a route version:
	// a release comes at most this late after the routes arrive, a small
	// part of the 300 ms pause budget.
	followTick = 20 * time.Millisecond
	// holdRetryWindow bounds a Hold retried after its first window passed.
	holdRetryWindow = 250 * time.Millisecond
	retryDelay      = 100 * time.Millisecond
	// reloadInterval spaces the route re-reads forced while a release
	// waits for a version the watcher has not delivered yet.
	reloadInterval  = 200 * time.Millisecond
	ackWriteTimeout = 2 * time.Second
	maxFollowRetry  = 2 * time.Second
)

// FollowerOption configures a LockFollower.
type FollowerOption func(*followerConfig)

type followerConfig struct {
	log         *zap.Logger
	metrics     *LockMetrics
	readTimeout time.Duration
}

// WithFollowerLogger sets the logger (default: none).
func WithFollowerLogger(l *zap.Logger) FollowerOption {
	return func(c *followerConfig) {
		if l != nil {
			c.log = l
		}
	}
}

// WithFollowerMetrics records held shards in m.
func WithFollowerMetrics(m *LockMetrics) FollowerOption {
	return func(c *followerConfig) { c.metrics = m }
}

// LockFollower is one proxy's participant in the migration lock protocol.
type LockFollower struct {
	cli     *clientv3.Client
	cluster string
	reg     *Registration
	routes  *routecfg.Watcher
	holder  ShardHolder
	cfg     followerConfig
	log     *zap.Logger
	id      string

	started atomic.Bool
	ctx     context.Context
	cancel  context.CancelFunc
	done    chan struct{}
	wg      sync.WaitGroup // goroutines spawned by the loop
	events  chan func()    // results of those goroutines, run on the loop

	// Owned by Start, then by the loop goroutine.
	shards       map[int]*heldShard
	jobs         map[int]bool
	inDoubt      bool // the registration may have expired in etcd
	fence        WriteFence
	fencing      bool  // a Fence call is in flight
	fenceGen     int   // a re-read of this generation or later may lift the fence
	fenceLift    bool  // lift once the route watcher serves fenceNeed
	fenceNeed    int64 // the route version etcd held at that re-read
	resyncGen    int
	needResync   bool
	resyncing    bool
	resyncAt     time.Time
	backoff      time.Duration
	wcancel      context.CancelFunc
	pendingWatch <-chan clientv3.WatchChan
	wch          clientv3.WatchChan
	reloading    bool
	lastReload   time.Time
}

// heldShard is the follower's state for one shard that is, or must be,
// held.
type heldShard struct {
	shard int
	lock  *LockInfo // the lock in etcd, as last seen; nil when none
	// resolving: a lock or fence ended; release once the route watcher
	// serves need.
	resolving   bool
	need        int64
	needUnknown bool // a lock vanished unseen: re-read to learn need

	hold      ShardHold
	holding   bool // a Hold call is in flight
	holdRetry time.Time
	holdFails int       // failed Hold calls, for log rate limiting
	holdBy    time.Time // Hold's ctx deadline: open transactions fail then
	heldAt    time.Time
	deadline  time.Time // Fail the held writes at it (zero: none)
	failed    bool

	ackRev    int64 // lock revision acknowledged
	ackLease  clientv3.LeaseID
	ackModRev int64 // the ack key's revision, to delete exactly it
	acking    bool
	ackRetry  time.Time
}

// lockSnapshot is one consistent read of what the follower needs.
type lockSnapshot struct {
	rev    int64
	gen    int
	locks  map[int]LockInfo
	jobs   map[int]bool
	routes int64 // version of the route document at rev (0: none)
}

// NewLockFollower returns the follower of a cluster's migration locks for
// the proxy registered as reg, whose routes come from routes, holding
// shards through holder. Call Start before serving writes.
func NewLockFollower(cli *clientv3.Client, cluster string, reg *Registration, routes *routecfg.Watcher, holder ShardHolder, opts ...FollowerOption) *LockFollower {
	cfg := followerConfig{log: zap.NewNop(), readTimeout: routecfg.DefaultReadTimeout}
	for _, o := range opts {
		o(&cfg)
	}
	f := &LockFollower{
		cli: cli, cluster: cluster, reg: reg, routes: routes, holder: holder, cfg: cfg,
		done: make(chan struct{}), events: make(chan func()),
		shards: map[int]*heldShard{}, jobs: map[int]bool{}, backoff: minRewatchBackoff,
	}
	if reg != nil {
		f.id = reg.proxyID()
	}
	f.log = cfg.log.With(zap.String("cluster", cluster), zap.String("proxy", f.id))
	f.ctx, f.cancel = context.WithCancel(context.Background())
	return f
}

// Start reads the locks present now and holds every locked shard before it
// returns (bounded by ctx and each lock's deadline), so a proxy started
// during a switch never sends that shard's writes before the switch ends;
// then it follows etcd until Close. Start the registration and the route
// watcher first. If etcd cannot be read, or a locked shard cannot be held,
// Start fails: the proxy cannot know which shards it must not write.
func (f *LockFollower) Start(ctx context.Context) error {
	if !f.started.CompareAndSwap(false, true) {
		return errors.New("coord: lock follower already started")
	}
	fail := func(err error) error {
		close(f.done)
		return err
	}
	if err := validKeyPart("cluster name", f.cluster); err != nil {
		return fail(err)
	}
	if f.reg == nil || f.routes == nil || f.routes.Current() == nil || f.holder == nil {
		return fail(errors.New("coord: the lock follower needs a registration, a started route watcher and a shard holder"))
	}
	rctx, cancel := context.WithTimeout(ctx, f.cfg.readTimeout)
	snap, err := f.read(rctx)
	cancel()
	if err != nil {
		return fail(fmt.Errorf("coord: cannot read the migration locks, so this proxy cannot know which shards it must hold: %w", err))
	}
	// A switch may have flipped the routes, and ended, between the route
	// watcher's start and this read: then no lock says so, and the
	// watcher may not have delivered the flip yet. Serve nothing older
	// than what etcd holds with these locks.
	for f.routes.Current().Version() < snap.routes {
		rctx, cancel := context.WithTimeout(ctx, f.cfg.readTimeout)
		err := f.routes.Reload(rctx)
		cancel()
		if f.routes.Current().Version() >= snap.routes {
			break
		}
		if err == nil {
			err = errors.New("the document etcd holds was not taken (rejected?)")
		}
		select {
		case <-ctx.Done():
			return fail(fmt.Errorf("coord: the route watcher serves version %d, etcd holds %d, and the newer one could not be loaded: %w",
				f.routes.Current().Version(), snap.routes, err))
		case <-time.After(followTick):
		}
	}
	now := time.Now()
	f.resyncGen, snap.gen = 1, 1
	f.apply(snap, now)
	var locked []*heldShard
	for _, sh := range f.shards {
		locked = append(locked, sh)
	}
	slices.SortFunc(locked, func(a, b *heldShard) int { return a.shard - b.shard })
	for _, sh := range locked {
		hctx, cancel := context.WithDeadline(ctx, sh.holdBy)
		h, err := f.holder.Hold(hctx, sh.shard)
		cancel()
		if err != nil {
			for _, o := range locked {
				if o.hold != nil {
					o.hold.Fail(f.closedErr(o.shard))
				}
			}
			return fail(fmt.Errorf("coord: shard %d is locked for a migration switch (job %s) and cannot be held: %w", sh.shard, sh.lock.JobID, err))
		}
		f.held(sh, h, time.Now())
	}
	f.restartWatch(snap.rev)
	go f.run()
	return nil
}

// Close stops following, fails the writes of every shard still held (the
// proxy is going away and cannot know the outcome) and waits for the
// follower's goroutines. Idempotent.
func (f *LockFollower) Close() {
	f.cancel()
	if f.started.CompareAndSwap(false, true) {
		close(f.done)
		return
	}
	<-f.done
	f.wg.Wait()
}

// Done is closed when the follower has stopped.
func (f *LockFollower) Done() <-chan struct{} { return f.done }

func (f *LockFollower) closedErr(shard int) error {
	return fmt.Errorf("%w: shard %d: the proxy is shutting down while the shard is held for a migration switch", ErrShardUnavailable, shard)
}

// spawn runs fn on a goroutine Close waits for.
func (f *LockFollower) spawn(fn func()) {
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		fn()
	}()
}

// post runs fn on the loop; after Close it runs onClosed instead (if set).
func (f *LockFollower) post(fn, onClosed func()) {
	select {
	case f.events <- fn:
	case <-f.ctx.Done():
		if onClosed != nil {
			onClosed()
		}
	}
}

// read reads the locks, the job keys and the route document at one
// revision: if a lock is absent at that revision, the routes read with it
// are final for that lock's switch, since the flip is conditional on the
// lock.
func (f *LockFollower) read(ctx context.Context) (lockSnapshot, error) {
	from, end := jobsRange(f.cluster)
	resp, err := f.cli.Txn(ctx).Then(
		clientv3.OpGet(LocksPrefix(f.cluster), clientv3.WithPrefix()),
		clientv3.OpGet(from, clientv3.WithRange(end), clientv3.WithKeysOnly()),
		clientv3.OpGet(routecfg.RoutesKey(f.cluster))).Commit()
	if err != nil {
		return lockSnapshot{}, err
	}
	snap := lockSnapshot{rev: resp.Header.Revision, locks: map[int]LockInfo{}, jobs: map[int]bool{}}
	lp, mp := LocksPrefix(f.cluster), MigrationsPrefix(f.cluster)
	for _, kv := range resp.Responses[0].GetResponseRange().GetKvs() {
		shard, ok := parseShardPart(strings.TrimPrefix(string(kv.Key), lp))
		l, err := decodeLock(kv.Value, kv.CreateRevision)
		if !ok || err != nil {
			f.log.Error("ignoring a malformed migration lock key", zap.ByteString("key", kv.Key), zap.Error(err))
			continue
		}
		snap.locks[shard] = l
	}
	for _, kv := range resp.Responses[1].GetResponseRange().GetKvs() {
		if shard, ok := parseShardPart(strings.TrimPrefix(string(kv.Key), mp)); ok {
			snap.jobs[shard] = true
		}
	}
	if kvs := resp.Responses[2].GetResponseRange().GetKvs(); len(kvs) == 1 {
		if doc, err := routecfg.DecodeDocument(kvs[0].Value); err == nil {
			snap.routes = doc.Version
		}
	}
	return snap, nil
}

// apply installs a re-read: the locks it holds, and the end of every lock
// it no longer holds.
func (f *LockFollower) apply(snap lockSnapshot, now time.Time) {
	f.jobs = snap.jobs
	for shard, l := range snap.locks {
		f.seeLock(shard, l, now, snap.routes)
	}
	for _, sh := range f.shards {
		if sh.lock != nil {
			if _, ok := snap.locks[sh.shard]; !ok {
				f.lockGone(sh, nil, snap.routes, "re-read")
			}
		}
		if sh.needUnknown {
			sh.needUnknown = false
			sh.need = max(sh.need, snap.routes)
		}
	}
	if f.fence != nil && !f.inDoubt && snap.gen >= f.fenceGen && !f.fenceLift {
		f.fenceLift, f.fenceNeed = true, snap.routes
		f.log.Info("registration valid again: lifting the write fence once the routes etcd holds are served",
			zap.Int64("need_route_version", f.fenceNeed))
	}
}

func (f *LockFollower) shard(shard int) *heldShard {
	sh := f.shards[shard]
	if sh == nil {
		sh = &heldShard{shard: shard}
		f.shards[shard] = sh
	}
	return sh
}

// seeLock records a lock present in etcd. knownRoutes is the route version
// read with it (-1: seen on the watch).
func (f *LockFollower) seeLock(shard int, l LockInfo, now time.Time, knownRoutes int64) {
	sh := f.shard(shard)
	if sh.lock != nil && sh.lock.Revision == l.Revision {
		sh.lock = &l // its state changed (switched)
		return
	}
	if sh.lock != nil {
		// Another lock replaced one whose end we did not see.
		if knownRoutes >= 0 {
			sh.need = max(sh.need, knownRoutes)
		} else {
			sh.needUnknown, f.needResync = true, true
		}
	}
	sh.lock = &l
	sh.deadline = now.Add(l.maxHold())
	// Open transactions must end (or fail) in time for the acknowledgement
	// to reach the migrator before it gives up: a long transaction should
	// not abort the switch for everyone.
	ack := l.ackTimeout()
	sh.holdBy = now.Add(ack - min(200*time.Millisecond, ack/4))
	f.log.Info("migration lock seen; holding the shard's writes", zap.Int("shard", shard), zap.String("job", l.JobID),
		zap.Int64("lock_revision", l.Revision), zap.Int64("route_version", l.RouteVersion), zap.String("state", l.State),
		zap.Duration("max_hold", l.maxHold()))
}

// lockGone records the end of the lock sh holds for. prev is the lock's
// last value when known (a delete event's previous value); knownRoutes the
// route version read at a revision where the lock was absent (-1: none).
func (f *LockFollower) lockGone(sh *heldShard, prev *LockInfo, knownRoutes int64, source string) {
	l := sh.lock
	sh.lock, sh.resolving = nil, true
	var outcome string
	switch {
	case prev != nil && prev.State == LockSwitched:
		sh.need = max(sh.need, prev.RouteVersion)
		outcome = "switched"
	case prev != nil:
		outcome = "aborted" // the flip marks the lock in the same transaction
	case knownRoutes >= 0:
		sh.need = max(sh.need, knownRoutes)
		outcome = "unknown: waiting for the routes etcd holds"
	default:
		sh.needUnknown, f.needResync = true, true
		outcome = "unknown: re-reading"
	}
	f.log.Info("migration lock gone", zap.Int("shard", sh.shard), zap.String("job", l.JobID), zap.Int64("lock_revision", l.Revision),
		zap.String("outcome", outcome), zap.Int64("need_route_version", sh.need), zap.String("source", source))
}

func (f *LockFollower) run() {
	defer close(f.done)
	defer f.shutdown()
	tick := time.NewTicker(followTick)
	defer tick.Stop()
	for {
		select {
		case <-f.ctx.Done():
			return
		case ch := <-f.pendingWatch:
			f.pendingWatch, f.wch = nil, ch
		case resp, ok := <-f.wch:
			if !ok || resp.Canceled || resp.CompactRevision != 0 || resp.Err() != nil {
				f.log.Warn("migration lock watch broken; re-reading", zap.Bool("closed", !ok), zap.Error(resp.Err()))
				f.stopWatch()
				f.retryResync(time.Now())
				break
			}
			now := time.Now()
			for _, ev := range resp.Events {
				f.handleEvent(ev, now)
			}
		case fn := <-f.events:
			fn()
		case <-tick.C:
		}
		f.step(time.Now())
	}
}

func (f *LockFollower) retryResync(now time.Time) {
	f.needResync = true
	f.resyncAt = now.Add(f.backoff)
	f.backoff = min(2*f.backoff, maxFollowRetry)
}

func (f *LockFollower) handleEvent(ev *clientv3.Event, now time.Time) {
	rest := strings.TrimPrefix(string(ev.Kv.Key), MigrationsPrefix(f.cluster))
	if name, ok := strings.CutPrefix(rest, "locks/"); ok {
		shard, ok := parseShardPart(name)
		if !ok {
			return
		}
		if ev.Type == clientv3.EventTypePut {
			l, err := decodeLock(ev.Kv.Value, ev.Kv.CreateRevision)
			if err != nil {
				f.log.Error("ignoring a malformed migration lock", zap.Int("shard", shard), zap.Error(err))
				return
			}
			f.seeLock(shard, l, now, -1)
			return
		}
		sh := f.shards[shard]
		if sh == nil || sh.lock == nil {
			return
		}
		var prev *LockInfo
		if ev.PrevKv != nil {
			if l, err := decodeLock(ev.PrevKv.Value, ev.PrevKv.CreateRevision); err == nil && l.Revision == sh.lock.Revision {
				prev = &l
			}
		}
		f.lockGone(sh, prev, -1, "watch")
		return
	}
	if strings.Contains(rest, "/") {
		return // acks/, runners/
	}
	if shard, ok := parseShardPart(rest); ok {
		if ev.Type == clientv3.EventTypePut {
			f.jobs[shard] = true
		} else {
			delete(f.jobs, shard)
		}
	}
}

// step runs after every event: lease check, re-read scheduling, and each
// shard's next move.
func (f *LockFollower) step(now time.Time) {
	f.checkLease(now)
	f.maybeLift(now)
	if f.needResync && !f.resyncing && !now.Before(f.resyncAt) {
		f.startResync()
	}
	for _, sh := range f.shards {
		f.reconcile(sh, now)
	}
}

// checkLease fences every sharded write while the registration may have
// expired: a migrator may then switch any shard without this proxy,
// including one whose job this proxy has not seen (started while it was
// cut off), and the proxy cannot tell. Once the registration is renewed,
// a re-read of the locks and routes, and the watcher serving those
// routes, lift the fence (maybeLift).
func (f *LockFollower) checkLease(now time.Time) {
	if now.After(f.reg.validUntil()) {
		if !f.inDoubt {
			f.inDoubt = true
			f.log.Warn("registration lease may have expired (no renewal answered by etcd): refusing every write to sharded tables until etcd answers again and the routes are re-read",
				zap.Time("lease_expiry", f.reg.leaseExpiry()))
		}
		f.fenceLift = false
		if f.fence == nil && !f.fencing {
			f.startFence(now)
		}
		return
	}
	if f.inDoubt {
		f.inDoubt = false
		f.fenceGen = f.resyncGen + 1
		f.needResync = true
		f.log.Info("registration lease renewed; re-reading the locks and routes before lifting the write fence")
	}
}

// startFence puts up the engine's write fence. Transactions that wrote
// and are still open get until the registration's estimated expiry in
// etcd, when a migrator could proceed without this proxy; then they fail.
func (f *LockFollower) startFence(now time.Time) {
	f.fencing = true
	deadline := f.reg.leaseExpiry()
	if !deadline.After(now) {
		deadline = now.Add(holdRetryWindow)
	}
	err := fmt.Errorf("%w: this proxy's etcd registration may have expired (etcd has not answered its renewals), so a migration could have switched any shard without it; writes to sharded tables are refused until it can re-read the routes (reads are served)", ErrShardUnavailable)
	f.spawn(func() {
		ctx, cancel := context.WithDeadline(f.ctx, deadline)
		wf := f.holder.Fence(ctx, err)
		cancel()
		f.post(func() {
			f.fencing, f.fence = false, wf
			f.cfg.metrics.fenced(true)
			f.log.Warn("write fence up: every write to a sharded table is refused")
			if !f.inDoubt {
				// The registration was renewed while the fence went up
				// (it waits for the transactions that wrote): the re-read
				// that lifts it may have come and gone before it was up.
				// Another one lifts it.
				f.fenceGen, f.needResync = f.resyncGen+1, true
			}
		}, nil) // closed: the proxy is going away, the fence stays up
	})
}

// maybeLift lifts the write fence once its re-read's routes are served.
func (f *LockFollower) maybeLift(now time.Time) {
	if f.fence == nil || !f.fenceLift || f.inDoubt {
		return
	}
	if v := f.routes.Current().Version(); v < f.fenceNeed {
		f.reload(now)
		return
	}
	f.fence.Lift()
	f.fence, f.fenceLift = nil, false
	f.cfg.metrics.fenced(false)
	f.log.Info("write fence lifted: registration valid and the routes etcd holds are served", zap.Int64("route_version", f.routes.Current().Version()))
}

func (f *LockFollower) startResync() {
	f.needResync, f.resyncing = false, true
	f.resyncGen++
	gen := f.resyncGen
	// No event of the old watch may interleave with the re-read.
	f.stopWatch()
	if f.backoff > minRewatchBackoff {
		if conn := f.cli.ActiveConnection(); conn != nil {
			conn.ResetConnectBackoff()
		}
	}
	f.spawn(func() {
		ctx, cancel := context.WithTimeout(f.ctx, f.cfg.readTimeout)
		snap, err := f.read(ctx)
		cancel()
		snap.gen = gen
		f.post(func() {
			f.resyncing = false
			now := time.Now()
			if err != nil {
				if f.backoff == minRewatchBackoff {
					f.log.Warn("cannot re-read the migration locks; retrying", zap.Error(err))
				}
				f.retryResync(now)
				return
			}
			f.backoff = minRewatchBackoff
			f.apply(snap, now)
			f.restartWatch(snap.rev)
		}, nil)
	})
}

func (f *LockFollower) restartWatch(rev int64) {
	f.stopWatch()
	wctx, cancel := context.WithCancel(f.ctx)
	f.wcancel = cancel
	f.pendingWatch = startWatch(wctx, f.cli, MigrationsPrefix(f.cluster),
		clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithRev(rev+1))
}

func (f *LockFollower) stopWatch() {
	if f.wcancel != nil {
		f.wcancel()
		f.wcancel = nil
	}
	f.wch, f.pendingWatch = nil, nil
}

// reconcile moves one shard on: hold it while it must be held, acknowledge
// its lock, fail its writes at the deadline or under a fence, release it
// once its routes are served.
func (f *LockFollower) reconcile(sh *heldShard, now time.Time) {
	if sh.hold == nil {
		// Resolving needs no hold of its own: a Hold still in flight is
		// released as soon as it arrives.
		wanted := sh.lock != nil
		switch {
		case !wanted && !sh.holding:
			delete(f.shards, sh.shard)
		case wanted && !sh.holding && !now.Before(sh.holdRetry):
			f.startHold(sh, now)
		}
		return
	}
	if !sh.failed {
		switch {
		case f.inDoubt:
			f.fail(sh, "fenced", "this proxy's etcd registration may have expired, so a migration switch could complete without it")
		case !sh.deadline.IsZero() && !now.Before(sh.deadline):
			f.fail(sh, "deadline", "the migration switch did not end by its deadline and this proxy cannot confirm the routes it produced (etcd unreachable, or the migrator stalled)")
		}
	}
	if sh.lock != nil {
		if !f.inDoubt && !sh.acking && !now.Before(sh.ackRetry) &&
			(sh.ackRev != sh.lock.Revision || sh.ackLease != f.reg.leaseID()) {
			f.startAck(sh)
		}
		return
	}
	if f.inDoubt {
		return
	}
	if sh.needUnknown {
		f.needResync = true
		return
	}
	if v := f.routes.Current().Version(); v >= sh.need {
		f.release(sh, v, now)
		return
	}
	f.reload(now)
}

func (f *LockFollower) startHold(sh *heldShard, now time.Time) {
	sh.holding = true
	shard, deadline := sh.shard, sh.holdBy
	if !deadline.After(now) {
		deadline = now.Add(holdRetryWindow)
	}
	f.spawn(func() {
		ctx, cancel := context.WithDeadline(f.ctx, deadline)
		h, err := f.holder.Hold(ctx, shard)
		cancel()
		f.post(func() {
			sh := f.shards[shard] // never removed while a Hold is in flight
			sh.holding = false
			if err != nil {
				if sh.holdFails++; sh.holdFails == 1 || sh.holdFails%10 == 0 {
					f.log.Warn("cannot hold the shard's writes for a migration lock; retrying", zap.Int("shard", shard),
						zap.Int("attempts", sh.holdFails), zap.Error(err))
				}
				sh.holdRetry = time.Now().Add(retryDelay)
				return
			}
			f.held(sh, h, time.Now())
		}, func() {
			if err == nil {
				h.Fail(f.closedErr(shard))
			}
		})
	})
}

func (f *LockFollower) held(sh *heldShard, h ShardHold, now time.Time) {
	sh.hold, sh.heldAt = h, now
	f.cfg.metrics.shardHeld()
	f.log.Info("shard writes held for a migration lock", zap.Int("shard", sh.shard))
}

func (f *LockFollower) fail(sh *heldShard, label, reason string) {
	sh.failed = true
	err := fmt.Errorf("%w: shard %d: %s", ErrShardUnavailable, sh.shard, reason)
	sh.hold.Fail(err)
	f.cfg.metrics.shardFailed(label)
	f.log.Warn("failing the held writes of the shard", zap.Int("shard", sh.shard), zap.String("reason", label), zap.Error(err))
}

func (f *LockFollower) startAck(sh *heldShard) {
	sh.acking = true
	l, lease, shard := *sh.lock, f.reg.leaseID(), sh.shard
	rec, _ := json.Marshal(ackRecord{Proxy: f.id, JobID: l.JobID, LockRevision: l.Revision, HeldAt: sh.heldAt.UTC(),
		RouteVersion: f.routes.Current().Version()})
	key, lockKey := AckKey(f.cluster, shard, f.id), LockKey(f.cluster, shard)
	f.spawn(func() {
		ctx, cancel := context.WithTimeout(f.ctx, ackWriteTimeout)
		// Only while the lock is this one: no orphan acknowledgement of a
		// lock already gone.
		resp, err := f.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(lockKey), "=", l.Revision)).
			Then(clientv3.OpPut(key, string(rec), clientv3.WithLease(lease))).
			Commit()
		cancel()
		f.post(func() {
			if f.shards[shard] != sh {
				return // released meanwhile; the key goes with the lease or the next ack
			}
			sh.acking = false
			switch {
			case err != nil:
				f.log.Warn("cannot acknowledge the migration lock yet; retrying", zap.Int("shard", shard), zap.Error(err))
				sh.ackRetry = time.Now().Add(retryDelay)
			case !resp.Succeeded:
				sh.ackRetry = time.Now().Add(retryDelay) // the lock changed; the watch tells how
			default:
				sh.ackRev, sh.ackLease, sh.ackModRev = l.Revision, lease, resp.Header.Revision
				f.log.Info("migration lock acknowledged", zap.Int("shard", shard), zap.String("job", l.JobID),
					zap.Int64("lock_revision", l.Revision), zap.Duration("since_held", time.Since(sh.heldAt)))
			}
		}, nil)
	})
}

func (f *LockFollower) release(sh *heldShard, version int64, now time.Time) {
	sh.hold.Release()
	f.cfg.metrics.shardReleased(now.Sub(sh.heldAt))
	f.log.Info("shard writes released", zap.Int("shard", sh.shard), zap.Int64("route_version", version),
		zap.Int64("need_route_version", sh.need), zap.Duration("held", now.Sub(sh.heldAt)), zap.Bool("had_failed", sh.failed))
	delete(f.shards, sh.shard)
	if sh.ackModRev != 0 {
		key, rev := AckKey(f.cluster, sh.shard, f.id), sh.ackModRev
		f.spawn(func() {
			ctx, cancel := context.WithTimeout(f.ctx, ackWriteTimeout)
			defer cancel()
			_, _ = f.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).Then(clientv3.OpDelete(key)).Commit()
		})
	}
}

// reload asks the route watcher to re-read now, at most every
// reloadInterval: a release waits for a version the watch has not
// delivered yet (it may be re-establishing after an etcd outage).
func (f *LockFollower) reload(now time.Time) {
	if f.reloading || now.Sub(f.lastReload) < reloadInterval {
		return
	}
	f.reloading, f.lastReload = true, now
	f.spawn(func() {
		ctx, cancel := context.WithTimeout(f.ctx, f.cfg.readTimeout)
		_ = f.routes.Reload(ctx)
		cancel()
		f.post(func() { f.reloading = false }, nil)
	})
}

// shutdown runs when the loop exits: held shards cannot be resolved any
// more, so their writes fail.
func (f *LockFollower) shutdown() {
	f.stopWatch()
	for _, sh := range f.shards {
		if sh.hold != nil {
			if !sh.failed {
				sh.hold.Fail(f.closedErr(sh.shard))
				f.cfg.metrics.shardFailed("closed")
			}
			f.cfg.metrics.shardReleased(time.Since(sh.heldAt))
		}
	}
}
