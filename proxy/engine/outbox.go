package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"go.uber.org/zap"

	"github.com/convoy-im/convoy/internal/failpoint"
	"github.com/convoy-im/convoy/internal/sqlq"
	"github.com/convoy-im/convoy/outbox"
	"github.com/convoy-im/convoy/proxy/sqlerr"
	"github.com/convoy-im/convoy/rewrite"
	"github.com/convoy-im/convoy/router"
)

// The cross-shard outbox (docs/design.md §12; package outbox for the
// tables). A session in outbox mode may write several shards in one
// transaction: the first shard it writes (or reads: the shard its
// transaction is pinned to) is the home; the rows its INSERT / REPLACE
// statements carry for other shards are checked (parsed, routed,
// authorized) and recorded, not run, as logical statements with their
// values printed in. COMMIT writes them into the home datasource's outbox
// table on the transaction's own connection, just before the backend
// COMMIT: the home rows and the entries commit together or not at all.
// Each datasource's elected delivery worker (DeliverOutbox) applies them
// later through the same routing and migration hold as client writes.
//
// Inside the transaction, a read of another shard sees that shard as
// committed, without the transaction's recorded rows (it runs outside the
// transaction, as every other-shard read does); a locking read, an UPDATE
// or a DELETE of another shard is refused (1235): the rows it would lock or
// change are not known until delivery.

// TxnModeVar is the session variable (SET [SESSION] convoy_txn = 'single' |
// 'outbox' | DEFAULT) that chooses what a transaction may write: one shard
// (the default; a second one is refused with 1235) or one home shard plus
// INSERT / REPLACE rows for others, delivered through the outbox after
// COMMIT. An account's default is users[].txn.
const TxnModeVar = "convoy_txn"

// outboxEntry is one recorded statement for one other shard.
type outboxEntry struct {
	target router.Shard
	key    uint64 // a shard key of its rows: the applied marker is filed under it
	rows   int
	stmt   string // the logical statement, values printed in
	vars   string // the session's variables when it was recorded (JSON)
}

// SetOutboxDefault sets the account's default transaction mode (true:
// outbox), what SET convoy_txn = DEFAULT goes back to.
func (s *Session) SetOutboxDefault(on bool) {
	s.outboxDefault = on
	s.outbox = nil
}

// outboxOn reports whether the session's transactions use the outbox.
func (s *Session) outboxOn() bool {
	if s.outbox != nil {
		return *s.outbox
	}
	return s.outboxDefault
}

// txnModeValue reads a SET convoy_txn value (DEFAULT: nil).
func txnModeValue(value string) (*bool, error) {
	switch v := strings.ToLower(unquote(value)); v {
	case "single", "outbox":
		on := v == "outbox"
		return &on, nil
	case "default":
		return nil, nil
	}
	return nil, &mysql.MyError{Code: mysql.ER_WRONG_VALUE_FOR_VAR, State: "42000",
		Message: fmt.Sprintf("Variable '%s' can't be set to the value of '%s' (want 'single' or 'outbox')", TxnModeVar, unquote(value))}
}

// outboxHome is the shard an outbox transaction's home rows go to: the
// shard it is pinned to, or first (the first row's) when it has none yet.
// ok is false when the transaction is pinned to no shard and no table.
func (s *Session) outboxHome(first router.Shard) (home int, ok bool) {
	if s.txn.conn == nil {
		return int(first), true
	}
	return s.txn.pin, s.txn.pin != pinAny
}

