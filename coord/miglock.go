package coord

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/convoy-im/convoy/routecfg"
	"github.com/convoy-im/convoy/router"
)

// Migration lock, migrator side. The protocol, its guarantees and its
// residual windows are described in doc.go ("Migration lock"); the proxy
// side is lockfollow.go.

const (
	// DefaultAckTimeout bounds the wait for every live proxy's
	// acknowledgement (docs/design.md §5: a held write waits at most 2 s).
	DefaultAckTimeout = 2 * time.Second
	// DefaultMaxHold bounds the whole switch, acknowledgements included: the
	// flip callback's context ends then, and proxies stop queueing the
	// shard's writes (they fail them clearly) if the lock outlives it.
	DefaultMaxHold = 5 * time.Second
)

// Lock states stored in the lock's value. The route flip rewrites the lock
// from LockHolding to LockSwitched in the same etcd transaction that writes
// the routes, so whoever sees the lock's last value knows whether the routes
// changed under it.
const (
	LockHolding  = "holding"
	LockSwitched = "switched"
)

var (
	// ErrSwitchAborted means the switch gave up with the routes unchanged
	// (a proxy did not acknowledge in time, the callback failed before the
	// flip, the runner lost its lease): the shard stays where it was.
	ErrSwitchAborted = errors.New("shard switch aborted, routes unchanged")
	// ErrLockHeld means a migration lock already exists for the shard.
	ErrLockHeld = errors.New("a migration lock already exists for the shard")
	// ErrLockLost means the lock disappeared (its lease expired) or changed
	// before the route flip; the flip was not written.
	ErrLockLost = errors.New("the migration lock is gone")
	// ErrFlipUnknown means the route flip's outcome could not be learned
	// (etcd unreachable and the runner's lease lost): read the routes before
	// acting on the job.
	ErrFlipUnknown = errors.New("the outcome of the route flip is unknown")
)

// LocksPrefix is the etcd prefix of a cluster's migration locks; every proxy
// watches it.
func LocksPrefix(cluster string) string { return MigrationsPrefix(cluster) + "locks/" }

// LockKey is the etcd key of one shard's migration lock.
func LockKey(cluster string, shard int) string { return LocksPrefix(cluster) + shardPart(shard) }

// AcksPrefix is the etcd prefix of the acknowledgements of one shard's lock.
func AcksPrefix(cluster string, shard int) string {
	return MigrationsPrefix(cluster) + "acks/" + shardPart(shard) + "/"
}

// AckKey is the etcd key of one proxy's acknowledgement of a shard's lock.
func AckKey(cluster string, shard int, proxyID string) string {
	return AcksPrefix(cluster, shard) + proxyID
}

// RampStatsPrefix is the etcd prefix under which each proxy publishes its
// read-ramp figures (reads, errors and latency per side of every shard in a
// read ramp), one key per proxy under its registration lease.
func RampStatsPrefix(cluster string) string { return MigrationsPrefix(cluster) + "ramps/" }

// RampStatsKey is the etcd key of one proxy's read-ramp figures.
func RampStatsKey(cluster, proxyID string) string { return RampStatsPrefix(cluster) + proxyID }

// RampingPrefix is the etcd prefix of the proxies that may send a shard's
// reads to its migration target (a read ramp): one key per proxy under its
// registration lease, written before the proxy ramps and deleted once it
// stopped. A rollback deletes the target's rows only once none is left.
func RampingPrefix(cluster string, shard int) string {
	return MigrationsPrefix(cluster) + "ramping/" + fmt.Sprintf("%04d", shard) + "/"
}

// RampingKey is one proxy's key under RampingPrefix.
func RampingKey(cluster string, shard int, proxyID string) string {
	return RampingPrefix(cluster, shard) + proxyID
}

// LockInfo is the value of a migration lock.
type LockInfo struct {
	Shard  int    `json:"shard"`
	JobID  string `json:"job_id"`
	Runner string `json:"runner"`
	// RouteVersion is the route document version the switch produces: the
	// version read when the lock was taken, plus one.
	RouteVersion int64     `json:"route_version"`
	State        string    `json:"state"` // LockHolding or LockSwitched
	From         Endpoint  `json:"from"`
	To           Endpoint  `json:"to"`
	CreatedAt    time.Time `json:"created_at"`
	// Deadline is CreatedAt + MaxHold on the migrator's clock, for humans;
	// proxies count MaxHold from when they see the lock, so clock skew
	// between hosts does not matter.
	Deadline     time.Time `json:"deadline"`
	AckTimeoutMS int64     `json:"ack_timeout_ms"`
	MaxHoldMS    int64     `json:"max_hold_ms"`
	SwitchedAt   time.Time `json:"switched_at,omitzero"`

	// Revision is the lock key's CreateRevision: it names this lock
	// instance (acknowledgements carry it). Not stored.
	Revision int64 `json:"-"`
}

