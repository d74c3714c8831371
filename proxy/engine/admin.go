package engine

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/convoy-im/convoy/proxy/directive"
	"github.com/convoy-im/convoy/proxy/planbuilder"
	"github.com/convoy-im/convoy/proxy/sqlerr"
	"github.com/convoy-im/convoy/proxy/stats"
	"github.com/convoy-im/convoy/rewrite"
	"github.com/convoy-im/convoy/router"
)

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

// AdminHooks give admin directives what lives outside the engine. A nil
// hook makes its directive answer that the information is not available.
type AdminHooks struct {
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
	// planner, package planner, which the engine does not import).
	Capacity CapacityAdmin
	// Archive answers SHOW ARCHIVE and ARCHIVE ... (archive.go).
	Archive ArchiveAdmin
}

// CapacityAdmin is what the capacity directives need: result sets as text.
type CapacityAdmin interface {
	// ShardSizes is SHOW SHARD SIZES: rows and bytes per shard and per
	// datasource, and their growth per day.
	ShardSizes(ctx context.Context) ([]string, [][]string, error)
	// PlanExpansion is PLAN EXPANSION [TO n DATASOURCES] (n 0: as the
	// triggers say).
	PlanExpansion(ctx context.Context, minDatasources int) ([]string, [][]string, error)
}

// capacityTimeout bounds a capacity directive: etcd reads, the proxies'
// statistics and, for a plan, the datasources' table statistics.
const capacityTimeout = 30 * time.Second

