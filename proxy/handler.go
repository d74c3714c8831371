package proxy

import (
	"strconv"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/server"

	"github.com/convoy-im/convoy/proxy/engine"
)

// handler adapts go-mysql's server.Handler to one engine.Session.
type handler struct {
	s     *Server
	sess  *engine.Session
	conn  *server.Conn // nil during the handshake
	user  User
	stmts int // open prepared statements (bounded by MaxPreparedPerSession)
}

var _ server.Handler = (*handler)(nil)

// fail maps err to a MySQL error and counts it.
func (h *handler) fail(err error) error {
	if err == nil {
		return nil
	}
	me := toMySQL(err)
	h.s.errs.WithLabelValues(strconv.Itoa(int(me.Code))).Inc()
	return me
}

// syncStatus keeps the status flags of every reply in line with the session:
// backends' own flags describe a pooled connection, not this client.
func (h *handler) syncStatus() {
	if h.conn == nil {
		return
	}
	h.conn.UnsetStatus(mysql.SERVER_STATUS_IN_TRANS | mysql.SERVER_STATUS_AUTOCOMMIT)
	var st uint16
	if h.sess.Autocommit() {
		st |= mysql.SERVER_STATUS_AUTOCOMMIT
	}
	if h.sess.InTransaction() {
		st |= mysql.SERVER_STATUS_IN_TRANS
	}
	h.conn.SetStatus(st)
}

func (h *handler) result(r *mysql.Result, err error) (*mysql.Result, error) {
	h.syncStatus()
	if err != nil {
		return nil, h.fail(err)
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
	return h.fail(h.sess.UseDB(db))
}

func (h *handler) HandleQuery(q string) (*mysql.Result, error) {
	return h.result(h.sess.Query(q))
}

func (h *handler) HandleFieldList(table, wildcard string) ([]*mysql.Field, error) {
	fs, err := h.sess.FieldList(table, wildcard)
	return fs, h.fail(err)
}

func (h *handler) HandleStmtPrepare(q string) (int, int, any, error) {
	if h.stmts >= h.s.cfg.MaxPreparedPerSession {
		return 0, 0, nil, h.fail(&mysql.MyError{Code: mysql.ER_MAX_PREPARED_STMT_COUNT_REACHED, State: "42000",
			Message: "Can't create more than " + strconv.Itoa(h.s.cfg.MaxPreparedPerSession) + " prepared statements in one session; close some"})
	}
	p, err := h.sess.Prepare(q)
	if err != nil {
		return 0, 0, nil, h.fail(err)
	}
	h.stmts++
	return p.Params, p.Columns, p, nil
}

func (h *handler) HandleStmtExecute(ctx any, _ string, args []any) (*mysql.Result, error) {
	p, ok := ctx.(*engine.Prepared)
	if !ok {
		return nil, h.fail(&engine.Error{Code: engine.CodeUnknownStmt, Msg: "Unknown prepared statement handler given to mysqld_stmt_execute"})
	}
	r, err := h.result(h.sess.Execute(p, args))
	if err != nil && h.conn != nil {
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
		// Multi-statements stay off either way (CLIENT_MULTI_STATEMENTS is not
		// announced); accepting the option keeps PHP / C clients working.
		return nil
	case comResetConnection:
		db := h.sess.DB()
		h.sess.Close()
		h.sess = h.s.eng.NewSession(db)
		h.sess.SetAdmin(h.user.Admin)
		h.sess.SetFoundRows(h.conn.HasCapability(mysql.CLIENT_FOUND_ROWS))
		h.syncStatus()
		return nil
	}
	return h.fail(&mysql.MyError{Code: mysql.ER_UNKNOWN_COM_ERROR, State: "08S01", Message: "Unknown command " + strconv.Itoa(int(cmd))})
}