func (l LockInfo) maxHold() time.Duration {
	if l.MaxHoldMS <= 0 {
		return DefaultMaxHold
	}
	return time.Duration(l.MaxHoldMS) * time.Millisecond
}

func (l LockInfo) ackTimeout() time.Duration {
	if l.AckTimeoutMS <= 0 {
		return DefaultAckTimeout
	}
	return time.Duration(l.AckTimeoutMS) * time.Millisecond
}

func decodeLock(kv []byte, createRevision int64) (LockInfo, error) {
	var l LockInfo
	if err := json.Unmarshal(kv, &l); err != nil {
		return LockInfo{}, fmt.Errorf("coord: stored value is not a migration lock: %w", err)
	}
	l.Revision = createRevision
	return l, nil
}

// ackRecord is the value of a proxy's acknowledgement.
type ackRecord struct {
	Proxy        string    `json:"proxy"`
	JobID        string    `json:"job_id"`
	LockRevision int64     `json:"lock_revision"` // LockInfo.Revision acknowledged
	HeldAt       time.Time `json:"held_at"`
	RouteVersion int64     `json:"route_version"` // served when the shard was held
}

// ListLocks returns the migration locks present in the cluster, by shard.
func ListLocks(ctx context.Context, cli *clientv3.Client, cluster string) ([]LockInfo, error) {
	if err := validKeyPart("cluster name", cluster); err != nil {
		return nil, err
	}
	resp, err := cli.Get(ctx, LocksPrefix(cluster), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("coord: list migration locks: %w", err)
	}
	var out []LockInfo
	for _, kv := range resp.Kvs {
		if l, err := decodeLock(kv.Value, kv.CreateRevision); err == nil {
			out = append(out, l)
		}
	}
	slices.SortFunc(out, func(a, b LockInfo) int { return a.Shard - b.Shard })
	return out, nil
}

// SwitchOptions bounds one switch. Zero fields take the defaults.
type SwitchOptions struct {
	AckTimeout time.Duration // default DefaultAckTimeout
	MaxHold    time.Duration // default DefaultMaxHold; at least AckTimeout
}

// SwitchResult describes a switch, successful or not.
type SwitchResult struct {
	JobID        string
	LockRevision int64
	// RouteVersion is the version the flip produces (or produced).
	RouteVersion int64
	// Flipped reports whether the routes were changed under the lock. It is
	// true with a non-nil error when the callback failed after the flip:
	// the shard moved; roll back with another switch if needed.
	Flipped bool
	// The proxies, named by their registered listen address (ProxyInfo.Name),
	// of the last attempt:
	Proxies  []string // the live proxies when the lock was taken
	Acked    []string // proxies that acknowledged
	Vanished []string // proxies whose registration expired before acknowledging
	Refused  []string // proxies still registered whose listen address refused connections: gone
	Missing  []string // proxies still unacknowledged at the ack deadline
	AckWait  time.Duration
	Held     time.Duration // lock taken -> lock removed
	// Attempts counts the locks taken: Switch tries again by itself when
	// the proxies that made an attempt abort turn out to be gone.
	Attempts int
}

// SwitchTx is handed to the flip callback while every live proxy holds the
// shard's writes.
type SwitchTx struct {
	r         *Runner
	turn      *switchTurn
	lockKey   string
	info      LockInfo // as stored at lockRev
	lockRev   int64
	doc       router.Document
	routesRev int64

	mu    sync.Mutex
	state flipState
	value []byte // the route document FlipRoutes wrote or tried to
}

type flipState int

const (
	flipNone    flipState = iota
	flipUnknown           // a FlipRoutes call failed without an answer
	flipDone
)

// Routes returns the route document read when the lock was taken. Edit it
// and give it to FlipRoutes.
func (tx *SwitchTx) Routes() router.Document {
	b, _ := json.Marshal(tx.doc)
	var doc router.Document
	_ = json.Unmarshal(b, &doc) // a deep copy: the caller may edit slices
	return doc
}

// RouteVersion is the version FlipRoutes stores.
func (tx *SwitchTx) RouteVersion() int64 { return tx.info.RouteVersion }

// Lock returns the lock as stored.
func (tx *SwitchTx) Lock() LockInfo { return tx.info }

