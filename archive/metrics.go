package archive

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric names of the archive runs a process makes. No shard label: every
// process runs some of the 1024 shards in turn, and per-shard figures are
// in SHOW ARCHIVE.
const (
	MetricRows        = "convoy_archive_rows_total"
	MetricFiles       = "convoy_archive_files_total"
	MetricBytes       = "convoy_archive_bytes_total"
	MetricErrors      = "convoy_archive_errors_total"
	MetricLastSuccess = "convoy_archive_last_success_timestamp_seconds"
	MetricKeysScanned = "convoy_archive_keys_scanned_total"
)

// Metrics are what this process archived. A nil *Metrics records nothing.
type Metrics struct {
	rows        *prometheus.CounterVec
	files       prometheus.Counter
	bytes       prometheus.Counter
	errors      prometheus.Counter
	lastSuccess prometheus.Gauge
	scans       *prometheus.CounterVec
}

// NewMetrics creates the archiver metrics and registers them with reg
// (nil: not registered).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		rows: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricRows,
			Help: "Rows the archiver handled, by op: archived / deleted (history rows written to a verified, catalogued cold file / their warm row removed after cold.delete_after), inbox_archived / inbox_deleted (the same for read im_inbox rows)."}, []string{"op"}),
		files: prometheus.NewCounter(prometheus.CounterOpts{Name: MetricFiles, Help: "Cold files written, verified and catalogued."}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{Name: MetricBytes, Help: "Bytes of the cold files catalogued."}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Name: MetricErrors,
			Help: "Archive runs that failed (SHOW ARCHIVE's last_error says why; the shard is retried)."}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{Name: MetricLastSuccess,
			Help: "Unix time of the last archive run of any shard that completed here."}),
		scans: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricKeysScanned,
			Help: "Keys the archiver's day scans read, by table (conv_msg, im_inbox): neither table's key starts with the day, so finding old days' rows reads the shard's keys; compare with rows archived."}, []string{"table"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.rows, m.files, m.bytes, m.errors, m.lastSuccess, m.scans} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// op names a row operation of kind k ("archived" / "deleted", "inbox_" before an inbox one).
func op(k *kind, what string) string {
	if k == inbox {
		return "inbox_" + what
	}
	return what
}

func (m *Metrics) archived(k *kind, rows, bytes int64) {
	if m != nil {
		m.rows.WithLabelValues(op(k, "archived")).Add(float64(rows))
		m.files.Inc()
		m.bytes.Add(float64(bytes))
	}
}

func (m *Metrics) deleted(k *kind, rows int) {
	if m != nil {
		m.rows.WithLabelValues(op(k, "deleted")).Add(float64(rows))
	}
}

func (m *Metrics) failed() {
	if m != nil {
		m.errors.Inc()
	}
}

func (m *Metrics) success(at time.Time) {
	if m != nil {
		m.lastSuccess.Set(float64(at.Unix()))
	}
}

func (m *Metrics) scanned(k *kind, keys int) {
	if m != nil {
		m.scans.WithLabelValues(k.table).Add(float64(keys))
	}
}
