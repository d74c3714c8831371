package backend

import "github.com/prometheus/client_golang/prometheus"

var (
	poolDesc = prometheus.NewDesc("convoy_pool_connections",
		"Backend connections per datasource, by state (in_use|idle).", []string{"datasource", "state"}, nil)
	stateDesc = prometheus.NewDesc("convoy_datasource_state",
		"What the health checker last concluded about a datasource: 0 up, 1 down (refusing connections), 2 hung (not answering). While it is not 0 its statements fail at once.",
		[]string{"datasource"}, nil)
)

// poolCollector reports pool usage and datasource states at scrape time,
// so the hot path pays nothing for them, and the transition counters.
type poolCollector struct{ m *Manager }

// Collector returns a Prometheus collector for the manager's pools.
func (m *Manager) Collector() prometheus.Collector { return poolCollector{m} }

func (c poolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- poolDesc
	ch <- stateDesc
	c.m.transitions.Describe(ch)
}

func (c poolCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.m.Stats() {
		ch <- prometheus.MustNewConstMetric(poolDesc, prometheus.GaugeValue, float64(s.InUse), s.Datasource, "in_use")
		ch <- prometheus.MustNewConstMetric(poolDesc, prometheus.GaugeValue, float64(s.Idle), s.Datasource, "idle")
		ch <- prometheus.MustNewConstMetric(stateDesc, prometheus.GaugeValue, float64(s.Health.State), s.Datasource)
	}
	c.m.transitions.Collect(ch)
}