// FlipRoutes stores doc (edited from Routes(), so with its Version) as
// version RouteVersion(), in one etcd transaction that also marks the lock
// LockSwitched, and only if the routes are unchanged since the lock was
// taken (else routecfg.ErrVersionConflict), the lock is still this one and the
// runner still has the cluster's switch turn (else ErrLockLost) and the
// runner is still elected (else ErrNotRunner): a
// migrator whose lease expired can never flip routes under a lock that
// proxies no longer honour. An invalid document is never written. After an
// error without an answer from etcd, calling it again is safe: it recognises
// its own earlier write.
func (tx *SwitchTx) FlipRoutes(ctx context.Context, doc router.Document) error {
	tx.mu.Lock()
	defer tx.mu.Unlock()
	if tx.state == flipDone {
		return errors.New("coord: [BUG] FlipRoutes called twice in one switch")
	}
	if doc.Version != tx.doc.Version {
		return fmt.Errorf("coord: FlipRoutes: the document has version %d, want %d (edit the one SwitchTx.Routes returns)", doc.Version, tx.doc.Version)
	}
	doc.Version = tx.info.RouteVersion
	doc.ChangedBy = fmt.Sprintf("%s: migration %s of shard %d, runner %s", routecfg.Identity(tx.r.store.cli), tx.info.JobID, tx.info.Shard, tx.r.id)
	val, err := routecfg.EncodeDocument(doc)
	if err != nil {
		return err
	}
	if tx.state == flipUnknown && !bytes.Equal(val, tx.value) {
		return errors.New("coord: FlipRoutes retried with a different document after an unanswered attempt")
	}
	info := tx.info
	info.State = LockSwitched
	info.SwitchedAt = time.Now().UTC()
	lockVal, _ := json.Marshal(info)
	routesKey := routecfg.RoutesKey(tx.r.store.cluster)
	resp, err := tx.r.store.cli.Txn(ctx).
		If(tx.r.guard().cmps(
			clientv3.Compare(clientv3.ModRevision(routesKey), "=", tx.routesRev),
			clientv3.Compare(clientv3.ModRevision(tx.lockKey), "=", tx.lockRev),
			tx.turn.owns())...).
		Then(clientv3.OpPut(routesKey, string(val)), clientv3.OpPut(tx.lockKey, string(lockVal), clientv3.WithLease(tx.r.Lease()))).
		Else(clientv3.OpGet(routesKey), clientv3.OpGet(tx.lockKey, clientv3.WithKeysOnly()), clientv3.OpGet(tx.turn.key, clientv3.WithKeysOnly())).
		Commit()
	if err != nil {
		tx.state, tx.value = flipUnknown, val
		return fmt.Errorf("coord: route flip of shard %d to version %d: no answer from etcd, outcome unknown: %w", tx.info.Shard, tx.info.RouteVersion, err)
	}
	if !resp.Succeeded {
		routes := resp.Responses[0].GetResponseRange().GetKvs()
		lock := resp.Responses[1].GetResponseRange().GetKvs()
		turn := resp.Responses[2].GetResponseRange().GetKvs()
		switch {
		case tx.state == flipUnknown && len(routes) == 1 && bytes.Equal(routes[0].Value, val):
			// Our unanswered attempt was applied.
		case len(routes) == 0 || routes[0].ModRevision != tx.routesRev:
			return fmt.Errorf("coord: route flip of shard %d: %w: the routes changed since the lock was taken", tx.info.Shard, routecfg.ErrVersionConflict)
		case len(lock) == 0 || lock[0].ModRevision != tx.lockRev:
			return fmt.Errorf("coord: route flip of shard %d: %w (its lease expired?)", tx.info.Shard, ErrLockLost)
		case len(turn) == 0 || turn[0].CreateRevision != tx.turn.rev:
			return fmt.Errorf("coord: route flip of shard %d: %w: the runner's switch turn %s is gone", tx.info.Shard, ErrLockLost, tx.turn.key)
		default:
			return tx.r.guard().lost()
		}
	}
	tx.state, tx.value = flipDone, val
	tx.r.log.Info("routes flipped under the migration lock", zap.String("job", tx.info.JobID),
		zap.Int64("route_version", tx.info.RouteVersion), zap.Int64("lock_revision", tx.lockRev))
	return nil
}

