package rewrite

import (
	"github.com/pingcap/tidb/pkg/parser/ast"
	"github.com/pingcap/tidb/pkg/parser/opcode"
)

// HistoryDir is one of the three history reads of docs/design.md §4.
type HistoryDir int

const (
	HistoryBefore HistoryDir = iota + 1 // scroll up: seq < ? ORDER BY seq DESC LIMIT n
	HistoryAfter                        // catch up: seq > ? ORDER BY seq ASC LIMIT n
	HistoryAnchor                       // jump: conv_id = ? AND msg_id = ?
)

// HistoryColumns are the conv_msg columns the hot tier holds.
var HistoryColumns = map[string]bool{"conv_id": true, "seq": true, "msg_id": true, "sender_uid": true, "msg_type": true, "created_at": true}

// History is a recognised history read on conv_msg.
type History struct {
	Dir     HistoryDir
	Columns []string // result columns in order (lower-case names from HistoryColumns)
	ConvID  Value
	Cursor  Value // Before/After: the seq bound; Anchor: the msg_id
	Limit   Value // Before/After: the page size (literal or ?)
}

// HistoryShape recognises the history reads (docs/design.md §4) the hot tier
// serves: an ArchiveShape read of conv_msg whose select list is plain
// HistoryColumns (no wildcard, no alias). Anything else is not a history read
// for the hot tier and goes to MySQL.
func HistoryShape(a *Analysis) (*History, bool) {
	r, ok := ArchiveShape(a)
	if !ok || r.Table != "conv_msg" || r.Inclusive {
		return nil, false // (seq <= / >= pages: MySQL and the cold tier only)
	}
	h := &History{Dir: r.Dir, ConvID: r.ConvID, Cursor: r.Cursor, Limit: r.Limit}
	for _, f := range r.fields {
		if f.wildcard || f.alias || !HistoryColumns[f.name] {
			return nil, false
		}
		h.Columns = append(h.Columns, f.name)
	}
	return h, true
}

// ArchiveRead is a read the cold tier can continue (the three history reads
// of docs/design.md §4, and the body fetch by msg_id that follows them), with
// any select list of the table's plain columns or *:
//
//	conv_msg    WHERE conv_id = v AND seq < v ORDER BY seq DESC LIMIT n   (Before)
//	conv_msg    WHERE conv_id = v AND seq > v ORDER BY seq [ASC] LIMIT n  (After)
//	            (or seq <= v / seq >= v: Inclusive)
//	conv_msg    WHERE conv_id = v AND msg_id = v                          (Anchor)
//	msg_content WHERE conv_id = v AND msg_id = v | msg_id IN (v, ...)     (Dir 0)
//
// (operands in either order, an alias allowed, nothing else in WHERE).
type ArchiveRead struct {
	Table  string // "conv_msg" or "msg_content"
	Dir    HistoryDir
	ConvID Value
	Cursor Value // Before/After: the seq bound; Anchor: the msg_id
	// Inclusive: the bound is seq <= Cursor (Before) or seq >= Cursor
	// (After).
	Inclusive bool
	Limit     Value   // Before/After: the page size
	MsgIDs    []Value // msg_content: the msg_ids asked for
	fields    []selectField
}

// selectField is one item of a select list: a column (its name, whether
// it is renamed) or a wildcard.
type selectField struct {
	name     string
	alias    bool
	wildcard bool
}

