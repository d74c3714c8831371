package routecfg

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// Metric names. The proxy's operator docs list them; do not rename.
const (
	MetricVersion   = "convoy_route_version"
	MetricLastSync  = "convoy_route_last_sync_timestamp_seconds"
	MetricStale     = "convoy_route_stale"
	MetricStaleness = "convoy_route_staleness_seconds"
	MetricRejected  = "convoy_route_rejected_total"
	MetricReloads   = "convoy_route_reloads_total"
)

type metrics struct {
	version  prometheus.Gauge
	lastSync prometheus.Gauge
	stale    prometheus.Gauge
	rejected prometheus.Counter
	reloads  prometheus.Counter
}

// newMetrics creates the watcher's collectors, labelled with the cluster so
// one process watching two clusters exports two series, and registers them
// with reg. The staleness gauge is computed at scrape time from lastSync
// (unix nanoseconds, 0 = never synced).
func newMetrics(reg prometheus.Registerer, cluster string, lastSync func() int64, log *zap.Logger) *metrics {
	labels := prometheus.Labels{"cluster": cluster}
	m := &metrics{
		version: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: MetricVersion, ConstLabels: labels,
			Help: "Version of the route document the proxy is serving.",
		}),
		lastSync: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: MetricLastSync, ConstLabels: labels,
			Help: "Unix time the proxy last confirmed its route snapshot is what etcd holds (0: never).",
		}),
		stale: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: MetricStale, ConstLabels: labels,
			Help: "1 while etcd is unreachable, holds no route document, or the last re-read failed; the proxy serves its last good snapshot.",
		}),
		rejected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: MetricRejected, ConstLabels: labels,
			Help: "Route documents refused because they failed validation; the last good snapshot kept serving.",
		}),
		reloads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: MetricReloads, ConstLabels: labels,
			Help: "Route snapshots swapped in (initial load included).",
		}),
	}
	staleness := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: MetricStaleness, ConstLabels: labels,
		Help: "Seconds since the proxy last confirmed its route snapshot is what etcd holds.",
	}, func() float64 {
		ns := lastSync()
		if ns == 0 {
			// Never confirmed (cold start from the cache file with etcd
			// down and no file time): report time since the epoch rather
			// than 0, which would read as "fresh".
			return float64(time.Now().Unix())
		}
		return time.Since(time.Unix(0, ns)).Seconds()
	})
	if reg == nil {
		reg = prometheus.NewRegistry() // private: nothing scrapes it, nothing collides
	}
	for _, c := range []prometheus.Collector{m.version, m.lastSync, m.stale, staleness, m.rejected, m.reloads} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				// A second watcher for the same cluster on one registry:
				// its metrics would duplicate the first's. Keep running.
				log.Warn("route metric already registered; this watcher's copy is not exported",
					zap.String("cluster", cluster), zap.Error(err))
				continue
			}
			log.Error("cannot register route metric", zap.String("cluster", cluster), zap.Error(err))
		}
	}
	return m
}
