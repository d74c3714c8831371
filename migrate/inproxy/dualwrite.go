package inproxy

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/convoy-im/convoy/binlog"
	"github.com/convoy-im/convoy/coord"
	"github.com/convoy-im/convoy/migrate/internal/jobrec"
	"github.com/convoy-im/convoy/migrate/internal/physical"
	"github.com/convoy-im/convoy/router"
)

// Dual-write (step 2, docs/design.md §5: "双写"): while reads of a share of the
// shard's conversations may go to the target (READ PERCENT, ramp.go), the
// ACK of every write a proxy commits there of a conversation in that share
// waits, within a short deadline, until the target shows it (Mirror.Write:
// the binlog apply's checkpoint passes the write's source transaction).
// Nothing else waits: the binlog apply and the switch's fence make the
// target exact, and the wait only matters to a read served by the target,
// which must see every write its client was told of (a mirror of every
// write, from the backfill on, cost the migrating shard's writes 3.5 to 4.5
// times their p99, docs/design.md §5). The share is read when the write has
// committed, not when it was planned: the runner confirms a share (lets
// reads move) only once every proxy mirrors it and the apply passed the
// moment they all did, so a write committed after that moment waits. The
// source stays authoritative: a target that is late never fails the
// client's write; the rows' keys go to the compensation queue in the source
// database, which the job's runner replays until the switch, and are
// counted (convoy_migration_dualwrites_total{result="queued" or "lost"}:
// alert on it, seed: "双写失败必须告警").

// DualWrite results, the label of MetricDualWrites.
const (
	DualWriteMirrored = "mirrored" // the target had the rows before the ACK
	DualWriteQueued   = "queued"   // the target was late; the queue has the keys
	DualWriteLost     = "lost"     // neither: only the binlog apply brings the rows
	// DualWriteUnkeyed: the target was late and the statement does not
	// name the rows' keys, so nothing could be queued: left to the apply.
	DualWriteUnkeyed = "unkeyed"
	// DualWriteUnopened: this proxy could not open the mirror yet (the
	// source's table definitions unread): left to the binlog apply.
	DualWriteUnopened = "unopened"
)

// Metric names of the dual-write (every proxy's).
const (
	MetricDualWrites       = "convoy_migration_dualwrites_total"
	MetricDualWriteSeconds = "convoy_migration_dualwrite_seconds"
)

// DualWriteMetrics are a proxy's dual-write counters. A nil one records
// nothing.
type DualWriteMetrics struct {
	writes  *prometheus.CounterVec
	seconds prometheus.Histogram
}

// NewDualWriteMetrics creates the metrics and registers them with reg (nil:
// not registered).
func NewDualWriteMetrics(reg prometheus.Registerer) (*DualWriteMetrics, error) {
	m := &DualWriteMetrics{
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricDualWrites,
			Help: "Writes of migrating shards whose ACK waited for the target, by result: mirrored (on the target before the ACK), queued (target late: alert), lost (target late and queue failed: alert), unkeyed and unopened (left to the binlog apply)."},
			[]string{"result"}),
		seconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: MetricDualWriteSeconds,
			Help:    "Time a mirrored write's ACK waited for the target.",
			Buckets: []float64{.001, .002, .005, .01, .02, .05, .1, .2, .5, 1, 2}}),
	}
	for _, r := range []string{DualWriteMirrored, DualWriteQueued, DualWriteLost, DualWriteUnkeyed, DualWriteUnopened} {
		m.writes.WithLabelValues(r) // present at 0, so an alert's rate() sees the first failure
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.writes, m.seconds} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

func (m *DualWriteMetrics) count(result string, n int, d time.Duration) {
	if m == nil {
		return
	}
	m.writes.WithLabelValues(result).Add(float64(n))
	if d > 0 {
		m.seconds.Observe(d.Seconds())
	}
}

// DualWriteTimeout is how long a mirrored write's ACK may wait for the
// target before its keys are queued instead.
const DualWriteTimeout = 500 * time.Millisecond

// DualWriteConfig configures a proxy's dual-write.
type DualWriteConfig struct {
	Connect binlog.Connector
	// Routes returns the routes the proxy serves (where the datasources
	// of a job are).
	Routes  func() *router.Snapshot
	Timeout time.Duration // DualWriteTimeout if 0
	Metrics *DualWriteMetrics
	Log     *zap.Logger
}

// DualWrites is a proxy's view of the shards it mirrors, fed by a watch of
// the job records (WatchJobs). It implements engine.DualWrites.
type DualWrites struct {
	cfg    DualWriteConfig
	pools  *physical.Pools
	ctx    context.Context
	cancel context.CancelFunc

	active atomic.Int32 // shards mirrored: 0 keeps the write path at one load
	mu     sync.RWMutex
	shards map[router.Shard]*dualState
}

