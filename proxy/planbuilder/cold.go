package planbuilder

import (
	"slices"

	"github.com/convoy-im/convoy/rewrite"
)

// Cold is a plan's cold-tier facts.
type Cold struct {
	Read  *rewrite.ArchiveRead  // a read the cold tier may continue
	Write *rewrite.ArchiveWrite // a write that may name archived rows
	// Other is the conversation key of a read of one conversation's
	// history or bodies that the cold tier does not continue (another
	// shape: a COUNT, seq <=, a join...): it reads MySQL only, and says so
	// when the conversation has archived rows (coldFallback).
	Other *rewrite.Value
}

// coldOf is a's cold-tier facts; nil for a statement the cold tier does
// not care about.
func coldOf(a *rewrite.Analysis) *Cold {
	if len(a.Sharded) == 0 {
		return nil
	}
	var c Cold
	switch a.Kind {
	case rewrite.KindSelect:
		c.Read, _ = rewrite.ArchiveShape(a)
		if c.Read == nil && a.HasKey && len(a.Keys) == 1 &&
			slices.ContainsFunc(a.Sharded, func(t string) bool { return t == HistoryTable || t == "msg_content" }) {
			c.Other = &a.Keys[0]
		}
	case rewrite.KindUpdate, rewrite.KindDelete:
		c.Write, _ = rewrite.ArchiveWriteShape(a)
	}
	if c.Read != nil || c.Write != nil || c.Other != nil {
		return &c
	}
	return nil
}
