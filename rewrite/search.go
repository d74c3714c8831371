package rewrite

import (
	"slices"
	"strings"

	"github.com/pingcap/tidb/pkg/parser/ast"
	"github.com/pingcap/tidb/pkg/parser/opcode"
)

// SearchTable is the virtual table of message search (docs/design.md §10;
// seed 000: "检索"): no datasource holds it; the engine answers it from the
// search index.
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
//
// Hit counts per conversation (Counts):
//
//	SELECT conv_id, COUNT(*) [AS n] FROM msg_search WHERE (the conditions
//	  above but the cursor) GROUP BY conv_id
//	  [ORDER BY COUNT(*) | n DESC | conv_id [ASC | DESC]] [LIMIT n]
//
// the most hits first by default (ties: the lower conv_id first).
type Search struct {
	Columns []string
	// Counts: a GROUP BY conv_id query; Columns then hold "conv_id" and
	// CountName, the COUNT(*) column's name as the result names it.
	// ByConv orders by conv_id (descending with Desc) instead of the
	// count; HasLimit says whether Limit is set.
	Counts       bool
	CountName    string
	ByConv, Desc bool
	HasLimit     bool
	UID          Value
	Text         Value
	ConvID       *Value
	MsgType      *Value
	Sender       *Value
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
		"[AND (created_at, msg_id) < (?, ?)] [ORDER BY created_at DESC, msg_id DESC | ASC, ASC] LIMIT n, " +
		"or hit counts: SELECT conv_id, COUNT(*) FROM msg_search WHERE ... GROUP BY conv_id"
	no := func(why string) (*Search, error) { return nil, unsupported("%s; %s", why, shape) }
	sel, ok := a.Stmt.(*ast.SelectStmt)
	if !ok || len(a.Unsharded) != 1 {
		return no("msg_search is a virtual table: only a SELECT of it alone is served")
	}
	if sel.Distinct || sel.Having != nil || sel.LockInfo != nil || sel.With != nil ||
		sel.WindowSpecs != nil || sel.SelectIntoOpt != nil || sel.From == nil || sel.Fields == nil {
		return no("msg_search takes no DISTINCT, HAVING, WITH, window, locking or INTO")
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
	if sel.GroupBy != nil {
		const counts = "per-conversation hit counts are SELECT conv_id, COUNT(*) FROM msg_search WHERE ... GROUP BY conv_id [ORDER BY COUNT(*) DESC | conv_id] [LIMIT n]"
		if g := sel.GroupBy.Items; len(g) != 1 || !isColumn(g[0].Expr, "conv_id") {
			return no(counts)
		}
		for _, f := range sel.Fields.Fields {
			switch {
			case f.WildCard == nil && isColumn(f.Expr, "conv_id") && f.AsName.O == "":
				s.Columns = append(s.Columns, "conv_id")
			case f.WildCard == nil && isCountStar(f.Expr) && s.CountName == "":
				s.CountName = f.AsName.O
				if s.CountName == "" {
					s.CountName = f.Text()
				}
				s.Columns = append(s.Columns, s.CountName)
			default:
				return no(counts)
			}
		}
		if len(s.Columns) != 2 || s.CountName == "" {
			return no(counts)
		}
		s.Counts = true
	}
	for _, f := range sel.Fields.Fields {
		if s.Counts {
			break
		}
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
	if s.Counts {
		return countsTail(a, sel, s, no)
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

// countsTail reads a counts query's order and limit (SearchShape).
func countsTail(a *Analysis, sel *ast.SelectStmt, s *Search, no func(string) (*Search, error)) (*Search, error) {
	if s.Cursor != nil {
		return no("per-conversation counts take no cursor")
	}
	if ob := sel.OrderBy; ob != nil {
		const order = "per-conversation counts are ordered by COUNT(*) DESC (the default) or by conv_id"
		if len(ob.Items) != 1 {
			return no(order)
		}
		it := ob.Items[0]
		switch {
		case isColumn(it.Expr, "conv_id"):
			s.ByConv, s.Desc = true, it.Desc
		case (isCountStar(it.Expr) || isColumn(it.Expr, strings.ToLower(s.CountName))) && it.Desc:
		default:
			return no(order)
		}
	}
	if sel.Limit != nil {
		if sel.Limit.Offset != nil {
			return no("per-conversation counts take LIMIT n without OFFSET")
		}
		lim, ok := a.value(sel.Limit.Count)
		if !ok {
			return no("LIMIT takes a number or a placeholder")
		}
		s.Limit, s.HasLimit = lim, true
	}
	return s, nil
}

// isColumn: e is the plain column name.
func isColumn(e ast.ExprNode, name string) bool {
	c, ok := unparen(e).(*ast.ColumnNameExpr)
	return ok && c.Name.Table.L == "" && c.Name.Name.L == name
}

// isCountStar: e is COUNT(*).
func isCountStar(e ast.ExprNode) bool {
	f, ok := unparen(e).(*ast.AggregateFuncExpr)
	if !ok || !strings.EqualFold(f.F, ast.AggFuncCount) || f.Distinct || len(f.Args) != 1 {
		return false
	}
	v, ok := f.Args[0].(ast.ValueExpr)
	return ok && v.GetValue() != nil // COUNT(*) is COUNT(1) in the tree
}
