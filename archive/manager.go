package archive

import (
	"context"
	"errors"
	"hash/crc32"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/convoy-im/convoy/coord"
	"github.com/convoy-im/convoy/router"
)

// Manager defaults.
const (
	// DefaultInterval between two runs of a shard that succeeded: a day
	// becomes due once a day, and delete steps fall due at any hour.
	DefaultInterval = time.Hour
	// DefaultRetry after a failed run (store or datasource down, a
	// migration in progress).
	DefaultRetry = time.Minute
	// sweepEvery is how often the manager looks for due shards: ARCHIVE
	// SHARD n NOW starts within it.
	sweepEvery = 10 * time.Second
)

// Manager runs due shards' archivers in this process, one at a time:
// every `convoy serve` with cold.enabled hosts one, and the shard
// elections spread the 1024 shards over the processes (a shard another
// process runs is passed over within two seconds).
type Manager struct {
	a               *Archiver
	interval, retry time.Duration
	cancel          context.CancelFunc
	wg              sync.WaitGroup
	only            []int // tests: the shards swept (nil: all)
}

// NewManager starts a manager of a's shards (interval, retry: 0 for the
// defaults). Close stops it.
func NewManager(a *Archiver, interval, retry time.Duration) *Manager {
	return newManager(a, interval, retry, nil)
}

func newManager(a *Archiver, interval, retry time.Duration, only []int) *Manager {
	if interval <= 0 {
		interval = DefaultInterval
	}
	if retry <= 0 {
		retry = DefaultRetry
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Manager{a: a, interval: interval, retry: retry, cancel: cancel, only: only}
	m.wg.Add(1)
	go m.loop(ctx)
	return m
}

// Close stops the manager and the run in progress (its state is in etcd;
// the runner resigns, so another process can take the shard at once).
func (m *Manager) Close() error {
	m.cancel()
	m.wg.Wait()
	return nil
}

func (m *Manager) loop(ctx context.Context) {
	defer m.wg.Done()
	t := time.NewTicker(sweepEvery)
	defer t.Stop()
	for {
		m.sweep(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sweep runs every due shard, NOW requests first, the rest from an offset
// of this process's own so that processes start on different shards.
func (m *Manager) sweep(ctx context.Context) {
	a := m.a
	if paused, err := Paused(ctx, a.cfg.Client, a.cfg.Cluster); err != nil || paused {
		return
	}
	jobs, _, err := a.jobs.List(ctx)
	if err != nil {
		a.log.Debug("listing archive records", zap.Error(err))
		return
	}
	byShard := map[int]coord.Job{}
	for _, j := range jobs {
		byShard[j.Shard] = j
	}
	var now, rest []int
	off := int(crc32.ChecksumIEEE([]byte(a.cfg.ID)) % router.NumShards)
	for i := range router.NumShards {
		sh := (off + i) % router.NumShards
		if m.only != nil && !slices.Contains(m.only, sh) {
			continue
		}
		j, ok := byShard[sh]
		st, derr := decodeState(j)
		switch {
		case !ok:
			rest = append(rest, sh) // never run
		case derr != nil:
		case st.Now:
			now = append(now, sh)
		case m.due(j, st):
			rest = append(rest, sh)
		}
	}
	for _, sh := range append(now, rest...) {
		if ctx.Err() != nil {
			return
		}
		err := a.runShard(ctx, sh, m.due)
		switch {
		case err == nil, errors.Is(err, ErrNotElected), errors.Is(err, ErrMigrating):
		case errors.Is(err, ErrPaused):
			return
		default:
			a.log.Debug("archive run", zap.Int("shard", sh), zap.Error(err))
		}
	}
}

// due: the shard's last run is older than the interval (the retry delay
// after a failure).
func (m *Manager) due(j coord.Job, st state) bool {
	wait := m.interval
	if j.LastError != "" {
		wait = m.retry
	}
	return !m.a.cfg.Now().Before(st.LastRun.Add(wait))
}
