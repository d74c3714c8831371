package planbuilder

import (
	"strings"

	"github.com/pingcap/tidb/pkg/parser/ast"

	"github.com/convoy-im/convoy/proxy/sqlerr"
	"github.com/convoy-im/convoy/rewrite"
)

// explainPlan plans EXPLAIN [FORMAT=JSON] of a SELECT, UPDATE or DELETE on
// sharded tables (ok false: not such an EXPLAIN, planned as before).
func explainPlan(sql string, ex *ast.ExplainStmt) (*Plan, bool, error) {
	switch ex.Stmt.(type) {
	case *ast.SelectStmt, *ast.SetOprStmt, *ast.UpdateStmt, *ast.DeleteStmt, *ast.InsertStmt:
	default:
		return nil, false, nil
	}
	a, err := rewrite.Analyze(ex.Stmt)
	if err != nil {
		return nil, true, classify(err)
	}
	if len(a.Sharded) == 0 {
		return nil, false, nil
	}
	var prefix string
	switch f := strings.ToLower(ex.Format); {
	case ex.Analyze || ex.Explore || ex.PlanDigest != "":
		return nil, true, sqlerr.Errorf(sqlerr.NotSupported, "this EXPLAIN form is not supported on the sharded table %s: use EXPLAIN [FORMAT=JSON] <statement>", a.Sharded[0])
	case f == "" || f == "row" || f == "traditional":
		prefix = "EXPLAIN "
	case f == "json":
		prefix = "EXPLAIN FORMAT=JSON "
	default:
		return nil, true, sqlerr.Errorf(sqlerr.NotSupported, "EXPLAIN FORMAT=%s is not supported: MariaDB knows FORMAT=JSON", ex.Format)
	}
	switch a.Kind {
	case rewrite.KindSelect:
		if _, ok := ex.Stmt.(*ast.SetOprStmt); ok {
			return nil, true, sqlerr.Errorf(sqlerr.NotSupported, "EXPLAIN of a UNION on the sharded table %s is not supported: explain each SELECT", a.Sharded[0])
		}
	case rewrite.KindUpdate, rewrite.KindDelete:
	default:
		return nil, true, sqlerr.Errorf(sqlerr.NotSupported, "EXPLAIN %s on the sharded table %s is not supported: explain the SELECT of its rows", a.Kind, a.Sharded[0])
	}
	pl := &Plan{SQL: sql, A: a, Explain: prefix}
	if pl.Tmpl, err = rewrite.NewTemplate(a); err != nil {
		return nil, true, classify(err)
	}
	return pl, true, nil
}
