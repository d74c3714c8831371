package rewrite

import (
	"slices"
	"strings"

	"github.com/pingcap/tidb/pkg/parser/ast"
	"github.com/pingcap/tidb/pkg/parser/opcode"
)

// SearchTable is the virtual table of message search (seed 000, "检索"):
// no datasource holds it; the engine answers it from the search index.
const SearchTable = "msg_search"

// SearchColumns are the columns a msg_search SELECT may return, in the
// order SELECT * lists them.
var SearchColumns = []string{"msg_id", "conv_id", "seq", "sender_uid", "msg_type", "created_at"}

// Search is a recognised msg_search query:
//
//	SELECT cols FROM msg_search WHERE uid = ? AND MATCH(text) AGAINST (?)
//	  [AND conv_id = ?] [AND msg_type = ?] [AND sender_uid = ?]
//	  [AND created_at >= | > ?] [AND created_at < | <= ?]
//	  [AND (created_at, msg_id) < ? | > (?, ?)]
//	  [ORDER BY created_at DESC [, msg_id DESC] | created_at ASC [, msg_id ASC]] LIMIT n
//
// the conditions in any order. Values are literals or placeholders. The
// row comparison is the page cursor: the last hit of the previous page,
// "<" with newest-first order (older pages), ">" with oldest-first.
type Search struct {
	Columns []string
	UID     Value
	Text    Value
	ConvID  *Value
	MsgType *Value
	Sender  *Value
	// Since is the lower bound on created_at (SinceAfter: exclusive),
	// Until the upper one (UntilIncl: inclusive).
	Since, Until          *Value
	SinceAfter, UntilIncl bool
	// Cursor is (created_at, msg_id) of the previous page's last hit.
	Cursor *[2]Value
	// Asc: oldest first; else newest first.
	Asc   bool
	Limit Value
}

// NamesSearchTable reports whether a statement's tables include msg_search.
func NamesSearchTable(a *Analysis) bool {
	for _, n := range a.Unsharded {
		if strings.EqualFold(n[strings.LastIndexByte(n, '.')+1:], SearchTable) {
			return true
		}
	}
	return false
}

