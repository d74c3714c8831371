package proxy

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/server"

	"github.com/convoy-im/convoy/proxy/admin"
	"github.com/convoy-im/convoy/proxy/engine"
	"github.com/convoy-im/convoy/proxy/sqlerr"
)

// handler adapts go-mysql's server.Handler to one engine.Session.
type handler struct {
	s    *Server
	sess *engine.Session
	conn *server.Conn // nil during the handshake
	cc   *clientConn  // nil until the handshake is done
	// salt is the handshake's scramble (COM_CHANGE_USER).
	salt []byte
	user User
	host string // the client's address, for USER()
	// tlsVersion and tlsCipher name the client's TLS session in MariaDB's
	// words (TLSv1.3, TLS_AES_128_GCM_SHA256), empty without TLS.
	tlsVersion, tlsCipher string
	stmts                 int // open prepared statements (bounded by MaxPreparedPerSession)
	// multi: the client enabled multi-statements (CLIENT_MULTI_STATEMENTS at
	// the handshake, or COM_SET_OPTION later).
	multi bool
}

var _ server.Handler = (*handler)(nil)

// The engine is what the directives run against: proxy/admin declares what
// it needs, and neither package imports the other.
var (
	_ admin.Engine  = (*engine.Engine)(nil)
	_ admin.Session = (*engine.Session)(nil)
)

// Client commands as the statement log names them.
const (
	cmdQuery       = "COM_QUERY"
	cmdInitDB      = "COM_INIT_DB"
	cmdFieldList   = "COM_FIELD_LIST"
	cmdStmtPrepare = "COM_STMT_PREPARE"
	cmdStmtExecute = "COM_STMT_EXECUTE"
	cmdSetOption   = "COM_SET_OPTION"
)

// fail maps err to a MySQL error, counts it and logs it (stmtlog.go). cmd
// is the client command; sql its statement text, if it has one. A
// statement's line names the shard the session routed it to, if any.
func (h *handler) fail(err error, cmd, sql string) error {
	if err == nil {
		return nil
	}
	var shard fmt.Stringer
	switch cmd {
	case cmdQuery, cmdStmtPrepare, cmdStmtExecute:
		if sh, ok := h.sess.StatementShard(); ok {
			shard = sh
		}
	}
	return h.failAt(err, cmd, sql, shard)
}

// failAt is fail for a command routed to shard (nil: none).
func (h *handler) failAt(err error, cmd, sql string, shard fmt.Stringer) error {
	me := sqlerr.ToMySQL(err)
	h.s.errs.WithLabelValues(strconv.Itoa(int(me.Code))).Inc()
	fc := failedCommand{cmd: cmd, sql: sql, user: h.user.Name, shard: shard}
	if h.conn != nil {
		fc.remote = h.conn.RemoteAddr()
	}
	h.s.stmtLog.failed(err, me, fc)
	return me
}

// replaceSession ends the client's session (its transaction rolled back,
// its variables gone) and continues with sess (COM_RESET_CONNECTION,
// COM_CHANGE_USER).
func (h *handler) replaceSession(sess *engine.Session) {
	if h.cc != nil {
		h.cc.closeStatements()
	}
	h.sess.Close()
	h.sess = sess
	h.sess.SetFoundRows(h.conn.HasCapability(mysql.CLIENT_FOUND_ROWS))
	h.setMultiResults()
	h.startSession()
}

// startSession gives a new session what it knows of its client.
func (h *handler) startSession() {
	h.sess.SetPrivileges(h.user.privileges())
	h.sess.SetOutboxDefault(h.user.Outbox)
	if a := h.conn.RemoteAddr(); a != nil {
		h.sess.SetRemoteAddr(a.String())
	}
	h.sess.SetTLS(h.tlsVersion, h.tlsCipher)
	if cc := h.cc; cc != nil {
		h.sess.SetLocalFiles(h.localFile)
		h.sess.SetMaxAllowedPacket(int64(cc.max))
		// KILL CONNECTION from another session: the socket's Close is safe
		// beside this connection's own reads and writes, which then fail
		// and end it (its session closes, rolling its transaction back).
		h.sess.SetCloser(func() { _ = cc.Conn.Close() })
	}
	// Last: it makes the session visible to others (KILL, SHOW
	// PROCESSLIST), which read what the calls above set.
	h.sess.SetClient(h.user.Name, h.host, h.conn.ConnectionID())
	h.syncStatus()
}

