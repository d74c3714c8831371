package admin

import (
	"context"
	"fmt"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/convoy-im/convoy/proxy/directive"
	"github.com/convoy-im/convoy/proxy/sqlerr"
	"github.com/convoy-im/convoy/proxy/stats"
	"github.com/convoy-im/convoy/router"
)

// Engine is what the directives read of the engine every session shares.
// *engine.Engine satisfies it.
type Engine interface {
	// Routes is the route snapshot being served.
	Routes() *router.Snapshot
	// StatsWindow is this proxy's sliding-window statistics of every shard.
	StatsWindow() *stats.Window
	// HealthThresholds are the shard triggers of SHOW SHARD HEALTH.
	HealthThresholds() (qps float64, writeP99 time.Duration)
	// QueryDatasource runs sql on a pooled connection to ds, each command
	// bounded by timeout, and returns its result with its rows decoded.
	QueryDatasource(ds, sql string, timeout time.Duration) (*mysql.Result, error)
	// CountStatement counts a client statement of class in the statement
	// metrics.
	CountStatement(class string)
}

// Session is the client session a directive arrived on. *engine.Session
// satisfies it.
type Session interface {
	// IsAdmin reports whether the session's account holds Convoy's admin
	// privilege.
	IsAdmin() bool
	// RunTargeted runs sql, the statement after a targeting directive, in
	// the session: on shard (>= 0), raw on datasource (non-empty), else on
	// every shard.
	RunTargeted(shard int, datasource, sql string) (*mysql.Result, error)
}

// PoolStat is one datasource's connection pool usage and what its health
// checker last concluded.
type PoolStat struct {
	Datasource  string
	InUse, Idle int
	State       string    // up, down or hung ("" if there is no health checker)
	Since       time.Time // when it entered State
	LastError   string    // the last probe failure, if any
	TLS         string    // mode and the last connection's protocol, e.g. "verify-ca: TLSv1.3 ..."
}

// ProxyInfo is one live Convoy instance as registered in etcd.
type ProxyInfo struct {
	ID, Listen, Metrics, Version string
	StartedAt                    time.Time
	RouteVersion                 int64
}

// Config is what the directives need from outside the engine, wired by
// cmd/convoy. A nil hook makes its directive answer that the information
// is not available in this process.
type Config struct {
	Reload  func(context.Context) error
	Pools   func() []PoolStat
	Proxies func(context.Context) ([]ProxyInfo, error)
	// Probe checks a datasource live (a new connection and a ping) within
	// ctx and returns the time it took. Nil: SHOW DATASOURCES runs SELECT 1
	// on a pooled connection instead.
	Probe func(ctx context.Context, datasource string) (time.Duration, error)
	// Migrations answers the migration directives (migrations.go).
	Migrations MigrationAdmin
	// Capacity answers SHOW SHARD SIZES and PLAN EXPANSION (the capacity
	// planner, package planner, which this package does not import).
	Capacity CapacityAdmin
	// Archive answers SHOW ARCHIVE and ARCHIVE ... (archive.go).
	Archive ArchiveAdmin
	// Outbox answers SHOW OUTBOX and OUTBOX ... (outbox.go).
	Outbox OutboxAdmin
	// The disk trigger of SHOW SHARD HEALTH: a datasource's databases
	// using more than DiskPercent (default 60) of its DiskCapacity (bytes
	// per datasource; a datasource without one: the check says so).
	DiskPercent  float64
	DiskCapacity map[string]int64
}

// Admin answers the directives of every session of one engine. It is safe
// for concurrent use once serving.
type Admin struct {
	eng    Engine
	c      Config
	search SearchStatus // nil: message search is off (search.go)
}

// New returns the directives of eng with c's hooks.
func New(eng Engine, c Config) *Admin {
	if c.DiskPercent <= 0 {
		c.DiskPercent = 60
	}
	return &Admin{eng: eng, c: c}
}

// Parse reads sql as a directive. ok=false: sql is not one, but SQL for
// the engine. ok=true and err != nil: a malformed directive, whose error is
// the client's syntax error.
func Parse(sql string) (d *directive.Directive, ok bool, err error) {
	d, ok, err = directive.Parse(sql)
	if !ok {
		return nil, false, nil
	}
	if err != nil {
		return nil, true, sqlerr.Errorf(sqlerr.Syntax, "%s", err.Error())
	}
	return d, true, nil
}

// Run answers directive d for session s: the admin's only, counted as a
// statement of class admin.
func (a *Admin) Run(s Session, d *directive.Directive) (*mysql.Result, error) {
	if !s.IsAdmin() {
		return nil, sqlerr.Errorf(sqlerr.AccessDenied, "Access denied; you need the Convoy admin privilege for %s", d.Kind)
	}
	a.eng.CountStatement("admin")
	snap := a.eng.Routes()
	switch d.Kind {
	case directive.ShowShardSizes, directive.PlanExpansion:
		return a.capacity(d)
	case directive.ShowRoutes:
		return showRoutes(snap, d)
	case directive.ShowShardFor:
		return showShardFor(snap, d)
	case directive.ShowDatasources:
		return a.showDatasources(snap)
	case directive.ShowProxies:
		return a.showProxies()
	case directive.ReloadRoutes:
		return a.reloadRoutes(snap)
	case directive.ShowShardStats:
		return a.showShardStats(d)
	case directive.ShowShardHealth:
		return a.showShardHealth(snap, d.All)
	case directive.ShowMigrations, directive.ShowMigration, directive.MigrateShard, directive.MigrationCommand:
		return a.migration(d)
	case directive.ShowArchive, directive.ArchiveCommand:
		return a.archive(d)
	case directive.ShowSearchStatus:
		return a.showSearchStatus()
	case directive.ShowOutbox, directive.OutboxCommand:
		return a.outbox(d)
	case directive.Target:
		return s.RunTargeted(d.Shard, d.Datasource, d.Rest)
	}
	return nil, sqlerr.Errorf(sqlerr.Internal, "[BUG] directive %s has no handler", d.Kind)
}

// table builds a text result set. Values are rendered as strings so that
// row 0 never types a column wrongly (go-mysql types columns from row 0).
func table(cols []string, rows [][]any) (*mysql.Result, error) {
	out := make([][]any, len(rows))
	for i, r := range rows {
		out[i] = make([]any, len(r))
		for j, v := range r {
			if v == nil {
				continue
			}
			out[i][j] = fmt.Sprint(v)
		}
	}
	rs, err := mysql.BuildSimpleResultset(cols, out, false)
	if err != nil {
		return nil, sqlerr.Errorf(sqlerr.Internal, "[BUG] building a result set: %v", err)
	}
	if len(rows) == 0 {
		// go-mysql types the columns of an empty set NULL; keep them the
		// strings a non-empty set has.
		for _, f := range rs.Fields {
			f.Type = mysql.MYSQL_TYPE_VAR_STRING
		}
	}
	return mysql.NewResult(rs), nil
}

// textTable is table for rows already rendered as text.
func textTable(cols []string, rows [][]string) (*mysql.Result, error) {
	out := make([][]any, len(rows))
	for i, r := range rows {
		out[i] = make([]any, len(r))
		for j, v := range r {
			out[i][j] = v
		}
	}
	return table(cols, out)
}
