package rewrite

import (
	"github.com/pingcap/tidb/pkg/parser/ast"
	"github.com/pingcap/tidb/pkg/parser/opcode"
)

// Unknown is the Param of a Value the statement computes (NOW(), seq + 1):
// a write's rows are known only by their plain values.
const Unknown = -2

// WrittenRows is what a write on a sharded table says of the rows it
// touches, by their column values: for INSERT / REPLACE each VALUES row,
// for UPDATE / DELETE the rows its WHERE pins with column = value and
// column IN (...) conjuncts (every combination of them), and for an UPDATE
// that assigns plain values to pinned columns also the rows as they are
// after it. The migration's dual-write reads primary keys out of it
// (docs/design.md §5): where the columns do not cover the primary key the
// rows are unknown, and the binlog apply alone carries the write.
type WrittenRows struct {
	Table   string   // logical table, lower-case
	Columns []string // lower-case
	Rows    [][]Value
}

// Written returns the rows a write says it touches, at most max of them;
// ok is false for other statements, for a join and past max.
func (a *Analysis) Written(max int) (w WrittenRows, ok bool) {
	if len(a.Sharded) != 1 {
		return w, false
	}
	w.Table = a.Sharded[0]
	switch s := a.Stmt.(type) {
	case *ast.InsertStmt:
		if !a.InsertHasKey || len(s.Lists) > max {
			return w, false
		}
		for _, c := range s.Columns {
			w.Columns = append(w.Columns, c.Name.L)
		}
		for _, list := range s.Lists {
			row := make([]Value, len(list))
			for i, e := range list {
				row[i] = a.plainValue(e)
			}
			w.Rows = append(w.Rows, row)
		}
		return w, true
	case *ast.UpdateStmt:
		if !singleTable(s.TableRefs) {
			return w, false
		}
		if !a.pinned(s.Where, max, &w) {
			return w, false
		}
		// The rows as they are after the UPDATE, where it moves a pinned
		// column to a plain value (a changed primary key).
		after := map[int]Value{}
		for _, as := range s.List {
			for i, c := range w.Columns {
				if as.Column.Name.L == c {
					after[i] = a.plainValue(as.Expr)
				}
			}
		}
		if len(after) > 0 && 2*len(w.Rows) <= max {
			for _, r := range w.Rows[:len(w.Rows):len(w.Rows)] {
				moved := append([]Value(nil), r...)
				for i, v := range after {
					moved[i] = v
				}
				w.Rows = append(w.Rows, moved)
			}
		}
		return w, true
	case *ast.DeleteStmt:
		if s.IsMultiTable || !singleTable(s.TableRefs) {
			return w, false
		}
		return w, a.pinned(s.Where, max, &w)
	}
	return w, false
}

func singleTable(refs *ast.TableRefsClause) bool {
	if refs == nil || refs.TableRefs == nil {
		return false
	}
	j := refs.TableRefs
	if j.Right != nil {
		return false
	}
	_, ok := j.Left.(*ast.TableSource)
	return ok
}

// plainValue is a literal or placeholder, else Unknown.
func (a *Analysis) plainValue(e ast.ExprNode) Value {
	if v, ok := a.value(e); ok {
		return v
	}
	return Value{Param: Unknown}
}

// pinned fills w.Columns and w.Rows with the combinations of the WHERE's
// equality conjuncts.
func (a *Analysis) pinned(where ast.ExprNode, max int, w *WrittenRows) bool {
	w.Rows = [][]Value{{}}
	has := map[string]bool{}
	// add multiplies the rows by a set of tuples over cols.
	add := func(cols []string, tuples [][]Value) bool {
		for _, c := range cols {
			if has[c] {
				return true // the first restriction of a column is enough
			}
		}
		if len(w.Rows)*len(tuples) > max {
			return false
		}
		var out [][]Value
		for _, r := range w.Rows {
			for _, t := range tuples {
				out = append(out, append(append([]Value(nil), r...), t...))
			}
		}
		for _, c := range cols {
			has[c] = true
		}
		w.Columns, w.Rows = append(w.Columns, cols...), out
		return true
	}
	for _, e := range conjuncts(where, nil) {
		cols, tuples, ok := a.equality(e)
		if !ok {
			continue
		}
		if !add(cols, tuples) {
			return false
		}
	}
	return len(w.Columns) > 0
}

// equality reads col = v, (c1, c2) = (v1, v2), col IN (v, ...) and
// (c1, c2) IN ((v1, v2), ...).
func (a *Analysis) equality(e ast.ExprNode) (cols []string, tuples [][]Value, ok bool) {
	switch x := e.(type) {
	case *ast.BinaryOperationExpr:
		if x.Op != opcode.EQ {
			return nil, nil, false
		}
		if c, vals, ok := a.columnsAndValues(x.L, x.R); ok {
			return c, [][]Value{vals}, true
		}
		if c, vals, ok := a.columnsAndValues(x.R, x.L); ok {
			return c, [][]Value{vals}, true
		}
	case *ast.PatternInExpr:
		if x.Not || x.Sel != nil || len(x.List) == 0 {
			return nil, nil, false
		}
		for _, item := range x.List {
			c, vals, ok := a.columnsAndValues(x.Expr, item)
			if !ok {
				return nil, nil, false
			}
			cols = c
			tuples = append(tuples, vals)
		}
		return cols, tuples, true
	}
	return nil, nil, false
}

// columnsAndValues pairs a column (or a row of columns) with a value (or a
// row of values).
func (a *Analysis) columnsAndValues(c, v ast.ExprNode) ([]string, []Value, bool) {
	if cr, vr := rowOf(c), rowOf(v); cr != nil || vr != nil {
		if cr == nil || vr == nil || len(cr.Values) != len(vr.Values) {
			return nil, nil, false
		}
		cols := make([]string, len(cr.Values))
		vals := make([]Value, len(cr.Values))
		for i := range cr.Values {
			cn, ok := unparen(cr.Values[i]).(*ast.ColumnNameExpr)
			if !ok {
				return nil, nil, false
			}
			if vals[i], ok = a.value(vr.Values[i]); !ok {
				return nil, nil, false
			}
			cols[i] = cn.Name.Name.L
		}
		return cols, vals, true
	}
	cn, ok := unparen(c).(*ast.ColumnNameExpr)
	if !ok {
		return nil, nil, false
	}
	val, ok := a.value(v)
	if !ok {
		return nil, nil, false
	}
	return []string{cn.Name.Name.L}, []Value{val}, true
}