type dualState struct {
	job      string
	from, to coord.Endpoint
	// fromTable, toTable: the shared table index on each side (nil: the
	// shard's own tables), jobrec.Placement.Tables.
	fromTable, toTable *int
	mirror             atomic.Pointer[Mirror] // nil until opened
	mirroring          atomic.Bool            // the job's step mirrors writes
	// percent is the READ PERCENT share mirrored: the rows of keys whose
	// Share is below it.
	percent atomic.Int32
	stop    context.CancelFunc
	warned  atomic.Int64 // unix seconds of the last "no mirror" warning
}

// NewDualWrites returns an empty view; Close releases its pools.
func NewDualWrites(cfg DualWriteConfig) *DualWrites {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DualWriteTimeout
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &DualWrites{cfg: cfg, pools: physical.NewPools(cfg.Connect), ctx: ctx, cancel: cancel, shards: map[router.Shard]*dualState{}}
}

// Close stops mirroring and closes the pools.
func (d *DualWrites) Close() {
	d.cancel()
	d.mu.Lock()
	for sh, st := range d.shards {
		st.stop()
		delete(d.shards, sh)
	}
	d.active.Store(0)
	d.mu.Unlock()
	d.pools.Close()
}

// jobView says what a proxy does for a job: open its mirror from the
// first step (so that it is ready when a read ramp starts) and look at its
// writes from the backfill until the switch (Mirror keeps those of the
// READ PERCENT share, when they have committed: a transaction planned
// before the ramp and committed after it is mirrored); nothing for a job
// rolling back.
func jobView(job *coord.Job) (p jobrec.Progress, open, mirror bool) {
	if job == nil {
		return p, false, false
	}
	switch job.Step {
	case jobrec.StepQueued, jobrec.StepPrepare:
	case jobrec.StepBackfill, jobrec.StepVerify, jobrec.StepReady:
		mirror = true
	default:
		return p, false, false
	}
	p, err := jobrec.Decode(*job)
	if err != nil || p.Commands.Rollback || job.Intent == jobrec.IntentRollback {
		return p, false, false
	}
	return p, true, mirror
}

// Update takes a job record as the watch saw it (nil: deleted).
func (d *DualWrites) Update(shard int, job *coord.Job) {
	sh := router.Shard(shard)
	p, open, mirror := jobView(job)
	d.mu.Lock()
	defer d.mu.Unlock()
	cur := d.shards[sh]
	if open && cur != nil && cur.job == job.ID {
		cur.mirroring.Store(mirror)
		cur.percent.Store(int32(p.Commands.ReadPercent))
		return
	}
	if cur != nil {
		cur.stop()
		delete(d.shards, sh)
	}
	if open && d.ctx.Err() == nil {
		ctx, stop := context.WithCancel(d.ctx)
		fromTable, toTable := p.State.Tables()
		st := &dualState{job: job.ID, from: job.From, to: job.To, fromTable: fromTable, toTable: toTable, stop: stop}
		st.mirroring.Store(mirror)
		st.percent.Store(int32(p.Commands.ReadPercent))
		d.shards[sh] = st
		go d.open(ctx, sh, st)
	}
	d.active.Store(int32(len(d.shards)))
}

// Shards lists the shards mirrored now (WatchJobs).
func (d *DualWrites) Shards() []int {
	d.mu.RLock()
	defer d.mu.RUnlock()
	out := make([]int, 0, len(d.shards))
	for sh := range d.shards {
		out = append(out, int(sh))
	}
	return out
}

