package engine

import (
	"context"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/pingcap/tidb/pkg/parser/ast"

	"github.com/convoy-im/convoy/histcache"
	"github.com/convoy-im/convoy/proxy/sqlerr"

	"github.com/convoy-im/convoy/internal/sqlq"
	"github.com/convoy-im/convoy/rewrite"
	"github.com/convoy-im/convoy/router"
)

// Pin values for statements that do not name a shard.
const (
	pinUnsharded = -1 // unsharded tables: the default datasource
	pinAny       = -2 // no table at all (SELECT 1, SELECT @@x): any connection will do
)

// Session is the engine state of one client connection. It is used by one
// goroutine at a time (the connection's), so it needs no locks. It is made
// of pieces with types of their own: who the client is (client), the
// session's variables (variables, sessionvars.go), the transaction
// (txnState), the diagnostics area (diagArea, warnings.go), the session's
// own connections (temporary tables, named locks) and the running
// statement's state (statement).
type Session struct {
	e      *Engine
	parser *rewrite.Parser
	client
	variables
	txn txnState
	// diag are the current statement's conditions, the engine's own and
	// its backends', and the diagnostics area (warnings.go).
	diag diagArea
	statement
	rt routineState // routine.go
	// interrupt receives KILL QUERY / KILL CONNECTION of this session
	// while it waits in Convoy itself (a migration hold): the wait ends at
	// once. Drained at each command's start (a KILL between statements
	// stops none, as on MariaDB).
	interrupt chan struct{}
	// temp is the session's own connection (temptables.go): its temporary
	// tables live there (temps: db.table lower-case) and its SQL-level
	// prepared statements (stmts: names lower-case).
	temp  Conn
	temps map[string]bool
	stmts map[string]bool
	// locks is the connection the session's named locks live on
	// (namedlock.go); nil until the first GET_LOCK or kin.
	locks   Conn
	buf     []byte // reused for rendering SQL
	normBuf []byte // reused by the plan cache (rewrite.Normalize)
	lits    []rewrite.Literal
}

// client is who is connected: the account, its privileges and the
// connection's facts, fixed when the session starts (Set* methods).
type client struct {
	priv       Privileges
	user, host string // the Convoy account and the client's address (SetClient)
	connID     uint32
	ownerCtx   context.Context // backendCtx
	closer     func()          // closes the client connection (SetCloser)
	localFiles LocalFiles      // the client's files (SetLocalFiles, loaddata.go)
	addr       string          // the client's host:port (SetRemoteAddr)
	proc       procState       // what SHOW PROCESSLIST says of this session
	// tlsVersion and tlsCipher describe the client's TLS session (SetTLS).
	tlsVersion, tlsCipher string
	// maxPacket is the session's max_allowed_packet, fixed when it started
	// (SetMaxAllowedPacket); 0: the engine's current value.
	maxPacket int64
	foundRows bool // the client set CLIENT_FOUND_ROWS: backend connections carry it too
}

// variables are the session's state that statements set and read: the
// database, system and transaction variables every backend connection it
// uses must carry, and what a session reads about itself (LAST_INSERT_ID(),
// FOUND_ROWS(), ROW_COUNT()).
type variables struct {
	db         string
	autocommit bool
	vars       map[string]string // session variables every backend connection must carry
	// nextTx are the characteristics SET TRANSACTION (without SESSION) gave
	// the next transaction, as session variables (@@tx_isolation,
	// @@tx_read_only) its connections carry on top of vars; stmtVars the
	// same for the one autocommit statement that consumes them.
	nextTx   map[string]string
	stmtVars map[string]string
	// outbox is SET convoy_txn ('outbox': true; nil: the account's
	// default, outboxDefault).
	outbox        *bool
	outboxDefault bool
	// coldPartial is SET convoy_cold_partial ('error': true; nil: the
	// engine's default, cold.partial).
	coldPartial *bool
	// sqlModeNBE is the session's sql_mode, as MariaDB prints it, while it
	// holds NO_BACKSLASH_ESCAPES ("" otherwise): Convoy reads the
	// session's statements in that mode (Standard) while its backend
	// connections run without it (nobackslash.go).
	sqlModeNBE string
	lastID     uint64 // LAST_INSERT_ID() of this session, from OK packets
	// found and rowCount answer FOUND_ROWS() and ROW_COUNT() (see
	// noteResult).
	found, rowCount int64
}

