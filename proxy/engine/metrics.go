package engine

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/convoy-im/convoy/router"
)

// Metrics are the engine's Prometheus series. Per-shard series are created on
// first use, so an idle shard costs nothing on the scrape.
type Metrics struct {
	queries   *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	errors    *prometheus.CounterVec
	statement fixedCounters
	scatters  *prometheus.CounterVec
	scatterN  prometheus.Histogram
	plans     fixedCounters
	backendPS fixedCounters
	shardObs  [router.NumShards][2]atomic.Pointer[shardSeries]
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

type shardSeries struct {
	count   prometheus.Counter
	latency prometheus.Observer
	errors  prometheus.Counter
}

// NewMetrics registers the engine series on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		queries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "convoy_shard_queries_total", Help: "Statements sent to a logical shard, by kind (read|write).",
		}, []string{"shard", "kind"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "convoy_shard_query_duration_seconds", Help: "Backend time of statements on a logical shard, by kind (read|write).",
			// 0.25 ms .. 2 s: point reads sit at the bottom, the 50 ms write P99
			// expansion trigger of seed 001 falls between two buckets.
			Buckets: []float64{.00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 2},
		}, []string{"shard", "kind"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "convoy_shard_errors_total", Help: "Failed statements on a logical shard, by kind (read|write).",
		}, []string{"shard", "kind"}),
		statement: newFixedCounters(prometheus.CounterOpts{
			Name: "convoy_statements_total", Help: "Client statements by routing class.",
		}, "class", "admin", "ddl", "hot", "session", "sharded", "transaction", "unsharded"),
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
	}
	if reg != nil {
		reg.MustRegister(m.queries, m.latency, m.errors, m.statement.vec, m.scatters, m.scatterN, m.plans.vec, m.backendPS.vec)
	}
	return m
}

func (m *Metrics) shard(sh router.Shard, write bool) *shardSeries {
	k := 0
	kind := "read"
	if write {
		k, kind = 1, "write"
	}
	p := &m.shardObs[sh][k]
	if s := p.Load(); s != nil {
		return s
	}
	label := sh.String()
	s := &shardSeries{
		count:   m.queries.WithLabelValues(label, kind),
		latency: m.latency.WithLabelValues(label, kind),
		errors:  m.errors.WithLabelValues(label, kind),
	}
	p.CompareAndSwap(nil, s)
	return p.Load()
}

func (m *Metrics) observeShard(sh router.Shard, write bool, d time.Duration, err error) {
	if m == nil {
		return
	}
	s := m.shard(sh, write)
	s.count.Inc()
	s.latency.Observe(d.Seconds())
	if err != nil {
		s.errors.Inc()
	}
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
