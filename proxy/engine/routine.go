package engine

import (
	"context"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/pingcap/tidb/pkg/parser/charset"

	"github.com/convoy-im/convoy/proxy/sqlerr"
	"github.com/convoy-im/convoy/rewrite"
)

// Stored routines, triggers, events and compound statements (see
// rewrite.ClassifyRoutine) run on the default datasource, byte for byte, in
// the session's current database. A routine created through Convoy cannot
// name a sharded table (the CREATE is refused), so what it runs stays on
// that server; a routine a DBA created on the backend directly is the DBA's
// responsibility.

// routineState is the session's share of routine statements.
type routineState struct {
	// noMulti / noPSMulti: the client lacks CLIENT_MULTI_RESULTS /
	// CLIENT_PS_MULTI_RESULTS. The zero value is a client of today, which
	// has both.
	noMulti, noPSMulti bool
	// leading are the result sets the last statement sent before its final
	// reply (TakeLeading).
	leading []*mysql.Result
}

// SetMultiResults records whether the client announced CLIENT_MULTI_RESULTS
// and CLIENT_PS_MULTI_RESULTS. MariaDB refuses a CALL of a procedure that
// returns rows to a client without the first (1312) and sends the OUT
// parameters of a prepared CALL only to a client with the second; Convoy's
// backend connections have both, so such a client's CALL runs on a
// connection opened with its own capabilities.
func (s *Session) SetMultiResults(multi, psMulti bool) {
	s.rt.noMulti, s.rt.noPSMulti = !multi, !psMulti
}

// TakeLeading returns, and forgets, the result sets the last statement sent
// before its final reply (OK or error): a CALL sends one per SELECT its
// procedure ran, and a prepared CALL its OUT parameters (Status carries
// SERVER_PS_OUT_PARAMS). Each goes to the client flagged
// SERVER_MORE_RESULTS_EXISTS, before the statement's own reply. nil for
// every other statement.
func (s *Session) TakeLeading() []*mysql.Result {
	l := s.rt.leading
	s.rt.leading = nil
	return l
}

// chainConn is a connection that can read a statement's chain of results
// (proxy/backend.Conn).
type chainConn interface {
	ExecAll(sql string) ([]*mysql.Result, error)
	ExecPreparedAll(sql string, args []any) ([]*mysql.Result, error)
}

// onceBackends opens a connection for one statement without some client
// capabilities (proxy/backend.Manager.AcquireOnce).
type onceBackends interface {
	AcquireOnce(ctx context.Context, ds string, foundRows bool, drop uint32) (Conn, error)
}