// Switch runs the per-shard migration lock protocol (doc.go, "Migration
// lock"): it waits for the cluster's switch turn (one switch at a time:
// switchturn.go), takes the shard's lock under the runner's lease, waits
// until every live proxy acknowledged that it holds the shard's writes (a
// proxy whose registration expires meanwhile, or whose listen address
// refuses connections, no longer counts; one that registers meanwhile must
// acknowledge too), calls flip while they all hold, removes the lock and
// gives the turn back. A missing acknowledgement at the deadline, or an
// error from flip before FlipRoutes succeeded, aborts with ErrSwitchAborted
// and the routes unchanged. flip's context ends at the lock's deadline or
// when the runner loses its lease.
//
// After an abort for missing acknowledgements, Switch waits (holding
// nothing) to learn whether those proxies are gone, and if they all are it
// tries again, up to maxSwitchAttempts locks in all: a proxy killed just
// before the switch no longer costs an abort per NEXT until its
// registration expires. flip is only ever called once the proxies hold,
// so it runs at most once per lock.
//
// Switch returns only once the lock is removed, or once the runner lost its
// lease (the lock is then removed by etcd with it): it keeps retrying the
// removal while etcd is unreachable, whatever ctx says, because proxies keep
// the shard's writes held until the lock is gone.
func (r *Runner) Switch(ctx context.Context, opts SwitchOptions, flip func(context.Context, *SwitchTx) error) (SwitchResult, error) {
	if opts.AckTimeout <= 0 {
		opts.AckTimeout = DefaultAckTimeout
	}
	if opts.MaxHold <= 0 {
		opts.MaxHold = DefaultMaxHold
	}
	opts.MaxHold = max(opts.MaxHold, opts.AckTimeout)
	for attempt := 1; ; attempt++ {
		res, missing, err := r.switchOnce(ctx, opts, flip)
		res.Attempts = attempt
		if err == nil || len(missing) == 0 || attempt == maxSwitchAttempts || !r.missingGone(ctx, missing, r.log) {
			return res, err
		}
		r.log.Info("the proxies that made the switch abort are gone; switching again", zap.Strings("gone", res.Missing), zap.Int("attempt", attempt+1))
		select {
		case <-ctx.Done():
			return res, err
		case <-r.Done():
			return res, err
		case <-time.After(switchRetryBackoff):
		}
	}
}

// maxSwitchAttempts bounds the locks one Switch takes; switchRetryBackoff
// spaces them (the proxies that were missing are known to be gone by then,
// so the pause is only to let the last attempt's releases settle).
const (
	maxSwitchAttempts  = 3
	switchRetryBackoff = 100 * time.Millisecond
)

// switchOnce is one attempt of Switch, within the switch turn. missing is
// set when it aborted for missing acknowledgements alone (the lock
// removed, the routes unchanged, flip not called): the proxies, by id.
func (r *Runner) switchOnce(ctx context.Context, opts SwitchOptions, flip func(context.Context, *SwitchTx) error) (SwitchResult, map[string]ProxyInfo, error) {
	select {
	case <-r.Done():
		return SwitchResult{}, nil, r.guard().lost()
	default:
	}
	turn, err := r.takeTurn(ctx)
	if err != nil {
		return SwitchResult{}, nil, err
	}
	res, missing, err := r.switchLocked(ctx, opts, flip, turn)
	if rerr := r.releaseTurn(turn); rerr != nil {
		// Only once the lease is lost, which takes the turn with it.
		r.log.Warn("switch turn not given back", zap.Error(rerr))
	}
	return res, missing, err
}

// switchLocked takes the shard's lock, waits for the acknowledgements,
// calls flip and removes the lock, all while the runner has its turn.
func (r *Runner) switchLocked(ctx context.Context, opts SwitchOptions, flip func(context.Context, *SwitchTx) error, turn *switchTurn) (SwitchResult, map[string]ProxyInfo, error) {
	var res SwitchResult
	tx, proxies, err := r.takeLock(ctx, opts, turn)
	if err != nil {
		return res, nil, err
	}
	info := tx.info
	res.JobID, res.LockRevision, res.RouteVersion = info.JobID, tx.lockRev, info.RouteVersion
	for _, p := range proxies {
		res.Proxies = append(res.Proxies, p.Name())
	}
	log := r.log.With(zap.String("job", info.JobID), zap.Int64("lock_revision", tx.lockRev), zap.Int64("route_version", info.RouteVersion))
	log.Info("migration lock taken; waiting for every live proxy to hold the shard's writes",
		zap.Strings("proxies", res.Proxies), zap.Duration("ack_timeout", opts.AckTimeout), zap.Duration("max_hold", opts.MaxHold))

	aw := r.waitAcks(ctx, tx.lockRev, proxies, info.CreatedAt.Add(opts.AckTimeout), opts.AckTimeout, log)
	res.Acked, res.Vanished, res.Refused, res.Missing = aw.list(aw.acked), aw.list(aw.vanished), aw.list(aw.refused), aw.list(aw.pending)
	res.AckWait = time.Since(info.CreatedAt)
	r.cfg.metrics.ackWaited(res.AckWait, len(res.Vanished)+len(res.Refused))

	var flipErr error
	if aw.err == nil {
		log.Info("every live proxy holds the shard's writes; switching",
			zap.Strings("acked", res.Acked), zap.Strings("vanished", res.Vanished), zap.Strings("refused", res.Refused), zap.Duration("ack_wait", res.AckWait))
		fctx, cancel := context.WithDeadline(ctx, info.Deadline)
		stop := context.AfterFunc(r.lead.session.Ctx(), cancel) // lease lost: stop now
		flipErr = flip(fctx, tx)
		stop()
		cancel()
	}

	flipped, rmErr := r.removeLock(tx)
	res.Flipped = flipped
	res.Held = time.Since(info.CreatedAt)
	var reason string // abort label: the routes are unchanged
	switch {
	case aw.err != nil:
		err, reason = aw.err, aw.reason
	case flipErr != nil && flipped:
		err = fmt.Errorf("coord: shard %d switched to route version %d, but the switch callback failed after the flip: %w", r.shard, info.RouteVersion, flipErr)
	case flipErr != nil:
		err, reason = fmt.Errorf("coord: shard %d: %w: the switch callback failed: %w", r.shard, ErrSwitchAborted, flipErr), "callback"
	}
	switch {
	case rmErr != nil && err != nil:
		err = fmt.Errorf("%w; %w", err, rmErr)
	case rmErr != nil:
		err = rmErr
	}
	r.cfg.metrics.lockDone(res.Held, flipped, reason)
	if err != nil {
		log.Warn("migration switch ended with an error", zap.Bool("flipped", flipped), zap.String("abort_reason", reason),
			zap.Bool("lock_removed", rmErr == nil), zap.Strings("missing", res.Missing), zap.Duration("held", res.Held), zap.Error(err))
		var missing map[string]ProxyInfo
		if reason == "ack_timeout" && rmErr == nil && !flipped {
			missing = map[string]ProxyInfo{}
			for id := range aw.pending {
				missing[id] = aw.infos[id]
			}
		}
		return res, missing, err
	}
	log.Info("migration lock released", zap.Bool("flipped", flipped), zap.Duration("held", res.Held))
	return res, nil, nil
}