// outboxInsert runs an INSERT / REPLACE of an outbox transaction whose
// rows are not all on its home shard: the home rows run now, on the
// transaction's connection; the others are recorded per shard and written
// to the outbox at COMMIT. Every statement is rendered before anything
// runs, so a row that cannot be recorded refuses the whole statement.
func (s *Session) outboxInsert(pl *plan, args []any, binary bool, home int) (*mysql.Result, error) {
	a := pl.A
	if a.Returning != "" {
		return nil, sqlerr.Errorf(sqlerr.CrossShardTxn, "INSERT ... RETURNING with rows for another shard than this transaction's (%s) cannot run in outbox mode: those rows are written after COMMIT", pinName(home))
	}
	byShard := map[router.Shard][]int{}
	keys := map[router.Shard]uint64{}
	var order []router.Shard
	for i, v := range a.InsertRows {
		k, err := keyOf(v, args)
		if err != nil {
			return nil, fmt.Errorf("row %d: %w", i+1, err)
		}
		sh := router.ShardOf(k)
		if _, ok := byShard[sh]; !ok {
			order = append(order, sh)
			keys[sh] = k
		}
		byShard[sh] = append(byShard[sh], i)
	}
	vars, err := s.outboxVars()
	if err != nil {
		return nil, err
	}
	printable := args
	if binary {
		printable = outboxLiterals(pl.inlineArgs(args, s.utf8Client()))
	}
	var entries []outboxEntry
	for _, sh := range order {
		if int(sh) == home {
			continue
		}
		tmpl, err := rewrite.SubsetInsertHoles(a, byShard[sh])
		if err != nil {
			return nil, err
		}
		logical := func(name string) (string, string) { return "", name }
		var b []byte
		ok := true
		if len(printable) > 0 {
			b, ok = tmpl.RenderInline(nil, logical, printable)
		} else {
			b = tmpl.Render(nil, logical)
		}
		if !ok {
			return nil, sqlerr.Errorf(sqlerr.NotSupported, "a value of this INSERT for shard %s has no exact SQL literal (bytes that are not valid in the connection's character set): it cannot be recorded in the outbox", sh)
		}
		entries = append(entries, outboxEntry{target: sh, key: keys[sh], rows: len(byShard[sh]), stmt: string(b), vars: vars})
	}
	if err := s.txnUsable(); err != nil {
		return nil, err
	}
	res := okResult()
	if rows := byShard[router.Shard(home)]; home >= 0 && len(rows) > 0 {
		// As insert's parts: a text statement's values are in the template.
		snap := s.e.routes.Current()
		sh := router.Shard(home)
		tmpl, params, err := rewrite.SubsetInsert(a, rows)
		if err != nil {
			return nil, err
		}
		sub := make([]any, len(params))
		for i, p := range params {
			sub[i] = args[p]
		}
		p := part{shard: sh, ds: snap.Target(sh).Datasource, sql: renderTemplate(s, tmpl, snap, sh), args: sub}
		switch {
		case pl.textArgs: // a plan-cache plan: the client's literals go back in
			b, _ := tmpl.RenderInline(nil, func(logical string) (string, string) {
				ph := snap.Physical(logical, sh)
				return ph.Database, ph.Table
			}, sub)
			p.sql, p.args = string(b), nil
		case !binary:
			p.args = nil
		}
		r, err := s.single(p, true, binary)
		if err != nil {
			return nil, err
		}
		res = r
	} else if s.txn.conn == nil {
		return nil, sqlerr.Errorf(sqlerr.Internal, "[BUG] an outbox transaction without a home connection")
	}
	for _, e := range entries {
		s.txn.outbox = append(s.txn.outbox, e)
		res.AffectedRows += uint64(e.rows)
	}
	s.e.metrics.outboxRecorded(len(entries))
	return res, nil
}

// outboxLiterals makes the floating-point arguments of a prepared
// statement printable: a DOUBLE literal in e-notation reads back as the
// same float64 (AppendLiteral refuses floats, which it cannot print for a
// DECIMAL column without changing the server's rounding; a recorded
// statement has no other way to keep its value).
func outboxLiterals(args []any) []any {
	var out []any
	for i, a := range args {
		var f float64
		switch x := a.(type) {
		case float64:
			f = x
		case float32:
			f = float64(x)
		default:
			continue
		}
		if out == nil {
			out = append([]any(nil), args...)
		}
		out[i] = rewrite.Literal{Raw: strconv.FormatFloat(f, 'e', -1, 64)}
	}
	if out == nil {
		return args
	}
	return out
}

