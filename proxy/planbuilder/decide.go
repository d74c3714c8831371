package planbuilder

import (
	"strings"

	"github.com/pingcap/tidb/pkg/parser/ast"

	"github.com/convoy-im/convoy/rewrite"
)

// decide is the classification of a built plan (db: the session's
// database). Its order is the order
// of precedence: stored code and search are recognised before the parser's
// kind of statement, a statement's kind before what it names.
func decide(pl *Plan, db string) Op {
	a := pl.A
	switch {
	case pl.Routine != nil:
		return OpRoutine
	case pl.Search != nil:
		return OpSearch
	}
	switch a.Kind {
	case rewrite.KindEmpty:
		return OpEmpty
	case rewrite.KindBegin:
		return OpBegin
	case rewrite.KindCommit, rewrite.KindRollback:
		return OpEndTxn
	case rewrite.KindSavepoint:
		return OpSavepoint
	case rewrite.KindSet:
		return OpSet
	case rewrite.KindUse:
		return OpUse
	case rewrite.KindLoadData:
		return OpLoadData
	case rewrite.KindMaintenance:
		if len(a.Sharded) > 0 {
			return OpMaintenance
		}
	}
	if pl.Tmpl == nil {
		switch st := a.Stmt.(type) {
		case *ast.KillStmt:
			return OpKill
		case *ast.ShowStmt:
			switch st.Tp {
			case ast.ShowGrants:
				return OpShowGrants
			case ast.ShowProcessList:
				return OpProcessList
			case ast.ShowWarnings, ast.ShowErrors:
				return OpDiagnostics
			case ast.ShowDatabases, ast.ShowTables, ast.ShowTableStatus:
				return OpIntrospect
			}
		}
		if a.Kind == rewrite.KindSelect && ReadsInfoSchema(a, db) {
			return OpIntrospect
		}
		return OpPassthrough
	}
	switch {
	case pl.Explain != "":
		return OpExplain
	case a.Kind == rewrite.KindDDL:
		return OpDDL
	case a.Kind == rewrite.KindShow:
		return OpShowSharded
	case a.Kind == rewrite.KindInsert && rewrite.NeedsSeq(a):
		return OpInsertSeq
	case a.Kind == rewrite.KindInsert:
		return OpInsert
	case pl.Hist != nil:
		return OpHistory
	case a.Kind == rewrite.KindSelect && !a.HasKey && !a.RoutedByNested:
		return OpScatter
	}
	return OpRoute
}

// ReadsInfoSchema reports whether a statement may read information_schema.
func ReadsInfoSchema(a *rewrite.Analysis, db string) bool {
	const prefix = "information_schema."
	if strings.EqualFold(db, "information_schema") {
		return len(a.Unsharded) > 0
	}
	for _, n := range a.Unsharded {
		if len(n) > len(prefix) && strings.EqualFold(n[:len(prefix)], prefix) {
			return true
		}
	}
	return false
}

// WithSessionValues is the plan of a statement on sharded tables with the
// session's values (rewrite.SessionRef) put into its statement: a new Plan,
// no longer a history read the hot tier answers.
func (pl *Plan) WithSessionValues(value func(rewrite.SessionRef) rewrite.SessionValue) (*Plan, error) {
	c := *pl
	c.A = pl.A.WithSessionValues(value)
	t, err := rewrite.NewTemplate(c.A)
	if err != nil {
		return nil, classify(err)
	}
	c.Tmpl, c.Hist, c.HistCols = t, nil, ""
	c.Op = decide(&c, "") // (a statement on sharded tables: the database plays no part)
	return &c, nil
}