// statement is the state of the statement running: set up when it starts,
// read while it runs, forgotten after it.
type statement struct {
	// calc* collect the running SELECT SQL_CALC_FOUND_ROWS's total from
	// the backends (a read of several shards sums theirs, from parallel
	// parts).
	calcFound bool
	calcTotal atomic.Int64
	calcOK    atomic.Bool
	// histEntries are the conv_msg rows the current statement inserted,
	// read back before its commit for the hot tier's write-through.
	histEntries map[uint64][]histcache.Entry
	// shard is the shard the current statement was routed to (the last one
	// asked for a connection), or -1: the proxy names it when the statement
	// fails.
	shard int
	// seqs collects the seqs a mirrored conv_msg INSERT was given, by row
	// index (dualwrite.go); nil when nothing is mirrored.
	seqs map[int]uint64
	// commits has a key per shard the current statement's writes are
	// mirrored on, whose value is the GTID of the source transaction that
	// committed them once known (noteCommit); nil when nothing is mirrored.
	commits map[router.Shard]string
	// onShard: the statement being planned runs on the one shard a
	// /*+ convoy shard=N */ names (rewrite.AnalyzeOnShard).
	onShard bool
	// oneShard backs the shard list admitWrite hands endWrite for a
	// single-key write (hold.go), so the common write allocates nothing.
	oneShard [1]router.Shard
}

// txnState is a transaction pinned to one backend connection of one shard.
// The backend BEGIN is sent lazily with the first statement, because only
// that statement says which shard the transaction belongs to.
type txnState struct {
	explicit bool   // BEGIN / START TRANSACTION seen
	beginSQL string // what to send to the backend to open it
	conn     Conn   // nil until the first statement
	pin      int    // shard number, pinUnsharded or pinAny
	// at is where the routes placed pin when conn was opened: a shard
	// moved since (a migration switch) makes every later statement fail
	// the transaction, whatever conn still reaches (see conn).
	at      router.Target
	aborted bool // the pinned connection broke: only ROLLBACK is accepted
	// abortMsg says why, when not a broken connection (a migration hold
	// failed the transaction).
	abortMsg string
	// hist lists conversations whose conv_msg rows this transaction wrote;
	// histAll means some write could not be attributed. COMMIT guards them on
	// the hot tier.
	hist    []uint64
	histAll bool
	// vars are the characteristics SET TRANSACTION gave this transaction.
	vars map[string]string
	// savepoints were set before the transaction had a connection; they
	// are set on it after BEGIN (see savepoint).
	savepoints []string
	// mirror are the writes of mirrored shards, mirrored after COMMIT
	// while the transaction still counts on its shard (dualwrite.go).
	mirror []txnMirror
	// outbox are the rows recorded for other shards (outbox.go), written
	// to the home's outbox at COMMIT; outboxMarks how many there were when
	// each savepoint (lower-case) was set.
	outbox      []outboxEntry
	outboxMarks map[string]int
}

func (t *txnState) noteHistory(convs []uint64, known bool) {
	t.hist = append(t.hist, convs...)
	t.histAll = t.histAll || !known
}

// NewSession starts a session with db as its current database.
func (e *Engine) NewSession(db string) *Session {
	return &Session{e: e, parser: rewrite.NewParser(),
		variables: variables{db: db, autocommit: true, vars: map[string]string{}},
		statement: statement{shard: -1},
		client:    client{priv: Privileges{Read: true, Write: true, DDL: true}},
		interrupt: make(chan struct{}, 1)}
}

// StatementShard is the shard the last Query, Prepare or Execute was routed
// to, if it was routed to one (a statement on several shards names the last
// one it asked a connection for).
func (s *Session) StatementShard() (router.Shard, bool) {
	if s.shard < 0 {
		return 0, false
	}
	return router.Shard(s.shard), true
}

// DB is the session's current database.
func (s *Session) DB() string { return s.db }

// Autocommit reports the session's autocommit setting.
func (s *Session) Autocommit() bool { return s.autocommit }

// InTransaction reports whether a transaction is open, for the status flags
// of every reply.
func (s *Session) InTransaction() bool { return s.txn.explicit || s.txn.conn != nil }

func (s *Session) inTxn() bool { return s.txn.explicit || !s.autocommit }