// AcquireOnce adapts backend.Manager.AcquireOnce.
func (b managerBackends) AcquireOnce(ctx context.Context, ds string, foundRows bool, drop uint32) (Conn, error) {
	c, err := b.m.AcquireOnce(ctx, ds, foundRows, drop)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// splitRoutines is Split for a text holding routine statements (see
// rewrite.SplitRoutines). Every statement is planned before any runs, so a
// syntax error or a refusal anywhere refuses all of it, as in Split.
func (s *Session) splitRoutines(sql string, parts []string) ([]Statement, error) {
	out := make([]Statement, len(parts))
	for i, p := range parts {
		if _, err := s.plan(p); err != nil {
			return nil, err
		}
		out[i] = Statement{Text: p}
	}
	if len(parts) > 1 && strings.Contains(sql, "/*!") {
		return nil, sqlerr.Errorf(sqlerr.NotSupported, "multi-statements with executable comments (/*! ... */) are not supported through Convoy: send the statements one by one")
	}
	return out, nil
}

// runRoutine executes a routine statement.
func (s *Session) runRoutine(pl *plan, args []any, binary bool) (*mysql.Result, error) {
	s.e.metrics.countStatement("unsharded")
	s.rt.leading = nil
	switch r := pl.Routine; {
	case r.Kind == rewrite.RoutineUnparsed && (r.Need == "read" || r.Need == "write"):
		// A read or a write: like a CALL, in the transaction (pinned to
		// the default datasource) or on a pooled connection.
		return s.call(pl, args, binary)
	case r.Kind == rewrite.RoutineShow || r.Kind == rewrite.RoutineUnparsed && r.What == "SHOW":
		var res *mysql.Result
		err := s.withDefaultConn(func(c Conn) (err error) {
			res, err = s.execIn(c, pl.SQL, args, binary)
			s.afterError(c, err)
			return err
		})
		return res, err
	case r.Kind == rewrite.RoutineDefine || r.Kind == rewrite.RoutineDrop || r.Kind == rewrite.RoutineUnparsed:
		// MariaDB commits an open transaction before these; so do we.
		if s.txn.explicit || s.txn.conn != nil {
			if _, err := s.endTxn(true); err != nil {
				return nil, err
			}
		}
		c, err := s.acquire(s.e.routes.Current().DefaultDatasource())
		if err != nil {
			return nil, err
		}
		defer c.Release()
		return s.execIn(c, pl.SQL, args, binary)
	}
	return s.call(pl, args, binary)
}

// execIn runs sql in the session's database on c.
func (s *Session) execIn(c Conn, sql string, args []any, binary bool) (*mysql.Result, error) {
	if err := c.UseDB(s.db); err != nil {
		return nil, err
	}
	if binary {
		return c.ExecPrepared(sql, args)
	}
	return c.Exec(sql)
}

// call runs a CALL or a compound statement: stored code, whose result sets
// (TakeLeading) and final reply reach the client as MariaDB sends them.
// Inside a transaction it runs on the transaction's connection, which it
// pins to the default datasource like any unsharded statement (refused when
// the transaction belongs to a shard); outside, on a connection that is
// closed afterwards, since the code may have changed its session (see
// backend.Conn.ExecAll).
func (s *Session) call(pl *plan, args []any, binary bool) (*mysql.Result, error) {
	ds := s.e.routes.Current().DefaultDatasource()
	var c Conn
	release := func() {}
	var err error
	switch {
	case s.inTxn():
		if s.rt.noMulti {
			return nil, sqlerr.Errorf(sqlerr.NotSupported, "%s inside a transaction needs a client with CLIENT_MULTI_RESULTS through Convoy (every driver of today sets it); commit first", pl.Routine.What)
		}
		c, release, err = s.conn(pinUnsharded, ds)
	case s.rt.noMulti || s.rt.noPSMulti:
		c, err = s.acquireOnce(ds)
		if err == nil {
			release = c.Release
		}
	default:
		c, err = s.acquire(ds)
		if err == nil {
			release = c.Release
		}
	}
	if err != nil {
		return nil, err
	}
	keep := false
	defer func() {
		if !keep {
			release()
		}
	}()
	if err := c.UseDB(s.db); err != nil {
		s.afterError(c, err)
		return nil, err
	}
	cc, ok := c.(chainConn)
	if !ok {
		return nil, sqlerr.Errorf(sqlerr.Internal, "[BUG] backend connection %T cannot read a chain of results", c)
	}
	var rs []*mysql.Result
	if binary {
		rs, err = cc.ExecPreparedAll(pl.SQL, args)
	} else {
		rs, err = cc.ExecAll(pl.SQL)
	}
	s.afterError(c, err)
	if s.rt.noPSMulti {
		// MariaDB sends OUT parameters only to clients that read them.
		kept := rs[:0]
		for _, r := range rs {
			if r.Status&mysql.SERVER_PS_OUT_PARAMS == 0 {
				kept = append(kept, r)
			}
		}
		rs = kept
	}
	if err != nil {
		s.rt.leading = rs
		return nil, err
	}
	if len(rs) == 0 {
		return nil, sqlerr.Errorf(sqlerr.Internal, "[BUG] %s answered nothing", pl.Routine.What)
	}
	final := rs[len(rs)-1]
	s.rt.leading = rs[:len(rs)-1]
	s.readBack(c, pl.Routine.UserVars)
	keep = s.followTxn(c, final.Status)
	return final, nil
}

// acquireOnce gets a connection opened with the client's own
// multi-results capabilities (see SetMultiResults).
func (s *Session) acquireOnce(ds string) (Conn, error) {
	ob, ok := s.e.backends.(onceBackends)
	if !ok {
		return s.acquire(ds)
	}
	var drop uint32
	if s.rt.noMulti {
		drop |= mysql.CLIENT_MULTI_RESULTS
	}
	if s.rt.noPSMulti {
		drop |= mysql.CLIENT_PS_MULTI_RESULTS
	}
	c, err := ob.AcquireOnce(s.backendCtx(), ds, s.foundRows, drop)
	if err != nil {
		return nil, err
	}
	if err := c.SyncVars(mergeVars(s.vars, s.stmtVars)); err != nil {
		c.Release()
		return nil, err
	}
	return c, nil
}

// followTxn keeps the session's transaction in step with what stored code
// did to it, from the server status after the call: a routine may start a
// transaction (then the session keeps c, pinned, and reports keep), end the
// session's one (its connection goes), or turn autocommit off.
func (s *Session) followTxn(c Conn, status uint16) (keep bool) {
	inTrans := status&mysql.SERVER_STATUS_IN_TRANS != 0
	// Backend connections always run with autocommit on (a session's
	// autocommit=0 is BEGIN on its pinned connection): off here means the
	// code turned it off.
	if status&mysql.SERVER_STATUS_AUTOCOMMIT == 0 {
		s.autocommit = false
	}
	switch {
	case s.txn.conn == c && !inTrans:
		// The code committed or rolled back the session's transaction.
		c.Release()
		s.txn = txnState{}
	case s.txn.conn == nil && inTrans:
		s.txn = txnState{explicit: s.autocommit, conn: c, pin: pinUnsharded}
		return true
	}
	return false
}

// readBack learns the user variables a statement assigned on c (a CALL's
// OUT parameters, as in `CALL p(@total)`; `SELECT @n := ...`) and keeps them
// in the session, so the next statement sees them on whichever connection
// it runs. Variables a routine's own body sets are not seen (it is not
// parsed). A failure leaves the session's variables as they were: the
// statement itself succeeded.
func (s *Session) readBack(c Conn, names []string) {
	if len(names) == 0 {
		return
	}
	var q strings.Builder
	q.WriteString("SELECT ")
	for i, n := range names {
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteString("@" + n) // rewrite.ClassifyRoutine kept plain names only
	}
	r, err := c.Exec(q.String())
	if err != nil || r.Resultset == nil || len(r.RowDatas) != 1 || len(r.Fields) != len(names) {
		s.afterError(c, err)
		return
	}
	next := make(map[string]string, len(s.vars)+len(names))
	for k, v := range s.vars {
		next[k] = v
	}
	row := []byte(r.RowDatas[0])
	for i, n := range names {
		lit, rest, ok := userVarLiteral(r.Fields[i], row)
		if !ok {
			return
		}
		row = rest
		key := "@" + n
		if _, set := next[key]; lit == "NULL" && !set {
			continue
		}
		next[key] = lit
	}
	s.vars = next
}

// userVarLiteral prints the text-protocol value at the start of row as a
// literal that gives a user variable the same value and type again.
func userVarLiteral(f *mysql.Field, row []byte) (lit string, rest []byte, ok bool) {
	if len(row) > 0 && row[0] == 0xfb {
		return "NULL", row[1:], true
	}
	v, rest, ok := lenencString(row)
	if !ok {
		return "", nil, false
	}
	switch f.Type {
	case mysql.MYSQL_TYPE_TINY, mysql.MYSQL_TYPE_SHORT, mysql.MYSQL_TYPE_INT24, mysql.MYSQL_TYPE_LONG,
		mysql.MYSQL_TYPE_LONGLONG, mysql.MYSQL_TYPE_NEWDECIMAL, mysql.MYSQL_TYPE_DECIMAL:
		if numeric(v, false) {
			return v, rest, true
		}
	case mysql.MYSQL_TYPE_FLOAT, mysql.MYSQL_TYPE_DOUBLE:
		if numeric(v, true) {
			if !strings.ContainsAny(v, "eE") {
				v += "e0" // a DOUBLE literal, not a DECIMAL
			}
			return v, rest, true
		}
	}
	// A string: its bytes exactly, in its character set and collation.
	var b strings.Builder
	intro, collate := "_binary", ""
	if f.Charset != 63 {
		if c, err := charset.GetCollationByID(int(f.Charset)); err == nil {
			intro, collate = "_"+c.CharsetName, " COLLATE "+c.Name
		}
	}
	const hex = "0123456789ABCDEF"
	b.WriteString(intro + " X'")
	for i := 0; i < len(v); i++ {
		b.WriteByte(hex[v[i]>>4])
		b.WriteByte(hex[v[i]&15])
	}
	b.WriteString("'" + collate)
	return b.String(), rest, true
}

// numeric accepts what MariaDB prints for a number (digits, sign, point,
// and with float an exponent), so it can go back into SQL unquoted.
func numeric(v string, float bool) bool {
	if v == "" {
		return false
	}
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c >= '0' && c <= '9', c == '-', c == '.':
		case float && (c == 'e' || c == 'E' || c == '+'):
		default:
			return false
		}
	}
	return true
}
