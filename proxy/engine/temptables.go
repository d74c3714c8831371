package engine

import (
	"github.com/convoy-im/convoy/proxy/sqlerr"
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

// usesTempConn reports whether a statement to the default datasource runs
// on the session's own connection.
func (s *Session) usesTempConn(pl *plan) bool {
	if len(s.temps) > 0 || pl.Temp.Creates() {
		return true
	}
	return pl.Temp != nil && (pl.Temp.Execute || pl.Temp.Deallocate != "") && s.temp != nil
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
	if pl.Temp.Create != "" {
		if s.temps == nil {
			s.temps = map[string]bool{}
		}
		s.temps[pl.Temp.Create] = true
	}
	for _, t := range pl.Temp.Drop {
		delete(s.temps, t)
	}
	if n := pl.Temp.Prepare; n != "" {
		if s.stmts == nil {
			s.stmts = map[string]bool{}
		}
		s.stmts[n] = true
	}
	delete(s.stmts, pl.Temp.Deallocate)
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