// Close rolls back an open transaction and returns its connection.
func (s *Session) Close() {
	s.e.live.remove(s.connID, s)
	if c := s.txn.conn; c != nil {
		_, _ = c.Exec("ROLLBACK")
		s.releaseTxnConn(c, false)
	}
	s.txn = txnState{}
	s.dropLocks()
	s.dropTemps()
}

// UseDB switches the current database after checking that it exists on the
// default datasource (which also holds the unsharded tables).
func (s *Session) UseDB(db string) error {
	if !s.priv.MayUseDatabase(db) {
		return s.dbDenied(db)
	}
	if err := s.withDefaultConn(func(c Conn) error { return c.UseDB(db) }); err != nil {
		return classify(err)
	}
	s.db = db
	return nil
}

func (s *Session) withDefaultConn(fn func(Conn) error) error {
	if c := s.txn.conn; c != nil && c.Datasource() == s.e.routes.Current().DefaultDatasource() {
		return fn(c)
	}
	c, err := s.acquire(s.e.routes.Current().DefaultDatasource())
	if err != nil {
		return err
	}
	defer c.Release()
	return fn(c)
}

// Query runs one COM_QUERY. sql is SQL: Convoy's directives
// (/*+ convoy ... */) are told apart before, by package proxy, and
// answered by package proxy/admin through Answer.
func (s *Session) Query(sql string) (*mysql.Result, error) {
	s.startCommand("Query", sql)
	defer s.endCommand()
	s.beginStatement()
	r, err := s.query(sql)
	s.endStatement(r, err)
	return r, err
}

// RunStatement runs one statement of a multi-statement query (Split) as
// Query runs one query, without parsing it again.
func (s *Session) RunStatement(st Statement) (*mysql.Result, error) {
	s.startCommand("Query", st.Text)
	defer s.endCommand()
	s.beginStatement()
	r, err := s.queryParsed(st.Text, st.node)
	s.endStatement(r, err)
	return r, err
}

// Answer runs answer as client statement sql, a statement the engine does
// not plan (Convoy's directives, answered by package proxy/admin), with the
// bookkeeping of every statement: the process list, the diagnostics area,
// FOUND_ROWS() and ROW_COUNT(), the refusal of Convoy's reserved user
// variables (before answer runs) and answer's error classified as the
// engine's own. A statement answer runs with RunTargeted names its shard
// to StatementShard, as Query's do.
func (s *Session) Answer(sql string, answer func() (*mysql.Result, error)) (*mysql.Result, error) {
	s.startCommand("Query", sql)
	defer s.endCommand()
	s.beginStatement()
	r, err := s.answer(sql, answer)
	s.endStatement(r, err)
	return r, err
}

func (s *Session) answer(sql string, answer func() (*mysql.Result, error)) (*mysql.Result, error) {
	s.shard = -1
	if err := refuseReservedVars(sql); err != nil {
		return nil, err
	}
	r, err := answer()
	return r, classify(err)
}

// IsAdmin reports whether the session's account holds Convoy's admin
// privilege (directives, account management).
func (s *Session) IsAdmin() bool { return s.priv.Admin }

func (s *Session) query(sql string) (*mysql.Result, error) {
	return s.queryParsed(sql, nil)
}

// queryParsed is query for a statement Split parsed (stmt; nil: not yet).
func (s *Session) queryParsed(sql string, stmt ast.StmtNode) (*mysql.Result, error) {
	s.shard = -1
	if err := refuseReservedVars(sql); err != nil {
		return nil, err
	}
	if pl, args, ok := s.cachedPlan(sql); ok {
		r, err := s.run(pl, args, false)
		s.noteInsertID(r)
		return r, classify(err)
	}
	pl, err := s.planParsed(sql, stmt)
	if err != nil {
		return nil, err
	}
	if pl.A.ParamCount > 0 {
		return nil, sqlerr.Errorf(sqlerr.Syntax, "You have an error in your SQL syntax: '?' placeholders are only valid in prepared statements")
	}
	r, err := s.run(pl, nil, false)
	s.noteInsertID(r)
	return r, classify(err)
}

// refuseReservedVars refuses a statement naming one of the user variables
// of Convoy's own sessions on the datasources (rewrite.NamesReservedVar):
// the migration's, which the storage fence's triggers let write a shard a
// side no longer owns (migrate/fence.go). Set on a pooled backend
// connection, it would let the writes of every later user of that
// connection past the fence.
func refuseReservedVars(sql string) error {
	if rewrite.NamesReservedVar(sql) {
		return sqlerr.Errorf(sqlerr.NotSupported, "user variables named @%s* are reserved for Convoy's own sessions on the datasources", rewrite.ReservedVarPrefix)
	}
	return nil
}

