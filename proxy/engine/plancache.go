package engine

import (
	"sync"
	"sync/atomic"

	"github.com/convoy-im/convoy/rewrite"
)

// planCache holds the plans of text statements by their normalised form
// (rewrite.Normalize: literals replaced with `?`), so the point reads and
// history pages an IM client sends thousands of times differ only in values
// and are parsed once per proxy instead of once per statement.
//
// Only plans that are safe to share between sessions are kept
// (rewrite.SharedKey): a SELECT on sharded tables routed by one shard-key
// value, whose literals all sit in WHERE / LIMIT, and a one-row INSERT /
// REPLACE (a message sent, an inbox entry); the history pages the hot tier
// serves are such SELECTs. Such a plan is only read after it is built (its
// templates are immutable and built here; no scatter plan, no prepared
// fallback state). Every other normalised form is remembered as "not
// cacheable" so it costs one failed lookup, not a second parse. The cache
// does not depend on the route table: holes are filled from the current
// snapshot at every execution.
type planCache struct {
	m   sync.Map // normalised SQL -> *plan (nil: not cacheable)
	n   atomic.Int64
	max int64
}

// maxCachedPlans bounds the cache; when full it is emptied (statement shapes
// are few in practice, so this only trips on generated SQL).
const maxCachedPlans = 10000

func newPlanCache() *planCache { return &planCache{max: maxCachedPlans} }

func (c *planCache) get(norm string) (*plan, bool) {
	v, ok := c.m.Load(norm)
	if !ok {
		return nil, false
	}
	return v.(*plan), true
}

func (c *planCache) put(norm string, pl *plan) {
	if c.n.Add(1) > c.max {
		c.m.Clear()
		c.n.Store(1)
	}
	c.m.Store(norm, pl)
}

// cachedPlan returns the shared plan of a text statement and its literals as
// arguments, or ok=false when the statement must be planned on its own.
func (s *Session) cachedPlan(sql string) (pl *plan, args []any, ok bool) {
	if s.sqlModeNBE != "" {
		// Its plans differ from other sessions' for the same text (LIKE:
		// nobackslash.go); such sessions are rare enough to plan each time.
		s.e.metrics.countPlanCache("bypass")
		return nil, nil, false
	}
	c := s.e.plans
	norm, lits, ok := rewrite.Normalize(s.normBuf[:0], sql, s.lits[:0])
	s.normBuf, s.lits = norm, lits
	if !ok || len(lits) == 0 {
		s.e.metrics.countPlanCache("bypass")
		return nil, nil, false
	}
	result := "hit"
	key := string(norm) // one conversion: sync.Map keys are interfaces
	pl, known := c.get(key)
	if !known {
		result = "miss"
		pl = s.buildShared(key, len(lits))
		c.put(key, pl)
	}
	if pl == nil {
		s.e.metrics.countPlanCache("bypass")
		return nil, nil, false
	}
	args = make([]any, len(lits))
	for i, l := range lits {
		args[i] = l
	}
	if _, undecoded := lits[pl.keyParam].Val.(rewrite.Undecoded); undecoded || !pl.inlinable(args) {
		// A key Convoy would have to decode (escapes, _binary), or e.g.
		// LIMIT '5': the full path routes it, or gives MariaDB's error.
		s.e.metrics.countPlanCache("bypass")
		return nil, nil, false
	}
	s.e.metrics.countPlanCache(result)
	return pl, args, true
}

// buildShared plans a normalised statement; nil when it is not shareable.
func (s *Session) buildShared(norm string, params int) *plan {
	pl, err := s.plan(norm)
	if err != nil || pl.Tmpl == nil || !pl.Inline || pl.NamedColumns || pl.A.SessionRefs != 0 || pl.Explain != "" {
		return nil // (columns Convoy named change with DDL, session values with the session)
	}
	key, ok := rewrite.SharedKey(pl.A, params)
	if !ok {
		return nil
	}
	if rewrite.NeedsSeq(pl.A) {
		// Built now: a shared plan is never written after this.
		if pl.seqHoles, err = rewrite.SeqInsertHoles(pl.A); err != nil {
			return nil
		}
	}
	pl.textArgs, pl.keyParam = true, key
	return pl
}