// open builds the shard's mirror, retrying every second until it can
// (the source's table definitions are needed to read keys; until then
// writes count as unopened, the binlog apply still brings them).
func (d *DualWrites) open(ctx context.Context, sh router.Shard, st *dualState) {
	for {
		m, err := d.newMirror(ctx, sh, st)
		if err == nil {
			st.mirror.Store(m)
			d.cfg.Log.Info("dual-write on", zap.Int("shard", int(sh)), zap.String("job", st.job),
				zap.String("to", st.to.Datasource+"."+st.to.Database))
			return
		}
		d.cfg.Log.Warn("dual-write: cannot open the mirror yet", zap.Int("shard", int(sh)), zap.String("job", st.job), zap.Error(err))
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

func (d *DualWrites) newMirror(ctx context.Context, sh router.Shard, st *dualState) (*Mirror, error) {
	doc := d.cfg.Routes().Document()
	side := func(name string) (router.Datasource, bool) {
		for _, ds := range doc.Datasources {
			if ds.Name == name {
				return ds, true
			}
		}
		return router.Datasource{}, false
	}
	var dbs [2]physical.Side
	for i, ep := range []coord.Endpoint{st.from, st.to} {
		ds, ok := side(ep.Datasource)
		if !ok {
			return nil, fmt.Errorf("migrate: datasource %s of job %s is not in the routes this proxy serves", ep.Datasource, st.job)
		}
		db, _, err := d.pools.Get(ctx, ds)
		if err != nil {
			return nil, err
		}
		dbs[i] = physical.Side{DB: db, Database: ep.Database}
	}
	var tables []MirrorTable
	for _, logical := range router.ShardedTables() {
		src, dst := dbs[0], dbs[1]
		src.Table = router.PhysicalTableName(logical, jobrec.TableIndex(int(sh), st.fromTable))
		dst.Table = router.PhysicalTableName(logical, jobrec.TableIndex(int(sh), st.toTable))
		tables = append(tables, MirrorTable{Logical: logical, Source: src, Target: dst})
	}
	return NewMirror(ctx, st.job, int(sh), tables)
}

// Any implements engine.DualWrites.
func (d *DualWrites) Any() bool { return d.active.Load() != 0 }

func (d *DualWrites) state(sh router.Shard) *dualState {
	if d.active.Load() == 0 {
		return nil
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.shards[sh]
}

// Mirrors implements engine.DualWrites: writes of sh that ran at (the
// datasource and database the proxy's routes sent them to) are mirrored
// when at is the job's source. After the switch the routes send them to
// the target, which is then authoritative: never mirrored from the old
// side, whatever this proxy's view of the job says.
func (d *DualWrites) Mirrors(sh router.Shard, at router.Target) bool {
	st := d.state(sh)
	return st != nil && st.mirroring.Load() && st.from.Datasource == at.Datasource && st.from.Database == at.Database
}

// TableRows are a write's rows of one logical table by column values
// (names lower-case; a row may hold values of other columns, and a nil
// value is unknown). engine.MirrorRows converts to it.
type TableRows struct {
	Table   string
	Columns []string
	Rows    [][]any
}

// Mirror implements engine.DualWrites (through the adapter convoy serve
// installs): the ACK of a committed write waits until the target shows
// commit, the write's source transaction (its GTID; "" unknown). Each
// table's rows count once under their result.
func (d *DualWrites) Mirror(sh router.Shard, writes []TableRows, commit string) {
	st := d.state(sh)
	if st == nil || len(writes) == 0 {
		return
	}
	if writes = inShare(writes, int(st.percent.Load())); len(writes) == 0 {
		return
	}
	start := time.Now()
	m := st.mirror.Load()
	if m == nil {
		d.cfg.Metrics.count(DualWriteUnopened, len(writes), 0)
		if now := time.Now().Unix(); st.warned.Swap(now) != now {
			d.cfg.Log.Warn("dual-write: the mirror is not open; the write is left to the binlog apply", zap.Int("shard", int(sh)), zap.String("job", st.job))
		}
		return
	}
	ctx, cancel := context.WithTimeout(d.ctx, d.cfg.Timeout)
	err := m.await(ctx, binlog.Position(commit))
	cancel()
	if err == nil {
		d.cfg.Metrics.count(DualWriteMirrored, len(writes), time.Since(start))
		return
	}
	// Late: queue the keys, for the runner to make the rows equal.
	keyed := make([]TableKeys, 0, len(writes))
	for _, w := range writes {
		keys, kerr := m.Keys(w.Table, w.Columns, w.Rows)
		if kerr != nil || len(keys) == 0 {
			d.cfg.Metrics.count(DualWriteUnkeyed, 1, 0)
			continue
		}
		keyed = append(keyed, TableKeys{Table: w.Table, Keys: keys})
	}
	if now := time.Now().Unix(); st.warned.Swap(now) != now {
		d.cfg.Log.Warn("dual-write: the target is late; the write's keys are queued for replay", zap.Int("shard", int(sh)), zap.String("job", st.job),
			zap.String("error", err.Error()))
	}
	if len(keyed) == 0 {
		return
	}
	if qerr := m.queueKeys(keyed, err); qerr != nil {
		d.cfg.Metrics.count(DualWriteLost, len(keyed), time.Since(start))
		d.cfg.Log.Error("dual-write: the target is late and the write could not be queued; the binlog apply still brings the rows", zap.Int("shard", int(sh)), zap.String("job", st.job), zap.Error(qerr))
		return
	}
	d.cfg.Metrics.count(DualWriteQueued, len(keyed), time.Since(start))
}

// inShare keeps the rows whose shard key's Share is below percent (the
// read ramp's share: ramp.go); a row whose key is unknown is kept, and a
// table whose rows are not named (Rows empty: counted unkeyed by Mirror)
// too.
func inShare(writes []TableRows, percent int) []TableRows {
	if percent <= 0 {
		return nil
	}
	if percent >= 100 {
		return writes
	}
	out := writes[:0:0]
	for _, w := range writes {
		col, _ := router.ShardKeyColumn(w.Table)
		at := slices.Index(w.Columns, col)
		if len(w.Rows) == 0 || at < 0 {
			out = append(out, w)
			continue
		}
		var rows [][]any
		for _, r := range w.Rows {
			k, err := router.KeyFromValue(r[at])
			if r[at] == nil || err != nil || Share(k) < percent {
				rows = append(rows, r)
			}
		}
		if len(rows) > 0 {
			out = append(out, TableRows{Table: w.Table, Columns: w.Columns, Rows: rows})
		}
	}
	return out
}
