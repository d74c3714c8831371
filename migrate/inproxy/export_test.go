package inproxy

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/convoy-im/convoy/router"
)

// What the tests of package inproxy_test (env_test.go says why they are
// there) look at inside this package, and the helpers they share with its
// own tests.

var (
	ReplayWait     = replayWait
	EncodeProgress = encodeProgress
	KeysOfShard    = keysOfShard
	RampJob        = rampJob
	AnnounceAll    = announceAll
	RampSnapshot   = rampSnapshot
	RampReads      = rampReads
	Itoa           = itoa
	FormatPct      = formatPct
)

// QueueKeys is Mirror.queueKeys.
func (m *Mirror) QueueKeys(writes []TableKeys, cause error) error { return m.queueKeys(writes, cause) }

// MirrorOpen reports whether sh's mirror is open (sh must be followed).
func (d *DualWrites) MirrorOpen(sh router.Shard) bool { return d.state(sh).mirror.Load() != nil }

// Writes is the counter of the dual-writes of a result.
func (m *DualWriteMetrics) Writes(result string) prometheus.Counter {
	return m.writes.WithLabelValues(result)
}