// outboxVars are the session's variables for a recorded statement, with
// the time it was recorded: NOW() and column defaults of the delivered
// rows then read the time of the transaction, not of the delivery.
func (s *Session) outboxVars() (string, error) {
	vars := make(map[string]string, len(s.vars)+1)
	for k, v := range s.vars {
		vars[k] = v
	}
	if _, ok := vars["@@timestamp"]; !ok {
		now := time.Now()
		vars["@@timestamp"] = fmt.Sprintf("%d.%06d", now.Unix(), now.Nanosecond()/1000)
	}
	b, err := json.Marshal(vars)
	return string(b), err
}

// outboxSavepoint keeps the entries a ROLLBACK TO SAVEPOINT must drop: the
// ones recorded after the savepoint was set.
func (s *Session) outboxSavepoint(op rewrite.SavepointOp, name string) {
	name = strings.ToLower(name)
	switch op {
	case rewrite.SavepointSet:
		if s.txn.outboxMarks == nil {
			s.txn.outboxMarks = map[string]int{}
		}
		s.txn.outboxMarks[name] = len(s.txn.outbox)
	case rewrite.SavepointRollback:
		// A savepoint set before the transaction had a connection had
		// nothing recorded before it either: 0.
		s.txn.outbox = s.txn.outbox[:s.txn.outboxMarks[name]]
	case rewrite.SavepointRelease:
		delete(s.txn.outboxMarks, name)
	}
}

// outboxStatementLimit bounds one INSERT of entries at COMMIT, well under
// the smallest max_allowed_packet a datasource is likely to have (16 MiB).
const outboxStatementLimit = 4 << 20

// flushOutbox writes the transaction's entries on its connection before
// its COMMIT. Their seqs come from the home's sequence row, updated first:
// its lock is held until the COMMIT, so two transactions of one home take
// seqs in the order they commit, and the worker, which delivers in seq
// order, delivers in commit order.
func (s *Session) flushOutbox(t *txnState) error {
	c := t.conn
	if err := s.e.outboxTables.ensureHome(s, c.Datasource()); err != nil {
		return err
	}
	db := sqlq.Ident(outbox.Database)
	n := len(t.outbox)
	r, err := c.Exec(fmt.Sprintf("INSERT INTO %s.%s (home, n) VALUES (%d, %d) ON DUPLICATE KEY UPDATE n = LAST_INSERT_ID(n + %d)",
		db, sqlq.Ident(outbox.SeqTable), t.pin, n, n))
	if err != nil {
		return err
	}
	last := uint64(n) // inserted: the home's first entries
	if r.AffectedRows != 1 {
		last = r.InsertId
	}
	if last < uint64(n) {
		return sqlerr.Errorf(sqlerr.Internal, "[BUG] the outbox sequence of home %d answered %d for %d entries", t.pin, last, n)
	}
	first := last - uint64(n) + 1
	head := fmt.Sprintf("INSERT INTO %s.%s (home, seq, target, conv_id, n_rows, db, vars, stmt, created_at, next_at) VALUES ", db, sqlq.Ident(outbox.HomeTable))
	b := []byte(head)
	for i, e := range t.outbox {
		if len(b) > len(head) {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, "(%d,%d,%d,%d,%d,", t.pin, first+uint64(i), e.target, e.key, e.rows)
		b = append(b, rewrite.QuoteString(s.db)...)
		b = append(b, ',')
		b = append(b, rewrite.QuoteString(e.vars)...)
		b = append(b, ',')
		b = append(b, rewrite.QuoteString(e.stmt)...)
		b = append(b, ",NOW(6),NOW(6))"...)
		if len(b) > outboxStatementLimit || i == len(t.outbox)-1 {
			if _, err := c.Exec(string(b)); err != nil {
				return err
			}
			b = append(b[:0], head...)
		}
	}
	return nil
}

