package coord

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Migration lock metric names. The migrator side is recorded by Runner.Switch
// (WithRunnerMetrics), the proxy side by LockFollower (WithFollowerMetrics).
const (
	MetricLockSeconds      = "convoy_migration_lock_seconds"
	MetricLockAckWait      = "convoy_migration_lock_ack_wait_seconds"
	MetricLockAcks         = "convoy_migration_lock_acks_total"
	MetricLockVanished     = "convoy_migration_lock_vanished_proxies_total"
	MetricLockAborts       = "convoy_migration_lock_aborts_total"
	MetricShardHoldSeconds = "convoy_migration_shard_hold_seconds"
	MetricShardHoldFails   = "convoy_migration_shard_hold_failures_total"
	MetricShardsHeld       = "convoy_migration_shards_held"
	MetricWriteFenced      = "convoy_migration_write_fenced"
)

// LockMetrics are the migration lock's metrics. A nil *LockMetrics records
// nothing.
type LockMetrics struct {
	lockSeconds  *prometheus.HistogramVec
	ackWait      prometheus.Histogram
	acks         prometheus.Counter
	vanished     prometheus.Counter
	aborts       *prometheus.CounterVec
	holdSeconds  prometheus.Histogram
	holdFailures *prometheus.CounterVec
	held         prometheus.Gauge
	fence        prometheus.Gauge
}

// lockBuckets spread around the 300 ms pause target (docs/design.md §5) up to the
// default 5 s bound.
var lockBuckets = []float64{.005, .01, .025, .05, .1, .2, .3, .5, 1, 2, 3, 5, 10}

// NewLockMetrics creates the migration lock's metrics, labelled
// cluster=<name>, and registers them with reg (nil: not registered). It
// returns an error if registration fails (e.g. registered twice).
func NewLockMetrics(reg prometheus.Registerer, cluster string) (*LockMetrics, error) {
	labels := prometheus.Labels{"cluster": cluster}
	m := &LockMetrics{
		lockSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: MetricLockSeconds, ConstLabels: labels, Buckets: lockBuckets,
			Help: "Migrator: time a shard's migration lock existed, from taking it to removing it, by outcome (switched, aborted).",
		}, []string{"outcome"}),
		ackWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: MetricLockAckWait, ConstLabels: labels, Buckets: lockBuckets,
			Help: "Migrator: time from taking a migration lock until every live proxy acknowledged (or the wait ended).",
		}),
		acks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: MetricLockAcks, ConstLabels: labels,
			Help: "Migrator: proxy acknowledgements of migration locks received.",
		}),
		vanished: prometheus.NewCounter(prometheus.CounterOpts{
			Name: MetricLockVanished, ConstLabels: labels,
			Help: "Migrator: proxies whose registration expired, or whose listen address refused connections, during a migration lock's acknowledgement wait (they no longer counted).",
		}),
		aborts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricLockAborts, ConstLabels: labels,
			Help: "Migrator: shard switches aborted with the routes unchanged, by reason (ack_timeout, callback, runner_lost, canceled).",
		}, []string{"reason"}),
		holdSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: MetricShardHoldSeconds, ConstLabels: labels, Buckets: lockBuckets,
			Help: "Proxy: time a shard's writes were held for a migration lock, from holding to release.",
		}),
		holdFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricShardHoldFails, ConstLabels: labels,
			Help: "Proxy: held shards whose writes were failed because the proxy could not confirm the routes, by reason (deadline, fenced, closed).",
		}, []string{"reason"}),
		held: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: MetricShardsHeld, ConstLabels: labels,
			Help: "Proxy: shards whose writes are held (or failed) for a migration lock now.",
		}),
		fence: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: MetricWriteFenced, ConstLabels: labels,
			Help: "Proxy: 1 while every write to a sharded table is refused because the proxy's etcd registration may have expired (alert on it).",
		}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.lockSeconds, m.ackWait, m.acks, m.vanished, m.aborts, m.holdSeconds, m.holdFailures, m.held, m.fence} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

func (m *LockMetrics) ackWaited(d time.Duration, vanished int) {
	if m == nil {
		return
	}
	m.ackWait.Observe(d.Seconds())
	m.vanished.Add(float64(vanished))
}

func (m *LockMetrics) acked() {
	if m != nil {
		m.acks.Inc()
	}
}

// lockDone records a removed lock; abortReason is empty unless the switch
// aborted with the routes unchanged.
func (m *LockMetrics) lockDone(held time.Duration, flipped bool, abortReason string) {
	if m == nil {
		return
	}
	outcome := "aborted"
	if flipped {
		outcome = "switched"
	}
	m.lockSeconds.WithLabelValues(outcome).Observe(held.Seconds())
	if abortReason != "" {
		m.aborts.WithLabelValues(abortReason).Inc()
	}
}

func (m *LockMetrics) shardHeld() {
	if m != nil {
		m.held.Inc()
	}
}

func (m *LockMetrics) shardReleased(held time.Duration) {
	if m != nil {
		m.held.Dec()
		m.holdSeconds.Observe(held.Seconds())
	}
}

func (m *LockMetrics) shardFailed(reason string) {
	if m != nil {
		m.holdFailures.WithLabelValues(reason).Inc()
	}
}

func (m *LockMetrics) fenced(up bool) {
	if m == nil {
		return
	}
	if up {
		m.fence.Set(1)
	} else {
		m.fence.Set(0)
	}
}
