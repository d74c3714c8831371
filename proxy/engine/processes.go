package engine

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/pingcap/tidb/pkg/parser/ast"

	"github.com/convoy-im/convoy/proxy/mysqlrow"
	"github.com/convoy-im/convoy/proxy/sqlerr"
	"github.com/convoy-im/convoy/rewrite"
)

// KILL [CONNECTION | QUERY] id names a Convoy client connection (the id
// of its handshake and CONNECTION_ID()), as drivers send it to cancel a
// statement (Connector/J's Statement.cancel and query timeout,
// MySqlConnector's cancellation: a second connection sends KILL QUERY).
// It is never passed on: on a datasource the number is some pooled
// connection's thread, whichever session's statement that is running.

// SHOW [FULL] PROCESSLIST lists Convoy's client connections the same way:
// a datasource's list is its pooled connections, all as Convoy's
// backend account, with other sessions' statements in Info.

// liveSessions are the sessions by client connection id.
type liveSessions struct {
	mu sync.Mutex
	m  map[uint32]*Session
}

func (l *liveSessions) add(id uint32, s *Session) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[uint32]*Session{}
	}
	l.m[id] = s
}

// remove forgets s, unless its id already names a newer session (COM_CHANGE_USER).
func (l *liveSessions) remove(id uint32, s *Session) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m[id] == s {
		delete(l.m, id)
	}
}

