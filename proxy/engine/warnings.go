package engine

import (
	"errors"
	"strconv"
	"sync"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/pingcap/tidb/pkg/parser/ast"
	"go.uber.org/zap"

	"github.com/convoy-im/convoy/proxy/mysqlrow"
	"github.com/convoy-im/convoy/proxy/sqlerr"
	"github.com/convoy-im/convoy/router"
)

// The diagnostics area, as MariaDB keeps it per session: the conditions
// (notes, warnings, the error) of the last statement that used a table
// or produced one, which SHOW WARNINGS / SHOW ERRORS, SHOW COUNT(*) ...
// and @@warning_count / @@error_count read. A session's statements run on
// many pooled backend connections, so the backend's own area belongs to
// whichever session used that connection last: Convoy asks the backend
// for its conditions (SHOW WARNINGS on the same connection, only when the
// statement's OK or EOF counted some) before the connection goes back to
// the pool, and answers every diagnostic statement from the session.

// Warning is one condition SHOW WARNINGS lists.
type Warning struct {
	Level   string
	Code    uint16
	Message string
}

// maxConditions is MariaDB's max_error_count default: the conditions a
// statement keeps (its warning count still counts them all).
const maxConditions = 64

// diagArea is a session's conditions: the current statement's, and the
// diagnostics area diagnostic statements read.
type diagArea struct {
	mu      sync.Mutex // a scatter's parts add conditions at once
	cur     []Warning  // the current statement's, at most maxConditions
	dropped int        // the current statement's past maxConditions, still counted
	// keep: the current statement leaves the area as it is unless it has
	// conditions (it used no table: SET, SELECT 1, SHOW WARNINGS).
	keep        bool
	area        []Warning // what SHOW WARNINGS lists
	areaDropped int       // dropped of the statement area is from
}

// warn adds a condition to the current statement's.
func (d *diagArea) warn(w Warning) {
	d.mu.Lock()
	d.cur = append(d.cur, w)
	d.mu.Unlock()
}

// add adds conditions to the current statement's, counting those past
// maxConditions (and uncounted more that were never listed); with once, a
// condition the statement already has is not repeated.
func (d *diagArea) add(ws []Warning, once bool, uncounted int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, w := range ws {
		dup := false
		for _, o := range d.cur {
			dup = dup || once && o == w
		}
		switch {
		case dup:
		case len(d.cur) < maxConditions:
			d.cur = append(d.cur, w)
		default:
			d.dropped++ // counted, as MariaDB counts past max_error_count
		}
	}
	d.dropped += uncounted
}

// count is the number of conditions of the current statement, for the
// warning count of its OK or EOF packet.
func (d *diagArea) count() uint16 { return uint16(min(len(d.cur)+d.dropped, 65535)) }

// take removes the current statement's conditions and returns them, for a
// statement Convoy runs inside another (LOAD DATA's batches); restore puts
// them back.
func (d *diagArea) take() (ws []Warning, dropped int) {
	ws, dropped = d.cur, d.dropped
	d.cur, d.dropped = nil, 0
	return ws, dropped
}

func (d *diagArea) restore(ws []Warning, dropped int) { d.cur, d.dropped = ws, dropped }

// begin starts a client statement's conditions.
func (d *diagArea) begin() { d.cur, d.dropped, d.keep = nil, 0, false }

// end ends a client statement: its error joins its conditions, and they
// become the area unless the statement keeps it and produced none.
func (d *diagArea) end(err error) {
	if err == nil && len(d.cur) == 0 && d.keep {
		return
	}
	// A copy: the error is the area's, not the statement's warning count
	// (a CALL's result sets before its error count none).
	d.area = append([]Warning(nil), d.cur[:min(len(d.cur), maxConditions)]...)
	d.areaDropped = d.dropped
	var me *mysql.MyError
	if errors.As(err, &me) && len(d.area) < maxConditions {
		d.area = append(d.area, Warning{Level: "Error", Code: me.Code, Message: me.Message})
	}
}

