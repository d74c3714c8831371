package backend

import (
	"encoding/binary"
	"errors"
	"sort"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"
)

// maxStmtCache bounds the backend prepared statements one connection keeps;
// MariaDB's max_prepared_stmt_count is global (16382 by default), so every
// pooled connection must stay well under its share.
const maxStmtCache = 64

// Conn is one backend connection. It is owned by a single session between
// Acquire and Release.
type Conn struct {
	*client.Conn
	pool      *Pool
	foundRows bool // CLIENT_FOUND_ROWS was set at the handshake
	broken    bool
	lastUsed  time.Time
	vars      map[string]string // session variables applied on this connection
	stmts     map[string]*client.Stmt
	stmtLRU   []string
}

// Datasource is the name of the datasource this connection belongs to.
func (c *Conn) Datasource() string { return c.pool.ds.Name }

// Release hands the connection back to its pool. Never use c afterwards.
func (c *Conn) Release() { c.pool.release(c) }

// InTxn reports whether the server says a transaction is open.
func (c *Conn) InTxn() bool { return c.Conn.IsInTransaction() }

func (c *Conn) close() {
	for _, s := range c.stmts {
		_ = s.Close()
	}
	_ = c.Conn.Close()
}

// check marks the connection broken on anything but a server error packet: a
// half-read result leaves the protocol state unknown, so it must not be reused.
func (c *Conn) check(err error) error {
	if err == nil {
		return nil
	}
	if IsServerError(err) {
		if closesConnection(err) {
			c.broken = true
		}
		return err
	}
	c.broken = true
	return &UnavailableError{Datasource: c.pool.ds.Name, Err: err}
}

// Exec runs a text-protocol statement.
func (c *Conn) Exec(sql string) (*mysql.Result, error) {
	r, err := c.Conn.Execute(sql)
	return r, c.check(err)
}

// ExecPrepared runs sql as a server-side prepared statement with args and
// returns binary-protocol rows, which the front end forwards unchanged to a
// client that used COM_STMT_EXECUTE. Statements are cached per connection.
func (c *Conn) ExecPrepared(sql string, args []any) (*mysql.Result, error) {
	st, err := c.stmt(sql)
	if err != nil {
		return nil, err
	}
	r, err := st.Execute(args...)
	return r, c.check(err)
}

// Describe prepares sql on the backend and reports its parameter count and
// result columns, as the server describes them at PREPARE (go-mysql's client
// drops the column definitions, so this speaks the protocol itself). The
// statement is closed again: EXECUTE prepares its own, per physical table.
func (c *Conn) Describe(sql string) (params int, fields []*mysql.Field, err error) {
	defer func() { err = c.check(err) }()
	c.Conn.ResetSequence()
	if err := c.Conn.WritePacket(append([]byte{0, 0, 0, 0, mysql.COM_STMT_PREPARE}, sql...)); err != nil {
		return 0, nil, err
	}
	data, err := c.Conn.ReadPacket()
	if err != nil {
		return 0, nil, err
	}
	if data[0] == mysql.ERR_HEADER {
		return 0, nil, c.Conn.HandleErrorPacket(data)
	}
	if data[0] != mysql.OK_HEADER || len(data) < 9 {
		return 0, nil, mysql.ErrMalformPacket
	}
	id := binary.LittleEndian.Uint32(data[1:5])
	columns := int(binary.LittleEndian.Uint16(data[5:7]))
	params = int(binary.LittleEndian.Uint16(data[7:9]))
	if params > 0 {
		for i := 0; i <= params; i++ { // definitions, then EOF
			if _, err := c.Conn.ReadPacket(); err != nil {
				return 0, nil, err
			}
		}
	}
	if columns > 0 {
		fields = make([]*mysql.Field, 0, columns)
		for i := 0; i <= columns; i++ {
			data, err := c.Conn.ReadPacket()
			if err != nil {
				return 0, nil, err
			}
			if i == columns {
				break // EOF
			}
			f, err := mysql.FieldData(data).Parse()
			if err != nil {
				return 0, nil, err
			}
			fields = append(fields, f)
		}
	}
	c.Conn.ResetSequence()
	err = c.Conn.WritePacket(binary.LittleEndian.AppendUint32([]byte{0, 0, 0, 0, mysql.COM_STMT_CLOSE}, id))
	return params, fields, err
}

func (c *Conn) stmt(sql string) (*client.Stmt, error) {
	if st, ok := c.stmts[sql]; ok {
		return st, nil
	}
	st, err := c.Conn.Prepare(sql)
	if err != nil {
		return nil, c.check(err)
	}
	if c.stmts == nil {
		c.stmts = map[string]*client.Stmt{}
	}
	if len(c.stmtLRU) >= maxStmtCache {
		old := c.stmtLRU[0]
		c.stmtLRU = c.stmtLRU[1:]
		if s, ok := c.stmts[old]; ok {
			_ = s.Close()
			delete(c.stmts, old)
		}
	}
	c.stmts[sql] = st
	c.stmtLRU = append(c.stmtLRU, sql)
	return st, nil
}

// UseDB switches the connection's default database when it differs.
func (c *Conn) UseDB(db string) error {
	if db == "" || c.Conn.GetDB() == db {
		return nil
	}
	return c.check(c.Conn.UseDB(db))
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