func (l *liveSessions) get(id uint64) *Session {
	if id > math.MaxUint32 {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.m[uint32(id)]
}

// SetCloser gives the session the function that closes its client
// connection, for KILL CONNECTION.
func (s *Session) SetCloser(f func()) { s.closer = f }

// backendCtx is the context of the session's backend Acquires: it names
// the client connection holding them (backend.Interrupt).
func (s *Session) backendCtx() context.Context {
	if s.ownerCtx == nil {
		return context.Background()
	}
	return s.ownerCtx
}

// interrupter is the part of Backends KILL needs (backend.Manager has it).
type interrupter interface {
	// Interrupt stops the owner's running statements and drops their
	// connections (KILL CONNECTION); InterruptQuery has the server stop
	// them and keeps the connections and their transactions (KILL QUERY).
	Interrupt(owner uint32) int
	InterruptQuery(owner uint32) int
}

// kill answers KILL: the target's running backend statements are stopped
// (they fail with 1317), and for KILL CONNECTION its client connection is
// closed, which rolls its transaction back. An account may kill its own
// connections; an admin any.
func (s *Session) kill(pl *plan) (*mysql.Result, error) {
	st := pl.A.Stmt.(*ast.KillStmt) // planbuilder.OpKill
	s.e.metrics.countStatement("session")
	target := s.e.live.get(st.ConnectionID)
	if target == nil {
		return nil, sqlerr.Errorf(sqlerr.UnknownThread, "Unknown thread id: %d", st.ConnectionID)
	}
	if target.user != s.user && !s.priv.Admin {
		return nil, sqlerr.Errorf(sqlerr.NotThreadOwner, "You are not owner of thread %d", st.ConnectionID)
	}
	if in, ok := s.e.backends.(interrupter); ok {
		if st.Query {
			in.InterruptQuery(target.connID)
		} else {
			in.Interrupt(target.connID)
		}
	}
	select {
	case target.interrupt <- struct{}{}: // a wait in Convoy itself ends too
	default:
	}
	if !st.Query && target.closer != nil {
		target.closer()
	}
	return okResult(), nil
}

// Interrupt implements interrupter.
func (b managerBackends) Interrupt(owner uint32) int { return b.m.Interrupt(owner) }

// InterruptQuery implements interrupter.
func (b managerBackends) InterruptQuery(owner uint32) int { return b.m.InterruptQuery(owner) }

var _ interrupter = managerBackends{}

// procState is what SHOW PROCESSLIST says of a session: the command it
// runs ("Sleep" between commands) since when, and its statement's text.
// The session's current database is kept here too, for the same reason
// (readers are other sessions' goroutines).
type procState struct {
	mu      sync.Mutex
	command string
	since   time.Time
	info    string
	db      string
}

// startCommand and endCommand bracket one command of the session.
func (s *Session) startCommand(command, info string) {
	select {
	case <-s.interrupt:
	default:
	}
	s.proc.set(command, info, s.db)
}
func (s *Session) endCommand() { s.proc.set("Sleep", "", s.db) }

func (p *procState) set(command, info, db string) {
	p.mu.Lock()
	p.command, p.since, p.info, p.db = command, time.Now(), info, db
	p.mu.Unlock()
}

func (p *procState) get() (command string, since time.Time, info, db string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.command == "" {
		return "Sleep", p.since, "", p.db
	}
	return p.command, p.since, p.info, p.db
}

// SetRemoteAddr is the client's address as SHOW PROCESSLIST's Host shows
// it (host:port).
func (s *Session) SetRemoteAddr(addr string) { s.addr = addr }

// process is one client connection as the process lists show it.
type process struct {
	id                  uint32
	user, host, command string
	db, state, info     []byte // nil: NULL
	elapsed             time.Duration
}

// processes are the client connections the session may see: its
// account's own, every one for an admin (as MariaDB's PROCESS privilege),
// by id; self is the statement the session itself is running.
func (s *Session) processes(self string) []process {
	s.e.live.mu.Lock()
	var list []*Session
	for _, o := range s.e.live.m {
		if s.priv.Admin || o.user == s.user {
			list = append(list, o)
		}
	}
	s.e.live.mu.Unlock()
	sort.Slice(list, func(i, j int) bool { return list[i].connID < list[j].connID })
	now := time.Now()
	out := make([]process, 0, len(list))
	for _, o := range list {
		command, since, stmt, cur := o.proc.get()
		if o == s {
			command, since, stmt = "Query", now, self // as MariaDB lists the asking statement
		}
		p := process{id: o.connID, user: o.user, host: o.addr, command: command, state: []byte{}}
		if cur != "" {
			p.db = []byte(cur)
		}
		if command != "Sleep" {
			p.state, p.info = []byte("executing"), []byte(stmt)
		}
		if !since.IsZero() {
			p.elapsed = now.Sub(since)
		}
		out = append(out, p)
	}
	return out
}

// processList answers SHOW [FULL] PROCESSLIST in MariaDB's columns.
func (s *Session) processList(pl *plan, binary bool) (*mysql.Result, error) {
	st := pl.A.Stmt.(*ast.ShowStmt) // planbuilder.OpProcessList
	// The column definitions MariaDB 10.11 sends to a utf8mb4 client.
	text := func(name string, length uint32, flag uint16) *mysql.Field {
		return &mysql.Field{Name: []byte(name), Type: mysql.MYSQL_TYPE_VAR_STRING, Charset: 45, ColumnLength: length, Flag: flag, Decimal: 39}
	}
	num := func(name string, tp uint8, length uint32, decimals uint8) *mysql.Field {
		return &mysql.Field{Name: []byte(name), Type: tp, Charset: 63, ColumnLength: length, Decimal: decimals,
			Flag: mysql.NOT_NULL_FLAG | mysql.BINARY_FLAG | mysql.NUM_FLAG}
	}
	info := text("Info", 400, 0)
	if st.Full {
		info = &mysql.Field{Name: []byte("Info"), Type: mysql.MYSQL_TYPE_BLOB, Charset: 45, ColumnLength: 201326592, Decimal: 39}
	}
	rs := &mysql.Resultset{Fields: []*mysql.Field{
		num("Id", mysql.MYSQL_TYPE_LONGLONG, 11, 0), text("User", 512, mysql.NOT_NULL_FLAG), text("Host", 256, mysql.NOT_NULL_FLAG),
		text("db", 256, 0), text("Command", 64, mysql.NOT_NULL_FLAG), num("Time", mysql.MYSQL_TYPE_LONG, 7, 0),
		text("State", 120, 0), info, num("Progress", mysql.MYSQL_TYPE_DOUBLE, 7, 3),
	}}
	for _, p := range s.processes(pl.SQL) {
		infoV := p.info
		if !st.Full && len(infoV) > 100 {
			infoV = []byte(truncateRunes(string(infoV), 100))
		}
		rs.RowDatas = append(rs.RowDatas, mysqlrow.TextRow([][]byte{
			[]byte(strconv.FormatUint(uint64(p.id), 10)), []byte(p.user), []byte(p.host), p.db, []byte(p.command),
			[]byte(strconv.Itoa(int(p.elapsed / time.Second))), p.state, infoV, []byte("0.000"),
		}))
	}
	if binary && !mysqlrow.TextToBinary(rs) {
		return nil, sqlerr.Errorf(sqlerr.Internal, "[BUG] SHOW PROCESSLIST rows could not be encoded for the binary protocol")
	}
	return &mysql.Result{Resultset: rs}, nil
}

// processListSQL is pl's SELECT on information_schema.PROCESSLIST with the
// table replaced by the Convoy connections the session may see: a
// derived table whose first branch is the datasource's own table with no
// row (the column types are MariaDB's) and whose others are one row each,
// value by column name. The client's conditions, joins and order then run
// on the datasource as written.
func (s *Session) processListSQL(c Conn, pl *plan) (string, error) {
	cols, err := s.e.processListColumns(c)
	if err != nil {
		return "", err
	}
	var b []byte
	b = append(b, "SELECT * FROM information_schema.PROCESSLIST WHERE 0"...)
	for _, p := range s.processes(pl.SQL) {
		b = append(b, " UNION ALL SELECT "...)
		for i, col := range cols {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendProcessValue(b, col, p)
		}
	}
	stmts, err := s.parser.Parse(string(b))
	if err != nil || len(stmts) != 1 {
		return "", sqlerr.Errorf(sqlerr.Internal, "[BUG] the process list query did not parse: %v", err)
	}
	derived, ok := stmts[0].(ast.ResultSetNode)
	if !ok {
		return "", sqlerr.Errorf(sqlerr.Internal, "[BUG] the process list query is no result set")
	}
	return rewrite.RestoreWithProcessList(pl.A.Stmt, s.db, derived)
}

// appendProcessValue is the literal of information_schema.PROCESSLIST's
// column col for p (NULL for a column Convoy has no value for).
func appendProcessValue(b []byte, col string, p process) []byte {
	str := func(v []byte) []byte {
		if v == nil {
			return append(b, "NULL"...)
		}
		if out, ok := rewrite.AppendLiteral(b, v); ok {
			return out
		}
		return fmt.Appendf(b, "X'%X'", v) // not UTF-8
	}
	switch strings.ToUpper(col) {
	case "ID":
		return strconv.AppendUint(b, uint64(p.id), 10)
	case "USER":
		return str([]byte(p.user))
	case "HOST":
		return str([]byte(p.host))
	case "DB":
		return str(p.db)
	case "COMMAND":
		return str([]byte(p.command))
	case "TIME":
		return strconv.AppendInt(b, int64(p.elapsed/time.Second), 10)
	case "TIME_MS":
		return strconv.AppendFloat(b, float64(p.elapsed.Microseconds())/1000, 'f', 3, 64)
	case "STATE":
		return str(p.state)
	case "INFO", "INFO_BINARY":
		return str(p.info)
	case "STAGE", "MAX_STAGE", "PROGRESS", "MEMORY_USED", "MAX_MEMORY_USED", "EXAMINED_ROWS", "QUERY_ID", "TID", "SENT_ROWS":
		return append(b, '0')
	}
	return append(b, "NULL"...)
}

// processListColumns are the datasources' information_schema.PROCESSLIST
// columns, read once.
func (e *Engine) processListColumns(c Conn) ([]string, error) {
	e.plColsMu.Lock()
	defer e.plColsMu.Unlock()
	if e.plCols != nil {
		return e.plCols, nil
	}
	r, err := c.Exec("SELECT * FROM information_schema.PROCESSLIST WHERE 0")
	if err != nil {
		return nil, err
	}
	cols := make([]string, len(r.Fields))
	for i, f := range r.Fields {
		cols[i] = string(f.Name)
	}
	e.plCols = cols
	return cols, nil
}

// truncateRunes is s cut to n characters (not bytes), as MariaDB cuts
// Info.
func truncateRunes(s string, n int) string {
	for i := range s {
		if n == 0 {
			return s[:i]
		}
		n--
	}
	return s
}
