package planbuilder

import (
	"github.com/pingcap/tidb/pkg/parser/ast"

	"github.com/convoy-im/convoy/proxy/sqlerr"
	"github.com/convoy-im/convoy/rewrite"
	"github.com/convoy-im/convoy/router"
)

// searchPlan recognises a statement naming msg_search; ok=false: it does
// not.
func searchPlan(sql string, a *rewrite.Analysis, ctx Context) (*Plan, bool, error) {
	if !rewrite.NamesSearchTable(a) {
		return nil, false, nil
	}
	if !ctx.Search {
		return nil, true, sqlerr.Errorf(sqlerr.NotSupported, "msg_search: message search is not enabled on this proxy (search.enabled)")
	}
	sh, err := rewrite.SearchShape(a)
	if err != nil {
		return nil, true, classify(err)
	}
	return &Plan{SQL: sql, A: a, Search: sh}, true, nil
}

// routinePlan plans a routine statement; ok is false for any other.
func routinePlan(sql string) (pl *Plan, ok bool, err error) {
	r, err := rewrite.ClassifyRoutine(sql)
	if err != nil {
		return nil, true, classify(err)
	}
	if r == nil {
		return nil, false, nil
	}
	return &Plan{SQL: sql, A: &rewrite.Analysis{Kind: rewrite.KindOther, ParamCount: r.Params}, Routine: r}, true, nil
}

// nameInsertColumns gives an INSERT / REPLACE into a sharded table that
// lists no columns the table's own, in order, so it is analysed, routed,
// split and sent like the named form (a row of another length gets
// MariaDB's error 1136). named reports that it did: such a plan depends on
// the schema and is not shared (plan cache).
func nameInsertColumns(stmt ast.StmtNode, ctx Context) (named bool, err error) {
	ins, ok := stmt.(*ast.InsertStmt)
	if !ok || len(ins.Columns) > 0 || ins.Select != nil || ins.Table == nil || ins.Table.TableRefs == nil {
		return false, nil
	}
	ts, ok := ins.Table.TableRefs.Left.(*ast.TableSource)
	if !ok {
		return false, nil
	}
	tn, ok := ts.Source.(*ast.TableName)
	if !ok || tn.Name.O != tn.Name.L {
		return false, nil
	}
	if _, sharded := router.ShardKeyColumn(tn.Name.L); !sharded {
		return false, nil
	}
	cols, err := ctx.Schema.Columns(tn.Name.L)
	if err != nil {
		return false, err
	}
	ins.Columns = make([]*ast.ColumnName, len(cols))
	for i, c := range cols {
		ins.Columns[i] = &ast.ColumnName{Name: ast.NewCIStr(c)}
	}
	return true, nil
}

// namedLockFuncs are the named-lock functions, lower-case.
var namedLockFuncs = map[string]bool{
	"get_lock": true, "release_lock": true, "release_all_locks": true,
	"is_free_lock": true, "is_used_lock": true,
}

// callsNamedLock reports whether a statement calls a named-lock function.
func callsNamedLock(a *rewrite.Analysis, sql string) bool {
	if !containsFold(sql, "_lock") {
		return false // the common case, without a walk of the AST
	}
	v := &lockFinder{}
	a.Stmt.Accept(v)
	return v.found
}

type lockFinder struct{ found bool }

func (v *lockFinder) Enter(n ast.Node) (ast.Node, bool) {
	if f, ok := n.(*ast.FuncCallExpr); ok && namedLockFuncs[f.FnName.L] {
		v.found = true
	}
	return n, v.found
}

func (v *lockFinder) Leave(n ast.Node) (ast.Node, bool) { return n, true }

// containsFold reports whether s contains the ASCII word sub (lower-case)
// in any case, without copying s (it runs on every statement planned).
func containsFold(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		j := 0
		for j < len(sub) && s[i+j]|0x20 == sub[j]|0x20 {
			j++
		}
		if j == len(sub) {
			return true
		}
	}
	return false
}