// list is the area's conditions, only its errors with errorsOnly, and how
// many more the statement counted.
func (d *diagArea) list(errorsOnly bool) (ws []Warning, more int) {
	if !errorsOnly {
		return d.area, d.areaDropped
	}
	for _, w := range d.area {
		if w.Level == "Error" {
			ws = append(ws, w)
		}
	}
	return ws, 0
}

// warn adds a condition to the current statement's.
func (s *Session) warn(w Warning) { s.diag.warn(w) }

// WarningCount is the number of conditions of the last statement, for the
// warning count of its OK or EOF packet.
func (s *Session) WarningCount() uint16 { return s.diag.count() }

// beginStatement starts a client statement's conditions.
func (s *Session) beginStatement() {
	s.diag.begin()
	s.calcFound = false
	s.calcTotal.Store(0)
	s.calcOK.Store(false)
}

// endStatement ends a client statement: its error joins its conditions,
// and they become the diagnostics area unless the statement used no
// table and produced none (SET, SELECT 1, SHOW WARNINGS keep the area, as
// in MariaDB). An OK packet carries the statement's warning count.
func (s *Session) endStatement(r *mysql.Result, err error) {
	s.diag.end(err)
	if err == nil && r != nil && (r.Resultset == nil || len(r.Fields) == 0) {
		r.Warnings = s.WarningCount()
		r.StatusMessage = withWarnings(r.StatusMessage, r.Warnings)
	}
	s.noteResult(r, err)
}

// noteResult keeps what FOUND_ROWS() and ROW_COUNT() answer after a
// statement, as MariaDB counts: a result set (SELECT, SHOW, ...) sets
// FOUND_ROWS() to its rows (a SELECT SQL_CALC_FOUND_ROWS to its total
// without LIMIT) and ROW_COUNT() to -1; an OK sets ROW_COUNT() to its
// affected rows and leaves FOUND_ROWS(); an error sets ROW_COUNT() to -1.
func (s *Session) noteResult(r *mysql.Result, err error) {
	switch {
	case err != nil:
		s.rowCount = -1
	case r != nil && r.Resultset != nil && len(r.Fields) > 0:
		s.rowCount = -1
		switch {
		case !s.calcFound:
			s.found = int64(len(r.RowDatas))
		case s.calcOK.Load():
			s.found = s.calcTotal.Load()
		}
	case r != nil:
		s.rowCount = int64(r.AffectedRows)
	default:
		s.rowCount = 0
	}
}

// noteFoundRows adds the total of a SELECT SQL_CALC_FOUND_ROWS that just
// ran on c (FOUND_ROWS() of that connection, asked before anything else
// runs there).
func (s *Session) noteFoundRows(c Conn) {
	if !s.calcFound {
		return
	}
	r, err := c.Exec("SELECT FOUND_ROWS()")
	if err != nil {
		s.e.log.Debug("reading FOUND_ROWS() failed", zap.Error(err))
		return
	}
	rows, err := mysqlrow.TextRows(r)
	if err != nil || len(rows) != 1 || len(rows[0]) != 1 {
		return
	}
	if n, err := strconv.ParseInt(string(rows[0][0]), 10, 64); err == nil {
		s.calcTotal.Add(n)
		s.calcOK.Store(true)
	}
}

