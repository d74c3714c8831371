package planbuilder

import (
	"errors"
	"slices"
	"strings"

	"github.com/pingcap/tidb/pkg/parser/ast"

	"github.com/convoy-im/convoy/proxy/sqlerr"
	"github.com/convoy-im/convoy/rewrite"
	"github.com/convoy-im/convoy/router"
)

// Temporary tables and SQL-level prepared statements belong to the server
// connection that created them: the engine runs a session's statements
// that make or use them on one connection of its own (the engine's
// temptables.go). Planning says what a statement does to them.

// TempEffect is a statement's effect on the session's temporary tables and
// SQL-level prepared statements.
type TempEffect struct {
	Create string   // CREATE TEMPORARY TABLE: the table, db.name lower-case
	Drop   []string // DROP [TEMPORARY] TABLE: the tables named
	// Prepare and Deallocate name a prepared statement (lower-case, as
	// MariaDB compares them); Execute runs one.
	Prepare, Deallocate string
	Execute             bool
}

// Creates reports a statement that makes session state on its connection.
func (p *TempEffect) Creates() bool { return p != nil && (p.Create != "" || p.Prepare != "") }

// planTemp reads what stmt does to temporary tables (nil: nothing); db
// qualifies unqualified names. A temporary table named like a sharded
// table is refused: it would exist on one connection of one datasource.
func planTemp(stmt ast.StmtNode, db string) (*TempEffect, error) {
	switch st := stmt.(type) {
	case *ast.CreateTableStmt:
		if st.TemporaryKeyword == ast.TemporaryNone {
			return nil, nil
		}
		if isSharded(st.Table) {
			return nil, sqlerr.Errorf(sqlerr.NotSupported, "CREATE TEMPORARY TABLE %s: a temporary table cannot have a sharded table's name", st.Table.Name.O)
		}
		return &TempEffect{Create: tempName(st.Table, db)}, nil
	case *ast.PrepareStmt:
		return &TempEffect{Prepare: strings.ToLower(st.Name)}, nil
	case *ast.ExecuteStmt:
		return &TempEffect{Execute: true}, nil
	case *ast.DeallocateStmt:
		return &TempEffect{Deallocate: strings.ToLower(st.Name)}, nil
	case *ast.DropTableStmt:
		if st.IsView || st.TemporaryKeyword == ast.TemporaryNone && len(st.Tables) > 0 && isSharded(st.Tables[0]) {
			return nil, nil // a sharded DROP TABLE: DDL on every shard
		}
		p := &TempEffect{}
		for _, t := range st.Tables {
			p.Drop = append(p.Drop, tempName(t, db))
		}
		return p, nil
	}
	return nil, nil
}

func isSharded(t *ast.TableName) bool {
	_, ok := router.ShardKeyColumn(strings.ToLower(t.Name.O))
	return ok
}

func tempName(t *ast.TableName, db string) string {
	if t.Schema.O != "" {
		db = t.Schema.O
	}
	return strings.ToLower(db + "." + t.Name.O)
}

// checkPrepared refuses a PREPARE whose text names a sharded table: it
// would run on one connection of the default datasource, which has no
// such table. Clients prepare those through the protocol (COM_STMT_PREPARE,
// which Convoy routes) or send them as plain statements.
func checkPrepared(stmt ast.StmtNode, ctx Context) error {
	p, ok := stmt.(*ast.PrepareStmt)
	if !ok {
		return nil
	}
	if ctx.NoBackslashEscapes && (p.SQLVar != nil || strings.Contains(p.SQLText, `\`)) {
		// The server reads the prepared text in its own mode, without
		// NO_BACKSLASH_ESCAPES (the engine's nobackslash.go).
		return sqlerr.Errorf(sqlerr.NotSupported, "PREPARE ... FROM a text with a backslash, or from a variable, is not supported through Convoy in a NO_BACKSLASH_ESCAPES session: use the client's prepared statements (COM_STMT_PREPARE) or plain statements")
	}
	if p.SQLText == "" {
		return nil
	}
	stmts, err := ctx.Parser.Parse(p.SQLText)
	if err != nil || len(stmts) != 1 {
		return nil // the server says what is wrong with it
	}
	if a, err := rewrite.Analyze(stmts[0]); err == nil && len(a.Sharded) > 0 ||
		err != nil && isUnsupportedSharded(err) {
		return sqlerr.Errorf(sqlerr.NotSupported, "PREPARE ... FROM a statement on sharded tables is not supported through Convoy (it would run on one datasource, which lacks them): use the client's prepared statements (COM_STMT_PREPARE) or plain statements")
	}
	return nil
}

// isUnsupportedSharded: an analysis refusal, which only statements naming
// sharded tables get.
func isUnsupportedSharded(err error) bool {
	var ue *rewrite.UnsupportedError
	return errors.As(err, &ue)
}

// assignedUserVars lists the user variables stmt assigns with := (plain
// names only: they are read back by name).
func assignedUserVars(stmt ast.StmtNode, sql string) []string {
	if !strings.Contains(sql, ":=") {
		return nil // the common case, without a walk of the AST
	}
	v := &assignFinder{}
	stmt.Accept(v)
	return v.names
}

type assignFinder struct{ names []string }

func (v *assignFinder) Enter(n ast.Node) (ast.Node, bool) {
	if x, ok := n.(*ast.VariableExpr); ok && !x.IsSystem && x.Value != nil && plainVarName(x.Name) && !slices.Contains(v.names, x.Name) {
		v.names = append(v.names, x.Name)
	}
	return n, false
}

func (v *assignFinder) Leave(n ast.Node) (ast.Node, bool) { return n, true }

func plainVarName(n string) bool {
	if n == "" {
		return false
	}
	for _, r := range n {
		if !(r == '_' || r == '$' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return false
		}
	}
	return true
}