// takeLock reads the routes and puts the lock, in one transaction with the
// read of the live proxies, so that every proxy registered after that
// revision finds the lock when its follower starts.
func (r *Runner) takeLock(ctx context.Context, opts SwitchOptions, turn *switchTurn) (*SwitchTx, []ProxyInfo, error) {
	tx, proxies, err := r.takeLockOnce(ctx, opts, turn)
	var stale *staleLock
	if errors.As(err, &stale) {
		// This runner's own earlier attempt, whose creation got no answer
		// (etcd restarting) and which could not be removed then: nothing
		// stands behind it, and under this runner's live lease it would
		// never expire. Remove exactly that version, as an aborted switch
		// does (proxies release), and take a fresh one.
		dresp, derr := r.store.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(stale.key), "=", stale.modRev)).
			Then(clientv3.OpDelete(stale.key)).Commit()
		if derr != nil || !dresp.Succeeded {
			return nil, nil, fmt.Errorf("coord: shard %d: remove this runner's leftover migration lock: %w", r.shard, cmp.Or(derr, ErrLockHeld))
		}
		r.log.Warn("removed this runner's leftover migration lock (an earlier attempt went unanswered)", zap.Int64("revision", stale.modRev))
		tx, proxies, err = r.takeLockOnce(ctx, opts, turn)
	}
	return tx, proxies, err
}

// staleLock is a lock of this runner's job and runner found by takeLockOnce.
type staleLock struct {
	key    string
	modRev int64
}

func (e *staleLock) Error() string {
	return fmt.Sprintf("coord: %s: %v (this runner's own, revision %d)", e.key, ErrLockHeld, e.modRev)
}

func (e *staleLock) Unwrap() error { return ErrLockHeld }