// outboxTables remembers the datasources and databases where the
// outbox's tables are known to exist.
type outboxTables struct {
	mu   sync.Mutex
	done map[string]bool // "ds" (home tables) or "ds\x00database" (applied table)
}

func (o *outboxTables) known(key string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.done[key]
}

func (o *outboxTables) note(key string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.done == nil {
		o.done = map[string]bool{}
	}
	o.done[key] = true
}

// ensureHome creates the home tables on ds, on a connection of their own.
func (o *outboxTables) ensureHome(s *Session, ds string) error {
	if o.known(ds) {
		return nil
	}
	c, err := s.e.backends.Acquire(s.backendCtx(), ds, false)
	if err != nil {
		return err
	}
	defer c.Release()
	for _, ddl := range outbox.HomeDDL() {
		if _, err := c.Exec(ddl); err != nil {
			return fmt.Errorf("creating the outbox on %s: %w", ds, err)
		}
	}
	o.note(ds)
	return nil
}

// ensureApplied creates the applied table in database on ds.
func (o *outboxTables) ensureApplied(ctx context.Context, e *Engine, ds, database string) error {
	key := ds + "\x00" + database
	if o.known(key) {
		return nil
	}
	c, err := e.backends.Acquire(ctx, ds, false)
	if err != nil {
		return err
	}
	defer c.Release()
	if _, err := c.Exec(outbox.AppliedDDL(database)); err != nil {
		return fmt.Errorf("creating %s.%s on %s: %w", database, outbox.AppliedTable, ds, err)
	}
	o.note(key)
	return nil
}

// OutboxOptions tune delivery.
type OutboxOptions struct {
	// Batch is how many entries one DeliverOutbox reads (default 500).
	Batch int
	// MaxTries is how many times an entry that fails for a reason that
	// will not pass by itself (a constraint, a missing column) is tried
	// before it becomes a dead letter (default 10). Entries failing for a
	// passing reason (a datasource down, a migration hold) are retried
	// for as long as it takes.
	MaxTries int
	// MaxBackoff bounds the wait between two tries of an entry (default 30 s).
	MaxBackoff time.Duration
}

func (o OutboxOptions) withDefaults() OutboxOptions {
	if o.Batch <= 0 {
		o.Batch = 500
	}
	if o.MaxTries <= 0 {
		o.MaxTries = 10
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 30 * time.Second
	}
	return o
}

// pendingEntry is an entry as delivery reads it.
type pendingEntry struct {
	home      int
	seq       uint64
	target    router.Shard
	key       uint64
	rows      int
	db, stmt  string
	vars      map[string]string
	tries     int
	ready     bool // next_at has passed
	createdAt time.Time
}

// DeliverOutbox applies the pending entries of ds's outbox that are due, at
// most Batch of them, and says how many it applied. Entries of one home go
// to each target shard in seq order: one that fails holds back the later
// entries of its home for the same target shard (until it is applied or
// becomes a dead letter). Only the datasource's elected worker may call it;
// two running at once would still apply each entry once (the applied
// marker), in an order nobody promised.
func (e *Engine) DeliverOutbox(ctx context.Context, ds string, opt OutboxOptions) (int, error) {
	opt = opt.withDefaults()
	c, err := e.backends.Acquire(ctx, ds, false)
	if err != nil {
		return 0, err
	}
	defer c.Release()
	r, err := c.Exec(fmt.Sprintf("SELECT home, seq, target, conv_id, n_rows, db, vars, stmt, tries, next_at <= NOW(6), UNIX_TIMESTAMP(created_at) FROM %s.%s WHERE state = 'pending' ORDER BY home, seq LIMIT %d",
		sqlq.Ident(outbox.Database), sqlq.Ident(outbox.HomeTable), opt.Batch))
	if err != nil {
		if isMissingTable(err) {
			return 0, nil // no outbox transaction ever committed here
		}
		return 0, err
	}
	if err := decodeRows(r); err != nil {
		return 0, err
	}
	type pair struct {
		home   int
		target router.Shard
	}
	held := map[pair]bool{}
	var done []pendingEntry
	delivered := 0
	for i := range r.RowDatas {
		en, err := readEntry(r, i)
		if err != nil {
			return delivered, err
		}
		p := pair{en.home, en.target}
		if held[p] {
			continue
		}
		if !en.ready {
			held[p] = true
			continue
		}
		if ctx.Err() != nil {
			break
		}
		err = e.applyEntry(ctx, ds, en)
		if err == nil {
			// A drill's crash here leaves an entry applied and still in
			// the outbox: the next worker must find its marker.
			failpoint.Inject("outbox-applied")
			done = append(done, en)
			delivered++
			e.metrics.outboxDelivered(ds, time.Since(en.createdAt))
			continue
		}
		held[p] = true
		if ferr := e.entryFailed(c, ds, en, err, opt); ferr != nil {
			return delivered, ferr
		}
	}
	if err := deleteEntries(c, done); err != nil {
		return delivered, err
	}
	return delivered, ctx.Err()
}