func (s *Session) capacity(d *directive.Directive) (*mysql.Result, error) {
	c := s.e.admin.Capacity
	if c == nil {
		return nil, sqlerr.Errorf(sqlerr.NotSupported, "%s is not available in this process", d.Kind)
	}
	ctx, cancel := context.WithTimeout(context.Background(), capacityTimeout)
	defer cancel()
	var cols []string
	var rows [][]string
	var err error
	if d.Kind == directive.ShowShardSizes {
		cols, rows, err = c.ShardSizes(ctx)
	} else {
		cols, rows, err = c.PlanExpansion(ctx, d.MinDatasources)
	}
	if err != nil {
		return nil, sqlerr.Errorf(sqlerr.BackendUnavailable, "%s: %v", d.Kind, err)
	}
	return textTable(cols, rows)
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

// Bounds of admin directives on datasources: they report what the health
// checker knows plus a short live look, and never wait on a sick datasource
// longer than this.
const (
	liveProbeTimeout = 300 * time.Millisecond // SHOW DATASOURCES' ping
	diskQueryTimeout = 2 * time.Second        // SHOW SHARD HEALTH's information_schema query
)

// ShardStats is this proxy's sliding-window statistics of every shard
// (SHOW SHARD STATS), for the shard map page.
func (e *Engine) ShardStats() []stats.ShardStats { return e.window.All() }

// HealthThresholds are seed 001's shard triggers as configured.
func (e *Engine) HealthThresholds() (qps float64, writeP99 time.Duration) {
	return e.opt.HealthQPS, e.opt.HealthWriteP99
}

// SetAdmin installs the admin hooks; call before serving.
func (e *Engine) SetAdmin(h AdminHooks) { e.admin = h }

// directive answers a /*+ convoy ... */ statement. ok=false: sql is not a
// directive.
func (s *Session) directive(sql string) (*mysql.Result, bool, error) {
	d, ok, err := directive.Parse(sql)
	if !ok {
		return nil, false, nil
	}
	if err != nil {
		return nil, true, sqlerr.Errorf(sqlerr.Syntax, "%s", err.Error())
	}
	if !s.priv.Admin {
		return nil, true, sqlerr.Errorf(sqlerr.AccessDenied, "Access denied; you need the Convoy admin privilege for %s", d.Kind)
	}
	s.e.metrics.countStatement("admin")
	r, err := s.runDirective(d)
	return r, true, err
}

func (s *Session) runDirective(d *directive.Directive) (*mysql.Result, error) {
	snap := s.e.routes.Current()
	switch d.Kind {
	case directive.ShowShardSizes, directive.PlanExpansion:
		return s.capacity(d)
	case directive.ShowRoutes:
		return s.showRoutes(snap, d)
	case directive.ShowShardFor:
		return s.showShardFor(snap, d)
	case directive.ShowDatasources:
		return s.showDatasources(snap)
	case directive.ShowProxies:
		return s.showProxies()
	case directive.ReloadRoutes:
		if s.e.admin.Reload == nil {
			return nil, sqlerr.Errorf(sqlerr.NotSupported, "RELOAD ROUTES is not available in this process")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.e.admin.Reload(ctx); err != nil {
			return nil, sqlerr.Errorf(sqlerr.BackendUnavailable, "RELOAD ROUTES: %v (still serving route version %d)", err, snap.Version())
		}
		return table([]string{"route_version"}, [][]any{{s.e.routes.Current().Version()}})
	case directive.ShowShardStats:
		return s.showShardStats(d)
	case directive.ShowShardHealth:
		return s.showShardHealth(snap, d.All)
	case directive.ShowMigrations, directive.ShowMigration, directive.MigrateShard, directive.MigrationCommand:
		return s.migration(d)
	case directive.ShowArchive, directive.ArchiveCommand:
		return s.archive(d)
	case directive.ShowSearchStatus:
		return s.showSearchStatus()
	case directive.Target:
		return s.targeted(d)
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

func (s *Session) showRoutes(snap *router.Snapshot, d *directive.Directive) (*mysql.Result, error) {
	if d.Datasource != "" {
		if _, ok := snap.Datasource(d.Datasource); !ok {
			return nil, sqlerr.Errorf(sqlerr.NotSupported, "unknown datasource %q", d.Datasource)
		}
	}
	var rows [][]any
	for sh := 0; sh < router.NumShards; sh++ {
		if d.Shard >= 0 && sh != d.Shard {
			continue
		}
		t := snap.Target(router.Shard(sh))
		if d.Datasource != "" && t.Datasource != d.Datasource {
			continue
		}
		rows = append(rows, []any{router.Shard(sh).String(), t.Datasource, t.Database,
			router.PhysicalTableName("*", t.Table), "serving", snap.Version()})
	}
	return table([]string{"shard", "datasource", "database", "table", "state", "route_version"}, rows)
}

func (s *Session) showShardFor(snap *router.Snapshot, d *directive.Directive) (*mysql.Result, error) {
	sh := router.ShardOf(d.Key)
	var rows [][]any
	for _, logical := range router.ShardedTables() {
		if col, _ := router.ShardKeyColumn(logical); col != d.KeyColumn {
			continue
		}
		p := snap.Physical(logical, sh)
		rows = append(rows, []any{d.KeyColumn, d.Key, sh.String(), logical, p.Datasource, p.Database, p.Table,
			fmt.Sprintf("SELECT CRC32(%d) %% %d", d.Key, router.NumShards)})
	}
	return table([]string{"key_column", "key", "shard", "logical_table", "datasource", "database", "table", "check_with"}, rows)
}

// showDatasources lists the datasources with the health checker's state
// (up, down, hung; since when; the last probe error) and a live probe of
// each, all probed at once and each bounded by liveProbeTimeout.
func (s *Session) showDatasources(snap *router.Snapshot) (*mysql.Result, error) {
	usage := map[string]PoolStat{}
	if s.e.admin.Pools != nil {
		for _, p := range s.e.admin.Pools() {
			usage[p.Datasource] = p
		}
	}
	dss := snap.Datasources()
	type probe struct {
		rtt time.Duration
		err error
	}
	live := make([]probe, len(dss))
	var wg sync.WaitGroup
	for i, ds := range dss {
		wg.Add(1)
		go func() {
			defer wg.Done()
			live[i].rtt, live[i].err = s.probe(ds.Name)
		}()
	}
	wg.Wait()
	var rows [][]any
	for i, ds := range dss {
		u := usage[ds.Name]
		health, ping := u.State, live[i].rtt.Round(time.Microsecond).String()
		if live[i].err != nil {
			ping = "failed: " + live[i].err.Error()
		}
		if health == "" { // no health checker: the live probe decides
			health = "up"
			if live[i].err != nil {
				health = "down"
			}
		}
		since, stateFor := "", ""
		if !u.Since.IsZero() {
			since = u.Since.Format("2006-01-02 15:04:05.000")
			stateFor = time.Since(u.Since).Round(time.Millisecond).String()
		}
		def := ""
		if ds.Name == snap.DefaultDatasource() {
			def = "yes"
		}
		rows = append(rows, []any{ds.Name, ds.Addr, ds.User, health, ping, u.InUse, u.Idle, def, since, stateFor, u.LastError, u.TLS})
	}
	return table([]string{"datasource", "addr", "user", "health", "ping", "pool_in_use", "pool_idle", "default", "since", "for", "last_error", "tls"}, rows)
}

// probe checks ds live within liveProbeTimeout.
func (s *Session) probe(ds string) (time.Duration, error) {
	start := time.Now()
	if s.e.admin.Probe != nil {
		ctx, cancel := context.WithTimeout(context.Background(), liveProbeTimeout)
		defer cancel()
		return s.e.admin.Probe(ctx, ds)
	}
	c, err := s.e.acquire(ds)
	if err != nil {
		return 0, err
	}
	defer c.Release()
	setTimeout(c, liveProbeTimeout)
	_, err = c.Exec("SELECT 1")
	return time.Since(start), err
}

// setTimeout bounds each command on c until Release, if its backend can
// (proxy/backend's connections can; the recording fake cannot).
func setTimeout(c Conn, d time.Duration) {
	if t, ok := c.(interface{ SetTimeout(time.Duration) }); ok {
		t.SetTimeout(d)
	}
}

func (s *Session) showProxies() (*mysql.Result, error) {
	if s.e.admin.Proxies == nil {
		return nil, sqlerr.Errorf(sqlerr.NotSupported, "SHOW PROXIES is not available in this process")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ps, err := s.e.admin.Proxies(ctx)
	if err != nil {
		return nil, sqlerr.Errorf(sqlerr.BackendUnavailable, "SHOW PROXIES: reading etcd: %v", err)
	}
	var rows [][]any
	for _, p := range ps {
		rows = append(rows, []any{p.ID, p.Listen, p.Metrics, p.Version, p.StartedAt.UTC().Format(time.RFC3339), p.RouteVersion})
	}
	return table([]string{"id", "listen", "metrics", "version", "started_at", "route_version"}, rows)
}

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 3, 64)
}

func (s *Session) showShardStats(d *directive.Directive) (*mysql.Result, error) {
	var rows [][]any
	add := func(st statsRow) {
		rows = append(rows, []any{st.Shard.String(), strconv.FormatFloat(st.QPS, 'f', 2, 64), st.Reads, st.Writes, st.Errors,
			ms(st.ReadP50), ms(st.ReadP99), ms(st.WriteP50), ms(st.WriteP99)})
	}
	if d.Shard >= 0 {
		add(statsRow(s.e.window.Shard(router.Shard(d.Shard))))
	} else {
		for _, st := range s.e.window.All() {
			add(statsRow(st))
		}
	}
	return table([]string{"shard", "qps", "reads", "writes", "errors", "read_p50_ms", "read_p99_ms", "write_p50_ms", "write_p99_ms"}, rows)
}

// The config keys of the health thresholds (cmd/convoy/config.go), named in
// SHOW SHARD HEALTH so a DBA knows what to change.
const (
	keyShardQPS     = "health.shard_qps"
	keyWriteP99     = "health.write_p99"
	keyDiskPercent  = "health.disk_percent"
	keyDiskCapacity = "health.disk_capacity"
)

// overQPS and overWriteP99 are seed 001's shard triggers, shared by SHOW
// SHARD HEALTH and the convoy_shards_over_threshold gauge.
func (o Options) overQPS(st stats.ShardStats) bool { return st.QPS > o.HealthQPS }

func (o Options) overWriteP99(st stats.ShardStats) bool {
	return st.Writes > 0 && st.WriteP99 > o.HealthWriteP99
}

// Status values of SHOW SHARD HEALTH.
const (
	healthOK      = "ok"
	healthFired   = "FIRED"
	healthUnknown = "unknown" // the check could not be made
)

// showShardHealth evaluates seed 001's expansion triggers: any shard over
// the QPS or write-P99 threshold, any datasource whose databases use more
// than the disk threshold of its configured capacity. By default it lists
// only what needs a DBA: rows FIRED, and checks that could not be made
// (unknown). Nothing wrong is an empty result set with the same columns, so
// a script can count rows. SHOW SHARD HEALTH ALL lists every row.
func (s *Session) showShardHealth(snap *router.Snapshot, all bool) (*mysql.Result, error) {
	o := s.e.opt
	var rows [][]any
	add := func(scope, metric string, value any, threshold, status, key string) {
		if all || status != healthOK {
			rows = append(rows, []any{scope, metric, value, threshold, status, key})
		}
	}
	status := func(fired bool) string {
		if fired {
			return healthFired
		}
		return healthOK
	}
	for _, st := range s.e.window.All() {
		scope := "shard " + st.Shard.String()
		add(scope, "qps", strconv.FormatFloat(st.QPS, 'f', 2, 64), strconv.FormatFloat(o.HealthQPS, 'f', -1, 64), status(o.overQPS(st)), keyShardQPS)
		add(scope, "write_p99_ms", ms(st.WriteP99), ms(o.HealthWriteP99), status(o.overWriteP99(st)), keyWriteP99)
	}
	dbs := map[string][]string{}
	for _, d := range snap.Databases() {
		dbs[d[0]] = append(dbs[d[0]], d[1])
	}
	names := make([]string, 0, len(dbs))
	for n := range dbs {
		names = append(names, n)
	}
	sort.Strings(names)
	pctLimit := strconv.FormatFloat(o.HealthDiskPct, 'f', -1, 64)
	// One query per datasource, all at once: a datasource marked down or
	// hung refuses at once, one not marked yet costs diskQueryTimeout.
	used := make([]int64, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, ds := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			used[i], errs[i] = s.databaseBytes(ds, dbs[ds])
		}()
	}
	wg.Wait()
	for i, ds := range names {
		scope := "datasource " + ds
		used, err := used[i], errs[i]
		capacity := o.DiskCapacity[ds]
		switch {
		case err != nil:
			add(scope, "disk_pct", "error: "+err.Error(), pctLimit, healthUnknown, keyDiskPercent)
		case capacity <= 0:
			// No percentage without a capacity: the bytes used help choose one.
			add(scope, "disk_bytes", used, "capacity not configured", healthUnknown, keyDiskCapacity)
		default:
			pct := 100 * float64(used) / float64(capacity)
			add(scope, "disk_pct", strconv.FormatFloat(pct, 'f', 2, 64), pctLimit, status(pct > o.HealthDiskPct), keyDiskPercent)
		}
	}
	return table([]string{"scope", "metric", "value", "threshold", "status", "config_key"}, rows)
}

func (s *Session) databaseBytes(ds string, dbs []string) (int64, error) {
	c, err := s.e.acquire(ds)
	if err != nil {
		return 0, err
	}
	defer c.Release()
	setTimeout(c, diskQueryTimeout)
	quoted := make([]string, len(dbs))
	for i, d := range dbs {
		quoted[i] = "'" + strings.ReplaceAll(d, "'", "''") + "'"
	}
	r, err := c.Exec("SELECT CAST(COALESCE(SUM(data_length + index_length + data_free), 0) AS UNSIGNED) FROM information_schema.TABLES WHERE table_schema IN (" + strings.Join(quoted, ",") + ")")
	if err != nil {
		return 0, err
	}
	if err := decodeRows(r); err != nil {
		return 0, err
	}
	n, err := r.GetUint(0, 0)
	return int64(n), err
}

// targeted runs the statement after /*+ convoy shard=N | datasource=X | all */.
func (s *Session) targeted(d *directive.Directive) (*mysql.Result, error) {
	snap := s.e.routes.Current()
	if d.Datasource != "" {
		if _, ok := snap.Datasource(d.Datasource); !ok {
			return nil, sqlerr.Errorf(sqlerr.NotSupported, "unknown datasource %q", d.Datasource)
		}
		if s.inTxn() {
			return nil, sqlerr.Errorf(sqlerr.CrossShardTxn, "datasource=%s cannot run inside a transaction", d.Datasource)
		}
		// Raw: the DBA addresses physical objects by their own names, and
		// may run maintenance longer than the statement timeout.
		c, err := s.acquire(d.Datasource)
		if err != nil {
			return nil, err
		}
		defer c.Release()
		setTimeout(c, 0)
		r, err := c.Exec(d.Rest)
		if strings.Contains(strings.ToLower(d.Rest), planbuilder.HistoryTable) {
			s.e.invalidateAllHistory() // a raw write the proxy cannot attribute
		}
		return r, err
	}
	// shard=N names the shard: the statement may join tables of both
	// shard keys, whose shares of shard N live in the same database.
	s.onShard = d.Shard >= 0
	pl, err := s.plan(d.Rest)
	s.onShard = false
	if err != nil {
		return nil, err
	}
	if pl.A.ParamCount > 0 {
		return nil, sqlerr.Errorf(sqlerr.Syntax, "You have an error in your SQL syntax: '?' placeholders are only valid in prepared statements")
	}
	if pl.Tmpl == nil {
		return nil, sqlerr.Errorf(sqlerr.NotSupported, "/*+ convoy %s */ needs a statement on a sharded table", targetWords(d))
	}
	if pl.TouchesHistory() || (pl.A.Kind == rewrite.KindDDL && pl.A.Sharded[0] == planbuilder.HistoryTable) {
		defer s.e.invalidateAllHistory()
	}
	// A targeted write waits behind migration holds like any write (see
	// hold.go), then is routed under the routes served after the wait:
	// shard=N on shard N (on a layout whose physical tables several shards
	// share, it touches its co-tenants' rows unheld), all on every shard.
	// datasource= is raw SQL on physical objects Convoy does not parse:
	// it is never held.
	if held := s.targetedShards(d, pl); held != nil {
		shards, err := s.admitShards(held)
		if err != nil {
			return nil, err
		}
		defer s.endWrite(shards)
		snap = s.e.routes.Current()
	}
	if d.Shard >= 0 {
		sh := router.Shard(d.Shard)
		p := part{shard: sh, ds: snap.Target(sh).Datasource, sql: pl.render(s, snap, sh), untimed: pl.A.Kind == rewrite.KindDDL}
		if pl.A.Kind == rewrite.KindDDL {
			_, err := s.autonomous(p, true, false)
			if err != nil {
				return nil, err
			}
			return okResult(), nil
		}
		return s.single(p, pl.Write(), false)
	}
	// all: a keyless UPDATE / DELETE may touch every shard.
	switch pl.A.Kind {
	case rewrite.KindUpdate, rewrite.KindDelete:
		if pl.A.HasKey {
			return s.run(pl, nil, false)
		}
		if s.inTxn() {
			return nil, sqlerr.Errorf(sqlerr.CrossShardTxn, "/*+ convoy all */ cannot run inside a transaction")
		}
		if limited(pl.A.Stmt) {
			return nil, sqlerr.Errorf(sqlerr.NotSupported, "%s with ORDER BY / LIMIT cannot run on every shard", pl.A.Kind)
		}
		var parts []part
		for _, g := range snap.AllPhysical(pl.A.Sharded[0]) {
			parts = append(parts, part{shard: g.Shards[0], ds: g.Datasource, sql: pl.render(s, snap, g.Shards[0])})
		}
		return s.writeParts(parts, false)
	}
	return s.run(pl, nil, false)
}

// targetedShards are the shards a shard= or all directive's write must be
// admitted on; nil for a read, or for what targeted hands to run (which
// admits it itself).
func (s *Session) targetedShards(d *directive.Directive, pl *plan) []router.Shard {
	switch {
	case !pl.Write():
		return nil
	case d.Shard >= 0:
		s.oneShard[0] = router.Shard(d.Shard)
		return s.oneShard[:]
	case d.All && !pl.A.HasKey && (pl.A.Kind == rewrite.KindUpdate || pl.A.Kind == rewrite.KindDelete):
		return allShards
	}
	return nil
}

func targetWords(d *directive.Directive) string {
	switch {
	case d.Shard >= 0:
		return "shard=" + strconv.Itoa(d.Shard)
	case d.All:
		return "all"
	}
	return "datasource=" + d.Datasource
}

// statsRow is the stats package's view of one shard.
type statsRow = stats.ShardStats
