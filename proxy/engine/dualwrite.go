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
	// Mirror makes the target's rows of a logical table equal to the
	// source's, the rows given by column values (lower-case names; a nil
	// value is unknown). It never fails the client's write: failures are
	// the mirror's to queue and count.
	Mirror(sh router.Shard, table string, cols []string, rows [][]any)
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
	w, ok := pl.a.Written(maxMirrorRows)
	keyAt := -1
	for i, c := range w.Columns {
		if c == pl.a.KeyColumn {
			keyAt = i
		}
	}
	if !ok || keyAt < 0 {
		// Rows not named by the statement: left to the binlog apply.
		if shards := s.writeShards(pl, args); len(shards) > 0 {
			snap := s.e.routes.Current()
			for _, sh := range shards {
				if s.e.dual.Mirrors(sh, snap.Target(sh)) {
					s.e.dual.Mirror(sh, w.Table, nil, nil) // counted as unkeyed
				}
			}
		}
		return nil
	}
	snap := s.e.routes.Current()
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

// mirror hands a committed write's rows to the dual-write. seqs are the
// seqs Convoy allocated to a conv_msg INSERT's rows (by row index), whose
// im_conv_seq rows changed too.
func (s *Session) mirror(ws []mirrorWrite, seqs map[int]uint64) {
	for _, w := range ws {
		cols, rows := w.cols, w.rows
		if len(seqs) > 0 && w.table == historyTable {
			cols = append(cols[:len(cols):len(cols)], "seq")
			convAt := slices.Index(w.cols, "conv_id") // the shard key: always there
			seqRows := make([][]any, 0, len(rows))
			convs := map[any]bool{}
			var convRows [][]any
			for _, r := range rows {
				idx := r[len(r)-1].(int)
				if seq, ok := seqs[idx]; ok {
					seqRows = append(seqRows, append(r[:len(w.cols):len(w.cols)], seq))
				}
				if !convs[r[convAt]] {
					convs[r[convAt]] = true
					convRows = append(convRows, []any{r[convAt]})
				}
			}
			s.e.dual.Mirror(w.shard, "im_conv_seq", []string{"conv_id"}, convRows)
			rows = seqRows
		}
		s.e.dual.Mirror(w.shard, w.table, cols, rows)
	}
}

// txnMirror is a statement's mirror waiting for its transaction's COMMIT.
type txnMirror struct {
	ws   []mirrorWrite
	seqs map[int]uint64
}
