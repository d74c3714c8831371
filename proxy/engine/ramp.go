package engine

import (
	"time"

	"github.com/convoy-im/convoy/router"
)

// ReadRamps is step 5 of a shard migration, the read ramp (inproxy.Ramps):
// while a migrating shard's target is verified and kept current, the reads
// of a stable share of its conversations go there, so the new side takes
// real traffic before it takes the writes. Writes, reads inside
// transactions and the hot tier's fills stay on the authoritative side.
type ReadRamps interface {
	// Any reports whether any shard is ramped now (one atomic load): the
	// read path asks it before it computes the key.
	Any() bool
	// ReadSnapshot returns the routes a read of key (the conversation or
	// user) on shard sh uses instead of snap, or nil when the read stays:
	// the shard is not ramped, the key is outside the share, or the
	// target's lag is over the bound. ramped reports whether sh is in a
	// ramp: the read's outcome then goes to ObserveRead. One atomic load
	// when nothing is ramped.
	ReadSnapshot(snap *router.Snapshot, sh router.Shard, key uint64) (alt *router.Snapshot, ramped bool)
	// ObserveRead records a read of a ramped shard on the target (or the
	// source): its backend time and error (SHOW MIGRATIONS shows both
	// sides' error rate and P99).
	ObserveRead(sh router.Shard, target bool, d time.Duration, err error)
}

// rampSide says whether a part reads a ramped shard, and on which side.
type rampSide uint8

const (
	notRamped rampSide = iota
	rampSource
	rampTarget
)

// SetReadRamps installs the read ramps; call before serving.
func (e *Engine) SetReadRamps(r ReadRamps) { e.ramps = r }

// rampedRead returns the routes a single-key read of pl uses when its key
// is ramped to a migration target (else nil), and the side it reads if its
// shard is in a ramp.
func (s *Session) rampedRead(pl *plan, snap *router.Snapshot, args []any) (*router.Snapshot, rampSide) {
	a := pl.A
	if s.e.ramps == nil || !s.e.ramps.Any() || pl.Write() || s.inTxn() || len(a.Keys) != 1 {
		return nil, notRamped
	}
	k, err := keyOf(a.Keys[0], args)
	if err != nil {
		return nil, notRamped
	}
	switch alt, ramped := s.e.ramps.ReadSnapshot(snap, router.ShardOf(k), k); {
	case alt != nil:
		return alt, rampTarget
	case ramped:
		return nil, rampSource
	}
	return nil, notRamped
}

// readsTarget reports whether a read of pl goes to a migration target.
func (s *Session) readsTarget(pl *plan, args []any) bool {
	_, side := s.rampedRead(pl, s.e.routes.Current(), args)
	return side == rampTarget
}

// observeRamp records a read of shard sh started at start on its side of a
// ramp, if the shard is ramped (side is a part's ramp).
func (e *Engine) observeRamp(side rampSide, sh router.Shard, start time.Time, err error) {
	if side != notRamped {
		e.ramps.ObserveRead(sh, side == rampTarget, time.Since(start), err)
	}
}
