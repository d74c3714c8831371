package migrate

import (
	"sync"
	"time"

	"github.com/convoy-im/convoy/binlog"
)

// lagMeter measures an Applier's replication lag to a fraction of a second
// from its CaughtUp checks, without writing anything to the source.
//
// The binlog's event times are whole seconds, so "now minus the commit time
// of the last transaction applied" is off by up to a second, and it also
// counts the quiet time after that transaction (a shard with no writes for
// a minute would show a minute of lag while nothing is pending). Instead
// each check notes the source's current position and when it was read. A
// noted position the apply has since reached proves that everything the
// source committed before that moment is applied; so with T the newest
// such moment, the oldest transaction not applied committed after T, and
// the lag is at most now - T. It is also at least now - T' for the oldest
// noted position not reached yet (read at T'), so the measure is exact to
// the checks' period (a quarter of a second in the backfill's apply).
//
// Before any noted position is reached (an apply just started) the bound
// falls back to the last applied transaction's binlog time, plus the
// second the binlog's rounding may hide.
type lagMeter struct {
	mu      sync.Mutex
	pending []lagSample // noted positions not reached yet, oldest first
	reached time.Time   // the newest moment whose position is applied
}

type lagSample struct {
	at  time.Time
	pos binlog.Position
}

// lagSamplesMax bounds the noted positions kept while the apply is far
// behind: past it the newest replaces the last, so the bound only grows
// coarser (never too small) until the apply passes the older ones.
const lagSamplesMax = 64

// observe records a check made at now: cur is the source's position then,
// caught whether the apply had reached it, reached the Applier's test for
// the positions noted earlier.
func (m *lagMeter) observe(now time.Time, cur binlog.Position, caught bool, reached func(binlog.Position) (bool, error)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if caught {
		m.pending, m.reached = m.pending[:0], now
		return
	}
	for len(m.pending) > 0 {
		ok, err := reached(m.pending[0].pos)
		if err != nil || !ok {
			break
		}
		m.reached = m.pending[0].at
		m.pending = m.pending[1:]
	}
	switch n := len(m.pending); {
	case n > 0 && m.pending[n-1].pos == cur:
		// The source has not moved since the last note: keep the older
		// moment, it is the tighter bound.
	case n >= lagSamplesMax:
		m.pending[n-1] = lagSample{now, cur}
	default:
		m.pending = append(m.pending, lagSample{now, cur})
	}
}

// lag is the measure at now (-1: unknown). lastApplied is the binlog time
// of the last source transaction handled (zero: none yet).
func (m *lagMeter) lag(now, lastApplied time.Time) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	since := m.reached
	if since.IsZero() {
		if lastApplied.IsZero() {
			return -1
		}
		since = lastApplied.Add(-time.Second)
	}
	if len(m.pending) == 0 && !m.reached.IsZero() && now.Sub(m.reached) < time.Second {
		// Caught up at the last check, a moment ago.
		return 0
	}
	return max(now.Sub(since), 0)
}
