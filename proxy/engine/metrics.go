package engine

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/convoy-im/convoy/proxy/stats"
	"github.com/convoy-im/convoy/router"
)

// Metrics are the engine's Prometheus series. Per-shard series are created on
// a shard's first statement, so an idle shard costs nothing on the scrape.
//
// A scrape must stay small with all 1024 shards busy (under 300 KB;
// TestScrapeSizeAllShards). So latency is a histogram per datasource, not
// per shard (1024 shards x 2 kinds x 15 lines made 2.7 MB), and a shard
// has three counters: statements by kind, and errors (about 210 bytes with
// values in the billions; errors by kind as well made 295 KB before the
// other packages' series). Errors by kind are counted per datasource. Per-shard
// percentiles come from the sliding window (SHOW SHARD STATS); the scrape
// carries the expansion triggers as a few gauges computed from it at scrape
// time (windowCollector).
type Metrics struct {
	queries   *prometheus.CounterVec   // shard, kind
	errors    *prometheus.CounterVec   // shard
	latency   *prometheus.HistogramVec // datasource, kind
	dsErrors  *prometheus.CounterVec   // datasource, kind
	statement fixedCounters
	scatters  *prometheus.CounterVec
	scatterN  prometheus.Histogram
	plans     fixedCounters
	backendPS fixedCounters
	shardObs  [router.NumShards]atomic.Pointer[shardSeries]

	// dsObs maps a datasource to its series, copied on write: the
	// statement path does one map read, no lock and no label hashing.
	dsObs atomic.Pointer[map[string]*dsSeries]
	dsMu  sync.Mutex // serialises copies of dsObs

	window atomic.Pointer[windowSource] // set by New; read at scrape time

	// Migration holds (hold.go); the proxy-side hold time and failures are
	// coord's LockMetrics.
	holdQueued  prometheus.Gauge
	holdWait    prometheus.Histogram
	holdRefused fixedCounters

	// Message search (search.go): latency by part, errors.
	searchLatency *prometheus.HistogramVec
	searchErrors  fixedCounters
	// The cold tier (cold.go).
	coldReads     *prometheus.CounterVec   // shape, first_screen, result
	coldSeconds   *prometheus.HistogramVec // shape
	coldRowsTotal prometheus.Counter
	coldChecks    fixedCounters // decision
	coldWrites    fixedCounters // result
	// The cross-shard outbox (outbox.go).
	outboxRecordedN  prometheus.Counter
	outboxDeliveredN *prometheus.CounterVec // datasource (the home)
	outboxLag        prometheus.Histogram
	outboxDeadN      *prometheus.CounterVec // datasource (the home)
	outboxOldest     *prometheus.GaugeVec   // datasource (the home)
	outboxDeadNow    *prometheus.GaugeVec   // datasource (the home)
}

// fixedCounters is a CounterVec over a small label set known up front, its
// children resolved once: WithLabelValues hashes the label and takes a lock
// on every call, per statement here. The series exist (at 0) from the start.
type fixedCounters struct {
	vec *prometheus.CounterVec
	c   map[string]prometheus.Counter
}

func newFixedCounters(opts prometheus.CounterOpts, label string, values ...string) fixedCounters {
	f := fixedCounters{vec: prometheus.NewCounterVec(opts, []string{label}), c: map[string]prometheus.Counter{}}
	for _, v := range values {
		f.c[v] = f.vec.WithLabelValues(v)
	}
	return f
}

func (f fixedCounters) inc(value string) {
	if c, ok := f.c[value]; ok {
		c.Inc()
		return
	}
	f.vec.WithLabelValues(value).Inc()
}

// shardSeries are one shard's counters. All are created together, at 0, so
// that rate() sees a shard's first write and first error.
type shardSeries struct {
	count  [2]prometheus.Counter // read, write
	errors prometheus.Counter
}

// dsSeries are a datasource's series, by kind (read, write).
type dsSeries struct {
	latency [2]prometheus.Observer
	errors  [2]prometheus.Counter
}