// noteInsertID keeps LAST_INSERT_ID() per session: the statements of one
// session run on many pooled connections.
func (s *Session) noteInsertID(r *mysql.Result) {
	if r != nil && r.InsertId != 0 {
		s.lastID = r.InsertId
	}
}

// Prepared is a statement parsed and planned once at COM_STMT_PREPARE and
// routed at every COM_STMT_EXECUTE by its bound values.
type Prepared struct {
	pl      *plan
	Params  int
	Columns int
	// Fields are the result columns as the backend describes them at
	// PREPARE, in logical names: clients such as libmariadb (Ruby mysql2,
	// PHP mysqli) take column names from the PREPARE response.
	Fields []*mysql.Field
}

// Prepare plans sql and asks a backend for its exact parameter and column
// counts (clients such as libmariadb fail if they are not exact). sql is
// SQL: package proxy refuses Convoy's directives before.
func (s *Session) Prepare(sql string) (*Prepared, error) {
	s.shard = -1
	if err := refuseReservedVars(sql); err != nil {
		return nil, err
	}
	pl, err := s.plan(sql)
	if err != nil {
		return nil, err
	}
	if pl.A.Kind == rewrite.KindLoadData {
		return nil, &mysql.MyError{Code: mysql.ER_UNSUPPORTED_PS, State: "HY000", Message: "This command is not supported in the prepared statement protocol yet"}
	}
	// As MariaDB: a statement the account may not run fails at PREPARE.
	if err := s.authorize(pl); err != nil {
		return nil, err
	}
	p := &Prepared{pl: pl, Params: pl.A.ParamCount}
	switch {
	case pl.Search != nil:
		// Answered by Convoy: the columns are its own.
		p.Fields = searchFields(pl.Search.Columns, s.db)
		p.Columns = len(p.Fields)
	case pl.Local():
		if p.Params > 0 {
			return nil, sqlerr.Errorf(sqlerr.NotSupported, "placeholders are not supported in a prepared %s statement", pl.A.Kind)
		}
		return p, nil
	case pl.Tmpl != nil:
		// Any shard describes the statement (same schema everywhere); try one
		// shard per datasource so one datasource down does not stop PREPARE.
		snap := s.e.routes.Current()
		for _, sh := range shardPerDatasource(snap) {
			if err = s.describe(snap.Target(sh).Datasource, "", pl.Explain+pl.render(s, snap, sh), p); err == nil {
				break
			}
			if ce := classify(err); !connLost(ce) && !sqlerr.Is(ce, sqlerr.PoolTimeout) {
				break
			}
		}
	default:
		err = s.describe(s.e.routes.Current().DefaultDatasource(), s.db, pl.SQL, p)
	}
	if err != nil {
		return nil, classify(err)
	}
	return p, nil
}

func (s *Session) describe(ds, db, sql string, p *Prepared) error {
	var c Conn
	if t := s.temp; t != nil && t.Datasource() == ds && len(s.temps) > 0 && (s.txn.conn == nil || s.txn.conn == t) {
		// The session's temporary tables are visible there only (and a
		// PREPARE on the connection leaves its transaction as it was).
		c = t
	} else {
		pc, err := s.e.acquire(ds)
		if err != nil {
			return err
		}
		defer pc.Release()
		c = pc
	}
	if err := c.UseDB(db); err != nil {
		return err
	}
	params, fields, err := c.Describe(sql)
	if err != nil {
		return err
	}
	if params != p.Params {
		return sqlerr.Errorf(sqlerr.Internal, "[BUG] backend counts %d placeholders where the parser counted %d", params, p.Params)
	}
	fixFieldList(fields, s.db)
	p.Columns, p.Fields = len(fields), fields
	return nil
}

// Execute runs a prepared statement with its bound arguments.
func (s *Session) Execute(p *Prepared, args []any) (*mysql.Result, error) {
	s.startCommand("Execute", p.pl.SQL)
	defer s.endCommand()
	s.beginStatement()
	r, err := s.execute(p, args)
	s.endStatement(r, err)
	return r, err
}

