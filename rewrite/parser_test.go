package rewrite

import (
	"errors"
	"strings"
	"testing"

	"github.com/pingcap/tidb/pkg/parser/ast"
)

// TestParseHugeDecimal: the parser's literal driver panics on a decimal of
// more than 81 digits; Parse answers a 1064 syntax error, and the parser
// keeps working with its SQL mode (found by FuzzInfoSchemaTemplate).
func TestParseHugeDecimal(t *testing.T) {
	p := NewParser()
	if err := p.SetSQLMode("ANSI_QUOTES"); err != nil {
		t.Fatal(err)
	}
	_, err := p.Parse("SELECT " + strings.Repeat("9", 100) + ".5")
	var se *SyntaxError
	if !errors.As(err, &se) || se.Code != 1064 {
		t.Fatalf("Parse of a 100-digit decimal: %v, want a 1064 syntax error", err)
	}
	stmts, err := p.Parse(`SELECT "a" FROM t`)
	if err != nil || len(stmts) != 1 {
		t.Fatalf("the parser after the refusal: %v", err)
	}
	// ANSI_QUOTES survived the fresh parser: "a" is a column, not a string.
	sel := stmts[0].(*ast.SelectStmt)
	if _, ok := sel.Fields.Fields[0].Expr.(*ast.ColumnNameExpr); !ok {
		t.Fatalf(`"a" parsed as %T: the SQL mode was lost`, sel.Fields.Fields[0].Expr)
	}
}
