package backend

import (
	"errors"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// maxStmtCache bounds the backend prepared statements one connection keeps;
// MariaDB's max_prepared_stmt_count is global (16382 by default), so every
// pooled connection must stay well under its share.
const maxStmtCache = 64

// Conn is one backend connection. It is owned by a single session between
// Acquire and Release.
type Conn struct {
	w         *wire
	id        uint32 // the server's connection id
	pool      *Pool
	foundRows bool // CLIENT_FOUND_ROWS was set at the handshake
	broken    bool
	// retire: the connection ran stored code (ExecAll) or was opened for one
	// statement (AcquireOnce); it is closed at Release, never pooled.
	retire   bool
	lastUsed time.Time
	gen      uint64            // the pool's outage count when it was opened
	limit    atomic.Int64      // timeout of each command, ns (0: none); read by the watchdog
	db       string            // current database on the server
	vars     map[string]string // session variables applied on this connection
	stmts    map[string]*stmt
	stmtLRU  []string
	// owner is the client connection holding c (see Interrupt).
	ownerMu sync.Mutex
	owner   uint32
}

// Datasource is the name of the datasource this connection belongs to.
func (c *Conn) Datasource() string { return c.pool.ds.Name }

// ConnectionID is the server's id of this connection (KILL takes it).
func (c *Conn) ConnectionID() uint32 { return c.id }

// Release hands the connection back to its pool. Never use c afterwards.
func (c *Conn) Release() {
	c.setOwner(0)
	c.pool.release(c)
}

// Retire makes Release close c instead of pooling it: a connection holding
// state no later owner may inherit (a session's named locks) ends with its
// owner, and the server releases that state with it.
func (c *Conn) Retire() { c.retire = true }

// InTxn reports whether the server says a transaction is open.
func (c *Conn) InTxn() bool { return c.w.status&mysql.SERVER_STATUS_IN_TRANS != 0 }

func (c *Conn) close() {
	c.pool.mu.Lock()
	delete(c.pool.live, c)
	c.pool.mu.Unlock()
	// Server-side statements go with the connection.
	c.w.quit()
}

// check ends a command: it marks the connection broken on anything but a
// server error packet (a half-read result leaves the protocol state
// unknown, so it must not be reused) and reports the outcome to the
// datasource's breaker. A command the watchdog or the breaker gave up on
// (see interrupt) fails with their error; one whose reply was complete
// keeps its result, but its connection is dropped all the same.
func (c *Conn) check(err error) error {
	if claim := c.w.busy.Swap(0); claim < 0 {
		c.broken = true
		if err == nil {
			return nil
		}
		if claim == claimTimeout {
			c.pool.br.suspect()
		}
		return c.claimed(claim)
	}
	if err == nil {
		c.pool.br.ok()
		return nil
	}
	if IsServerError(err) {
		c.pool.br.ok()
		if closesConnection(err) || c.w.failed {
			c.broken = true
		}
		return err
	}
	c.broken = true
	c.pool.br.suspect()
	return &UnavailableError{Datasource: c.pool.ds.Name, Err: err}
}

// Exec runs a text-protocol statement. Rows come back as the server sent
// them (Resultset.RowDatas; Values are not decoded): most go to the client
// unchanged.
func (c *Conn) Exec(sql string) (*mysql.Result, error) {
	r, err := c.w.query(sql)
	c.single(r)
	err = c.check(err)
	if IsFenceSetUp(err) {
		r, err = c.w.query(sql)
		c.single(r)
		err = c.check(err)
	}
	return r, err
}

// IsFenceSetUp reports MariaDB's answer to a statement compiled before a
// shard migration put its fence triggers on the table (MDEV-26048: the
// statement's table list lacks the table the new trigger reads, and the
// server says that table does not exist). The statement did nothing, and
// the same statement sent again is compiled with the trigger: Exec and
// ExecPrepared retry it once, and the engine's own batches too, so no
// client sees the migration's set-up.
func IsFenceSetUp(err error) bool {
	var me *mysql.MyError
	return errors.As(err, &me) && me.Code == mysql.ER_NO_SUCH_TABLE && strings.Contains(me.Message, "._convoy_")
}

// ExecMulti runs several statements of Convoy's own (never a client's text)
// in one round trip; see wire.multi. It returns the results of the
// statements that ran and, if one failed, its error: the server runs none
// after it.
func (c *Conn) ExecMulti(sql string) ([]*mysql.Result, error) {
	rs, err := c.w.multi(sql)
	return rs, c.check(err)
}

// ExecPrepared runs sql as a server-side prepared statement with args and
// returns binary-protocol rows, which the front end forwards unchanged to a
// client that used COM_STMT_EXECUTE. Statements are cached per connection.
func (c *Conn) ExecPrepared(sql string, args []any) (*mysql.Result, error) {
	st, err := c.stmt(sql)
	if err != nil {
		return nil, err
	}
	r, err := c.w.execute(st, args)
	c.single(r)
	err = c.check(err)
	if IsFenceSetUp(err) {
		// Prepared before the trigger: a new one (see IsFenceSetUp).
		c.forgetStmt(sql)
		if st, err = c.stmt(sql); err != nil {
			return nil, err
		}
		r, err = c.w.execute(st, args)
		c.single(r)
		err = c.check(err)
	}
	return r, err
}

// Describe prepares sql on the backend and reports its parameter count and
// result columns, as the server describes them at PREPARE. The statement is
// closed again: EXECUTE prepares its own, per physical table.
func (c *Conn) Describe(sql string) (params int, fields []*mysql.Field, err error) {
	st, err := c.w.prepare(sql)
	if err != nil {
		return 0, nil, c.check(err)
	}
	return st.params, st.columns, c.check(c.w.closeStmt(st.id))
}

// FieldList runs COM_FIELD_LIST on a table of the current database.
func (c *Conn) FieldList(table, wildcard string) ([]*mysql.Field, error) {
	fs, err := c.w.fieldList(table, wildcard)
	return fs, c.check(err)
}

func (c *Conn) stmt(sql string) (*stmt, error) {
	if st, ok := c.stmts[sql]; ok {
		return st, nil
	}
	st, err := c.w.prepare(sql)
	if err != nil {
		return nil, c.check(err)
	}
	if c.stmts == nil {
		c.stmts = map[string]*stmt{}
	}
	if len(c.stmtLRU) >= maxStmtCache {
		old := c.stmtLRU[0]
		c.stmtLRU = c.stmtLRU[1:]
		if s, ok := c.stmts[old]; ok {
			delete(c.stmts, old)
			if err := c.check(c.w.closeStmt(s.id)); err != nil {
				return nil, err
			}
		}
	}
	c.stmts[sql] = st
	c.stmtLRU = append(c.stmtLRU, sql)
	return st, nil
}

// forgetStmt closes sql's cached statement, if any (a close error breaks
// the connection, as check decides).
func (c *Conn) forgetStmt(sql string) {
	st, ok := c.stmts[sql]
	if !ok {
		return
	}
	delete(c.stmts, sql)
	if i := slices.Index(c.stmtLRU, sql); i >= 0 {
		c.stmtLRU = slices.Delete(c.stmtLRU, i, i+1)
	}
	_ = c.check(c.w.closeStmt(st.id))
}

// UseDB switches the connection's default database when it differs.
func (c *Conn) UseDB(db string) error {
	if db == "" || c.db == db {
		return nil
	}
	if err := c.check(c.w.simple(mysql.COM_INIT_DB, db)); err != nil {
		return err
	}
	c.db = db
	return nil
}

// SyncVars makes the connection's session variables equal want (name ->
// value as SQL text; names are "@@x" system or "@x" user variables, or
// "names" for SET NAMES). Variables set by an earlier user of the pooled
// connection and absent from want are put back to DEFAULT (user variables to
// NULL), so one session's state never leaks into another's.
func (c *Conn) SyncVars(want map[string]string) error {
	var parts []string
	var names string
	for k, v := range want {
		if c.vars[k] == v {
			continue
		}
		if k == "names" {
			names = v
			continue
		}
		parts = append(parts, assign(k, v))
	}
	for k := range c.vars {
		if _, ok := want[k]; ok {
			continue
		}
		switch {
		case k == "names":
			names = "utf8mb4 COLLATE " + Collation
		case strings.HasPrefix(k, "@@"):
			parts = append(parts, assign(k, "DEFAULT"))
		default:
			parts = append(parts, assign(k, "NULL"))
		}
	}
	if names == "" && len(parts) == 0 {
		return nil
	}
	sort.Strings(parts) // deterministic order: easier to read in the general log
	if names != "" {
		if _, err := c.Exec("SET NAMES " + names); err != nil {
			return err
		}
	}
	if len(parts) > 0 {
		if _, err := c.Exec("SET " + strings.Join(parts, ", ")); err != nil {
			return err
		}
	}
	c.vars = make(map[string]string, len(want))
	for k, v := range want {
		c.vars[k] = v
	}
	return nil
}

func assign(name, value string) string {
	if strings.HasPrefix(name, "@@") {
		return "@@SESSION." + name[2:] + " = " + value
	}
	return name + " = " + value
}

// closesConnection reports server errors after which the server drops the
// connection: reusing it would fail the next statement of another session.
func closesConnection(err error) bool {
	var me *mysql.MyError
	if !errors.As(err, &me) {
		return false
	}
	switch me.Code {
	case mysql.ER_NET_PACKET_TOO_LARGE, 1927 /* ER_CONNECTION_KILLED */, 4031 /* ER_CLIENT_INTERACTION_TIMEOUT */, mysql.ER_NET_READ_ERROR,
		mysql.ER_NET_READ_INTERRUPTED, mysql.ER_NET_ERROR_ON_WRITE, mysql.ER_NET_WRITE_INTERRUPTED, mysql.ER_NET_PACKETS_OUT_OF_ORDER:
		return true
	}
	return false
}
