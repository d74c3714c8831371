package migrate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/convoy-im/convoy/binlog"
	"github.com/convoy-im/convoy/coord"
	"github.com/convoy-im/convoy/internal/failpoint"
	"github.com/convoy-im/convoy/migrate/internal/physical"
	"github.com/convoy-im/convoy/routecfg"
	"github.com/convoy-im/convoy/router"
)

// DefaultRollbackWindow is how long reverse replication keeps the source
// current after a switch, so that ROLLBACK loses nothing (docs/design.md §5: 7 days).
const DefaultRollbackWindow = 7 * 24 * time.Hour

// ManagerConfig configures a migration manager.
type ManagerConfig struct {
	Client  *clientv3.Client
	Cluster string
	// ID names this process in runner elections (the proxy id, or
	// host-pid of a `convoy migrate worker`).
	ID      string
	Connect binlog.Connector // a pool and the binlog account of a datasource
	Log     *zap.Logger
	// RunnerTTL is the runner lease (coord.DefaultRunnerTTL if 0): how
	// long a dead runner's job waits before another process takes over.
	RunnerTTL time.Duration
	// RollbackWindow: DefaultRollbackWindow if 0.
	RollbackWindow time.Duration
	// Switch bounds the migration lock (coord defaults if zero).
	Switch coord.SwitchOptions
	// Rate is the copy rate of a job without its own (DefaultRate if 0,
	// < 0 unlimited).
	Rate float64
	// ChunkRows and SnapshotMaxAge are the copiers' (defaults if 0).
	ChunkRows      int
	SnapshotMaxAge time.Duration
	// ThrottleWriteP99 is the write latency on either side over which a
	// copy slows down (throttle.go; DefaultThrottleWriteP99 if 0, < 0
	// never).
	ThrottleWriteP99 time.Duration
	// Metrics records the jobs run here; LockMetrics their migration locks
	// (coord.WithRunnerMetrics). Nil: none.
	Metrics     *Metrics
	LockMetrics *coord.LockMetrics

	// afterFlip runs when a switch has flipped the routes and before the
	// job records it: where a runner dying leaves the most to its
	// successor. Unit tests set it; by default it is the failpoint
	// "migrate/after-flip", which drills arm in a worker process.
	afterFlip func()
}

// Manager runs the migration jobs of a cluster in this process: it watches
// the job records, campaigns for each unfinished job's runner election and
// runs the jobs it wins, from their persisted state. Every `convoy serve`
// runs one, so a job goes on as long as any Convoy process lives; the one
// that runs a job is whichever campaigned first, and on its lease's loss
// (death, etcd partition) the next takes over.
type Manager struct {
	cfg    ManagerConfig
	log    *zap.Logger
	store  *coord.JobStore
	routes *routecfg.Store
	cancel context.CancelFunc
	wg     sync.WaitGroup

	pools *physical.Pools

	mu    sync.Mutex
	slots map[int]*slot
}

// slot is this process's interest in one shard's job.
type slot struct {
	cancel  context.CancelFunc
	notify  chan coord.Job
	elected bool // guarded by Manager.mu
}

