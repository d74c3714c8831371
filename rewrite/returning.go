package rewrite

import (
	"strings"

	"github.com/convoy-im/convoy/internal/sqltext"
	"github.com/pingcap/tidb/pkg/parser/ast"
	"github.com/pingcap/tidb/pkg/parser/test_driver"
)

// SplitReturning cuts the RETURNING clause off an INSERT, REPLACE or DELETE
// (MariaDB 10.5+; GORM adds `RETURNING id` to every insert of a model with
// an auto-increment key), which the parser does not know: head is the
// statement before it, returning the select list after the keyword. ok is
// false when sql has no top-level RETURNING (outside strings, names,
// comments and parentheses) or is another statement.
func SplitReturning(sql string) (head, returning string, ok bool) {
	first, at := true, -1
	depth := 0
	s := sqltext.New(sql)
	for t := s.Next(); t.Kind != sqltext.End; t = s.Next() {
		switch {
		case t.Kind == sqltext.Comment && t.Open():
			return "", "", false
		case t.IsPunct('('):
			depth++
		case t.IsPunct(')'):
			depth--
		case t.Kind == sqltext.Word && first:
			first = false
			if !t.Is("INSERT") && !t.Is("REPLACE") && !t.Is("DELETE") {
				return "", "", false
			}
		case depth == 0 && t.Is("RETURNING"):
			at = t.Pos
		}
	}
	if at < 0 || strings.TrimSpace(sql[at+len("RETURNING"):]) == "" {
		return "", "", false
	}
	return sql[:at], sql[at+len("RETURNING"):], true
}

// CheckReturning parses a RETURNING select list (with p) and refuses what
// Convoy cannot send to the shards as written: placeholders (they would
// not be counted where the statement's are) and, for sharded tables,
// names qualified by a logical table (its physical name differs).
func CheckReturning(p *Parser, list string, sharded []string) error {
	stmts, err := p.Parse("SELECT " + list)
	if err != nil {
		return err
	}
	if len(stmts) != 1 {
		return unsupported("RETURNING must be the end of one statement")
	}
	v := returningChecker{sharded: sharded}
	stmts[0].Accept(&v)
	return v.err
}

type returningChecker struct {
	sharded []string
	err     error
}

func (v *returningChecker) Enter(n ast.Node) (ast.Node, bool) {
	switch x := n.(type) {
	case *test_driver.ParamMarkerExpr:
		v.err = unsupported("placeholders in RETURNING are not supported through Convoy")
	case *ast.ColumnName:
		for _, t := range v.sharded {
			if x.Table.L == t {
				v.err = unsupported("RETURNING on sharded table %s must name its columns without the table (%s, not %s.%s)", t, x.Name.O, t, x.Name.O)
			}
		}
	case *ast.TableName, *ast.SubqueryExpr:
		v.err = unsupported("RETURNING with a subquery is not supported through Convoy")
	}
	return n, v.err != nil
}

func (v *returningChecker) Leave(n ast.Node) (ast.Node, bool) { return n, true }

// withReturning appends the statement's RETURNING clause to a template
// restored from the statement without it.
func (a *Analysis) withReturning(t *Template, err error) (*Template, error) {
	if err != nil || a.Returning == "" {
		return t, err
	}
	parts := append([]string(nil), t.parts...)
	parts[len(parts)-1] += " RETURNING" + a.Returning
	c := *t
	c.parts = parts
	c.fixed += len(" RETURNING" + a.Returning)
	return &c, nil
}