func (s *Session) execute(p *Prepared, args []any) (*mysql.Result, error) {
	s.shard = -1
	if len(args) != p.Params {
		return nil, sqlerr.Errorf(sqlerr.WrongArguments, "Incorrect arguments to mysqld_stmt_execute: %d given, %d expected", len(args), p.Params)
	}
	r, err := s.run(p.pl, args, !p.pl.Local())
	s.noteInsertID(r)
	return r, classify(err)
}

// FieldList answers COM_FIELD_LIST (column completion in the mysql CLI).
func (s *Session) FieldList(table, wildcard string) ([]*mysql.Field, error) {
	type lister interface {
		FieldList(table, wildcard string) ([]*mysql.Field, error)
	}
	snap := s.e.routes.Current()
	ds, db, phys := snap.DefaultDatasource(), s.db, table
	if _, ok := router.ShardKeyColumn(strings.ToLower(table)); ok {
		p := snap.Physical(strings.ToLower(table), 0)
		ds, db, phys = p.Datasource, p.Database, p.Table
	}
	c, err := s.e.acquire(ds)
	if err != nil {
		return nil, classify(err)
	}
	defer c.Release()
	l, ok := c.(lister)
	if !ok {
		return nil, sqlerr.Errorf(sqlerr.NotSupported, "COM_FIELD_LIST is not supported by this backend")
	}
	if err := c.UseDB(db); err != nil {
		return nil, classify(err)
	}
	fs, err := l.FieldList(phys, wildcard)
	if err != nil {
		return nil, classify(err)
	}
	fixFieldList(fs, s.db)
	return fs, nil
}

// SetFoundRows records that the client connected with CLIENT_FOUND_ROWS
// (affected rows of UPDATE / INSERT ... ON DUPLICATE KEY UPDATE count rows
// matched, not rows changed); its statements run on backend connections
// opened the same way.
func (s *Session) SetFoundRows(on bool) { s.foundRows = on }

// acquire gets a pooled connection carrying the session's variables (and
// the characteristics SET TRANSACTION gave the autocommit statement being
// run, if any).
func (s *Session) acquire(ds string) (Conn, error) {
	return s.acquireVars(ds, mergeVars(s.vars, s.stmtVars))
}

func (s *Session) acquireVars(ds string, vars map[string]string) (Conn, error) {
	c, err := s.e.backends.Acquire(s.backendCtx(), ds, s.foundRows)
	if err != nil {
		return nil, err
	}
	if err := c.SyncVars(vars); err != nil {
		c.Release()
		return nil, err
	}
	return c, nil
}

// conn returns the connection a statement for pin on datasource ds runs on,
// and the function that gives it back. Inside a transaction that is the
// pinned connection, opened lazily; a statement for another shard is refused
// and leaves the transaction as it was.
func (s *Session) conn(pin int, ds string) (Conn, func(), error) {
	if pin >= 0 {
		s.shard = pin
	}
	noop := func() {}
	if s.inTxn() && s.txn.aborted {
		return nil, nil, s.abortedErr()
	}
	if !s.inTxn() || pin == pinAny && s.txn.conn == nil {
		// A statement without a table reads no rows: it does not open the
		// transaction (nor pin it to the default datasource), as in MariaDB,
		// where it starts none either.
		c, err := s.acquire(ds)
		if err != nil {
			return nil, nil, err
		}
		return c, c.Release, nil
	}
	if c := s.txn.conn; c != nil {
		if pin == pinAny || pin == s.txn.pin {
			if err := s.checkPinned(); err != nil {
				return nil, nil, err
			}
			return c, noop, nil
		}
		if s.outboxOn() {
			return nil, nil, sqlerr.Errorf(sqlerr.CrossShardTxn,
				"this transaction is pinned to %s; a statement for %s would need a second shard: in outbox mode (convoy_txn) only INSERT / REPLACE with VALUES and reads of other shards may follow (an UPDATE, DELETE, locking read or seq allocation needs its shard's transaction: run it in a transaction of its own)",
				pinName(s.txn.pin), pinName(pin))
		}
		return nil, nil, sqlerr.Errorf(sqlerr.CrossShardTxn,
			"this transaction is pinned to %s; a statement for %s would need a second shard (no distributed transactions: commit first, keep one conversation/user per transaction, or SET convoy_txn = 'outbox')",
			pinName(s.txn.pin), pinName(pin))
	}
	// The transaction's connection also carries the characteristics SET
	// TRANSACTION gave it; @@tx_isolation read elsewhere stays the session's.
	// A session with temporary tables opens its transactions on the default
	// datasource on their connection (temptables.go).
	var c Conn
	var err error
	if t := s.temp; t != nil && t.Datasource() == ds && pin < 0 {
		c, err = t, t.SyncVars(mergeVars(s.vars, s.txn.vars))
	} else {
		c, err = s.acquireVars(ds, mergeVars(s.vars, s.txn.vars))
	}
	if err != nil {
		return nil, nil, err
	}
	begin := s.txn.beginSQL
	if begin == "" {
		begin = "BEGIN"
	}
	if _, err := c.Exec(begin); err != nil {
		s.releaseTxnConn(c, connLost(classify(err)))
		return nil, nil, err
	}
	for _, sp := range s.txn.savepoints {
		if _, err := c.Exec("SAVEPOINT " + sqlq.Ident(sp)); err != nil {
			_, _ = c.Exec("ROLLBACK")
			s.releaseTxnConn(c, connLost(classify(err)))
			return nil, nil, err
		}
	}
	s.txn.conn, s.txn.pin, s.txn.savepoints = c, pin, nil
	if pin >= 0 {
		at := s.e.routes.Current().Target(router.Shard(pin))
		if at.Datasource != c.Datasource() {
			// The routes moved the shard since this statement was routed
			// (a read is never held): the transaction is on the old side,
			// and its next statement fails it (checkPinned).
			at = router.Target{Datasource: c.Datasource()}
		}
		s.txn.at = at
	}
	return c, noop, nil
}