// ArchiveShape recognises an ArchiveRead.
func ArchiveShape(a *Analysis) (*ArchiveRead, bool) {
	sel, ok := a.Stmt.(*ast.SelectStmt)
	if !ok || len(a.Sharded) != 1 || !a.HasKey || len(a.Keys) != 1 {
		return nil, false
	}
	table := a.Sharded[0]
	if table != "conv_msg" && table != "msg_content" {
		return nil, false
	}
	if sel.Distinct || sel.GroupBy != nil || sel.Having != nil || sel.LockInfo != nil || sel.With != nil ||
		sel.WindowSpecs != nil || sel.Where == nil || sel.From == nil || sel.Fields == nil {
		return nil, false
	}
	join := sel.From.TableRefs
	if join == nil || join.Right != nil {
		return nil, false
	}
	src, ok := join.Left.(*ast.TableSource)
	if !ok {
		return nil, false
	}
	if _, ok := src.Source.(*ast.TableName); !ok {
		return nil, false
	}
	r := &ArchiveRead{Table: table, ConvID: a.Keys[0]}
	for _, f := range sel.Fields.Fields {
		if f.WildCard != nil {
			r.fields = append(r.fields, selectField{wildcard: true})
			continue
		}
		c, ok := f.Expr.(*ast.ColumnNameExpr)
		if !ok {
			return nil, false
		}
		r.fields = append(r.fields, selectField{name: c.Name.Name.L, alias: f.AsName.O != ""})
	}
	conds := conjuncts(sel.Where, nil)
	if len(conds) != 2 {
		return nil, false
	}
	var seqOp opcode.Op
	var haveConv bool
	for _, c := range conds {
		if in, ok := unparen(c).(*ast.PatternInExpr); ok {
			col, isCol := unparen(in.Expr).(*ast.ColumnNameExpr)
			if table != "msg_content" || r.MsgIDs != nil || !isCol || col.Name.Name.L != "msg_id" || in.Not || in.Sel != nil || len(in.List) == 0 {
				return nil, false
			}
			for _, item := range in.List {
				v, ok := a.value(item)
				if !ok {
					return nil, false
				}
				r.MsgIDs = append(r.MsgIDs, v)
			}
			continue
		}
		b, ok := unparen(c).(*ast.BinaryOperationExpr)
		if !ok {
			return nil, false
		}
		col, val, op, ok := columnCompare(b)
		if !ok {
			return nil, false
		}
		v, ok := a.value(val)
		if !ok {
			return nil, false
		}
		switch {
		case col == "conv_id" && op == opcode.EQ:
			haveConv = true
		case table == "msg_content" && col == "msg_id" && op == opcode.EQ && r.MsgIDs == nil:
			r.MsgIDs = []Value{v}
		case table == "conv_msg" && col == "seq" && (op == opcode.LT || op == opcode.GT || op == opcode.LE || op == opcode.GE) && r.Dir == 0:
			r.Cursor, r.Inclusive = v, op == opcode.LE || op == opcode.GE
			seqOp, r.Dir = opcode.LT, HistoryBefore
			if op == opcode.GT || op == opcode.GE {
				seqOp, r.Dir = opcode.GT, HistoryAfter
			}
		case table == "conv_msg" && col == "msg_id" && op == opcode.EQ && r.Dir == 0:
			r.Cursor, r.Dir = v, HistoryAnchor
		default:
			return nil, false
		}
	}
	if !haveConv || r.Dir == 0 && r.MsgIDs == nil {
		return nil, false
	}
	if r.Dir == 0 || r.Dir == HistoryAnchor {
		if sel.OrderBy != nil || sel.Limit != nil {
			return nil, false
		}
		return r, true
	}
	if sel.OrderBy == nil || len(sel.OrderBy.Items) != 1 || sel.Limit == nil || sel.Limit.Offset != nil {
		return nil, false
	}
	ob, ok := sel.OrderBy.Items[0].Expr.(*ast.ColumnNameExpr)
	if !ok || ob.Name.Name.L != "seq" || sel.OrderBy.Items[0].Desc != (seqOp == opcode.LT) {
		return nil, false
	}
	lim, ok := a.value(sel.Limit.Count)
	if !ok {
		return nil, false
	}
	r.Limit = lim
	return r, true
}

// ArchiveWrite is an UPDATE or DELETE of conv_msg or msg_content, as the
// cold tier needs to know it: which conversations, and, when Keyed, the
// rows it names (WHERE exactly conv_id = v AND seq = v | seq IN (...) |
// msg_id = v | msg_id IN (...), no ORDER BY / LIMIT). An unkeyed write may
// reach any row of its conversations.
type ArchiveWrite struct {
	Table  string
	Delete bool
	ConvID []Value // the shard key values (empty: none, a keyless write)
	Keyed  bool
	Seqs   []Value // conv_msg by seq
	MsgIDs []Value // by msg_id
	// Erase: an unkeyed DELETE of one conversation the cold tier can
	// apply to archived rows (nil for any other write).
	Erase *ArchiveErase
}

// ArchiveWriteShape returns the ArchiveWrite of an UPDATE or DELETE that
// names conv_msg or msg_content (ok false for any other statement).
func ArchiveWriteShape(a *Analysis) (*ArchiveWrite, bool) {
	var where ast.ExprNode
	w := &ArchiveWrite{}
	switch st := a.Stmt.(type) {
	case *ast.UpdateStmt:
		where = st.Where
		w.Keyed = st.Order == nil && st.Limit == nil && !st.MultipleTable
	case *ast.DeleteStmt:
		where, w.Delete = st.Where, true
		w.Keyed = st.Order == nil && st.Limit == nil && !st.IsMultiTable
	default:
		return nil, false
	}
	for _, t := range a.Sharded {
		if t == "conv_msg" || t == "msg_content" {
			w.Table = t
		}
	}
	if w.Table == "" {
		return nil, false
	}
	if a.HasKey {
		w.ConvID = a.Keys
	}
	w.Keyed = w.Keyed && len(a.Sharded) == 1 && len(a.Keys) == 1 && w.keys(a, where)
	if !w.Keyed {
		w.Seqs, w.MsgIDs = nil, nil
		if st, ok := a.Stmt.(*ast.DeleteStmt); ok && st.Order == nil && st.Limit == nil && !st.IsMultiTable &&
			len(a.Sharded) == 1 && len(a.Keys) == 1 {
			w.Erase = eraseShape(a, w.Table, where)
		}
	}
	return w, true
}

