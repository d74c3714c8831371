package engine

import (
	"github.com/convoy-im/convoy/router"
)

// ReadRamps is step 5 of a shard migration, the read ramp (migrate.Ramps):
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
	// target's lag is over the bound. One atomic load when nothing is
	// ramped.
	ReadSnapshot(snap *router.Snapshot, sh router.Shard, key uint64) *router.Snapshot
}

// SetReadRamps installs the read ramps; call before serving.
func (e *Engine) SetReadRamps(r ReadRamps) { e.ramps = r }

// rampedRead returns the routes a single-key read of pl uses when its key
// is ramped to a migration target, or nil.
func (s *Session) rampedRead(pl *plan, snap *router.Snapshot, args []any) *router.Snapshot {
	a := pl.a
	if s.e.ramps == nil || !s.e.ramps.Any() || pl.write() || s.inTxn() || len(a.Keys) != 1 {
		return nil
	}
	k, err := keyOf(a.Keys[0], args)
	if err != nil {
		return nil
	}
	return s.e.ramps.ReadSnapshot(snap, router.ShardOf(k), k)
}