// NewMetrics registers the engine series on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		queries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "convoy_shard_queries_total", Help: "Statements sent to a logical shard, by kind (read|write).",
		}, []string{"shard", "kind"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "convoy_datasource_query_duration_seconds",
			Help: "Backend time of sharded statements, by datasource and kind (read|write). Per-shard percentiles: SHOW SHARD STATS.",
			// 0.25 ms .. 2 s: point reads sit at the bottom, the 50 ms write P99
			// expansion trigger of docs/design.md §7 is a bucket edge.
			Buckets: []float64{.00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 2},
		}, []string{"datasource", "kind"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "convoy_shard_errors_total", Help: "Failed statements on a logical shard, reads and writes (by kind: convoy_datasource_errors_total).",
		}, []string{"shard"}),
		dsErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "convoy_datasource_errors_total", Help: "Failed sharded statements, by datasource and kind (read|write).",
		}, []string{"datasource", "kind"}),
		statement: newFixedCounters(prometheus.CounterOpts{
			Name: "convoy_statements_total", Help: "Client statements by routing class.",
		}, "class", "admin", "ddl", "hot", "search", "session", "sharded", "transaction", "unsharded"),
		scatters: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "convoy_scatter_total", Help: "SELECTs that read more than one shard, by logical table.",
		}, []string{"table"}),
		scatterN: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "convoy_scatter_targets", Help: "Physical tables read by one multi-shard SELECT.",
			Buckets: []float64{2, 4, 8, 16, 64, 128, 256, 512, 1024},
		}),
		plans: newFixedCounters(prometheus.CounterOpts{
			Name: "convoy_plan_cache_total",
			Help: "Text statements by plan-cache outcome: hit (shared plan), miss (plan built and shared), bypass (planned on their own).",
		}, "result", "hit", "miss", "bypass"),
		backendPS: newFixedCounters(prometheus.CounterOpts{
			Name: "convoy_prepared_backend_total",
			Help: "Backend statements of client EXECUTEs by path: inline (sent as text with the values printed) or prepared (a backend prepared statement).",
		}, "path", "inline", "prepared"),
		holdQueued: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "convoy_migration_hold_queued_writes", Help: "Writes waiting now behind a migration hold of their shard.",
		}),
		holdWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "convoy_migration_hold_wait_seconds", Help: "Time writes waited behind a migration hold (released, refused or timed out).",
			// The switch pause budget is 300 ms; the default bound 2 s.
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .2, .3, .5, 1, 2, 5},
		}),
		holdRefused: newFixedCounters(prometheus.CounterOpts{
			Name: "convoy_migration_hold_refused_total",
			Help: "Writes refused because of a migration hold: timeout (waited migration.hold_max_wait), queue_full (migration.hold_max_queue), unavailable (the switch is unresolved), fenced (every sharded write: the proxy cannot prove its etcd registration), killed (KILL of the waiting session).",
		}, "reason", "timeout", "queue_full", "unavailable", "fenced", "killed"),
		searchLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "convoy_search_query_duration_seconds",
			Help:    "msg_search queries by part: total, members (im_conv_member), index, fresh (the window read from MySQL).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 5},
		}, []string{"part"}),
		searchErrors: newFixedCounters(prometheus.CounterOpts{
			Name: "convoy_search_query_errors_total", Help: "Failed msg_search queries by part.",
		}, "part", "total", "members", "index", "fresh"),
		coldReads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "convoy_cold_reads_total",
			Help: "History reads whose page needed the archive (cold tier), by shape (before|after|anchor|bodies), first_screen (a scroll-up page above every seq of its conversation: docs/design.md §9 says it never reaches object storage) and result (complete|partial: the budget ran out|unavailable: the archive did not answer).",
		}, []string{"shape", "first_screen", "result"}),
		coldSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "convoy_cold_read_duration_seconds",
			Help:    "Time of a history read's cold part (tombstones, catalog, object store), by shape; bounded by cold.budget.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, .8, 1, 2},
		}, []string{"shape"}),
		coldRowsTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "convoy_cold_rows_total", Help: "Archived rows served to clients from the cold tier.",
		}),
		coldChecks: newFixedCounters(prometheus.CounterOpts{
			Name: "convoy_cold_checks_total",
			Help: "History reads of archived shards by how the engine knew whether the archive had rows for them: page (the page itself proved it, free), ranges (one primary-key lookup of the conversation's archived range in MySQL), cold (the archive was read), mysql_only (a read the archive cannot continue, of a conversation with archived rows: answered from MySQL with warning 1931).",
		}, "decision", "page", "ranges", "cold", "mysql_only"),
		coldWrites: newFixedCounters(prometheus.CounterOpts{
			Name: "convoy_cold_writes_total",
			Help: "UPDATE / DELETE of conv_msg or msg_content on archived shards by outcome: warm (named no archived row), tombstoned (a DELETE by key hid archived rows), erased (a DELETE of a conversation's rows by range or sender erased its archived ones), refused (an UPDATE of archived rows, or a DELETE whose WHERE Convoy cannot apply to them), unavailable (the archive could not be checked; nothing changed).",
		}, "result", "warm", "tombstoned", "erased", "refused", "unavailable"),
		outboxRecordedN: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "convoy_outbox_recorded_total", Help: "Outbox entries recorded by outbox transactions (one per statement and other shard), committed or not.",
		}),
		outboxDeliveredN: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "convoy_outbox_delivered_total", Help: "Outbox entries applied to their shards by this process's delivery workers, by home datasource.",
		}, []string{"datasource"}),
		outboxLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "convoy_outbox_delivery_lag_seconds", Help: "Time from an outbox entry's COMMIT to its delivery.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
		}),
		outboxDeadN: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "convoy_outbox_dead_letters_total", Help: "Outbox entries that became dead letters (outbox.max_tries failures that do not pass by themselves), by home datasource: SHOW OUTBOX lists them.",
		}, []string{"datasource"}),
		outboxOldest: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "convoy_outbox_oldest_pending_seconds", Help: "Age of the oldest pending outbox entry a delivery pass read (0: none), by home datasource; set by the process delivering it.",
		}, []string{"datasource"}),
		outboxDeadNow: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "convoy_outbox_dead_letters", Help: "Outbox entries that are dead letters now, by home datasource (read at most every 10 s by the process delivering it): SHOW OUTBOX DEAD.",
		}, []string{"datasource"}),
	}
	if reg != nil {
		reg.MustRegister(m.outboxRecordedN, m.outboxDeliveredN, m.outboxLag, m.outboxDeadN, m.outboxOldest, m.outboxDeadNow)
		reg.MustRegister(m.queries, m.errors, m.latency, m.dsErrors, m.statement.vec, m.scatters, m.scatterN, m.plans.vec, m.backendPS.vec,
			m.holdQueued, m.holdWait, m.holdRefused.vec, m.coldReads, m.coldSeconds, m.coldRowsTotal, m.coldChecks.vec, m.coldWrites.vec,
			windowCollector{m}, m.searchLatency, m.searchErrors.vec)
	}
	return m
}

