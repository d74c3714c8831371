package migrate

import (
	"testing"
	"time"

	"github.com/convoy-im/convoy/binlog"
)

// TestLagMeter drives the meter with checks a quarter of a second apart
// against a fake apply whose position is a number.
func TestLagMeter(t *testing.T) {
	var m lagMeter
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	applied := 0
	pos := func(n int) binlog.Position { return binlog.Position(string(rune('a' + n))) }
	reached := func(p binlog.Position) (bool, error) { return int(p[0]-'a') <= applied, nil }
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

	if got := m.lag(at(0), time.Time{}); got != -1 {
		t.Fatalf("nothing known: %v, want -1", got)
	}
	// Before any check: the last transaction's binlog time, one second of
	// rounding added.
	if got := m.lag(at(500), at(0)); got != 1500*time.Millisecond {
		t.Errorf("from the binlog time: %v, want 1.5s", got)
	}
	m.observe(at(0), pos(0), true, reached)
	if got := m.lag(at(100), at(-60_000)); got != 0 {
		t.Errorf("caught up a moment ago: %v, want 0 (the binlog time of a quiet shard's last write does not count)", got)
	}
	// The source moves on at 250 ms (position 1) and keeps moving; the
	// apply stops at 0.
	for i, ms := range []int{250, 500, 750, 1000} {
		m.observe(at(ms), pos(i+1), false, reached)
	}
	if got := m.lag(at(1000), time.Time{}); got != time.Second {
		t.Errorf("stuck since the check at 0: %v, want 1s", got)
	}
	// The apply passes position 2 (noted at 500 ms): everything before
	// 500 ms is applied, so at 1250 the lag is at most 750 ms.
	applied = 2
	m.observe(at(1250), pos(5), false, reached)
	if got := m.lag(at(1250), time.Time{}); got != 750*time.Millisecond {
		t.Errorf("after reaching the position noted at 500ms: %v, want 750ms", got)
	}
	// A source that does not move keeps its older note (the tighter bound).
	m.observe(at(1500), pos(5), false, reached)
	if n := len(m.pending); n != 3 || m.pending[n-1].at != at(1250) {
		t.Errorf("pending %+v", m.pending)
	}
	// Checks that stop (the source unreachable): the lag keeps growing.
	if got := m.lag(at(5000), time.Time{}); got != 4500*time.Millisecond {
		t.Errorf("no checks since: %v, want 4.5s", got)
	}
	// Caught up again.
	applied = 100
	m.observe(at(5000), pos(6), true, reached)
	if got := m.lag(at(5200), time.Time{}); got != 0 || len(m.pending) != 0 {
		t.Errorf("caught up: %v, pending %v", got, m.pending)
	}
	// Caught up, then no check for over a second: no longer 0.
	if got := m.lag(at(6500), time.Time{}); got != 1500*time.Millisecond {
		t.Errorf("caught up 1.5s ago and not checked since: %v", got)
	}
	// Far behind: the notes are bounded, the bound only coarser.
	applied = 0
	for i := 0; i < 3*lagSamplesMax; i++ {
		m.observe(at(7000+250*i), pos(7+i%10), false, reached)
	}
	if len(m.pending) > lagSamplesMax {
		t.Errorf("%d notes kept", len(m.pending))
	}
	if got := m.lag(at(7000+250*3*lagSamplesMax), time.Time{}); got < 250*3*lagSamplesMax*time.Millisecond {
		t.Errorf("far behind: %v, want at least the time since the last caught-up check", got)
	}
}
