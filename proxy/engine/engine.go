// Package engine turns one client statement into work on the shards:
// parse -> analyse -> route -> execute -> merge. It holds no sockets: the
// proxy package feeds it statements and writes its results, and the backends
// arrive through the small Backends interface declared here.
package engine

import (
	"context"
	"sync"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"go.uber.org/zap"

	"github.com/convoy-im/convoy/proxy/shardgate"
	"github.com/convoy-im/convoy/proxy/stats"
	"github.com/convoy-im/convoy/router"
)

// Options bound what one statement may do. Zero values take the defaults.
type Options struct {
	// MaxInList caps the values of one shard-key IN list; a longer list gets
	// a clear error instead of an unbounded fan-out plan. Default 100000.
	MaxInList int
	// DDLParallelism bounds concurrent physical DDL statements. DDL on 1024
	// tables serially takes minutes; unbounded it would exhaust the pools.
	DDLParallelism int
	// ScatterParallelism bounds concurrent shard reads of one SELECT that
	// reads many shards. Default 16.
	ScatterParallelism int
	// MaxScatterRows caps the rows one multi-shard SELECT may buffer and
	// return; above it the client gets a clear error instead of the proxy
	// exhausting memory. Default 100000.
	MaxScatterRows int
	// MaxPacket is the largest packet the proxy accepts from a client;
	// @@max_allowed_packet reads the smaller of it and the datasources'
	// own. Default 64 MiB.
	MaxPacket int64
	// StatsWindow is the sliding window of SHOW SHARD STATS. Default 60s.
	StatsWindow time.Duration
	// The shard thresholds of SHOW SHARD HEALTH (the expansion triggers of
	// docs/design.md §7; the datasources' disk use is proxy/admin's) and of
	// the convoy_shards_over_threshold gauge: shard QPS and write P99.
	HealthQPS      float64       // default 3000
	HealthWriteP99 time.Duration // default 50ms
	// HoldMaxWait bounds how long a write waits behind a migration hold of
	// its shard (docs/design.md §5 step 6) before it gets a lock wait timeout;
	// HoldMaxQueue bounds the writes queued per held shard. The seed
	// prefers a short queue to reordered messages; the bounds keep a stuck
	// switch from piling up clients. Defaults 3s and 10000: a switch that
	// aborts for a missing acknowledgement holds for coord's ack timeout
	// (2 s), and the writes queued behind it then go through instead of
	// failing just before (BenchmarkMigrationUnderLoad: 2 writes failed in
	// 100 switches with 2 s).
	HoldMaxWait  time.Duration
	HoldMaxQueue int
	// LocalInfile says where LOAD DATA LOCAL INFILE may write (loaddata.go):
	// LocalInfileSharded (the default: sharded tables only, as the
	// hardened datasources refuse local files), LocalInfileAll or
	// LocalInfileOff.
	LocalInfile string
}

func (o Options) withDefaults() Options {
	if o.MaxInList <= 0 {
		o.MaxInList = 100000
	}
	if o.LocalInfile == "" {
		o.LocalInfile = LocalInfileSharded
	}
	if o.DDLParallelism <= 0 {
		o.DDLParallelism = 8
	}
	if o.ScatterParallelism <= 0 {
		o.ScatterParallelism = 16
	}
	if o.MaxScatterRows <= 0 {
		o.MaxScatterRows = 100000
	}
	if o.MaxPacket <= 0 {
		o.MaxPacket = 64 << 20
	}
	if o.StatsWindow <= 0 {
		o.StatsWindow = time.Minute
	}
	if o.HealthQPS <= 0 {
		o.HealthQPS = 3000
	}
	if o.HealthWriteP99 <= 0 {
		o.HealthWriteP99 = 50 * time.Millisecond
	}
	if o.HoldMaxWait <= 0 {
		o.HoldMaxWait = 3 * time.Second
	}
	if o.HoldMaxQueue <= 0 {
		o.HoldMaxQueue = 10000
	}
	return o
}

