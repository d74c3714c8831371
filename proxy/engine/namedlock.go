package engine

import (
	"github.com/pingcap/tidb/pkg/parser/ast"

	"github.com/convoy-im/convoy/rewrite"
)

// Named locks (GET_LOCK, RELEASE_LOCK, RELEASE_ALL_LOCKS, IS_FREE_LOCK,
// IS_USED_LOCK) belong to the server connection that took them, not to a
// transaction. On a pooled connection a lock would go back to the pool
// with it (another session's statements then run holding it), and the
// session's RELEASE_LOCK could run on another connection and answer 0.
// So every statement of a session that calls one runs on one connection
// of the default datasource, taken at the first and kept out of the pool
// until the session ends; then it is closed, not pooled, and the server
// releases whatever locks it still holds (a client that disconnects
// releases its locks, as with MariaDB). Two clients through two proxies
// exclude each other: the locks live on the one server. Applications take
// them for leader election and migrations at start (Rails, Laravel,
// Flyway, Liquibase).

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

// lockConn returns the session's named-lock connection on ds (the default
// datasource), taking it from the pool the first time. It is not bounded
// by the statement timeout: GET_LOCK waits as long as the client asked.
func (s *Session) lockConn(ds string) (Conn, error) {
	if c := s.locks; c != nil && c.Datasource() == ds {
		if err := c.SyncVars(mergeVars(s.vars, s.stmtVars)); err != nil {
			s.dropLocks()
			return nil, err
		}
		return c, nil
	}
	// The default datasource changed (a route change): the locks held on
	// the old one go with its connection.
	s.dropLocks()
	c, err := s.acquireOwn(ds)
	if err != nil {
		return nil, err
	}
	setTimeout(c, 0)
	s.locks = c
	return c, nil
}

// acquireOwn takes a connection of ds for the session's own server-side
// state (named locks, temporary tables, SQL-level prepared statements):
// retired, so that its Release closes it and the server drops that state,
// never handing it to another session through the pool.
func (s *Session) acquireOwn(ds string) (Conn, error) {
	c, err := s.acquire(ds)
	if err != nil {
		return nil, err
	}
	if r, ok := c.(interface{ Retire() }); ok {
		r.Retire()
	}
	return c, nil
}

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

// afterLockError drops the lock connection when it broke: the server has
// released its locks, and the next named-lock statement takes another.
func (s *Session) afterLockError(err error) {
	if err != nil && connLost(classify(err)) {
		s.dropLocks()
	}
}

// dropLocks closes the lock connection, if any (Retire: never pooled),
// which releases the session's named locks on the server.
func (s *Session) dropLocks() {
	if c := s.locks; c != nil {
		s.locks = nil
		c.Release()
	}
}