// NewManager starts a manager; Close stops it (and its jobs' runners,
// which hands the jobs to other processes).
func NewManager(cfg ManagerConfig) (*Manager, error) {
	if cfg.Client == nil || cfg.Connect == nil || cfg.ID == "" {
		return nil, errors.New("migrate: a manager needs an etcd client, a connector and an id")
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	if cfg.RunnerTTL <= 0 {
		cfg.RunnerTTL = coord.DefaultRunnerTTL
	}
	if cfg.RollbackWindow <= 0 {
		cfg.RollbackWindow = DefaultRollbackWindow
	}
	if cfg.Rate == 0 {
		cfg.Rate = DefaultRate
	}
	if cfg.afterFlip == nil {
		cfg.afterFlip = func() { failpoint.Inject("migrate/after-flip") }
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Manager{cfg: cfg, log: cfg.Log, store: coord.NewJobStore(cfg.Client, cfg.Cluster),
		routes: routecfg.NewStore(cfg.Client, cfg.Cluster), cancel: cancel,
		slots: map[int]*slot{}, pools: physical.NewPools(cfg.Connect)}
	m.wg.Add(1)
	go m.loop(ctx)
	return m, nil
}

// Close stops every job this process runs (their state is persisted; a
// runner resigns, so another process takes over at once) and closes the
// pools. Idempotent.
func (m *Manager) Close() error {
	m.cancel()
	m.wg.Wait()
	m.pools.Close()
	return nil
}

// Running lists the shards whose jobs this process runs now.
func (m *Manager) Running() []int {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []int
	for sh, s := range m.slots {
		if s.elected {
			out = append(out, sh)
		}
	}
	sort.Ints(out)
	return out
}

// rate is the limiter rate of a job's Commands.Rate.
func (m *Manager) rate(r float64) float64 {
	if r == 0 {
		return m.cfg.Rate
	}
	return r
}

// listRetryMax bounds the pause between attempts to list the jobs while
// etcd does not answer.
const listRetryMax = 30 * time.Second

// loop follows the job records: list, then watch from the list's revision,
// again after a broken watch.
func (m *Manager) loop(ctx context.Context) {
	defer m.wg.Done()
	backoff := time.Second
	for ctx.Err() == nil {
		jobs, rev, err := m.store.List(ctx)
		if err != nil {
			// etcd down: the proxy serves on; log once per outage and
			// back off to listRetryMax.
			if backoff == time.Second {
				m.log.Warn("listing migration jobs; retrying quietly until etcd answers", zap.Error(err))
			}
			_ = sleep(ctx, backoff)
			backoff = min(2*backoff, listRetryMax)
			continue
		}
		if backoff > time.Second {
			m.log.Info("migration jobs listed again")
		}
		backoff = time.Second
		for _, j := range jobs {
			m.track(ctx, j)
		}
		for ev := range m.store.Watch(ctx, rev) {
			switch {
			case ev.Err != nil:
				m.log.Warn("migration job watch", zap.Error(ev.Err))
			case ev.Job == nil:
				m.untrack(ev.Shard)
			default:
				m.track(ctx, *ev.Job)
			}
		}
		_ = sleep(ctx, 500*time.Millisecond)
	}
	m.mu.Lock()
	for _, s := range m.slots {
		s.cancel()
	}
	m.mu.Unlock()
}

// track hands a record to the shard's slot, creating the slot for an
// unfinished job.
func (m *Manager) track(ctx context.Context, job coord.Job) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.slots[job.Shard]; ok {
		// Latest record wins: drop an unread older one.
		select {
		case <-s.notify:
		default:
		}
		s.notify <- job
		return
	}
	if finished(job) {
		return
	}
	sctx, cancel := context.WithCancel(ctx)
	s := &slot{cancel: cancel, notify: make(chan coord.Job, 1)}
	m.slots[job.Shard] = s
	m.wg.Add(1)
	go m.serve(sctx, job.Shard, s)
}

func (m *Manager) untrack(shard int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.slots[shard]; ok {
		s.cancel()
		delete(m.slots, shard)
	}
}

func (m *Manager) setElected(s *slot, v bool) {
	m.mu.Lock()
	s.elected = v
	m.mu.Unlock()
}

// serve campaigns for the shard's runner and runs its job whenever elected,
// until the job is finished or gone or ctx ends.
func (m *Manager) serve(ctx context.Context, shard int, s *slot) {
	defer m.wg.Done()
	defer func() {
		m.mu.Lock()
		if m.slots[shard] == s {
			delete(m.slots, shard)
		}
		m.mu.Unlock()
		s.cancel()
	}()
	log := m.log.With(zap.Int("shard", shard))
	for ctx.Err() == nil {
		r, err := coord.CampaignRunner(ctx, m.store, shard, m.cfg.ID,
			coord.WithRunnerTTL(m.cfg.RunnerTTL), coord.WithRunnerLogger(m.log.Named("runner")),
			coord.WithRunnerMetrics(m.cfg.LockMetrics))
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("campaigning for a migration runner", zap.Error(err))
				_ = sleep(ctx, time.Second)
			}
			continue
		}
		m.setElected(s, true)
		finished, err := m.runJob(ctx, r, s)
		m.setElected(s, false)
		if cerr := r.Close(); cerr != nil {
			log.Warn("resigning as migration runner", zap.Error(cerr))
		}
		if finished {
			return
		}
		if err != nil && ctx.Err() == nil {
			log.Warn("migration runner stopped; campaigning again", zap.Error(err))
			_ = sleep(ctx, time.Second)
		}
	}
}