// readEntry reads row i of the pending entries.
func readEntry(r *mysql.Result, i int) (pendingEntry, error) {
	var en pendingEntry
	home, err := r.GetInt(i, 0)
	if err != nil {
		return en, err
	}
	en.home = int(home)
	if en.seq, err = r.GetUint(i, 1); err != nil {
		return en, err
	}
	target, err := r.GetUint(i, 2)
	if err != nil {
		return en, err
	}
	en.target = router.Shard(target)
	if en.key, err = r.GetUint(i, 3); err != nil {
		return en, err
	}
	rows, _ := r.GetInt(i, 4)
	en.rows = int(rows)
	en.db, _ = r.GetString(i, 5)
	vars, _ := r.GetString(i, 6)
	if err := json.Unmarshal([]byte(vars), &en.vars); err != nil {
		return en, fmt.Errorf("outbox entry %d/%d: its variables: %w", en.home, en.seq, err)
	}
	en.stmt, _ = r.GetString(i, 7)
	tries, _ := r.GetInt(i, 8)
	en.tries = int(tries)
	ready, _ := r.GetInt(i, 9)
	en.ready = ready != 0
	created, _ := r.GetFloat(i, 10)
	en.createdAt = time.Unix(0, int64(created*1e9))
	return en, nil
}

// applyEntry applies one entry exactly once in effect: its statement and
// its applied marker in one transaction on the target shard, run by an
// internal session through the engine's own routing (a moved shard is
// written where it is now; a migration hold holds it like a client's
// write). A marker already there means an earlier try committed: the
// transaction is rolled back and the entry counts as applied.
func (e *Engine) applyEntry(ctx context.Context, origin string, en pendingEntry) error {
	s := e.NewSession(en.db)
	s.ownerCtx = ctx
	s.priv = Privileges{Read: true, Write: true}
	s.user, s.host = "convoy-outbox", "localhost"
	for k, v := range en.vars {
		s.vars[k] = v
	}
	defer s.Close()
	if _, err := s.begin("BEGIN"); err != nil {
		return err
	}
	_, err := s.query(en.stmt)
	c := s.txn.conn
	if c != nil && s.txn.pin != int(en.target) {
		_, _ = s.endTxn(false)
		return sqlerr.Errorf(sqlerr.Internal, "[BUG] outbox entry %d/%d for shard %s ran on %s", en.home, en.seq, en.target, pinName(s.txn.pin))
	}
	if err != nil {
		// Applied by an earlier try, the statement may fail for that very
		// reason (its rows are there: a duplicate key): the marker says.
		if c != nil && !s.txn.aborted {
			if r, qerr := c.Exec(fmt.Sprintf("SELECT 1 FROM %s.%s WHERE %s = %d AND origin = %s AND home = %d AND seq = %d",
				sqlq.Ident(s.txn.at.Database), sqlq.Ident(outbox.AppliedTable), router.CompanionKey, en.key, rewrite.QuoteString(origin), en.home, en.seq)); qerr == nil && r.Resultset != nil && len(r.RowDatas) > 0 {
				err = nil
			}
		}
		_, _ = s.endTxn(false)
		return err
	}
	if c == nil {
		_, _ = s.endTxn(false)
		return sqlerr.Errorf(sqlerr.Internal, "[BUG] outbox entry %d/%d for shard %s opened no transaction", en.home, en.seq, en.target)
	}
	database := s.txn.at.Database
	mark := fmt.Sprintf("INSERT INTO %s.%s (%s, origin, home, seq, applied_at) VALUES (%d, %s, %d, %d, NOW(3))",
		sqlq.Ident(database), sqlq.Ident(outbox.AppliedTable), router.CompanionKey, en.key, rewrite.QuoteString(origin), en.home, en.seq)
	_, err = c.Exec(mark)
	if err != nil && isMissingTable(err) {
		// First delivery to this database: the table is created on
		// another connection (DDL would commit this transaction), then
		// the marker is written.
		if err = e.outboxTables.ensureApplied(ctx, e, c.Datasource(), database); err == nil {
			_, err = c.Exec(mark)
		}
	}
	if err != nil {
		_, _ = s.endTxn(false)
		if isDuplicate(err) {
			return nil // applied by an earlier try
		}
		return err
	}
	_, err = s.endTxn(true)
	return err
}