// syncStatus keeps the status flags of every reply in line with the session:
// backends' own flags describe a pooled connection, not this client.
func (h *handler) syncStatus() {
	if h.conn == nil {
		return
	}
	h.conn.UnsetStatus(mysql.SERVER_STATUS_IN_TRANS | mysql.SERVER_STATUS_AUTOCOMMIT | mysql.SERVER_STATUS_NO_BACKSLASH_ESCAPED)
	var st uint16
	if h.sess.Autocommit() {
		st |= mysql.SERVER_STATUS_AUTOCOMMIT
	}
	if h.sess.InTransaction() {
		st |= mysql.SERVER_STATUS_IN_TRANS
	}
	if h.sess.NoBackslashEscapes() {
		// Drivers that interpolate parameters escape by this flag.
		st |= mysql.SERVER_STATUS_NO_BACKSLASH_ESCAPED
	}
	h.conn.SetStatus(st)
}

// result finishes a statement that ran: status flags, and err through fail.
func (h *handler) result(cmd, sql string, r *mysql.Result, err error) (*mysql.Result, error) {
	h.syncStatus()
	if err != nil {
		return nil, h.fail(err, cmd, sql)
	}
	if r != nil {
		r.Status = 0 // the connection's flags are OR-ed in by the writer
	}
	return r, nil
}

// UseDB handles COM_INIT_DB and the database of the handshake. go-mysql
// calls it before the password check; the only effect is an existence check
// on the default datasource.
func (h *handler) UseDB(db string) error {
	return h.fail(h.sess.UseDB(db), cmdInitDB, "")
}

func (h *handler) HandleQuery(q string) (*mysql.Result, error) {
	q = h.sess.Standard(q) // (NO_BACKSLASH_ESCAPES: see engine/nobackslash.go)
	if h.multi && h.conn != nil && strings.IndexByte(q, ';') >= 0 {
		return h.multiQuery(q)
	}
	return h.query(q)
}

// query runs one statement and answers it (see reply).
func (h *handler) query(q string) (*mysql.Result, error) {
	r, ok, err := h.directive(q)
	if !ok {
		r, err = h.sess.Query(q)
	}
	return h.answer(q, r, err)
}

// statement runs one statement of a multi-statement query, as query does.
func (h *handler) statement(st engine.Statement) (*mysql.Result, error) {
	if r, ok, err := h.directive(st.Text); ok {
		return r, err
	}
	return h.sess.RunStatement(st)
}

// directive answers statement q when it is one of Convoy's directives
// (ok); otherwise q is SQL, for the engine. This is the one place the two
// part, once per statement: proxy/admin answers a directive inside
// engine.Session.Answer, which keeps a statement's bookkeeping around it
// (a malformed directive's syntax error included).
func (h *handler) directive(q string) (*mysql.Result, bool, error) {
	d, ok, perr := admin.Parse(q)
	if !ok {
		return nil, false, nil
	}
	r, err := h.sess.Answer(q, func() (*mysql.Result, error) {
		if perr != nil {
			return nil, perr
		}
		return h.s.admin.Run(h.sess, d)
	})
	return r, true, err
}

// answer answers statement q with its result (see reply).
func (h *handler) answer(q string, r *mysql.Result, err error) (*mysql.Result, error) {
	r, err = h.result(cmdQuery, q, r, err)
	if werr := h.writeLeading(); werr != nil {
		return nil, werr
	}
	if err != nil {
		return nil, err
	}
	return h.reply(r)
}