// SearchShape recognises a msg_search query; anything else naming the
// table is refused with an *UnsupportedError that says what is served.
func SearchShape(a *Analysis) (*Search, error) {
	const shape = "msg_search answers SELECT msg_id, conv_id, seq, created_at FROM msg_search WHERE uid = ? AND MATCH(text) AGAINST (?) " +
		"[AND conv_id = ?] [AND msg_type = ?] [AND sender_uid = ?] [AND created_at >= ?] [AND created_at < ?] " +
		"[AND (created_at, msg_id) < (?, ?)] [ORDER BY created_at DESC, msg_id DESC | ASC, ASC] LIMIT n"
	no := func(why string) (*Search, error) { return nil, unsupported("%s; %s", why, shape) }
	sel, ok := a.Stmt.(*ast.SelectStmt)
	if !ok || len(a.Unsharded) != 1 {
		return no("msg_search is a virtual table: only a SELECT of it alone is served")
	}
	if sel.Distinct || sel.GroupBy != nil || sel.Having != nil || sel.LockInfo != nil || sel.With != nil ||
		sel.WindowSpecs != nil || sel.SelectIntoOpt != nil || sel.From == nil || sel.Fields == nil {
		return no("msg_search takes no DISTINCT, GROUP BY, HAVING, WITH, window, locking or INTO")
	}
	join := sel.From.TableRefs
	if join == nil || join.Right != nil {
		return no("msg_search cannot be joined")
	}
	src, ok := join.Left.(*ast.TableSource)
	if !ok {
		return no("msg_search must be read directly")
	}
	if _, ok := src.Source.(*ast.TableName); !ok {
		return no("msg_search must be read directly")
	}
	s := &Search{}
	for _, f := range sel.Fields.Fields {
		if f.WildCard != nil {
			s.Columns = append(s.Columns, SearchColumns...)
			continue
		}
		c, ok := f.Expr.(*ast.ColumnNameExpr)
		if !ok || f.AsName.O != "" || !slices.Contains(SearchColumns, c.Name.Name.L) {
			return no("msg_search returns the plain columns " + strings.Join(SearchColumns, ", "))
		}
		s.Columns = append(s.Columns, c.Name.Name.L)
	}
	var haveUID, haveText bool
	var cursorOp opcode.Op
	for _, c := range conjuncts(sel.Where, nil) {
		if m, ok := unparen(c).(*ast.MatchAgainst); ok {
			if haveText || len(m.ColumnNames) != 1 || m.ColumnNames[0].Name.L != "text" {
				return no("one MATCH(text) AGAINST (...) is the search")
			}
			if m.Modifier.WithQueryExpansion() {
				return no("WITH QUERY EXPANSION is not served")
			}
			v, ok := a.value(m.Against)
			if !ok {
				return no("AGAINST takes a string or a placeholder")
			}
			s.Text, haveText = v, true
			continue
		}
		b, ok := unparen(c).(*ast.BinaryOperationExpr)
		if !ok {
			return no("the conditions are ANDed comparisons")
		}
		if cur, op, ok := searchCursor(a, b); ok {
			if s.Cursor != nil || op != opcode.LT && op != opcode.GT {
				return no("one cursor (created_at, msg_id) < (?, ?) or > (?, ?)")
			}
			s.Cursor, cursorOp = &cur, op
			continue
		}
		col, val, op, ok := columnCompare(b)
		if !ok {
			return no("the conditions compare a column with a value")
		}
		v, ok := a.value(val)
		if !ok {
			return no("the conditions compare a column with a literal or a placeholder")
		}
		switch {
		case col == "uid" && op == opcode.EQ && !haveUID:
			s.UID, haveUID = v, true
		case col == "conv_id" && op == opcode.EQ && s.ConvID == nil:
			s.ConvID = &v
		case col == "msg_type" && op == opcode.EQ && s.MsgType == nil:
			s.MsgType = &v
		case col == "sender_uid" && op == opcode.EQ && s.Sender == nil:
			s.Sender = &v
		case col == "created_at" && (op == opcode.GE || op == opcode.GT) && s.Since == nil:
			s.Since, s.SinceAfter = &v, op == opcode.GT
		case col == "created_at" && (op == opcode.LT || op == opcode.LE) && s.Until == nil:
			s.Until, s.UntilIncl = &v, op == opcode.LE
		default:
			return no("condition on " + col + " is not served")
		}
	}
	if !haveUID {
		return no("uid = ? is required: the searching user, whose conversations are searched")
	}
	if !haveText {
		return no("MATCH(text) AGAINST (...) is required")
	}
	if ob := sel.OrderBy; ob != nil {
		const order = "results are ordered by created_at DESC, msg_id DESC (newest first) or created_at ASC, msg_id ASC"
		if len(ob.Items) > 2 {
			return no(order)
		}
		for i, it := range ob.Items {
			c, ok := it.Expr.(*ast.ColumnNameExpr)
			if !ok || c.Name.Name.L != []string{"created_at", "msg_id"}[i] || it.Desc != ob.Items[0].Desc {
				return no(order)
			}
		}
		s.Asc = !ob.Items[0].Desc
	}
	if s.Cursor != nil && (cursorOp == opcode.GT) != s.Asc {
		return no("the cursor follows the order: (created_at, msg_id) < (...) with ORDER BY created_at DESC, > (...) with ASC")
	}
	if sel.Limit == nil || sel.Limit.Offset != nil {
		return no("LIMIT n is required, without OFFSET (the next page: AND (created_at, msg_id) < (the last hit's))")
	}
	lim, ok := a.value(sel.Limit.Count)
	if !ok {
		return no("LIMIT takes a number or a placeholder")
	}
	s.Limit = lim
	return s, nil
}

// searchCursor reads a (created_at, msg_id) <op> (v, v) comparison (either
// side first), with op as seen from the columns' side.
func searchCursor(a *Analysis, b *ast.BinaryOperationExpr) ([2]Value, opcode.Op, bool) {
	flip := map[opcode.Op]opcode.Op{opcode.LT: opcode.GT, opcode.GT: opcode.LT, opcode.LE: opcode.GE, opcode.GE: opcode.LE, opcode.EQ: opcode.EQ}
	cols, vals, op := unparen(b.L), unparen(b.R), b.Op
	if !isCursorColumns(cols) {
		cols, vals, op = vals, cols, flip[b.Op]
	}
	r, ok := vals.(*ast.RowExpr)
	if !isCursorColumns(cols) || !ok || len(r.Values) != 2 {
		return [2]Value{}, 0, false
	}
	var out [2]Value
	for i, e := range r.Values {
		if out[i], ok = a.value(e); !ok {
			return [2]Value{}, 0, false
		}
	}
	return out, op, true
}

// isCursorColumns: the row (created_at, msg_id).
func isCursorColumns(e ast.ExprNode) bool {
	r, ok := e.(*ast.RowExpr)
	if !ok || len(r.Values) != 2 {
		return false
	}
	for i, want := range []string{"created_at", "msg_id"} {
		c, ok := unparen(r.Values[i]).(*ast.ColumnNameExpr)
		if !ok || c.Name.Name.L != want {
			return false
		}
	}
	return true
}