// Engine is shared by every session. It is safe for concurrent use.
type Engine struct {
	backends Backends
	routes   Routes
	metrics  *Metrics
	window   *stats.Window // sliding-window shard stats for SHOW SHARD STATS / HEALTH
	hot      *hotState     // nil: no hot tier
	cold     *coldState    // nil: no cold tier (cold.go)
	ramps    ReadRamps     // nil: no read ramps (ramp.go)
	dual     DualWrites    // nil: no dual-write (dualwrite.go)
	search   *searchState  // nil: msg_search not enabled (search.go)
	live     liveSessions  // sessions by client connection id (processes.go)
	accounts Accounts      // nil: SHOW GRANTS FOR knows only the session's account
	// plCols are the datasources' information_schema.PROCESSLIST columns
	// (processListColumns).
	plColsMu sync.Mutex
	plCols   []string
	plans    *planCache
	intro    introState // introspection caches (introspect.go)
	log      *zap.Logger
	opt      Options
	// maxPacket caches the datasources' smallest max_allowed_packet.
	maxPacket maxPacketCache
	columns   columnCache // the sharded tables' column order
	// collations caches handshake collation ids (uint8 -> [charset, name]).
	collations sync.Map
	gate       *shardgate.Gates // migration holds and write fences (hold.go)
	// outboxTables are where the outbox's tables are known to exist
	// (outbox.go).
	outboxTables outboxTables
	// outboxKick tells this process's delivery worker of a datasource, if
	// it runs it, that a transaction committed entries there (nil: none).
	outboxKick func(ds string)
}

// observe records one backend statement on a shard, run on datasource ds.
func (e *Engine) observe(sh router.Shard, ds string, write bool, start time.Time, err error) {
	d := time.Since(start)
	e.metrics.observeShard(sh, ds, write, d, err)
	e.window.Record(sh, write, d, err != nil)
}

// observeRefused records a statement on a shard that got no connection to
// datasource ds, started at start. Refusals of the engine's own (a
// transaction rule) are not the shard's errors.
func (e *Engine) observeRefused(sh router.Shard, ds string, write bool, start time.Time, err error) {
	if !backendFailure(err) {
		return
	}
	e.metrics.failShard(sh, ds, write)
	e.window.Record(sh, write, time.Since(start), true)
}

// New builds an engine. metrics may be nil (no metrics are recorded).
func New(b Backends, r Routes, m *Metrics, log *zap.Logger, opt Options) *Engine {
	if log == nil {
		log = zap.NewNop()
	}
	opt = opt.withDefaults()
	e := &Engine{backends: b, routes: r, metrics: m, log: log, opt: opt, window: stats.New(opt.StatsWindow, nil), plans: newPlanCache(),
		gate: shardgate.New(shardgate.Options{MaxWait: opt.HoldMaxWait, MaxQueue: opt.HoldMaxQueue}, m)}
	m.watchWindow(e.window, opt)
	return e
}

// Routes is the route snapshot being served.
func (e *Engine) Routes() *router.Snapshot { return e.routes.Current() }

// StatsWindow is this proxy's sliding-window statistics of every shard
// (SHOW SHARD STATS and HEALTH).
func (e *Engine) StatsWindow() *stats.Window { return e.window }

// ShardStats is this proxy's sliding-window statistics of every shard
// (SHOW SHARD STATS), for the shard map page.
func (e *Engine) ShardStats() []stats.ShardStats { return e.window.All() }

// HealthThresholds are the shard triggers of docs/design.md §7 as configured.
func (e *Engine) HealthThresholds() (qps float64, writeP99 time.Duration) {
	return e.opt.HealthQPS, e.opt.HealthWriteP99
}

// triggers are HealthThresholds as package stats applies them.
func (o Options) triggers() stats.Triggers {
	return stats.Triggers{QPS: o.HealthQPS, WriteP99: o.HealthWriteP99}
}

// QueryDatasource runs sql on a pooled connection to ds, outside any
// session (none of a session's variables), each command bounded by
// timeout, and returns its result with its rows decoded (Values): the
// directives' look at a datasource (SHOW DATASOURCES' ping, SHOW SHARD
// HEALTH's disk use).
func (e *Engine) QueryDatasource(ds, sql string, timeout time.Duration) (*mysql.Result, error) {
	c, err := e.acquire(ds)
	if err != nil {
		return nil, err
	}
	defer c.Release()
	setTimeout(c, timeout)
	r, err := c.Exec(sql)
	if err != nil {
		return nil, err
	}
	if err := decodeRows(r); err != nil {
		return nil, err
	}
	return r, nil
}

// CountStatement counts a client statement the engine did not plan, of
// class (admin: a directive, package proxy/admin), in
// convoy_statements_total.
func (e *Engine) CountStatement(class string) { e.metrics.countStatement(class) }

// acquire gets a backend connection. Waiting is bounded by the pool's own
// wait timeout and running by the backend read timeout, so no per-statement
// context timer is needed on the hot path.
func (e *Engine) acquire(ds string) (Conn, error) {
	return e.backends.Acquire(context.Background(), ds, false)
}
