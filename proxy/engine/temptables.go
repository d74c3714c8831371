package engine

import (
	"errors"
	"slices"
	"strings"

	"github.com/pingcap/tidb/pkg/parser/ast"

	"github.com/convoy-im/convoy/proxy/sqlerr"
	"github.com/convoy-im/convoy/rewrite"
	"github.com/convoy-im/convoy/router"
)

// Temporary tables and SQL-level prepared statements (PREPARE name FROM
// ..., EXECUTE, DEALLOCATE PREPARE) belong to the server connection that
// created them. On a pooled connection the session's next statement could
// miss them and another session could see them. So a session's CREATE
// TEMPORARY TABLE and PREPARE, its EXECUTE and DEALLOCATE and, while it
// has temporary tables, every statement it sends to the default datasource
// (its transactions there included) run on one connection of that
// datasource kept out of the pool, the session's own; when the last
// temporary table and prepared statement are gone, or the session ends,
// that connection is closed (not pooled), and the server drops what is
// left, as MariaDB does at disconnect and COM_RESET_CONNECTION.

// tempPlan is a statement's effect on the session's temporary tables and
// SQL-level prepared statements.
type tempPlan struct {
	create string   // CREATE TEMPORARY TABLE: the table, db.name lower-case
	drop   []string // DROP [TEMPORARY] TABLE: the tables named
	// prepare and deallocate name a prepared statement (lower-case, as
	// MariaDB compares them); execute runs one.
	prepare, deallocate string
	execute             bool
}

// creates reports a statement that makes session state on its connection.
func (p *tempPlan) creates() bool { return p != nil && (p.create != "" || p.prepare != "") }

// planTemp reads what stmt does to temporary tables (nil: nothing); db
// qualifies unqualified names. A temporary table named like a sharded
// table is refused: it would exist on one connection of one datasource.
func planTemp(stmt ast.StmtNode, db string) (*tempPlan, error) {
	switch st := stmt.(type) {
	case *ast.CreateTableStmt:
		if st.TemporaryKeyword == ast.TemporaryNone {
			return nil, nil
		}
		if isSharded(st.Table) {
			return nil, sqlerr.Errorf(sqlerr.NotSupported, "CREATE TEMPORARY TABLE %s: a temporary table cannot have a sharded table's name", st.Table.Name.O)
		}
		return &tempPlan{create: tempName(st.Table, db)}, nil
	case *ast.PrepareStmt:
		return &tempPlan{prepare: strings.ToLower(st.Name)}, nil
	case *ast.ExecuteStmt:
		return &tempPlan{execute: true}, nil
	case *ast.DeallocateStmt:
		return &tempPlan{deallocate: strings.ToLower(st.Name)}, nil
	case *ast.DropTableStmt:
		if st.IsView || st.TemporaryKeyword == ast.TemporaryNone && len(st.Tables) > 0 && isSharded(st.Tables[0]) {
			return nil, nil // a sharded DROP TABLE: DDL on every shard
		}
		p := &tempPlan{}
		for _, t := range st.Tables {
			p.drop = append(p.drop, tempName(t, db))
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

// usesTempConn reports whether a statement to the default datasource runs
// on the session's own connection.
func (s *Session) usesTempConn(pl *plan) bool {
	if len(s.temps) > 0 || pl.Temp.creates() {
		return true
	}
	return pl.Temp != nil && (pl.Temp.execute || pl.Temp.deallocate != "") && s.temp != nil
}

// tempConn returns the session's temporary-table connection on ds (the
// default datasource), taking it from the pool the first time, with the
// session's variables.
func (s *Session) tempConn(ds string) (Conn, error) {
	if c := s.temp; c != nil {
		if c.Datasource() != ds {
			// The default datasource changed (a route change): its
			// temporary tables stay behind on the old one.
			return nil, sqlerr.Errorf(sqlerr.NotSupported, "the default datasource changed while this session had temporary tables on %s; reconnect", c.Datasource())
		}
		if err := c.SyncVars(mergeVars(s.vars, s.stmtVars)); err != nil {
			s.dropTemps()
			return nil, err
		}
		return c, nil
	}
	c, err := s.acquireOwn(ds)
	if err != nil {
		return nil, err
	}
	s.temp = c
	return c, nil
}

// noteTemp records what a statement that succeeded did to the session's
// temporary tables; the connection goes once none is left.
func (s *Session) noteTemp(pl *plan) {
	if pl.Temp == nil {
		return
	}
	if pl.Temp.create != "" {
		if s.temps == nil {
			s.temps = map[string]bool{}
		}
		s.temps[pl.Temp.create] = true
	}
	for _, t := range pl.Temp.drop {
		delete(s.temps, t)
	}
	if n := pl.Temp.prepare; n != "" {
		if s.stmts == nil {
			s.stmts = map[string]bool{}
		}
		s.stmts[n] = true
	}
	delete(s.stmts, pl.Temp.deallocate)
	if s.ownIdle() {
		s.dropTemps()
	}
}

// ownIdle: the session's own connection holds nothing of it any more.
func (s *Session) ownIdle() bool {
	return len(s.temps) == 0 && len(s.stmts) == 0 && (s.txn.conn == nil || s.txn.conn != s.temp)
}

// dropTemps closes the temporary-table connection (Retire: never pooled),
// which drops what is left of the session's temporary tables.
func (s *Session) dropTemps() {
	s.temps, s.stmts = nil, nil
	if c := s.temp; c != nil {
		s.temp = nil
		c.Release()
	}
}

// releaseTxnConn gives back a transaction's connection: a pooled one to
// its pool; the temporary-table connection stays the session's (ended:
// rolled back if still open; lost: its temporary tables are gone too).
func (s *Session) releaseTxnConn(c Conn, lost bool) {
	if c != s.temp {
		c.Release()
		return
	}
	if lost {
		s.dropTemps()
		return
	}
	if len(s.temps) == 0 && len(s.stmts) == 0 {
		s.dropTemps()
	}
}

// checkPrepared refuses a PREPARE whose text names a sharded table: it
// would run on one connection of the default datasource, which has no
// such table. Clients prepare those through the protocol (COM_STMT_PREPARE,
// which Convoy routes) or send them as plain statements.
func (s *Session) checkPrepared(stmt ast.StmtNode) error {
	p, ok := stmt.(*ast.PrepareStmt)
	if !ok {
		return nil
	}
	if s.sqlModeNBE != "" && (p.SQLVar != nil || strings.Contains(p.SQLText, `\`)) {
		// The server reads the prepared text in its own mode, without
		// NO_BACKSLASH_ESCAPES (nobackslash.go).
		return sqlerr.Errorf(sqlerr.NotSupported, "PREPARE ... FROM a text with a backslash, or from a variable, is not supported through Convoy in a NO_BACKSLASH_ESCAPES session: use the client's prepared statements (COM_STMT_PREPARE) or plain statements")
	}
	if p.SQLText == "" {
		return nil
	}
	stmts, err := s.parser.Parse(p.SQLText)
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
