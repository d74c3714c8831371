package migrate

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/convoy-im/convoy/internal/sqlq"
)

// Throttling on harm (docs/design.md §5; gh-ost and Vitess throttle on replica lag
// and load): a copy at its configured rate can still hurt the servers,
// so while a job copies, its runner measures both sides' write latency and
// slows the copy down when either crosses the line (docs/design.md §7: 50 ms write
// P99 by default, migration.throttle_write_p99), and speeds it up again
// once both are well under it.
//
// The measure is a probe: every throttleProbeEvery the runner times a
// one-row autocommit upsert into HeartbeatTable on each side (a commit
// like any client's: the same redo and binlog writes, the same CPU and IO
// queue), and takes the 95th percentile of the last throttleWindow of
// them (20 probes: the second slowest). Every throttleDecideEvery the
// copy's rate factor halves if a side is over the line (down to
// throttleFloor), doubles back if both are under 80 % of it, and holds in
// between: a copy that hurts backs off within half a second, halves again
// every half second the harm lasts, and is back at full speed a few
// seconds after it ends. The binlog apply is never throttled: it must keep
// up for the switch.

// HeartbeatTable is the probe table in both sides' databases.
const HeartbeatTable = "_convoy_migration_heartbeat"

const heartbeatDDL = `CREATE TABLE IF NOT EXISTS %s (
  job   VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  side  VARCHAR(8) NOT NULL,
  at    DATETIME(6) NOT NULL,
  PRIMARY KEY (job, side)
) ENGINE=InnoDB COMMENT='Convoy shard migration: write probes of the copy throttle'`

const (
	throttleProbeEvery  = 100 * time.Millisecond
	throttleWindow      = 2 * time.Second
	throttleDecideEvery = 500 * time.Millisecond
	// throttleFloor is the lowest factor: a copy never stops outright (a
	// job that cannot progress while the servers are merely busy would
	// never end), and a busy day at most multiplies its time by 8.
	throttleFloor = 1.0 / 8
	// throttleRecover: both sides under this share of the line lets the
	// factor grow again (between it and the line, it holds).
	throttleRecover = 0.8
)

// DefaultThrottleWriteP99 is the write latency above which a copy slows
// down: the expansion trigger of docs/design.md §7 ("写入 P99 > 50ms").
const DefaultThrottleWriteP99 = 50 * time.Millisecond

// prober times one write on a side.
type prober func(ctx context.Context) (time.Duration, error)

// heartbeat is a prober writing job's row of side in database on db.
func heartbeat(db *sql.DB, database, job, side string) prober {
	q := "INSERT INTO " + sqlq.Ident(database) + "." + sqlq.Ident(HeartbeatTable) +
		" (job, side, at) VALUES (?, ?, NOW(6)) ON DUPLICATE KEY UPDATE at = VALUES(at)"
	return func(ctx context.Context) (time.Duration, error) {
		start := time.Now()
		_, err := db.ExecContext(ctx, q, job, side)
		return time.Since(start), err
	}
}

// throttle is one job's copy throttle.
type throttle struct {
	limit  time.Duration
	names  [2]string // "source", "target"
	probes [2]prober

	mu     sync.Mutex
	lat    [2][]time.Duration // the last throttleWindow of probes, oldest first
	factor float64
	reason string
}

func newThrottle(limit time.Duration, src, dst prober) *throttle {
	return &throttle{limit: limit, names: [2]string{"source", "target"}, probes: [2]prober{src, dst}, factor: 1}
}

// state is the factor to apply to the copy's rate now, and why it is
// under 1 ("" when it is 1).
func (t *throttle) state() (float64, string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.factor, t.reason
}

// run probes both sides until ctx ends, calling changed after each round
// that moved the factor.
func (t *throttle) run(ctx context.Context, changed func()) {
	tick := time.NewTicker(throttleProbeEvery)
	defer tick.Stop()
	keep := int(throttleWindow / throttleProbeEvery)
	decide := int(throttleDecideEvery / throttleProbeEvery)
	for round := 1; ; round++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		var d [2]time.Duration
		for i, p := range t.probes {
			pctx, cancel := context.WithTimeout(ctx, 2*t.limit+time.Second)
			lat, err := p(pctx)
			cancel()
			if err != nil {
				// A side that does not take a tiny write is hurt, or
				// down: either way, no copy speed to gain there.
				lat = max(lat, 2*t.limit)
			}
			d[i] = lat
		}
		if t.observe(d, keep, round%decide == 0) {
			changed()
		}
	}
}

// observe records one round of probes and, when decide is set, moves the
// factor; it reports whether the factor changed.
func (t *throttle) observe(d [2]time.Duration, keep int, decide bool) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	before := t.factor
	over, under := "", true
	for i := range d {
		t.lat[i] = append(t.lat[i], d[i])
		if len(t.lat[i]) > keep {
			t.lat[i] = t.lat[i][len(t.lat[i])-keep:]
		}
		p := percentileOf(t.lat[i], 0.95)
		if p > t.limit && over == "" {
			over = fmt.Sprintf("%s write probes p95 %s > %s", t.names[i], p.Round(time.Millisecond), t.limit)
		}
		if float64(p) > throttleRecover*float64(t.limit) {
			under = false
		}
	}
	switch {
	case !decide:
	case over != "":
		t.factor = max(t.factor/2, throttleFloor)
		t.reason = over
	case under && t.factor < 1:
		t.factor = min(t.factor*2, 1)
		if t.factor == 1 {
			t.reason = ""
		}
	}
	return t.factor != before
}

// percentileOf is the nearest-rank q-quantile of ds.
func percentileOf(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}
