package backend

import "github.com/prometheus/client_golang/prometheus"

var poolDesc = prometheus.NewDesc("convoy_pool_connections",
	"Backend connections per datasource, by state (in_use|idle).", []string{"datasource", "state"}, nil)

// poolCollector reports pool usage at scrape time, so the hot path pays
// nothing for it.
type poolCollector struct{ m *Manager }

// Collector returns a Prometheus collector for the manager's pools.
func (m *Manager) Collector() prometheus.Collector { return poolCollector{m} }

func (c poolCollector) Describe(ch chan<- *prometheus.Desc) { ch <- poolDesc }

func (c poolCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.m.Stats() {
		ch <- prometheus.MustNewConstMetric(poolDesc, prometheus.GaugeValue, float64(s.InUse), s.Datasource, "in_use")
		ch <- prometheus.MustNewConstMetric(poolDesc, prometheus.GaugeValue, float64(s.Idle), s.Datasource, "idle")
	}
}