func (r *Runner) takeLockOnce(ctx context.Context, opts SwitchOptions, turn *switchTurn) (*SwitchTx, []ProxyInfo, error) {
	cli, cluster := r.store.cli, r.store.cluster
	job, err := r.Job(ctx)
	if err != nil {
		return nil, nil, err
	}
	routesKey := routecfg.RoutesKey(cluster)
	rresp, err := cli.Get(ctx, routesKey)
	if err != nil {
		return nil, nil, fmt.Errorf("coord: read %s: %w", routesKey, err)
	}
	if len(rresp.Kvs) == 0 {
		return nil, nil, fmt.Errorf("coord: %w for cluster %q", routecfg.ErrNotFound, cluster)
	}
	doc, err := routecfg.DecodeDocument(rresp.Kvs[0].Value)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now().UTC()
	info := LockInfo{
		Shard: r.shard, JobID: job.ID, Runner: r.id, RouteVersion: doc.Version + 1, State: LockHolding,
		From: job.From, To: job.To, CreatedAt: now, Deadline: now.Add(opts.MaxHold),
		AckTimeoutMS: opts.AckTimeout.Milliseconds(), MaxHoldMS: opts.MaxHold.Milliseconds(),
	}
	val, _ := json.Marshal(info)
	lockKey, jobKey := LockKey(cluster, r.shard), JobKey(cluster, r.shard)
	resp, err := cli.Txn(ctx).
		If(r.guard().cmps(
			clientv3.Compare(clientv3.CreateRevision(lockKey), "=", 0),
			clientv3.Compare(clientv3.ModRevision(routesKey), "=", rresp.Kvs[0].ModRevision),
			clientv3.Compare(clientv3.CreateRevision(jobKey), ">", 0),
			turn.owns())...).
		Then(clientv3.OpPut(lockKey, string(val), clientv3.WithLease(r.Lease())),
			clientv3.OpGet(ProxiesPrefix(cluster), clientv3.WithPrefix())).
		Else(clientv3.OpGet(lockKey), clientv3.OpGet(routesKey, clientv3.WithKeysOnly()), clientv3.OpGet(jobKey, clientv3.WithKeysOnly()),
			clientv3.OpGet(turn.key, clientv3.WithKeysOnly())).
		Commit()
	if err != nil {
		// Unanswered: the lock may exist. It is under our lease; remove it
		// (guarded by its value) before reporting.
		r.dropUnansweredLock(lockKey, string(val))
		return nil, nil, fmt.Errorf("coord: take the migration lock of shard %d: %w", r.shard, err)
	}
	if !resp.Succeeded {
		lock := resp.Responses[0].GetResponseRange().GetKvs()
		routes := resp.Responses[1].GetResponseRange().GetKvs()
		jobKV := resp.Responses[2].GetResponseRange().GetKvs()
		turnKV := resp.Responses[3].GetResponseRange().GetKvs()
		switch {
		case len(lock) == 1:
			held, _ := decodeLock(lock[0].Value, lock[0].CreateRevision)
			if held.JobID == job.ID && held.Runner == r.id && lock[0].Lease == int64(r.Lease()) {
				return nil, nil, &staleLock{key: lockKey, modRev: lock[0].ModRevision}
			}
			return nil, nil, fmt.Errorf("coord: shard %d: %w (job %s, runner %s)", r.shard, ErrLockHeld, held.JobID, held.Runner)
		case len(routes) == 0 || routes[0].ModRevision != rresp.Kvs[0].ModRevision:
			return nil, nil, fmt.Errorf("coord: shard %d: %w: the routes changed while the lock was being taken; try again", r.shard, routecfg.ErrVersionConflict)
		case len(jobKV) == 0:
			return nil, nil, fmt.Errorf("coord: %w %d", ErrJobNotFound, r.shard)
		case len(turnKV) == 0 || turnKV[0].CreateRevision != turn.rev:
			return nil, nil, fmt.Errorf("coord: shard %d: %w: the runner's switch turn %s is gone", r.shard, ErrLockLost, turn.key)
		default:
			return nil, nil, r.guard().lost()
		}
	}
	lockRev := resp.Header.Revision
	info.Revision = lockRev
	prefix := ProxiesPrefix(cluster)
	var proxies []ProxyInfo
	for _, kv := range resp.Responses[1].GetResponseRange().GetKvs() {
		proxies = append(proxies, decodeProxyKV(prefix, kv.Key, kv.Value))
	}
	tx := &SwitchTx{r: r, turn: turn, lockKey: lockKey, info: info, lockRev: lockRev, doc: doc, routesRev: rresp.Kvs[0].ModRevision}
	return tx, proxies, nil
}

// dropUnansweredLock removes a lock whose creation got no answer, if it is
// the one we tried to write (same value), best effort: otherwise it expires
// with the runner's lease.
func (r *Runner) dropUnansweredLock(lockKey, val string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, _ = r.store.cli.Txn(ctx).If(clientv3.Compare(clientv3.Value(lockKey), "=", val)).Then(clientv3.OpDelete(lockKey)).Commit()
}

// ackWait is the state of the wait for acknowledgements, by proxy id.
type ackWait struct {
	infos                             map[string]ProxyInfo // the registrations, for names and probes
	pending, acked, vanished, refused map[string]bool
	err                               error
	reason                            string // abort reason label, when err != nil
}

// list names the proxies of m, sorted.
func (a *ackWait) list(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for id := range m {
		out = append(out, a.name(id))
	}
	slices.Sort(out)
	return out
}

func (a *ackWait) name(id string) string {
	if p, ok := a.infos[id]; ok {
		return p.Name()
	}
	return id
}