// reply writes a result set itself (writeResultset) and hands go-mysql a
// result it writes as nothing; OK results go back to go-mysql's writer.
func (h *handler) reply(r *mysql.Result) (*mysql.Result, error) {
	if h.cc == nil || r == nil {
		return r, nil
	}
	if !r.HasResultset() {
		h.cc.okInfo = r.StatusMessage
	}
	if !r.HasResultset() || r.Streaming != mysql.StreamingNone {
		return r, nil
	}
	if err := h.writeResultset(r.Resultset); err != nil {
		return nil, err
	}
	return alreadyWritten, nil
}

// write sends one reply of a multi-statement query.
func (h *handler) write(v any) error {
	if r, ok := v.(*mysql.Result); ok && h.cc != nil {
		if r.HasResultset() && r.Streaming == mysql.StreamingNone {
			return h.writeResultset(r.Resultset)
		}
		if !r.HasResultset() {
			h.cc.okInfo = r.StatusMessage
		}
	}
	return h.conn.WriteValue(v)
}

// multiQuery runs the statements of a multi-statement query one by one, as
// MariaDB does: each result goes out with SERVER_MORE_RESULTS_EXISTS but the
// last, and the first error ends the query (the statements before it stay
// done).
func (h *handler) multiQuery(q string) (*mysql.Result, error) {
	parts, err := h.sess.Split(q)
	if err != nil {
		return h.result(cmdQuery, q, nil, err)
	}
	if len(parts) == 1 {
		r, err := h.statement(parts[0])
		return h.answer(q, r, err)
	}
	nbe := h.sess.NoBackslashEscapes()
	for i, part := range parts {
		var r *mysql.Result
		var err error
		if h.sess.NoBackslashEscapes() != nbe {
			// The text was read in the mode the query began with: MariaDB
			// would read the statements after the change in the new one.
			err = &mysql.MyError{Code: 1235, State: "42000", Message: "This version of Convoy doesn't yet support statements after a change of NO_BACKSLASH_ESCAPES in the same query: send them in another query"}
		} else {
			r, err = h.statement(part)
		}
		r, err = h.result(cmdQuery, part.Text, r, err)
		if werr := h.writeLeading(); werr != nil {
			return nil, werr
		}
		if err != nil {
			if werr := h.conn.WriteValue(err); werr != nil {
				return nil, werr
			}
			return alreadyWritten, nil
		}
		if i < len(parts)-1 {
			h.conn.SetStatus(mysql.SERVER_MORE_RESULTS_EXISTS)
		}
		werr := h.write(r)
		h.conn.UnsetStatus(mysql.SERVER_MORE_RESULTS_EXISTS)
		if werr != nil {
			return nil, werr
		}
	}
	return alreadyWritten, nil
}

func (h *handler) HandleFieldList(table, wildcard string) ([]*mysql.Field, error) {
	fs, err := h.sess.FieldList(table, wildcard)
	return fs, h.fail(err, cmdFieldList, "")
}

func (h *handler) HandleStmtPrepare(q string) (int, int, any, error) {
	if h.stmts >= h.s.cfg.MaxPreparedPerSession {
		return 0, 0, nil, h.fail(&mysql.MyError{Code: mysql.ER_MAX_PREPARED_STMT_COUNT_REACHED, State: "42000",
			Message: "Can't create more than " + strconv.Itoa(h.s.cfg.MaxPreparedPerSession) + " prepared statements in one session; close some"}, cmdStmtPrepare, q)
	}
	q = h.sess.Standard(q)
	if _, ok, _ := admin.Parse(q); ok {
		// Before the engine: routed nowhere, so the log names no shard.
		return 0, 0, nil, h.failAt(sqlerr.Errorf(sqlerr.NotSupported, "Convoy directives cannot be prepared; send them as plain queries"), cmdStmtPrepare, q, nil)
	}
	p, err := h.sess.Prepare(q)
	if err != nil {
		return 0, 0, nil, h.fail(err, cmdStmtPrepare, q)
	}
	h.stmts++
	if h.cc != nil {
		cols := make([][]byte, len(p.Fields))
		for i, f := range p.Fields {
			cols[i] = f.Dump()
		}
		h.cc.setPrepareColumns(cols)
	}
	return p.Params, p.Columns, p, nil
}

