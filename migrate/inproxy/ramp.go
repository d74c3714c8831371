package inproxy

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/convoy-im/convoy/coord"
	"github.com/convoy-im/convoy/migrate/internal/jobrec"
	"github.com/convoy-im/convoy/router"
)

// Read ramp (step 5, docs/design.md §5: "灰度切读" by conv_id whitelist 1% -> 10% ->
// 50% -> 100%): while a job is ready (verified, the binlog apply keeping
// the target current) and a DBA has set READ PERCENT p, every proxy sends
// the reads of p% of the shard's conversations (or users) to the target.
// The share is a fixed function of the key, so a conversation's reads stay
// on one side while p is unchanged and only move one way as p grows.
//
// A proxy trusts the target only while the runner says its apply lag is
// under RampMaxLag and keeps saying so: the runner re-publishes its status
// every 500 ms while reads are ramped (the lag measured to a quarter of a
// second: lagMeter); a proxy that heard nothing for RampFresh (runner
// dead, etcd away) sends the reads back to the source.
// Writes never move before the switch, and the hot tier is filled only
// from the source.
//
// The reads of a conversation go to the target only once the target
// certainly has everything its clients were told was written: every proxy
// mirrors the writes of the shard's conversations in the READ PERCENT
// share (dualwrite.go) from the moment it sees the command, and announces
// that share (coord.RampingKey's value); the runner waits until every
// serving proxy announced it, notes the source's binlog position, waits
// for the apply to pass it, and only then publishes the share as
// confirmed (jobrec.Status.RampPercent). Writes committed before that position
// are applied; those after it are mirrored before their ACK. A proxy
// reads from the target the smaller of READ PERCENT and the confirmed
// share, so a share lowered by the DBA takes effect at once.
//
// A rollback deletes the job's rows on the target, so it must first know
// that no proxy reads the shard there any more. A proxy announces that it
// may ramp a shard (coord.RampingKey, under its registration lease)
// before it sends a single read to the target, and withdraws the key
// rampGrace after it stopped (the reads sent before then have ended); it
// stops as soon as it sees the rollback asked for. The runner deletes
// nothing while a key of the shard is left (migrate's
// jobRun.waitRampsDropped).

const (
	// RampMaxLag bounds the apply lag under which reads go to the target.
	RampMaxLag = time.Second
	// RampFresh is how long a proxy trusts the last status it saw.
	RampFresh = 2 * time.Second
	// rampGrace is how long a proxy keeps its ramping key after it
	// stopped ramping a shard: reads sent to the target before that end
	// within it (a read's statement timeout is longer, but a history page
	// takes milliseconds).
	rampGrace = time.Second
	// rampAnnounceEvery paces the announcer: it also writes the keys again,
	// in case a lost lease took them.
	rampAnnounceEvery = time.Second
)

// Ramps is a proxy's view of the read ramps, fed by a watch of the job
// records. It implements engine.ReadRamps.
type Ramps struct {
	now    func() time.Time
	active atomic.Int32 // shards with a ramp: 0 keeps the read path at one load

	mu     sync.RWMutex
	shards map[router.Shard]*rampState

	// stats are each ramped shard's reads by side (rampstats.go), from the
	// ramp's start to its end: an array, so that recording a read takes
	// no lock.
	stats   [router.NumShards]atomic.Pointer[rampStats]
	metrics rampMetrics

	// announced are the shards whose ramping key is written (guarded by
	// mu): only those ramp. ended is when a shard's ramp ended, for its
	// key's withdrawal. kick wakes the announcer.
	announced map[router.Shard]int // the percent written
	ended     map[router.Shard]time.Time
	kick      chan struct{}
}

type rampState struct {
	// percent is the share read from the target: the DBA's READ PERCENT,
	// but no more than the runner confirmed (jobrec.Status.RampPercent:
	// every proxy mirrors that share and the apply passed the moment they
	// all did). mirror is READ PERCENT itself, what this proxy mirrors and
	// announces.
	percent, mirror int
	to              coord.Endpoint
	table           *int
	lagOK           bool
	heard           time.Time // when this proxy last saw the record change
	// alt caches the routes with the shard moved, per routes version.
	altMu      sync.Mutex
	altVersion int64
	alt        *router.Snapshot
}

// NewRamps returns an empty view; Update feeds it (WatchJobs does). Its
// per-side read metrics are registered with reg (nil: not registered).
func NewRamps(reg prometheus.Registerer) (*Ramps, error) {
	m, err := newRampMetrics(reg)
	if err != nil {
		return nil, err
	}
	return &Ramps{now: time.Now, shards: map[router.Shard]*rampState{}, metrics: m,
		announced: map[router.Shard]int{}, ended: map[router.Shard]time.Time{}, kick: make(chan struct{}, 1)}, nil
}

