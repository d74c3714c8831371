package migrate

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/convoy-im/convoy/router"
)

// Metric names of the migration jobs a process runs (the lock's are
// coord's).
const (
	MetricJobStep      = "convoy_migration_job_step"
	MetricRowsCopied   = "convoy_migration_rows_copied"
	MetricRowsEstimate = "convoy_migration_rows_estimate"
	MetricApplyLag     = "convoy_migration_apply_lag_seconds"
	MetricStepFailures = "convoy_migration_step_failures_total"
	MetricBacklog      = "convoy_migration_dualwrite_backlog"
	MetricBreaches     = "convoy_migration_fence_breaches_total"
)

// Metrics are the migration jobs this process runs, by shard; a job's
// series go when its runner stops (another process's then has them). A nil
// *Metrics records nothing.
type Metrics struct {
	step     *prometheus.GaugeVec
	rows     *prometheus.GaugeVec
	estimate *prometheus.GaugeVec
	lag      *prometheus.GaugeVec
	backlog  *prometheus.GaugeVec
	failures *prometheus.CounterVec
	breaches *prometheus.CounterVec
}

// NewMetrics creates the job metrics and registers them with reg (nil: not
// registered).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		step: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricJobStep,
			Help: "1 for the step each migration job run here is at (queued, prepare, backfill, verify, ready, switched, done)."}, []string{"shard", "step"}),
		rows: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricRowsCopied,
			Help: "Rows the backfill's copy has written, by shard."}, []string{"shard"}),
		estimate: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricRowsEstimate,
			Help: "Rows the backfill's copy will have written when done (its snapshots' counts), by shard."}, []string{"shard"}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricApplyLag,
			Help: "Binlog apply lag of a migration (the reverse stream's once switched), by shard; absent when unknown."}, []string{"shard"}),
		backlog: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricBacklog,
			Help: "Keys in a migration's dual-write compensation queue not replayed yet (the target failed them), by shard; absent outside backfill, verify and ready."}, []string{"shard"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricStepFailures,
			Help: "Migration steps that failed and are retried (the job's last_error says why), by step."}, []string{"step"}),
		breaches: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricBreaches,
			Help: "Writes of a moved shard seen in its old side's binlog after the switch, past the storage fence (alert on any), by shard."}, []string{"shard"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.step, m.rows, m.estimate, m.lag, m.backlog, m.failures, m.breaches} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// observe records a job's step and status.
func (m *Metrics) observe(shard router.Shard, step string, s Status) {
	if m == nil {
		return
	}
	sh := shard.String()
	m.step.DeletePartialMatch(prometheus.Labels{"shard": sh})
	m.step.WithLabelValues(sh, step).Set(1)
	m.rows.WithLabelValues(sh).Set(float64(s.Rows))
	m.estimate.WithLabelValues(sh).Set(float64(s.Estimate))
	if s.Lag >= 0 {
		m.lag.WithLabelValues(sh).Set(s.Lag)
	} else {
		m.lag.DeleteLabelValues(sh)
	}
	if step == StepBackfill || step == StepVerify || step == StepReady {
		m.backlog.WithLabelValues(sh).Set(float64(s.Backlog))
	} else {
		m.backlog.DeleteLabelValues(sh)
	}
}

// forget drops a job's series: its runner stopped here.
func (m *Metrics) forget(shard router.Shard) {
	if m == nil {
		return
	}
	sh := shard.String()
	for _, v := range []*prometheus.GaugeVec{m.step, m.rows, m.estimate, m.lag, m.backlog} {
		v.DeletePartialMatch(prometheus.Labels{"shard": sh})
	}
}

func (m *Metrics) failed(step string) {
	if m != nil {
		m.failures.WithLabelValues(step).Inc()
	}
}

func (m *Metrics) breach(shard router.Shard) {
	if m != nil {
		m.breaches.WithLabelValues(shard.String()).Inc()
	}
}