// waitAcks waits until every proxy of the snapshot, and every proxy that
// registers meanwhile, acknowledged lock lockRev, lost its registration, or
// refuses connections at its listen address (probed from probeAfter on:
// miglock_proxies.go). It follows /convoy/<cluster>/ from the lock's
// revision, so no acknowledgement or expiry after the lock is missed; a
// broken watch is replaced by a full read and a new watch.
func (r *Runner) waitAcks(ctx context.Context, lockRev int64, proxies []ProxyInfo, deadline time.Time, ackTimeout time.Duration, log *zap.Logger) *ackWait {
	cli, cluster := r.store.cli, r.store.cluster
	aw := &ackWait{infos: map[string]ProxyInfo{}, pending: map[string]bool{}, acked: map[string]bool{}, vanished: map[string]bool{}, refused: map[string]bool{}}
	for _, p := range proxies {
		aw.pending[p.ID], aw.infos[p.ID] = true, p
	}
	acksPrefix, proxiesPrefix := AcksPrefix(cluster, r.shard), ProxiesPrefix(cluster)
	ack := func(key string, val []byte) {
		var a ackRecord
		id := strings.TrimPrefix(key, acksPrefix)
		if json.Unmarshal(val, &a) != nil || a.LockRevision != lockRev || aw.acked[id] {
			return
		}
		aw.acked[id] = true
		delete(aw.pending, id)
		delete(aw.vanished, id)
		delete(aw.refused, id)
		r.cfg.metrics.acked()
		log.Info("proxy acknowledged the migration lock", zap.String("proxy", aw.name(id)), zap.Int("pending", len(aw.pending)))
	}
	proxyGone := func(id string) {
		if aw.pending[id] {
			delete(aw.pending, id)
			aw.vanished[id] = true
			log.Warn("proxy registration gone before it acknowledged; it no longer counts", zap.String("proxy", aw.name(id)), zap.Int("pending", len(aw.pending)))
		}
	}
	proxyRefused := func(id string) {
		if aw.pending[id] {
			delete(aw.pending, id)
			aw.refused[id] = true
			log.Warn("proxy still registered but its listen address refuses connections: its process is gone; it no longer counts",
				zap.String("proxy", aw.name(id)), zap.Int("pending", len(aw.pending)))
		}
	}
	proxySeen := func(p ProxyInfo) {
		aw.infos[p.ID] = p
		if !aw.acked[p.ID] && !aw.pending[p.ID] {
			aw.pending[p.ID] = true
			delete(aw.vanished, p.ID)
			delete(aw.refused, p.ID)
			log.Info("proxy registered during the switch; waiting for its acknowledgement too", zap.String("proxy", aw.name(p.ID)))
		}
	}

	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	probe := time.NewTimer(min(probeAfter, ackTimeout/4))
	defer probe.Stop()
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	rev := lockRev
	var (
		pending = startWatch(wctx, cli, "/convoy/"+cluster+"/", clientv3.WithPrefix(), clientv3.WithRev(rev+1))
		wch     clientv3.WatchChan
		retry   <-chan time.Time
		backoff = minRewatchBackoff
		probed  chan []string // the probe round in flight, if any
	)
	for len(aw.pending) > 0 {
		select {
		case <-timer.C:
			aw.err = fmt.Errorf("coord: shard %d: %w: no acknowledgement by the deadline from %s", r.shard, ErrSwitchAborted, strings.Join(aw.list(aw.pending), ", "))
			aw.reason = "ack_timeout"
			return aw
		case <-ctx.Done():
			aw.err, aw.reason = fmt.Errorf("coord: shard %d: %w: %w", r.shard, ErrSwitchAborted, ctx.Err()), "canceled"
			return aw
		case <-r.Done():
			aw.err, aw.reason = fmt.Errorf("coord: shard %d: %w: %w", r.shard, ErrSwitchAborted, r.guard().lost()), "runner_lost"
			return aw
		case <-probe.C:
			var ps []ProxyInfo
			for id := range aw.pending {
				ps = append(ps, aw.infos[id])
			}
			probed = make(chan []string, 1)
			go func(out chan<- []string) { out <- refusedOf(wctx, ps) }(probed)
		case ids := <-probed:
			probed = nil
			for _, id := range ids {
				proxyRefused(id)
			}
			probe.Reset(probeEvery)
		case ch := <-pending:
			pending, wch = nil, ch
		case <-retry:
			retry = nil
			rctx, cancel := context.WithTimeout(wctx, time.Second)
			resp, err := cli.Txn(rctx).Then(
				clientv3.OpGet(acksPrefix, clientv3.WithPrefix()),
				clientv3.OpGet(proxiesPrefix, clientv3.WithPrefix())).Commit()
			cancel()
			if err != nil {
				retry = time.After(backoff)
				backoff = min(2*backoff, maxRewatchBackoff)
				continue
			}
			for _, kv := range resp.Responses[0].GetResponseRange().GetKvs() {
				ack(string(kv.Key), kv.Value)
			}
			live := map[string]ProxyInfo{}
			for _, kv := range resp.Responses[1].GetResponseRange().GetKvs() {
				p := decodeProxyKV(proxiesPrefix, kv.Key, kv.Value)
				live[p.ID] = p
			}
			for id := range aw.pending {
				if _, ok := live[id]; !ok {
					proxyGone(id)
				}
			}
			for _, p := range live {
				proxySeen(p)
			}
			rev = resp.Header.Revision
			pending = startWatch(wctx, cli, "/convoy/"+cluster+"/", clientv3.WithPrefix(), clientv3.WithRev(rev+1))
		case resp, ok := <-wch:
			if !ok || resp.Canceled || resp.Err() != nil {
				log.Warn("watch of acknowledgements broken; re-reading", zap.Bool("closed", !ok), zap.Error(resp.Err()))
				wch = nil
				if conn := cli.ActiveConnection(); conn != nil {
					conn.ResetConnectBackoff()
				}
				retry = time.After(backoff)
				backoff = min(2*backoff, maxRewatchBackoff)
				continue
			}
			for _, ev := range resp.Events {
				key := string(ev.Kv.Key)
				switch {
				case strings.HasPrefix(key, acksPrefix) && ev.Type == clientv3.EventTypePut:
					ack(key, ev.Kv.Value)
				case strings.HasPrefix(key, proxiesPrefix):
					if ev.Type == clientv3.EventTypeDelete {
						proxyGone(strings.TrimPrefix(key, proxiesPrefix))
					} else {
						proxySeen(decodeProxyKV(proxiesPrefix, ev.Kv.Key, ev.Kv.Value))
					}
				}
			}
		}
	}
	return aw
}

