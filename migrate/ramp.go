package migrate

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/convoy-im/convoy/routecfg"
	"github.com/convoy-im/convoy/router"
)

// Read ramp (step 5, seed 001: "灰度切读" by conv_id whitelist 1% -> 10% ->
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

const (
	// RampMaxLag bounds the apply lag under which reads go to the target.
	RampMaxLag = time.Second
	// RampFresh is how long a proxy trusts the last status it saw.
	RampFresh = 2 * time.Second
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
}

type rampState struct {
	percent int
	to      routecfg.Endpoint
	table   *int
	lagOK   bool
	heard   time.Time // when this proxy last saw the record change
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
	return &Ramps{now: time.Now, shards: map[router.Shard]*rampState{}, metrics: m}, nil
}

// Update takes a job record as the watch saw it (nil: deleted).
func (r *Ramps) Update(shard int, job *routecfg.Job) {
	sh := router.Shard(shard)
	var st *rampState
	if job != nil && job.Step == StepReady {
		if p, err := decodeProgress(*job); err == nil && p.Commands.ReadPercent > 0 {
			lag := p.State.Status.Lag
			_, table := p.State.tables()
			st = &rampState{percent: p.Commands.ReadPercent, to: job.To, table: table,
				lagOK: lag >= 0 && lag < RampMaxLag.Seconds(), heard: r.now()}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if st == nil {
		delete(r.shards, sh)
		r.endStats(sh)
	} else {
		r.shards[sh] = st
		r.startStats(sh)
	}
	r.active.Store(int32(len(r.shards)))
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
	st := r.shards[sh]
	r.mu.RUnlock()
	if st == nil {
		return nil, false
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
