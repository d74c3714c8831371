package engine

import ()

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
