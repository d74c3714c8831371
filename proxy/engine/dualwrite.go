package engine

import (
	"slices"

	"github.com/convoy-im/convoy/proxy/planbuilder"
	"github.com/convoy-im/convoy/rewrite"
	"github.com/convoy-im/convoy/router"
)

// DualWrites is step 2 of a shard migration, the dual-write
// (inproxy.DualWrites): the ACK of a write a migrating shard's source
// committed waits until the target shows it. The engine's share is to say
// which rows a write touched (the keys queued if the target is late) and
// which source transaction committed them.
type DualWrites interface {
	// Any reports whether any shard is mirrored now (one atomic load).
	Any() bool
	// Mirrors reports whether writes of sh that ran at at are mirrored.
	Mirrors(sh router.Shard, at router.Target) bool
	// Mirror waits until the target shows commit, the source transaction
	// (its GTID, @@last_gtid; "" unknown) that committed writes, every
	// table of them. It never fails the client's write: a late target is
	// the dual-write's to queue and count.
	Mirror(sh router.Shard, writes []MirrorRows, commit string)
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
	if s.e.dual == nil || !s.e.dual.Any() || pl.A.Kind == rewrite.KindDDL {
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
	w, ok := pl.A.Written(maxMirrorRows)
	keyAt := slices.Index(w.Columns, pl.A.KeyColumn)
	if !ok || keyAt < 0 {
		// Rows not named by the statement: the ACK still waits for the
		// target, but a late target has no keys to queue (the mirror
		// counts it as unkeyed, left to the binlog apply).
		var out []mirrorWrite
		for _, sh := range s.writeShards(pl, args) {
			if s.e.dual.Mirrors(sh, snap.Target(sh)) {
				out = append(out, mirrorWrite{shard: sh, table: w.Table})
			}
		}
		return out
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
			if len(m.seqs) > 0 && w.table == planbuilder.HistoryTable {
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
		s.e.dual.Mirror(sh, byShard[sh], s.commits[sh])
	}
}

// noteCommit records the GTID of the source transaction c has just
// committed for shard sh, if sh's writes are mirrored (s.commits has it):
// the dual-write waits for the target to show that transaction. One round
// trip, on mirrored shards only; a failure leaves it unknown (the wait then
// covers all the source committed so far).
func (s *Session) noteCommit(c Conn, sh router.Shard) {
	if _, ok := s.commits[sh]; !ok {
		return
	}
	r, err := c.Exec("SELECT @@last_gtid")
	if err != nil || decodeRows(r) != nil || r.Resultset == nil || len(r.Values) != 1 || len(r.Values[0]) != 1 {
		return
	}
	if g, err := r.GetString(0, 0); err == nil {
		s.commits[sh] = g
	}
}

// txnMirror is a statement's mirror waiting for its transaction's COMMIT.
type txnMirror struct {
	ws   []mirrorWrite
	seqs map[int]uint64
}