func (m *Metrics) shard(sh router.Shard) *shardSeries {
	p := &m.shardObs[sh]
	if s := p.Load(); s != nil {
		return s
	}
	label := sh.String()
	s := &shardSeries{
		count:  [2]prometheus.Counter{m.queries.WithLabelValues(label, "read"), m.queries.WithLabelValues(label, "write")},
		errors: m.errors.WithLabelValues(label),
	}
	p.CompareAndSwap(nil, s)
	return p.Load()
}

func (m *Metrics) datasource(ds string) *dsSeries {
	if cur := m.dsObs.Load(); cur != nil {
		if s, ok := (*cur)[ds]; ok {
			return s
		}
	}
	m.dsMu.Lock()
	defer m.dsMu.Unlock()
	var old map[string]*dsSeries
	if cur := m.dsObs.Load(); cur != nil {
		if s, ok := (*cur)[ds]; ok {
			return s
		}
		old = *cur
	}
	// A datasource dropped from the routes keeps its series until restart:
	// datasources are few and rarely removed.
	next := make(map[string]*dsSeries, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	s := &dsSeries{
		latency: [2]prometheus.Observer{m.latency.WithLabelValues(ds, "read"), m.latency.WithLabelValues(ds, "write")},
		errors:  [2]prometheus.Counter{m.dsErrors.WithLabelValues(ds, "read"), m.dsErrors.WithLabelValues(ds, "write")},
	}
	next[ds] = s
	m.dsObs.Store(&next)
	return s
}

// observeShard records one backend statement on shard sh, run on datasource
// ds.
func (m *Metrics) observeShard(sh router.Shard, ds string, write bool, d time.Duration, err error) {
	if m == nil {
		return
	}
	k := 0
	if write {
		k = 1
	}
	s, dss := m.shard(sh), m.datasource(ds)
	s.count[k].Inc()
	dss.latency[k].Observe(d.Seconds())
	if err != nil {
		s.errors.Inc()
		dss.errors[k].Inc()
	}
}

// failShard records a statement on shard sh that failed before reaching
// datasource ds (no connection: the breaker, the pool or the dial refused
// it): a statement and an error, without a latency.
func (m *Metrics) failShard(sh router.Shard, ds string, write bool) {
	if m == nil {
		return
	}
	k := 0
	if write {
		k = 1
	}
	s := m.shard(sh)
	s.count[k].Inc()
	s.errors.Inc()
	m.datasource(ds).errors[k].Inc()
}

// windowSource is what windowCollector reads: the engine's sliding window
// and its health thresholds.
type windowSource struct {
	w   *stats.Window
	opt Options
}

// watchWindow makes the scrape report w's shards against opt's triggers.
func (m *Metrics) watchWindow(w *stats.Window, opt Options) {
	if m != nil {
		m.window.Store(&windowSource{w, opt})
	}
}

var (
	overThresholdDesc = prometheus.NewDesc("convoy_shards_over_threshold",
		"Logical shards over a SHOW SHARD HEALTH trigger in the stats window, by trigger (qps: health.shard_qps, write_p99: health.write_p99).",
		[]string{"trigger"}, nil)
	maxWriteP99Desc = prometheus.NewDesc("convoy_shard_write_p99_max_seconds",
		"Highest write P99 of any logical shard over the stats window (SHOW SHARD STATS); 0 without writes.", nil, nil)
)

// windowCollector reports, at scrape time, the per-shard expansion triggers
// as three series instead of 2048 histograms. It reads every active shard's
// window once per scrape: about 16 ms with all 1024 shards busy for the
// whole window, 0.3% of a core at a 5 s scrape interval, and nothing on the
// statement path.
type windowCollector struct{ m *Metrics }

func (c windowCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- overThresholdDesc
	ch <- maxWriteP99Desc
}

func (c windowCollector) Collect(ch chan<- prometheus.Metric) {
	src := c.m.window.Load()
	if src == nil {
		return
	}
	var overQPS, overP99 int
	var maxP99 time.Duration
	tr := src.opt.triggers()
	for _, st := range src.w.All() {
		if tr.OverQPS(st) {
			overQPS++
		}
		if tr.OverWriteP99(st) {
			overP99++
		}
		maxP99 = max(maxP99, st.WriteP99)
	}
	ch <- prometheus.MustNewConstMetric(overThresholdDesc, prometheus.GaugeValue, float64(overQPS), "qps")
	ch <- prometheus.MustNewConstMetric(overThresholdDesc, prometheus.GaugeValue, float64(overP99), "write_p99")
	ch <- prometheus.MustNewConstMetric(maxWriteP99Desc, prometheus.GaugeValue, maxP99.Seconds())
}

func (m *Metrics) countStatement(class string) {
	if m == nil {
		return
	}
	m.statement.inc(class)
}

func (m *Metrics) countScatter(table string, targets int) {
	if m == nil {
		return
	}
	m.scatters.WithLabelValues(table).Inc()
	m.scatterN.Observe(float64(targets))
}

func (m *Metrics) countPlanCache(result string) {
	if m == nil {
		return
	}
	m.plans.inc(result)
}

func (m *Metrics) countBackendPS(path string) {
	if m == nil {
		return
	}
	m.backendPS.inc(path)
}

// HoldQueued implements shardgate.Metrics.
func (m *Metrics) HoldQueued(delta float64) {
	if m == nil {
		return
	}
	m.holdQueued.Add(delta)
}

// HoldWaited implements shardgate.Metrics.
func (m *Metrics) HoldWaited(d time.Duration) {
	if m == nil {
		return
	}
	m.holdWait.Observe(d.Seconds())
}

// HoldRefused implements shardgate.Metrics.
func (m *Metrics) HoldRefused(reason string) {
	if m == nil {
		return
	}
	m.holdRefused.inc(reason)
}

func (m *Metrics) observeSearch(part string, start time.Time, err error) {
	if m == nil {
		return
	}
	m.searchLatency.WithLabelValues(part).Observe(time.Since(start).Seconds())
	if err != nil {
		m.searchErrors.inc(part)
	}
}

func (m *Metrics) coldDecision(d string) {
	if m != nil {
		m.coldChecks.inc(d)
	}
}

// coldRead records a read whose page needed the archive.
func (m *Metrics) coldRead(shape string, firstScreen bool, result string, d time.Duration) {
	if m == nil {
		return
	}
	m.coldReads.WithLabelValues(shape, strconv.FormatBool(firstScreen), result).Inc()
	if d > 0 {
		m.coldSeconds.WithLabelValues(shape).Observe(d.Seconds())
	}
}

func (m *Metrics) coldRows(n int) {
	if m != nil && n > 0 {
		m.coldRowsTotal.Add(float64(n))
	}
}

func (m *Metrics) coldWrite(result string) {
	if m != nil {
		m.coldWrites.inc(result)
	}
}

func (m *Metrics) outboxRecorded(n int) {
	if m != nil {
		m.outboxRecordedN.Add(float64(n))
	}
}

func (m *Metrics) outboxDelivered(ds string, lag time.Duration) {
	if m != nil {
		m.outboxDeliveredN.WithLabelValues(ds).Inc()
		m.outboxLag.Observe(lag.Seconds())
	}
}

// outboxState sets the delivering process's gauges of ds's outbox; dead <
// 0 leaves the dead letters' gauge as it is.
func (m *Metrics) outboxState(ds string, oldest time.Duration, dead int64) {
	if m == nil {
		return
	}
	m.outboxOldest.WithLabelValues(ds).Set(oldest.Seconds())
	if dead >= 0 {
		m.outboxDeadNow.WithLabelValues(ds).Set(float64(dead))
	}
}

func (m *Metrics) outboxDead(ds string) {
	if m != nil {
		m.outboxDeadN.WithLabelValues(ds).Inc()
	}
}
