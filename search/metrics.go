package search

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/convoy-im/convoy/binlog"
)

// Metrics are the index feed's. A nil *Metrics records nothing.
type Metrics struct {
	indexed, deleted, skipped *prometheus.CounterVec
	lag                       *prometheus.HistogramVec
	behind                    *prometheus.GaugeVec
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
		behind: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "convoy_search_feed_behind_seconds",
			Help: "How far the index feed is behind its datasource now (0 when caught up)."}, []string{"datasource"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.indexed, m.deleted, m.skipped, m.lag, m.behind} {
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
		m.behind.WithLabelValues(source).Set(now.Sub(txnTimes[n-1]).Seconds())
	}
}

// caughtUp notes an idle, connected feed: nothing is waiting.
func (m *Metrics) caughtUp(source string, st binlog.Stats) {
	if m == nil || !st.Connected {
		return
	}
	m.behind.WithLabelValues(source).Set(0)
}
