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
//	  [AND conv_id = ?] [AND msg_type = ?] [AND created_at >= ?]
//	  [ORDER BY created_at DESC] LIMIT n
//
// the conditions in any order. Values are literals or placeholders.
type Search struct {
	Columns []string
	UID     Value
	Text    Value
	ConvID  *Value
	MsgType *Value
	Since   *Value
	Limit   Value
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
		"[AND conv_id = ?] [AND msg_type = ?] [AND created_at >= ?] [ORDER BY created_at DESC] LIMIT n"
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
		case col == "created_at" && op == opcode.GE && s.Since == nil:
			s.Since = &v
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
		c, ok := ob.Items[0].Expr.(*ast.ColumnNameExpr)
		if len(ob.Items) != 1 || !ok || c.Name.Name.L != "created_at" || !ob.Items[0].Desc {
			return no("results are ordered by created_at DESC (newest first) only")
		}
	}
	if sel.Limit == nil || sel.Limit.Offset != nil {
		return no("LIMIT n is required, without OFFSET (page on with created_at >= ... of the last hit)")
	}
	lim, ok := a.value(sel.Limit.Count)
	if !ok {
		return no("LIMIT takes a number or a placeholder")
	}
	s.Limit = lim
	return s, nil
}