// entryFailed records a failed try: the entry waits (backing off) or,
// after MaxTries failures that will not pass by themselves, becomes a dead
// letter.
func (e *Engine) entryFailed(c Conn, ds string, en pendingEntry, cause error, opt OutboxOptions) error {
	tries := en.tries + 1
	state := outbox.StatePending
	if !transientDelivery(cause) && tries >= opt.MaxTries {
		state = outbox.StateDead
		e.metrics.outboxDead(ds)
		e.log.Warn("outbox entry is a dead letter", zapEntry(ds, en, cause)...)
	} else {
		e.log.Debug("outbox entry not delivered; retrying", zapEntry(ds, en, cause)...)
	}
	backoff := min(time.Duration(1<<min(tries, 20))*50*time.Millisecond, opt.MaxBackoff)
	msg := cause.Error()
	if len(msg) > 1000 {
		msg = msg[:1000]
	}
	_, err := c.Exec(fmt.Sprintf("UPDATE %s.%s SET tries = %d, state = '%s', last_error = %s, next_at = NOW(6) + INTERVAL %d MICROSECOND WHERE home = %d AND seq = %d",
		sqlq.Ident(outbox.Database), sqlq.Ident(outbox.HomeTable), tries, state, rewrite.QuoteString(msg), backoff.Microseconds(), en.home, en.seq))
	return err
}

// deleteEntries removes applied entries from the outbox (their markers on
// the targets keep them from being applied twice should this fail).
func deleteEntries(c Conn, done []pendingEntry) error {
	for len(done) > 0 {
		n := min(len(done), 500)
		var b strings.Builder
		fmt.Fprintf(&b, "DELETE FROM %s.%s WHERE (home, seq) IN (", sqlq.Ident(outbox.Database), sqlq.Ident(outbox.HomeTable))
		for i, en := range done[:n] {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "(%d,%d)", en.home, en.seq)
		}
		b.WriteByte(')')
		if _, err := c.Exec(b.String()); err != nil {
			return err
		}
		done = done[n:]
	}
	return nil
}