// abortedErr is what every statement of an aborted transaction gets.
func (s *Session) abortedErr() error {
	if s.txn.abortMsg != "" {
		return sqlerr.Errorf(sqlerr.TxnAborted, "%s; send ROLLBACK", s.txn.abortMsg)
	}
	return sqlerr.Errorf(sqlerr.TxnAborted, "the transaction was rolled back because its backend connection broke or timed out; send ROLLBACK")
}

// txnUsable reports why the transaction cannot take another statement
// (aborted, or its shard moved: checkPinned), without opening it.
func (s *Session) txnUsable() error {
	if s.txn.aborted {
		return s.abortedErr()
	}
	if s.txn.conn != nil {
		return s.checkPinned()
	}
	return nil
}

// checkPinned fails the transaction when its shard has moved since the
// transaction opened its connection there: a migration switch flipped the
// routes while it held only reads or locking reads (a transaction that
// wrote keeps the switch waiting, see hold.go). Its connection still
// reaches the old side, where a write would commit and be lost (the
// forward stream stopped at the switch), and its reads and locks no longer
// guard anything. A write reaches this check after admitWrite, so the
// routes cannot flip between the check and the write.
func (s *Session) checkPinned() error {
	if s.txn.pin < 0 {
		return nil
	}
	snap := s.e.routes.Current()
	now := snap.Target(router.Shard(s.txn.pin))
	if now == s.txn.at && now.Datasource == s.txn.conn.Datasource() {
		return nil
	}
	from := s.txn.at.Datasource
	if s.txn.at.Database != "" {
		from += "." + s.txn.at.Database
	}
	err := sqlerr.Errorf(sqlerr.TxnRolledBack,
		"Deadlock found when trying to get lock; try restarting transaction: shard %s moved from %s to %s.%s (a migration switch, route version %d) after this transaction began on it; the transaction was rolled back",
		router.Shard(s.txn.pin), from, now.Datasource, now.Database, snap.Version())
	_, _ = s.txn.conn.Exec("ROLLBACK") // released either way; a failed ROLLBACK drops the connection
	s.abortTxn(err)
	return err
}

func pinName(pin int) string {
	switch pin {
	case pinUnsharded:
		return "the unsharded tables"
	case pinAny:
		return "no table"
	}
	return "shard " + router.Shard(pin).String()
}

// afterError aborts the pinned transaction when its connection broke or
// timed out: the connection is dropped, so the server rolls the transaction
// back, and pretending otherwise would lose writes. A migration hold that
// failed the transaction (txnConn) rolled it back too.
func (s *Session) afterError(c Conn, err error) {
	if err == nil || s.txn.conn == nil || c != s.txn.conn {
		return
	}
	if sqlerr.Is(err, sqlerr.TxnAborted) || sqlerr.Is(err, sqlerr.TxnRolledBack) || connLost(err) {
		s.abortTxn(err)
	}
}

