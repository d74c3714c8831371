package admin

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
	"github.com/convoy-im/convoy/proxy/sqlerr"
	"github.com/convoy-im/convoy/proxy/stats"
	"github.com/convoy-im/convoy/router"
)

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

func (a *Admin) capacity(d *directive.Directive) (*mysql.Result, error) {
	c := a.c.Capacity
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

// Bounds of admin directives on datasources: they report what the health
// checker knows plus a short live look, and never wait on a sick datasource
// longer than this.
const (
	liveProbeTimeout = 300 * time.Millisecond // SHOW DATASOURCES' ping
	diskQueryTimeout = 2 * time.Second        // SHOW SHARD HEALTH's information_schema query
)

// reloadTimeout bounds RELOAD ROUTES.
const reloadTimeout = 10 * time.Second

func (a *Admin) reloadRoutes(snap *router.Snapshot) (*mysql.Result, error) {
	if a.c.Reload == nil {
		return nil, sqlerr.Errorf(sqlerr.NotSupported, "RELOAD ROUTES is not available in this process")
	}
	ctx, cancel := context.WithTimeout(context.Background(), reloadTimeout)
	defer cancel()
	if err := a.c.Reload(ctx); err != nil {
		return nil, sqlerr.Errorf(sqlerr.BackendUnavailable, "RELOAD ROUTES: %v (still serving route version %d)", err, snap.Version())
	}
	return table([]string{"route_version"}, [][]any{{a.eng.Routes().Version()}})
}

func showRoutes(snap *router.Snapshot, d *directive.Directive) (*mysql.Result, error) {
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

func showShardFor(snap *router.Snapshot, d *directive.Directive) (*mysql.Result, error) {
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
func (a *Admin) showDatasources(snap *router.Snapshot) (*mysql.Result, error) {
	usage := map[string]PoolStat{}
	if a.c.Pools != nil {
		for _, p := range a.c.Pools() {
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
			live[i].rtt, live[i].err = a.probe(ds.Name)
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
func (a *Admin) probe(ds string) (time.Duration, error) {
	start := time.Now()
	if a.c.Probe != nil {
		ctx, cancel := context.WithTimeout(context.Background(), liveProbeTimeout)
		defer cancel()
		return a.c.Probe(ctx, ds)
	}
	_, err := a.eng.QueryDatasource(ds, "SELECT 1", liveProbeTimeout)
	return time.Since(start), err
}

// proxiesTimeout bounds SHOW PROXIES' etcd read.
const proxiesTimeout = 5 * time.Second

func (a *Admin) showProxies() (*mysql.Result, error) {
	if a.c.Proxies == nil {
		return nil, sqlerr.Errorf(sqlerr.NotSupported, "SHOW PROXIES is not available in this process")
	}
	ctx, cancel := context.WithTimeout(context.Background(), proxiesTimeout)
	defer cancel()
	ps, err := a.c.Proxies(ctx)
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

func (a *Admin) showShardStats(d *directive.Directive) (*mysql.Result, error) {
	var rows [][]any
	add := func(st stats.ShardStats) {
		rows = append(rows, []any{st.Shard.String(), strconv.FormatFloat(st.QPS, 'f', 2, 64), st.Reads, st.Writes, st.Errors,
			ms(st.ReadP50), ms(st.ReadP99), ms(st.WriteP50), ms(st.WriteP99)})
	}
	w := a.eng.StatsWindow()
	if d.Shard >= 0 {
		add(w.Shard(router.Shard(d.Shard)))
	} else {
		for _, st := range w.All() {
			add(st)
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

// Status values of SHOW SHARD HEALTH.
const (
	healthOK      = "ok"
	healthFired   = "FIRED"
	healthUnknown = "unknown" // the check could not be made
)

// showShardHealth evaluates the expansion triggers of docs/design.md §7: any
// shard over the QPS or write-P99 threshold, any datasource whose databases
// use more than the disk threshold of its configured capacity. By default it
// lists only what needs a DBA: rows FIRED, and checks that could not be made
// (unknown). Nothing wrong is an empty result set with the same columns, so a
// script can count rows. SHOW SHARD HEALTH ALL lists every row.
func (a *Admin) showShardHealth(snap *router.Snapshot, all bool) (*mysql.Result, error) {
	var tr stats.Triggers
	tr.QPS, tr.WriteP99 = a.eng.HealthThresholds()
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
	for _, st := range a.eng.StatsWindow().All() {
		scope := "shard " + st.Shard.String()
		add(scope, "qps", strconv.FormatFloat(st.QPS, 'f', 2, 64), strconv.FormatFloat(tr.QPS, 'f', -1, 64), status(tr.OverQPS(st)), keyShardQPS)
		add(scope, "write_p99_ms", ms(st.WriteP99), ms(tr.WriteP99), status(tr.OverWriteP99(st)), keyWriteP99)
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
	pctLimit := strconv.FormatFloat(a.c.DiskPercent, 'f', -1, 64)
	// One query per datasource, all at once: a datasource marked down or
	// hung refuses at once, one not marked yet costs diskQueryTimeout.
	used := make([]int64, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, ds := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			used[i], errs[i] = a.databaseBytes(ds, dbs[ds])
		}()
	}
	wg.Wait()
	for i, ds := range names {
		scope := "datasource " + ds
		used, err := used[i], errs[i]
		capacity := a.c.DiskCapacity[ds]
		switch {
		case err != nil:
			add(scope, "disk_pct", "error: "+err.Error(), pctLimit, healthUnknown, keyDiskPercent)
		case capacity <= 0:
			// No percentage without a capacity: the bytes used help choose one.
			add(scope, "disk_bytes", used, "capacity not configured", healthUnknown, keyDiskCapacity)
		default:
			pct := 100 * float64(used) / float64(capacity)
			add(scope, "disk_pct", strconv.FormatFloat(pct, 'f', 2, 64), pctLimit, status(pct > a.c.DiskPercent), keyDiskPercent)
		}
	}
	return table([]string{"scope", "metric", "value", "threshold", "status", "config_key"}, rows)
}

// databaseBytes is the disk space databases dbs use on datasource ds.
func (a *Admin) databaseBytes(ds string, dbs []string) (int64, error) {
	quoted := make([]string, len(dbs))
	for i, d := range dbs {
		quoted[i] = "'" + strings.ReplaceAll(d, "'", "''") + "'"
	}
	r, err := a.eng.QueryDatasource(ds, "SELECT CAST(COALESCE(SUM(data_length + index_length + data_free), 0) AS UNSIGNED) FROM information_schema.TABLES WHERE table_schema IN ("+strings.Join(quoted, ",")+")", diskQueryTimeout)
	if err != nil {
		return 0, err
	}
	n, err := r.GetUint(0, 0)
	return int64(n), err
}