// transientDelivery reports a failure that passes by itself: the target or
// the home unreachable, a migration hold, a lock wait or deadlock, a
// read-only server. Others (a constraint, a missing table or column) will
// fail again until someone acts.
func transientDelivery(err error) bool {
	ce := classify(err)
	for _, code := range []sqlerr.Code{sqlerr.BackendUnavailable, sqlerr.PoolTimeout, sqlerr.TxnAborted, sqlerr.StatementTimeout,
		sqlerr.ShardHeld, sqlerr.ShardUnavailable, sqlerr.QueryInterrupted, sqlerr.TxnRolledBack} {
		if sqlerr.Is(ce, code) {
			return true
		}
	}
	var me *mysql.MyError
	if errors.As(err, &me) {
		switch me.Code {
		case mysql.ER_LOCK_WAIT_TIMEOUT, mysql.ER_LOCK_DEADLOCK, mysql.ER_CON_COUNT_ERROR, mysql.ER_SERVER_SHUTDOWN,
			mysql.ER_OPTION_PREVENTS_STATEMENT, mysql.ER_QUERY_INTERRUPTED, 1927 /* ER_CONNECTION_KILLED */ :
			return true
		}
	}
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

func isMissingTable(err error) bool {
	var me *mysql.MyError
	return errors.As(err, &me) && (me.Code == mysql.ER_NO_SUCH_TABLE || me.Code == mysql.ER_BAD_DB_ERROR)
}

func isDuplicate(err error) bool {
	var me *mysql.MyError
	return errors.As(err, &me) && me.Code == mysql.ER_DUP_ENTRY
}

// zapEntry names an entry in a log line (never its statement: it holds
// message payloads).
func zapEntry(ds string, en pendingEntry, cause error) []zap.Field {
	return []zap.Field{zap.String("datasource", ds), zap.Int("home", en.home), zap.Uint64("seq", en.seq),
		zap.Stringer("target", en.target), zap.Int("tries", en.tries+1), zap.Error(classify(cause))}
}

// OutboxSummary is one datasource's outbox as SHOW OUTBOX reports it.
type OutboxSummary struct {
	Pending, Dead int64
	// OldestPending is the age of the oldest pending entry (0: none).
	OldestPending time.Duration
}

// OutboxSummary counts ds's outbox entries.
func (e *Engine) OutboxSummary(ctx context.Context, ds string) (OutboxSummary, error) {
	var out OutboxSummary
	r, err := e.outboxQuery(ctx, ds, fmt.Sprintf("SELECT state, COUNT(*), TIMESTAMPDIFF(MICROSECOND, MIN(created_at), NOW(6)) FROM %s.%s GROUP BY state",
		sqlq.Ident(outbox.Database), sqlq.Ident(outbox.HomeTable)))
	if err != nil || r == nil {
		return out, err
	}
	for i := range r.RowDatas {
		state, _ := r.GetString(i, 0)
		n, _ := r.GetInt(i, 1)
		age, _ := r.GetInt(i, 2)
		switch state {
		case outbox.StatePending:
			out.Pending, out.OldestPending = n, time.Duration(age)*time.Microsecond
		case outbox.StateDead:
			out.Dead = n
		}
	}
	return out, nil
}

// OutboxDeadLetter is one dead letter (never its statement: it holds
// message payloads; a DBA reads it in the table when needed).
type OutboxDeadLetter struct {
	ID        string // datasource:home:seq, what OUTBOX RETRY | DISCARD take
	Target    router.Shard
	Rows      int
	Tries     int
	LastError string
	CreatedAt string
}

// OutboxDeadLetters lists up to limit of ds's dead letters, oldest first.
func (e *Engine) OutboxDeadLetters(ctx context.Context, ds string, limit int) ([]OutboxDeadLetter, error) {
	r, err := e.outboxQuery(ctx, ds, fmt.Sprintf("SELECT home, seq, target, n_rows, tries, last_error, created_at FROM %s.%s WHERE state = 'dead' ORDER BY home, seq LIMIT %d",
		sqlq.Ident(outbox.Database), sqlq.Ident(outbox.HomeTable), limit))
	if err != nil || r == nil {
		return nil, err
	}
	out := make([]OutboxDeadLetter, len(r.RowDatas))
	for i := range r.RowDatas {
		home, _ := r.GetInt(i, 0)
		seq, _ := r.GetUint(i, 1)
		target, _ := r.GetUint(i, 2)
		rows, _ := r.GetInt(i, 3)
		tries, _ := r.GetInt(i, 4)
		msg, _ := r.GetString(i, 5)
		created, _ := r.GetString(i, 6)
		out[i] = OutboxDeadLetter{ID: OutboxEntryID(ds, int(home), seq), Target: router.Shard(target), Rows: int(rows), Tries: int(tries), LastError: msg, CreatedAt: created}
	}
	return out, nil
}

// OutboxEntryID names an entry for the directives.
func OutboxEntryID(ds string, home int, seq uint64) string {
	return fmt.Sprintf("%s:%d:%d", ds, home, seq)
}

// ParseOutboxEntryID reads an OutboxEntryID (the datasource name may hold
// ':' itself: the last two fields are the numbers).
func ParseOutboxEntryID(id string) (ds string, home int, seq uint64, err error) {
	j := strings.LastIndexByte(id, ':')
	i := -1
	if j > 0 {
		i = strings.LastIndexByte(id[:j], ':')
	}
	if i <= 0 {
		return "", 0, 0, sqlerr.Errorf(sqlerr.NotSupported, "%q is not an outbox entry id (datasource:home:seq, as SHOW OUTBOX DEAD prints it)", id)
	}
	h, err1 := strconv.Atoi(id[i+1 : j])
	n, err2 := strconv.ParseUint(id[j+1:], 10, 64)
	if err1 != nil || err2 != nil {
		return "", 0, 0, sqlerr.Errorf(sqlerr.NotSupported, "%q is not an outbox entry id (datasource:home:seq, as SHOW OUTBOX DEAD prints it)", id)
	}
	return id[:i], h, n, nil
}

// OutboxResolve makes the dead letter id pending again (retry: tried at
// once, its tries reset) or deletes it (discard: its rows are never
// written). Only a dead letter: a pending entry is the worker's.
func (e *Engine) OutboxResolve(ctx context.Context, id string, retry bool) error {
	ds, home, seq, err := ParseOutboxEntryID(id)
	if err != nil {
		return err
	}
	if _, ok := e.routes.Current().Datasource(ds); !ok {
		return sqlerr.Errorf(sqlerr.NotSupported, "outbox entry %s: no datasource %s in the routes", id, ds)
	}
	table := sqlq.Ident(outbox.Database) + "." + sqlq.Ident(outbox.HomeTable)
	stmt := fmt.Sprintf("DELETE FROM %s WHERE home = %d AND seq = %d AND state = 'dead'", table, home, seq)
	if retry {
		stmt = fmt.Sprintf("UPDATE %s SET state = 'pending', tries = 0, next_at = NOW(6) WHERE home = %d AND seq = %d AND state = 'dead'", table, home, seq)
	}
	r, err := e.outboxQuery(ctx, ds, stmt)
	if err != nil {
		return err
	}
	if r == nil || r.AffectedRows == 0 {
		return sqlerr.Errorf(sqlerr.NotSupported, "outbox entry %s is not a dead letter (delivered, pending, or unknown): SHOW OUTBOX DEAD lists them", id)
	}
	if retry {
		e.log.Info("outbox dead letter retried", zap.String("entry", id))
	} else {
		e.log.Warn("outbox dead letter discarded: its rows will never be written", zap.String("entry", id))
	}
	return nil
}

// outboxQuery runs one statement on ds's outbox; nil without an error when
// ds has no outbox yet.
func (e *Engine) outboxQuery(ctx context.Context, ds, stmt string) (*mysql.Result, error) {
	c, err := e.backends.Acquire(ctx, ds, false)
	if err != nil {
		return nil, err
	}
	defer c.Release()
	r, err := c.Exec(stmt)
	if err != nil {
		if isMissingTable(err) {
			return nil, nil
		}
		return nil, err
	}
	return r, decodeRows(r)
}

// SetOutboxKick gives the engine the delivery workers' wake-up (call
// before serving): a COMMIT with entries calls it with its datasource.
func (e *Engine) SetOutboxKick(kick func(ds string)) { e.outboxKick = kick }
