package rewrite

import (
	"github.com/pingcap/tidb/pkg/parser/ast"
	"github.com/pingcap/tidb/pkg/parser/opcode"
)

// HistoryDir is one of the three history reads of seed 000.
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

// HistoryShape recognises the seed 000 history reads: a SELECT of plain
// HistoryColumns from conv_msg (no join, alias allowed) whose WHERE is
// exactly `conv_id = v AND seq < v` (or >) with ORDER BY seq DESC (ASC) and
// LIMIT n, or exactly `conv_id = v AND msg_id = v`. Anything else is not a
// history read and goes to MySQL.
func HistoryShape(a *Analysis) (*History, bool) {
	sel, ok := a.Stmt.(*ast.SelectStmt)
	if !ok || len(a.Sharded) != 1 || a.Sharded[0] != "conv_msg" || !a.HasKey || len(a.Keys) != 1 {
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
	h := &History{ConvID: a.Keys[0]}
	for _, f := range sel.Fields.Fields {
		c, ok := f.Expr.(*ast.ColumnNameExpr)
		if f.WildCard != nil || !ok || f.AsName.O != "" || !HistoryColumns[c.Name.Name.L] {
			return nil, false
		}
		h.Columns = append(h.Columns, c.Name.Name.L)
	}
	conds := conjuncts(sel.Where, nil)
	if len(conds) != 2 {
		return nil, false
	}
	var seqOp opcode.Op
	var haveConv bool
	for _, c := range conds {
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
		case col == "seq" && (op == opcode.LT || op == opcode.GT) && h.Dir == 0:
			h.Cursor, seqOp = v, op
			h.Dir = HistoryBefore
			if op == opcode.GT {
				h.Dir = HistoryAfter
			}
		case col == "msg_id" && op == opcode.EQ && h.Dir == 0:
			h.Cursor, h.Dir = v, HistoryAnchor
		default:
			return nil, false
		}
	}
	if !haveConv || h.Dir == 0 {
		return nil, false
	}
	if h.Dir == HistoryAnchor {
		if sel.OrderBy != nil || sel.Limit != nil {
			return nil, false
		}
		return h, true
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
	h.Limit = lim
	return h, true
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
