package engine

import (
	"strings"

	"github.com/pingcap/tidb/pkg/parser/ast"

	"github.com/convoy-im/convoy/router"
)

// Temporary tables belong to the server connection that created them. On
// a pooled connection the session's next statement could miss its table
// and another session could see it. So a session's CREATE TEMPORARY TABLE
// and, while it has temporary tables, every statement it sends to the
// default datasource (its transactions there included) run on one
// connection of that datasource kept out of the pool; when the last
// temporary table is dropped, or the session ends, that connection is
// closed (not pooled), and the server drops what is left, as MariaDB does
// at disconnect and COM_RESET_CONNECTION.

// tempPlan is a statement's effect on the session's temporary tables.
type tempPlan struct {
	create string   // CREATE TEMPORARY TABLE: the table, db.name lower-case
	drop   []string // DROP [TEMPORARY] TABLE: the tables named
}

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
			return nil, errorf(CodeNotSupported, "CREATE TEMPORARY TABLE %s: a temporary table cannot have a sharded table's name", st.Table.Name.O)
		}
		return &tempPlan{create: tempName(st.Table, db)}, nil
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
// on the session's temporary-table connection.
func (s *Session) usesTempConn(pl *plan) bool {
	return pl.temp != nil && pl.temp.create != "" || len(s.temps) > 0
}

// tempConn returns the session's temporary-table connection on ds (the
// default datasource), taking it from the pool the first time, with the
// session's variables.
func (s *Session) tempConn(ds string) (Conn, error) {
	if c := s.temp; c != nil {
		if c.Datasource() != ds {
			// The default datasource changed (a route change): its
			// temporary tables stay behind on the old one.
			return nil, errorf(CodeNotSupported, "the default datasource changed while this session had temporary tables on %s; reconnect", c.Datasource())
		}
		if err := c.SyncVars(mergeVars(s.vars, s.stmtVars)); err != nil {
			s.dropTemps()
			return nil, err
		}
		return c, nil
	}
	c, err := s.acquire(ds)
	if err != nil {
		return nil, err
	}
	if r, ok := c.(interface{ Retire() }); ok {
		r.Retire()
	}
	s.temp = c
	return c, nil
}

// noteTemp records what a statement that succeeded did to the session's
// temporary tables; the connection goes once none is left.
func (s *Session) noteTemp(pl *plan) {
	if pl.temp == nil {
		return
	}
	if pl.temp.create != "" {
		if s.temps == nil {
			s.temps = map[string]bool{}
		}
		s.temps[pl.temp.create] = true
	}
	for _, t := range pl.temp.drop {
		delete(s.temps, t)
	}
	if len(s.temps) == 0 && (s.txn.conn == nil || s.txn.conn != s.temp) {
		s.dropTemps()
	}
}

// dropTemps closes the temporary-table connection (Retire: never pooled),
// which drops what is left of the session's temporary tables.
func (s *Session) dropTemps() {
	s.temps = nil
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
	if len(s.temps) == 0 {
		s.dropTemps()
	}
}