func (h *handler) HandleStmtExecute(ctx any, q string, args []any) (*mysql.Result, error) {
	if h.cc != nil && h.cc.extraPackets > 0 {
		h.conn.Sequence -= h.cc.extraPackets // the client sent one packet
		h.cc.extraPackets = 0
	}
	p, ok := ctx.(*engine.Prepared)
	if !ok {
		return nil, h.fail(&sqlerr.Error{Code: sqlerr.UnknownStmt, Msg: "Unknown prepared statement handler given to mysqld_stmt_execute"}, cmdStmtExecute, "")
	}
	for i, a := range args {
		// go-mysql hands length-encoded values (strings, blobs, decimals) over
		// with their wire type; the engine takes them as bytes, as it binds
		// and routes text-protocol values (stmtWire already sent temporal
		// values as text).
		if tb, ok := a.(mysql.TypedBytes); ok {
			args[i] = tb.Bytes
		}
	}
	r, err := h.sess.Execute(p, args)
	r, err = h.result(cmdStmtExecute, q, r, err)
	if werr := h.writeLeading(); werr != nil {
		return nil, werr
	}
	if err == nil {
		return h.reply(r)
	}
	if h.conn != nil {
		// go-mysql wraps every error returned here with errors.Trace and then
		// no longer recognises it as a *mysql.MyError, so the client would see
		// errno 1105 for everything. Write the error packet ourselves and hand
		// back a result the library writes as nothing.
		if werr := h.conn.WriteValue(err); werr != nil {
			return nil, werr
		}
		return alreadyWritten, nil
	}
	return r, err
}

// alreadyWritten is a result go-mysql's writer skips (a finished
// multi-statement stream).
var alreadyWritten = &mysql.Result{Resultset: &mysql.Resultset{
	Fields: []*mysql.Field{{}}, Streaming: mysql.StreamingMultiple, StreamingDone: true,
}}

func (h *handler) HandleStmtClose(any) error {
	h.stmts--
	return nil
}

// COM_RESET_CONNECTION is not in go-mysql's command switch.
const comResetConnection = 0x1f

func (h *handler) HandleOtherCommand(cmd byte, data []byte) error {
	switch cmd {
	case mysql.COM_SET_OPTION:
		// MYSQL_OPTION_MULTI_STATEMENTS_ON (0) / _OFF (1).
		if len(data) < 2 {
			return h.fail(&mysql.MyError{Code: 1835, State: "HY000", Message: "Malformed communication packet"}, cmdSetOption, "")
		}
		switch binary.LittleEndian.Uint16(data) {
		case 0:
			h.multi = true
		case 1:
			h.multi = false
		default:
			return h.fail(&mysql.MyError{Code: mysql.ER_UNKNOWN_COM_ERROR, State: "08S01", Message: "Unknown COM_SET_OPTION option"}, cmdSetOption, "")
		}
		return nil
	case mysql.COM_STATISTICS:
		if h.cc == nil {
			break
		}
		// mysqladmin status, MySQLdb's stat(), health checks: MariaDB's
		// line, with Convoy's own figures (its clients, the commands they
		// sent); it opens no tables.
		up := time.Since(h.s.started)
		q := h.s.commands.Load()
		h.cc.replyWith = fmt.Appendf(nil, "Uptime: %d  Threads: %d  Questions: %d  Slow queries: 0  Opens: 0  Open tables: 0  Queries per second avg: %.3f",
			int64(up.Seconds()), h.s.active.Load(), q, float64(q)/max(up.Seconds(), 1))
		return nil
	case mysql.COM_CHANGE_USER:
		return h.changeUser(data)
	case comResetConnection:
		h.replaceSession(h.s.eng.NewSession(h.sess.DB()))
		return nil
	}
	return h.fail(&mysql.MyError{Code: mysql.ER_UNKNOWN_COM_ERROR, State: "08S01", Message: "Unknown command " + strconv.Itoa(int(cmd))}, "command "+strconv.Itoa(int(cmd)), "")
}