// abortTxn gives the transaction's connection back and leaves only ROLLBACK
// (and COMMIT, which fails) to the client; err says why, unless the
// connection broke (the generic message then says so).
func (s *Session) abortTxn(err error) {
	lost := connLost(err)
	if c := s.txn.conn; c == s.temp && !lost {
		_, _ = c.Exec("ROLLBACK") // kept: its temporary tables live on
	}
	s.releaseTxnConn(s.txn.conn, lost)
	s.txn.conn = nil
	s.txn.aborted = true
	if !connLost(err) {
		s.txn.abortMsg = err.Error()
	}
}

// endTxn commits or rolls back.
func (s *Session) endTxn(commit bool) (*mysql.Result, error) {
	t := s.txn
	s.txn = txnState{}
	if t.aborted {
		if commit && t.abortMsg != "" {
			return nil, sqlerr.Errorf(sqlerr.TxnAborted, "COMMIT failed: %s", t.abortMsg)
		}
		if commit {
			return nil, sqlerr.Errorf(sqlerr.TxnAborted, "COMMIT failed: the transaction was already rolled back because its backend connection broke or timed out")
		}
		return okResult(), nil
	}
	if t.conn == nil {
		return okResult(), nil
	}
	verb := "ROLLBACK"
	var w *histWrite
	if commit && len(t.outbox) > 0 {
		if err := s.flushOutbox(&t); err != nil {
			_, _ = t.conn.Exec("ROLLBACK")
			s.releaseTxnConn(t.conn, connLost(classify(err)))
			return nil, sqlerr.Errorf(sqlerr.TxnAborted, "COMMIT failed: the transaction's outbox entries could not be written (%v); the transaction was rolled back", classify(err))
		}
	}
	if commit {
		verb = "COMMIT"
		w = s.e.beginHistWrite(dedupe(t.hist))
	}
	start := time.Now()
	r, err := t.conn.Exec(verb)
	w.end(err, nil) // transactional writes invalidate: their rows are not read back
	if commit && t.histAll {
		s.e.invalidateAllHistory()
	}
	if t.pin >= 0 {
		s.e.observe(router.Shard(t.pin), t.conn.Datasource(), true, start, err)
	}
	if commit && err == nil && len(t.outbox) > 0 {
		if kick := s.e.outboxKick; kick != nil {
			kick(t.conn.Datasource())
		}
	}
	if commit && err == nil && len(t.mirror) > 0 && t.pin >= 0 {
		sh := router.Shard(t.pin)
		s.commits = map[router.Shard]string{sh: ""}
		s.noteCommit(t.conn, sh)
		s.mirror(t.mirror)
		s.commits = nil
	}
	s.releaseTxnConn(t.conn, err != nil && connLost(classify(err)))
	if err != nil {
		if !commit && (connLost(err) || sqlerr.Is(err, sqlerr.TxnAborted) || sqlerr.Is(err, sqlerr.TxnRolledBack)) {
			// The connection is dropped: the server rolls back whatever it
			// holds when it notices, which is what ROLLBACK asked for.
			return okResult(), nil
		}
		if commit && sqlerr.Is(err, sqlerr.TxnRolledBack) {
			// A migration hold failed the transaction while its last
			// statement ran: rolled back, so COMMIT fails as MariaDB's does.
			return nil, sqlerr.Errorf(sqlerr.TxnAborted, "COMMIT failed: %v", err)
		}
		if ce := classify(err); commit && connLost(ce) {
			return nil, sqlerr.Errorf(sqlerr.TxnAborted, "COMMIT failed: the backend connection broke or timed out (%v); the transaction's outcome on the server is unknown, nothing was replayed", ce)
		}
		return nil, err
	}
	return r, nil
}

func okResult() *mysql.Result { return &mysql.Result{} }

func dedupe(xs []uint64) []uint64 {
	seen := make(map[uint64]bool, len(xs))
	out := xs[:0:0]
	for _, x := range xs {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// shardPerDatasource returns the first shard of every datasource, shard 0's
// datasource first.
func shardPerDatasource(snap *router.Snapshot) []router.Shard {
	seen := map[string]bool{}
	var out []router.Shard
	for sh := 0; sh < router.NumShards; sh++ {
		ds := snap.Target(router.Shard(sh)).Datasource
		if !seen[ds] {
			seen[ds] = true
			out = append(out, router.Shard(sh))
		}
	}
	return out
}
