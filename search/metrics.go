package search

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/convoy-im/convoy/binlog"
)

// Metrics are the index feed's. A nil *Metrics records nothing.
type Metrics struct {
	indexed, deleted, skipped *prometheus.CounterVec
	lag                       *prometheus.HistogramVec
	behind                    *behindGauge
	runs                      *prometheus.CounterVec
}

// behindGauge is convoy_search_feed_behind_seconds, computed when read:
// now minus the instant up to which each feed run here is known current
// (its last applied transaction's commit, or the last time it was idle and
// connected). A feed that stops applying (its stream broken, reconnecting,
// stuck) therefore shows a lag that grows, not the last value it set.
type behindGauge struct {
	desc    *prometheus.Desc
	mu      sync.Mutex
	current map[string]time.Time
	// paused keeps a stopped feed's instant: when this process runs the
	// feed again (a restart after an error), its lag goes on from there.
	paused map[string]time.Time
}

func (g *behindGauge) Describe(ch chan<- *prometheus.Desc) { ch <- g.desc }

func (g *behindGauge) Collect(ch chan<- prometheus.Metric) {
	for ds, v := range g.values() {
		ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, v, ds)
	}
}

func (g *behindGauge) values() map[string]float64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	out := make(map[string]float64, len(g.current))
	for ds, t := range g.current {
		out[ds] = max(0, now.Sub(t).Seconds())
	}
	return out
}

func (g *behindGauge) set(ds string, t time.Time) {
	g.mu.Lock()
	g.current[ds] = t
	g.mu.Unlock()
}

func (g *behindGauge) start(ds string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if t, ok := g.paused[ds]; ok {
		g.current[ds] = t
		return
	}
	g.current[ds] = time.Now()
}

func (g *behindGauge) stop(ds string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if t, ok := g.current[ds]; ok {
		g.paused[ds] = t
	}
	delete(g.current, ds)
}

// NewMetrics registers the feed's metrics on reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		indexed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "convoy_search_docs_indexed_total",
			Help: "Messages written to the search index (inserts and edits), by datasource."}, []string{"datasource"}),
		deleted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "convoy_search_docs_deleted_total",
			Help: "Messages soft-deleted in the search index (deletes and recalls), by datasource."}, []string{"datasource"}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "convoy_search_docs_skipped_total",
			Help: "Messages not indexed because their body yielded no text (search.extraction), by datasource."}, []string{"datasource"}),
		// Binlog commit times are whole seconds: a lag reads up to 1 s high.
		lag: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "convoy_search_index_lag_seconds",
			Help:    "Time from a transaction's commit on the datasource to its rows being searchable.",
			Buckets: []float64{0.5, 1, 2, 3, 5, 10, 30, 60, 300}}, []string{"datasource"}),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "convoy_search_feed_runs_total",
			Help: "Index feed runs this process started, by datasource: more than one every few minutes is a feed failing and restarting."}, []string{"datasource"}),
		behind: &behindGauge{current: map[string]time.Time{}, paused: map[string]time.Time{}, desc: prometheus.NewDesc("convoy_search_feed_behind_seconds",
			"How far the index feed this process runs is behind its datasource now: since its last applied commit or its last idle moment connected (0 when caught up; it grows while the feed is stopped or broken).",
			[]string{"datasource"}, nil)},
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.indexed, m.deleted, m.skipped, m.lag, m.behind, m.runs} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

func (m *Metrics) applied(source string, b Batch, skipped int, txnTimes []time.Time) {
	if m == nil {
		return
	}
	m.indexed.WithLabelValues(source).Add(float64(len(b.Upserts)))
	m.deleted.WithLabelValues(source).Add(float64(len(b.Deletes)))
	m.skipped.WithLabelValues(source).Add(float64(skipped))
	now := time.Now()
	for _, t := range txnTimes {
		m.lag.WithLabelValues(source).Observe(now.Sub(t).Seconds())
	}
	if n := len(txnTimes); n > 0 {
		m.behind.set(source, txnTimes[n-1])
	}
}

// started notes a feed this process now runs: behind from now (or from
// where its last run here stopped) until it applies or idles; a backfill
// counts as behind.
func (m *Metrics) started(source string) {
	if m != nil {
		m.behind.start(source)
		m.runs.WithLabelValues(source).Inc()
	}
}

// stopped notes a feed this process no longer runs (it failed, lost its
// election, or the process is stopping): another process may feed the
// datasource now, so this one stops reporting its lag.
func (m *Metrics) stopped(source string) {
	if m != nil {
		m.behind.stop(source)
	}
}

// Behind is how far behind each feed this process runs is (seconds, by
// datasource), as the metric reads it.
func (m *Metrics) Behind() map[string]float64 {
	if m == nil {
		return nil
	}
	return m.behind.values()
}

// caughtUp notes an idle, connected feed: nothing is waiting.
func (m *Metrics) caughtUp(source string, st binlog.Stats) {
	if m == nil || !st.Connected {
		return
	}
	m.behind.set(source, time.Now())
}