// runJob runs the job for the elected runner r until it is finished (done
// or deleted: true) or the election is lost or ctx ends.
func (m *Manager) runJob(ctx context.Context, r *coord.Runner, s *slot) (bool, error) {
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-r.Done():
			cancel()
		case <-rctx.Done():
		}
	}()
	job, err := r.Job(rctx)
	if errors.Is(err, coord.ErrJobNotFound) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	if finished(job) {
		return true, nil
	}
	j, err := newJobRun(m, r, job, s.notify)
	if err != nil {
		return false, err
	}
	err = j.run(rctx)
	switch {
	case err == nil, errors.Is(err, errJobGone):
		return true, nil
	case errors.Is(err, context.Canceled) && ctx.Err() == nil:
		return false, fmt.Errorf("migrate: runner of shard %d lost its lease", job.Shard)
	}
	return false, err
}

// finished: nothing is left to do for the job (done, no purge pending).
func finished(job coord.Job) bool {
	if job.Step != StepDone {
		return false
	}
	p, err := decodeProgress(job)
	return err != nil || !purgePending(p.Commands, p.State)
}

// pool returns the pool and binlog config of a datasource, opened once.
func (m *Manager) pool(ctx context.Context, ds router.Datasource) (*sql.DB, binlog.Config, error) {
	return m.pools.Get(ctx, ds)
}

// endpoint is the (datasource, database) the routes put the shard on now.
func (m *Manager) endpoint(ctx context.Context, shard int) (coord.Endpoint, error) {
	t, err := routesLocation(ctx, m.routes, shard)
	return coord.Endpoint{Datasource: t.Datasource, Database: t.Database}, err
}

func routesLocation(ctx context.Context, routes *routecfg.Store, shard int) (router.Target, error) {
	doc, err := routes.Get(ctx)
	if err != nil {
		return router.Target{}, err
	}
	snap, err := router.NewSnapshot(doc)
	if err != nil {
		return router.Target{}, err
	}
	return snap.Target(router.Shard(shard)), nil
}

// slotFree reports whether a queued job may start: its group runs fewer
// than Parallel jobs in prepare, backfill or verify, and no queued job of
// the group with a lower shard number waits (so the group starts in shard
// order and two runners never both take the last slot).
func (m *Manager) slotFree(ctx context.Context, job coord.Job, cmds Commands) (bool, error) {
	if cmds.Group == "" || cmds.Parallel <= 0 {
		return true, nil
	}
	jobs, _, err := m.store.List(ctx)
	if err != nil {
		return false, err
	}
	active := 0
	for _, o := range jobs {
		p, err := decodeProgress(o)
		if err != nil || p.Commands.Group != cmds.Group || o.Shard == job.Shard {
			continue
		}
		switch o.Step {
		case StepQueued:
			if o.Shard < job.Shard {
				return false, nil
			}
		case StepPrepare, StepBackfill, StepVerify:
			active++
		}
	}
	return active < cmds.Parallel, nil
}
