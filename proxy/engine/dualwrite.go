package engine

import (
	"slices"

	"github.com/convoy-im/convoy/rewrite"
	"github.com/convoy-im/convoy/router"
)

// DualWrites is step 2 of a shard migration, the dual-write
// (migrate.DualWrites): a write a migrating shard's source committed is
// mirrored to the target before the client's ACK. The engine's share is to
// say which rows a write touched; the mirror re-reads them from the source,
// so what it is told needs to name rows, not their values.
type DualWrites interface {
	// Any reports whether any shard is mirrored now (one atomic load).
	Any() bool
	// Mirrors reports whether writes of sh that ran at at are mirrored.
	Mirrors(sh router.Shard, at router.Target) bool
	// Mirror makes the target's rows equal to the source's, every table
	// of a committed write at once. It never fails the client's write:
	// failures are the mirror's to queue and count.
	Mirror(sh router.Shard, writes []MirrorRows)
}

// MirrorRows are a write's rows of one logical table by column values
// (lower-case names; a row may hold values of other columns, and a nil
// value is unknown).
type MirrorRows struct {
	Table   string
	Columns []string
	Rows    [][]any
}

// SetDualWrites installs the dual-write; call before serving.
func (e *Engine) SetDualWrites(d DualWrites) { e.dual = d }

// maxMirrorRows bounds the rows one statement's mirror names (an IN list's
// combinations); past it the binlog apply alone carries the write.
const maxMirrorRows = 1000

// mirrorWrite is one statement's rows of mirrored shards, mirrored once
// its transaction has committed.
type mirrorWrite struct {
	shard router.Shard
	table string
	cols  []string
	rows  [][]any
}

// mirrorPlan returns the mirrored shards' rows of a write about to run, or
// nil when none of its shards is mirrored (the common case when a
// migration runs: one map lookup per shard). A conv_msg INSERT whose seqs
// Convoy allocates gets them after it ran (withSeqs).
func (s *Session) mirrorPlan(pl *plan, args []any) []mirrorWrite {
	if s.e.dual == nil || !s.e.dual.Any() || pl.a.Kind == rewrite.KindDDL {
		return nil
	}
	// The shards first: a write of a shard not migrating costs a lookup,
	// not a walk of its statement.
	snap := s.e.routes.Current()
	mirrored := false
	for _, sh := range s.writeShards(pl, args) {
		if s.e.dual.Mirrors(sh, snap.Target(sh)) {
			mirrored = true
			break
		}
	}
	if !mirrored {
		return nil
	}
	w, ok := pl.a.Written(maxMirrorRows)
	keyAt := slices.Index(w.Columns, pl.a.KeyColumn)
	if !ok || keyAt < 0 {
		// Rows not named by the statement: left to the binlog apply
		// (the mirror counts it as unkeyed).
		for _, sh := range s.writeShards(pl, args) {
			if s.e.dual.Mirrors(sh, snap.Target(sh)) {
				s.e.dual.Mirror(sh, []MirrorRows{{Table: w.Table}})
			}
		}
		return nil
	}
	var out []mirrorWrite
	for r, row := range w.Rows {
		vals := make([]any, len(row))
		for i, v := range row {
			vals[i] = resolveValue(v, args)
		}
		k, err := router.KeyFromValue(vals[keyAt])
		if err != nil {
			return nil
		}
		sh := router.ShardOf(k)
		if !s.e.dual.Mirrors(sh, snap.Target(sh)) {
			continue
		}
		i := len(out) - 1
		for ; i >= 0 && out[i].shard != sh; i-- {
		}
		if i < 0 {
			out = append(out, mirrorWrite{shard: sh, table: w.Table, cols: w.Columns})
			i = len(out) - 1
		}
		out[i].rows = append(out[i].rows, append(vals, r)) // the row's index, for withSeqs
	}
	return out
}

// resolveValue is a statement value as a Go value (nil: unknown).
func resolveValue(v rewrite.Value, args []any) any {
	switch {
	case v.Param == rewrite.Unknown:
		return nil
	case v.Param >= 0:
		if v.Param >= len(args) {
			return nil
		}
		if l, ok := args[v.Param].(rewrite.Literal); ok {
			return l.Val
		}
		return args[v.Param]
	}
	return v.Lit
}

// mirror hands committed writes' rows to the dual-write, one call per
// shard. seqs are the seqs Convoy allocated to a conv_msg INSERT's rows (by
// row index), whose im_conv_seq rows changed too.
func (s *Session) mirror(ms []txnMirror) {
	var order []router.Shard
	byShard := map[router.Shard][]MirrorRows{}
	add := func(sh router.Shard, r MirrorRows) {
		if _, ok := byShard[sh]; !ok {
			order = append(order, sh)
		}
		byShard[sh] = append(byShard[sh], r)
	}
	for _, m := range ms {
		for _, w := range m.ws {
			cols, rows := w.cols, w.rows
			if len(m.seqs) > 0 && w.table == historyTable {
				cols = append(cols[:len(cols):len(cols)], "seq")
				convAt := slices.Index(w.cols, "conv_id") // the shard key: always there
				seqRows := make([][]any, 0, len(rows))
				convs := map[any]bool{}
				var convRows [][]any
				for _, r := range rows {
					idx := r[len(r)-1].(int)
					if seq, ok := m.seqs[idx]; ok {
						seqRows = append(seqRows, append(r[:len(w.cols):len(w.cols)], seq))
					}
					if !convs[r[convAt]] {
						convs[r[convAt]] = true
						convRows = append(convRows, []any{r[convAt]})
					}
				}
				add(w.shard, MirrorRows{Table: "im_conv_seq", Columns: []string{"conv_id"}, Rows: convRows})
				rows = seqRows
			}
			add(w.shard, MirrorRows{Table: w.table, Columns: cols, Rows: rows})
		}
	}
	for _, sh := range order {
		s.e.dual.Mirror(sh, byShard[sh])
	}
}

// txnMirror is a statement's mirror waiting for its transaction's COMMIT.
type txnMirror struct {
	ws   []mirrorWrite
	seqs map[int]uint64
}