// Backoff between attempts to re-establish a broken watch of the
// migrations (the lock follower's, the acknowledgement wait's): the same
// bounds as the route watcher's (routecfg/watcher.go).
const (
	minRewatchBackoff = 100 * time.Millisecond
	maxRewatchBackoff = 5 * time.Second
)

// startWatch creates a watch without blocking the caller: clientv3's Watch
// returns only once the server created the watch, which is never while etcd
// is down, and the caller must keep serving its deadlines meanwhile. The
// watch channel arrives on the returned channel; canceling ctx ends both.
func startWatch(ctx context.Context, cli *clientv3.Client, key string, opts ...clientv3.OpOption) <-chan clientv3.WatchChan {
	p := make(chan clientv3.WatchChan, 1)
	go func() {
		// WithRequireLeader: a member cut off from its cluster cancels the
		// watch instead of going silently quiet.
		p <- cli.Watch(clientv3.WithRequireLeader(ctx), key, opts...)
	}()
	return p
}

// removeLock deletes the lock and reports whether the routes were flipped
// under it: the lock's last value says so (the flip marks it in the same
// transaction). It retries while etcd does not answer, until the runner's
// lease is lost (the lock then goes with it).
func (r *Runner) removeLock(tx *SwitchTx) (bool, error) {
	var resp *clientv3.TxnResponse
	err := r.untilAnswered("remove the migration lock", func(ctx context.Context) error {
		var err error
		resp, err = r.store.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(tx.lockKey), "=", tx.lockRev)).
			Then(clientv3.OpDelete(tx.lockKey, clientv3.WithPrevKV())).
			Commit()
		return err
	})
	if err != nil {
		flipped, ferr := r.flipOutcome(tx)
		return flipped, errors.Join(fmt.Errorf("coord: shard %d: the migration lock could not be removed before the runner's lease was lost; it expires with it: %w", r.shard, err), ferr)
	}
	if resp.Succeeded {
		if prev := resp.Responses[0].GetResponseDeleteRange().GetPrevKvs(); len(prev) == 1 {
			if l, err := decodeLock(prev[0].Value, tx.lockRev); err == nil {
				return l.State == LockSwitched, nil
			}
		}
	}
	// Gone already (expired with our lease) or undecodable.
	return r.flipOutcome(tx)
}

// flipOutcome decides whether the routes were flipped when the lock's last
// value is not available: from FlipRoutes' own knowledge, or, after an
// unanswered attempt, by reading the routes.
func (r *Runner) flipOutcome(tx *SwitchTx) (bool, error) {
	tx.mu.Lock()
	state, val := tx.state, tx.value
	tx.mu.Unlock()
	switch state {
	case flipNone:
		return false, nil
	case flipDone:
		return true, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := r.store.cli.Get(ctx, routecfg.RoutesKey(r.store.cluster))
	if err != nil {
		return false, fmt.Errorf("coord: shard %d: %w: %w", r.shard, ErrFlipUnknown, err)
	}
	// Once the lock is gone the guarded flip can no longer apply, so what
	// the routes hold now is final for this switch: our document, or a
	// version below ours (never flipped). A later version than ours with
	// other content may or may not sit on top of our flip.
	if len(resp.Kvs) == 1 && bytes.Equal(resp.Kvs[0].Value, val) {
		return true, nil
	}
	if len(resp.Kvs) == 1 {
		if doc, err := routecfg.DecodeDocument(resp.Kvs[0].Value); err == nil && doc.Version < tx.info.RouteVersion {
			return false, nil
		}
	}
	return false, fmt.Errorf("coord: shard %d: %w: the routes moved past version %d; check where they put the shard", r.shard, ErrFlipUnknown, tx.info.RouteVersion)
}