// backendWarnings reads the conditions a backend statement left on c when
// its answer counted some (r.Warnings), renaming shard sh's physical
// names in their messages to the logical ones (sh < 0: an unsharded
// statement), before c is released. With once, a condition the statement
// already has is not repeated: DDL fanned out to every physical table
// notes "already exists" once, as for one table.
func (s *Session) backendWarnings(c Conn, r *mysql.Result, sh int, once bool) {
	if r == nil || r.Warnings == 0 {
		return
	}
	res, err := c.Exec("SHOW WARNINGS")
	if err != nil {
		// The statement succeeded; its conditions are lost, not its result.
		s.e.log.Debug("reading a statement's warnings failed", zap.Error(err))
		return
	}
	rows, err := mysqlrow.TextRows(res)
	if err != nil || len(res.Fields) != 3 {
		return
	}
	var rename func(string) string
	if sh >= 0 {
		snap := s.e.routes.Current()
		rename = func(m string) string { return toLogical(m, snap, router.Shard(sh), s.db) }
	}
	ws := make([]Warning, len(rows))
	for i, row := range rows {
		code, _ := strconv.ParseUint(string(row[1]), 10, 16)
		ws[i] = Warning{Level: string(row[0]), Code: uint16(code), Message: string(row[2])}
		if rename != nil {
			ws[i].Message = rename(ws[i].Message)
		}
	}
	uncounted := 0
	if !once && int(r.Warnings) > len(rows) {
		uncounted = int(r.Warnings) - len(rows) // past the backend's own max_error_count
	}
	s.diag.add(ws, once, uncounted)
}

// showWarnings answers SHOW WARNINGS / SHOW ERRORS and SHOW COUNT(*)
// WARNINGS / ERRORS [LIMIT [offset,] count] from the session's diagnostics
// area (the LIMIT is matched before the parser, which does not know it).
func (s *Session) showWarnings(pl *plan, binary bool) (*mysql.Result, error) {
	st := pl.A.Stmt.(*ast.ShowStmt) // planbuilder.OpDiagnostics
	list, more := s.diag.list(st.Tp == ast.ShowErrors)
	// The column definitions MariaDB 10.11 sends to a utf8mb4 client.
	text := func(name string, length uint32) *mysql.Field {
		return &mysql.Field{Name: []byte(name), Type: mysql.MYSQL_TYPE_VAR_STRING, Charset: 45, ColumnLength: length, Flag: mysql.NOT_NULL_FLAG, Decimal: 39}
	}
	var rs *mysql.Resultset
	if st.CountWarningsOrErrors {
		name := "@@session.warning_count"
		if st.Tp == ast.ShowErrors {
			name = "@@session.error_count"
		}
		rs = &mysql.Resultset{Fields: []*mysql.Field{{Name: []byte(name), Type: mysql.MYSQL_TYPE_LONGLONG,
			Charset: 63, ColumnLength: 21, Flag: mysql.UNSIGNED_FLAG | mysql.BINARY_FLAG}}}
		n := len(list) + more
		rs.RowDatas = []mysql.RowData{mysqlrow.TextRow([][]byte{[]byte(strconv.Itoa(n))})}
	} else {
		if w := pl.DiagWindow; w != nil {
			list = list[min(w[0], len(list)):]
			list = list[:min(w[1], len(list))]
		}
		rs = &mysql.Resultset{Fields: []*mysql.Field{text("Level", 28), {Name: []byte("Code"), Type: mysql.MYSQL_TYPE_LONG,
			Charset: 63, ColumnLength: 4, Flag: mysql.UNSIGNED_FLAG | mysql.NOT_NULL_FLAG | mysql.BINARY_FLAG}, text("Message", 2048)}}
		for _, w := range list {
			rs.RowDatas = append(rs.RowDatas, mysqlrow.TextRow([][]byte{[]byte(w.Level), []byte(strconv.Itoa(int(w.Code))), []byte(w.Message)}))
		}
	}
	if binary && !mysqlrow.TextToBinary(rs) {
		return nil, sqlerr.Errorf(sqlerr.Internal, "[BUG] SHOW WARNINGS rows could not be encoded for the binary protocol")
	}
	return &mysql.Result{Resultset: rs}, nil
}

// diagCounts are @@warning_count and @@error_count.
func (s *Session) diagCounts() (warnings, errs uint64) {
	all, more := s.diag.list(false)
	es, _ := s.diag.list(true)
	return uint64(len(all) + more), uint64(len(es))
}