// Announce keeps this proxy's ramping keys (coord.RampingKey, through
// w: the proxy's registration) in step with its ramps until ctx ends. No
// shard ramps before its key is written, so a proxy that is not
// registered never ramps.
func (r *Ramps) Announce(ctx context.Context, w RampStatsWriter, key func(shard int) string, log *zap.Logger) {
	tick := time.NewTicker(rampAnnounceEvery)
	defer tick.Stop()
	for {
		r.announce(ctx, w, key, log)
		select {
		case <-ctx.Done():
			return
		case <-r.kick:
		case <-tick.C:
		}
	}
}

func (r *Ramps) announce(ctx context.Context, w RampStatsWriter, key func(shard int) string, log *zap.Logger) {
	r.mu.RLock()
	var put, del []router.Shard
	percent := map[router.Shard]int{}
	for sh, st := range r.shards {
		put = append(put, sh) // again every tick: a lost lease took it
		percent[sh] = st.mirror
	}
	now := r.now()
	for sh, at := range r.ended {
		if r.shards[sh] == nil && now.Sub(at) >= rampGrace {
			del = append(del, sh)
		}
	}
	r.mu.RUnlock()
	for _, sh := range put {
		wctx, cancel := context.WithTimeout(ctx, rampAnnounceEvery)
		err := w.Put(wctx, key(int(sh)), strconv.Itoa(percent[sh]))
		cancel()
		if err != nil {
			log.Debug("cannot announce a read ramp yet; its reads stay on the source", zap.Int("shard", int(sh)), zap.Error(err))
			continue
		}
		r.mu.Lock()
		if r.shards[sh] != nil {
			r.announced[sh] = percent[sh]
		}
		r.mu.Unlock()
	}
	for _, sh := range del {
		wctx, cancel := context.WithTimeout(ctx, rampAnnounceEvery)
		err := w.Delete(wctx, key(int(sh)))
		cancel()
		if err != nil {
			continue // next tick
		}
		r.mu.Lock()
		if r.shards[sh] == nil {
			delete(r.ended, sh)
		}
		r.mu.Unlock()
	}
}

// Update takes a job record as the watch saw it (nil: deleted).
func (r *Ramps) Update(shard int, job *coord.Job) {
	sh := router.Shard(shard)
	var st *rampState
	if job != nil && job.Step == jobrec.StepReady && job.Intent != jobrec.IntentRollback {
		// A rollback asked for ends the ramp at once: the runner deletes
		// the target's rows once every proxy withdrew its key.
		if p, err := jobrec.Decode(*job); err == nil && p.Commands.ReadPercent > 0 && !p.Commands.Rollback {
			lag := p.State.Status.Lag
			_, table := p.State.Tables()
			st = &rampState{percent: min(p.Commands.ReadPercent, p.State.Status.RampPercent), mirror: p.Commands.ReadPercent,
				to: job.To, table: table, lagOK: lag >= 0 && lag < RampMaxLag.Seconds(), heard: r.now()}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case st == nil && r.shards[sh] != nil:
		delete(r.shards, sh)
		delete(r.announced, sh)
		r.ended[sh] = r.now()
		r.endStats(sh)
	case st != nil:
		if r.shards[sh] == nil || r.shards[sh].mirror != st.mirror {
			delete(r.ended, sh)
			r.wake() // announce it before its first ramped read, or its new share
		}
		r.shards[sh] = st
		r.startStats(sh)
	}
	r.active.Store(int32(len(r.shards)))
}

func (r *Ramps) wake() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Share is a key's place in 0..99: reads of keys below READ PERCENT go to
// the target. A multiplicative hash of the key, independent of the shard
// hash (every key of a shard has the same CRC32 % 1024).
func Share(key uint64) int {
	return int((key * 0x9E3779B97F4A7C15 >> 32) % 100)
}

// Any implements engine.ReadRamps.
func (r *Ramps) Any() bool { return r.active.Load() != 0 }

// ReadSnapshot implements engine.ReadRamps.
func (r *Ramps) ReadSnapshot(snap *router.Snapshot, sh router.Shard, key uint64) (*router.Snapshot, bool) {
	if r.active.Load() == 0 {
		return nil, false
	}
	r.mu.RLock()
	st, announced := r.shards[sh], r.announced[sh]
	r.mu.RUnlock()
	if st == nil {
		return nil, false
	}
	if announced == 0 {
		return nil, true // to the source until the runner can see this proxy ramps
	}
	cur := snap.Target(sh)
	if cur.Datasource == st.to.Datasource && cur.Database == st.to.Database {
		return nil, false // switched already: the routes send it there
	}
	if !st.lagOK || r.now().Sub(st.heard) > RampFresh || Share(key) >= st.percent {
		return nil, true
	}
	st.altMu.Lock()
	defer st.altMu.Unlock()
	if st.alt == nil || st.altVersion != snap.Version() {
		alt, err := router.NewSnapshot(router.MoveShard(snap.Document(), int(sh), st.to.Datasource, st.to.Database, st.table))
		if err != nil {
			return nil, true
		}
		st.alt, st.altVersion = alt, snap.Version()
	}
	return st.alt, true
}

// Shards lists the shards with a ramp now (WatchJobs).
func (r *Ramps) Shards() []int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]int, 0, len(r.shards))
	for sh := range r.shards {
		out = append(out, int(sh))
	}
	return out
}