// keys reads the key condition of a keyed write's WHERE.
func (w *ArchiveWrite) keys(a *Analysis, where ast.ExprNode) bool {
	conds := conjuncts(where, nil)
	if len(conds) != 2 {
		return false
	}
	haveConv := false
	for _, c := range conds {
		var col string
		var vals []Value
		switch x := unparen(c).(type) {
		case *ast.PatternInExpr:
			cn, ok := unparen(x.Expr).(*ast.ColumnNameExpr)
			if !ok || x.Not || x.Sel != nil || len(x.List) == 0 {
				return false
			}
			col = cn.Name.Name.L
			for _, item := range x.List {
				v, ok := a.value(item)
				if !ok {
					return false
				}
				vals = append(vals, v)
			}
		case *ast.BinaryOperationExpr:
			name, val, op, ok := columnCompare(x)
			if !ok || op != opcode.EQ {
				return false
			}
			v, ok := a.value(val)
			if !ok {
				return false
			}
			col, vals = name, []Value{v}
		default:
			return false
		}
		switch {
		case col == "conv_id" && len(vals) == 1:
			haveConv = true
		case col == "seq" && w.Table == "conv_msg" && w.Seqs == nil && w.MsgIDs == nil:
			w.Seqs = vals
		case col == "msg_id" && w.Seqs == nil && w.MsgIDs == nil:
			w.MsgIDs = vals
		default:
			return false
		}
	}
	return haveConv && (w.Seqs != nil || w.MsgIDs != nil)
}

// columnCompare splits `col op value` or `value op col` into its parts, the
// operator as seen from the column.
func columnCompare(b *ast.BinaryOperationExpr) (string, ast.ExprNode, opcode.Op, bool) {
	flip := map[opcode.Op]opcode.Op{opcode.EQ: opcode.EQ, opcode.LT: opcode.GT, opcode.GT: opcode.LT, opcode.GE: opcode.LE, opcode.LE: opcode.GE}
	if c, ok := unparen(b.L).(*ast.ColumnNameExpr); ok {
		return c.Name.Name.L, b.R, b.Op, true
	}
	if c, ok := unparen(b.R).(*ast.ColumnNameExpr); ok {
		op, ok := flip[b.Op]
		return c.Name.Name.L, b.L, op, ok
	}
	return "", nil, 0, false
}

// ArchiveErase is an unkeyed DELETE of one conversation's rows that the
// cold tier applies to its archived rows too ("clear chat", a member's
// messages removed): WHERE conv_id = v AND-ed with any of comparisons of
// seq (conv_msg) or msg_id (=, <, <=, >, >=, BETWEEN) and sender_uid = v.
// Anything else in the WHERE (or ORDER BY / LIMIT, another table) cannot
// be decided for archived rows, and such a DELETE has no ArchiveErase.
type ArchiveErase struct {
	Bounds []EraseBound
	Sender *Value
}

// EraseBound is one comparison of an ArchiveErase: Column Op V, Column
// "seq" or "msg_id", Op one of "=", "<", "<=", ">", ">=".
type EraseBound struct {
	Column string
	Op     string
	V      Value
}

// eraseShape reads where as an ArchiveErase of table (nil when it is not one).
func eraseShape(a *Analysis, table string, where ast.ExprNode) *ArchiveErase {
	e := &ArchiveErase{}
	haveConv := false
	ops := map[opcode.Op]string{opcode.EQ: "=", opcode.LT: "<", opcode.LE: "<=", opcode.GT: ">", opcode.GE: ">="}
	bounded := func(col string) bool { return col == "msg_id" || col == "seq" && table == "conv_msg" }
	for _, c := range conjuncts(where, nil) {
		switch x := unparen(c).(type) {
		case *ast.BetweenExpr:
			cn, ok := unparen(x.Expr).(*ast.ColumnNameExpr)
			if !ok || x.Not || !bounded(cn.Name.Name.L) {
				return nil
			}
			lo, ok1 := a.value(x.Left)
			hi, ok2 := a.value(x.Right)
			if !ok1 || !ok2 {
				return nil
			}
			e.Bounds = append(e.Bounds, EraseBound{cn.Name.Name.L, ">=", lo}, EraseBound{cn.Name.Name.L, "<=", hi})
		case *ast.BinaryOperationExpr:
			name, val, op, ok := columnCompare(x)
			if !ok {
				return nil
			}
			v, ok := a.value(val)
			if !ok {
				return nil
			}
			switch {
			case name == "conv_id" && op == opcode.EQ && !haveConv:
				haveConv = true
			case name == "sender_uid" && op == opcode.EQ && e.Sender == nil:
				e.Sender = &v
			case bounded(name) && ops[op] != "":
				e.Bounds = append(e.Bounds, EraseBound{name, ops[op], v})
			default:
				return nil
			}
		default:
			return nil
		}
	}
	if !haveConv {
		return nil
	}
	return e
}
