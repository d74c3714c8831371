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
	db     string // the session's database when it was recorded
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
		entries = append(entries, outboxEntry{target: sh, key: keys[sh], rows: len(byShard[sh]), stmt: string(b), db: s.db, vars: vars})
	}
	if err := s.txnUsable(); err != nil {
		return nil, err
	}
	res := okResult()
	if rows := byShard[router.Shard(home)]; home >= 0 && len(rows) > 0 {
		// (A statement with rows for several shards is never a plan-cache
		// plan: its text values are in its template, as in insert.)
		snap := s.e.routes.Current()
		sh := router.Shard(home)
		p, err := s.rowsPart(a, snap, sh, snap.Target(sh).Datasource, rows, args, binary)
		if err != nil {
			return nil, err
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
// its COMMIT, in one round trip when they fit one statement. Their seqs
// come from the home's sequence row, updated first: its lock is held until
// the COMMIT, so two transactions of one home take seqs in the order they
// commit, and the worker, which delivers in seq order, delivers in commit
// order. The row's new value is LAST_INSERT_ID() (LAST_INSERT_ID(expr) on
// both the insert and the update path), which the entries' INSERT reads.
func (s *Session) flushOutbox(t *txnState) error {
	c := t.conn
	if err := s.e.outboxTables.ensureHome(s.backendCtx(), s.e.backends, c.Datasource()); err != nil {
		return err
	}
	db := sqlq.Ident(outbox.Database)
	n := len(t.outbox)
	seq := fmt.Sprintf("INSERT INTO %s.%s (home, n) VALUES (%d, LAST_INSERT_ID(%d)) ON DUPLICATE KEY UPDATE n = LAST_INSERT_ID(n + %d)",
		db, sqlq.Ident(outbox.SeqTable), t.pin, n, n)
	head := fmt.Sprintf("INSERT INTO %s.%s (home, seq, target, conv_id, n_rows, db, vars, stmt, created_at, next_at) VALUES ", db, sqlq.Ident(outbox.HomeTable))
	b := []byte(seq + ";" + head)
	first := true // the first statement goes with the sequence's
	fresh := len(b)
	for i, e := range t.outbox {
		if len(b) > fresh {
			b = append(b, ',')
		}
		// seq: the i-th of the n just taken, the last being LAST_INSERT_ID().
		b = fmt.Appendf(b, "(%d,LAST_INSERT_ID()-%d,%d,%d,%d,", t.pin, n-1-i, e.target, e.key, e.rows)
		b = append(b, rewrite.QuoteString(e.db)...)
		b = append(b, ',')
		b = append(b, rewrite.QuoteString(e.vars)...)
		b = append(b, ',')
		b = append(b, rewrite.QuoteString(e.stmt)...)
		b = append(b, ",NOW(6),NOW(6))"...)
		if len(b) > outboxStatementLimit || i == len(t.outbox)-1 {
			var err error
			if first {
				_, err = c.ExecMulti(string(b))
			} else {
				_, err = c.Exec(string(b))
			}
			if err != nil {
				return err
			}
			first = false
			b = append(b[:0], head...)
			fresh = len(b)
		}
	}
	return nil
}

// outboxTables remembers the datasources and databases where the
// outbox's tables are known to exist.
type outboxTables struct {
	mu   sync.Mutex
	done map[string]bool // "ds" (home tables) or "ds\x00database" (applied table)
	// counted is when each datasource's dead letters were last counted
	// (outboxDeadCount).
	counted map[string]time.Time
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

// ensureHome creates the home tables on ds.
func (o *outboxTables) ensureHome(ctx context.Context, b Backends, ds string) error {
	return o.ensure(ctx, b, ds, ds, outbox.HomeDDL()...)
}

// ensureApplied creates the applied table in database on ds.
func (o *outboxTables) ensureApplied(ctx context.Context, b Backends, ds, database string) error {
	return o.ensure(ctx, b, ds, ds+"\x00"+database, outbox.AppliedDDL(database))
}

// ensure runs ddl on a connection of its own to ds (DDL would commit a
// transaction's), once per key.
func (o *outboxTables) ensure(ctx context.Context, b Backends, ds, key string, ddl ...string) error {
	if o.known(key) {
		return nil
	}
	c, err := b.Acquire(ctx, ds, false)
	if err != nil {
		return err
	}
	defer c.Release()
	for _, d := range ddl {
		if _, err := c.Exec(d); err != nil {
			return fmt.Errorf("creating the outbox's tables on %s: %w", ds, err)
		}
	}
	o.note(key)
	return nil
}

// OutboxOptions tune delivery.
type OutboxOptions struct {
	// Batch is how many entries one DeliverOutbox reads (default 10000):
	// under a backlog a larger read gives each target shard more entries
	// per transaction.
	Batch int
	// MaxTries is how many times an entry that fails for a reason that
	// will not pass by itself (a constraint, a missing column) is tried
	// before it becomes a dead letter (default 10). Entries failing for a
	// passing reason (a datasource down, a migration hold) are retried
	// for as long as it takes.
	MaxTries int
	// MaxBackoff bounds the wait between two tries of an entry (default 30 s).
	MaxBackoff time.Duration
	// Parallel is how many target shards one pass serves at once
	// (default 8); BatchPerShard how many entries of one shard one target
	// transaction applies (default 50).
	Parallel, BatchPerShard int
}

func (o OutboxOptions) withDefaults() OutboxOptions {
	if o.Batch <= 0 {
		o.Batch = 10000
	}
	if o.MaxTries <= 0 {
		o.MaxTries = 10
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 30 * time.Second
	}
	if o.Parallel <= 0 {
		o.Parallel = 8
	}
	if o.BatchPerShard <= 0 {
		o.BatchPerShard = 50
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
	createdAt time.Time
	// attempted: a pass set out to apply it before (it may have a
	// marker); a first attempt needs no look for one.
	attempted bool
}

// DeliverOutbox applies the pending entries of ds's outbox that are due, at
// most Batch of them, and says how many it applied. Entries of one home go
// to each target shard in seq order: one that fails holds back the later
// entries of its home for the same target shard (until it is applied or
// becomes a dead letter). Target shards are served in parallel (at most
// Parallel at once), each with its entries applied in transactions of up
// to BatchPerShard. Only the datasource's elected worker may call it; two
// running at once would still apply each entry once (the applied marker),
// in an order nobody promised.
func (e *Engine) DeliverOutbox(ctx context.Context, ds string, opt OutboxOptions) (int, error) {
	opt = opt.withDefaults()
	c, err := e.backends.Acquire(ctx, ds, false)
	if err != nil {
		return 0, err
	}
	defer c.Release()
	// The due entries, in (home, seq) order, but not those behind an
	// earlier entry of their home for their target that is backing off
	// (order per home and target). Filtered in the query, so a backlog
	// waiting for a datasource that is down never fills the read and
	// hides the entries other targets could take.
	table := sqlq.Ident(outbox.Database) + "." + sqlq.Ident(outbox.HomeTable)
	r, err := c.Exec(fmt.Sprintf(`SELECT o.home, o.seq, o.target, o.conv_id, o.n_rows, o.db, o.vars, o.stmt, o.tries, UNIX_TIMESTAMP(o.created_at), o.attempts FROM %s o
WHERE o.state = 'pending' AND o.next_at <= NOW(6) AND NOT EXISTS (SELECT 1 FROM %s w FORCE INDEX (by_pair)
  WHERE w.state = 'pending' AND w.home = o.home AND w.target = o.target AND w.seq < o.seq AND w.next_at > NOW(6))
ORDER BY o.home, o.seq LIMIT %d`, table, table, opt.Batch))
	if err != nil {
		if isMissingTable(err) {
			return 0, nil // no outbox transaction ever committed here
		}
		return 0, err
	}
	if err := decodeRows(r); err != nil {
		return 0, err
	}
	// Per target shard, its due entries in (home, seq) order.
	groups := map[router.Shard][]pendingEntry{}
	var targets []router.Shard
	for i := range r.RowDatas {
		en, err := readEntry(r, i)
		if err != nil {
			return 0, err
		}
		if _, ok := groups[en.target]; !ok {
			targets = append(targets, en.target)
		}
		groups[en.target] = append(groups[en.target], en)
	}
	// Counted before anything is applied: a crash from here on leaves
	// entries that may have markers, and says so.
	var due []pendingEntry
	for _, sh := range targets {
		due = append(due, groups[sh]...)
	}
	if err := entriesAttempted(c, due); err != nil {
		return 0, err
	}
	var mu sync.Mutex
	var done []pendingEntry
	var failed []failedEntry
	sem := make(chan struct{}, opt.Parallel)
	var wg sync.WaitGroup
	for _, sh := range targets {
		sem <- struct{}{}
		wg.Add(1)
		go func(g []pendingEntry) {
			defer func() { <-sem; wg.Done() }()
			applied, fails := e.deliverShard(ctx, ds, g, opt.BatchPerShard)
			mu.Lock()
			done = append(done, applied...)
			failed = append(failed, fails...)
			mu.Unlock()
		}(groups[sh])
	}
	wg.Wait()
	for _, en := range done {
		e.metrics.outboxDelivered(ds, time.Since(en.createdAt))
	}
	for _, f := range failed {
		if err := e.entryFailed(c, ds, f.en, f.err, opt); err != nil {
			return len(done), err
		}
	}
	if err := deleteEntries(c, done); err != nil {
		return len(done), err
	}
	e.metrics.outboxState(ds, outboxOldest(c), e.outboxDeadCount(c, ds))
	return len(done), ctx.Err()
}

// outboxOldest is the age of the oldest pending entry (0: none, or the
// query failed).
func outboxOldest(c Conn) time.Duration {
	r, err := c.Exec(fmt.Sprintf("SELECT TIMESTAMPDIFF(MICROSECOND, MIN(created_at), NOW(6)) FROM %s.%s WHERE state = 'pending'", sqlq.Ident(outbox.Database), sqlq.Ident(outbox.HomeTable)))
	if err != nil || decodeRows(r) != nil || len(r.RowDatas) == 0 {
		return 0
	}
	us, _ := r.GetInt(0, 0)
	return time.Duration(us) * time.Microsecond
}

// outboxDeadCount counts ds's dead letters at most every 10 s (-1 in
// between, or when the count fails).
func (e *Engine) outboxDeadCount(c Conn, ds string) int64 {
	e.outboxTables.mu.Lock()
	if time.Since(e.outboxTables.counted[ds]) < 10*time.Second {
		e.outboxTables.mu.Unlock()
		return -1
	}
	if e.outboxTables.counted == nil {
		e.outboxTables.counted = map[string]time.Time{}
	}
	e.outboxTables.counted[ds] = time.Now()
	e.outboxTables.mu.Unlock()
	r, err := c.Exec(fmt.Sprintf("SELECT COUNT(*) FROM %s.%s WHERE state = 'dead'", sqlq.Ident(outbox.Database), sqlq.Ident(outbox.HomeTable)))
	if err != nil || decodeRows(r) != nil || len(r.RowDatas) == 0 {
		return -1
	}
	n, _ := r.GetInt(0, 0)
	return n
}

// failedEntry is a try that failed, with why.
type failedEntry struct {
	en  pendingEntry
	err error
}

// deliverShard applies one target shard's due entries (in order) in
// transactions of up to batch entries and returns those applied (or found
// applied before) and those that failed. A failed entry holds back the
// later entries of its home; another home's go on.
func (e *Engine) deliverShard(ctx context.Context, origin string, g []pendingEntry, batch int) (applied []pendingEntry, failed []failedEntry) {
	held := map[int]bool{}
	for len(g) > 0 && ctx.Err() == nil {
		var chunk []pendingEntry
		rest := g[:0:0]
		for _, en := range g {
			switch {
			case held[en.home]:
			case len(chunk) < batch:
				chunk = append(chunk, en)
			default:
				rest = append(rest, en)
			}
		}
		g = rest
		if len(chunk) == 0 {
			break
		}
		ok, bad := e.applyBatch(ctx, origin, chunk)
		applied = append(applied, ok...)
		for _, f := range bad {
			failed = append(failed, f)
			held[f.en.home] = true
		}
	}
	return applied, failed
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
	created, _ := r.GetFloat(i, 9)
	en.createdAt = time.Unix(0, int64(created*1e9))
	attempts, _ := r.GetInt(i, 10)
	en.attempted = attempts > 0
	return en, nil
}

// applyBatch applies entries of one target shard exactly once in effect:
// their statements and their applied markers in one transaction on the
// shard, run by an internal session through the engine's own routing (a
// moved shard is written where it is now; a migration hold holds it like a
// client's write). Entries whose marker is already there (an earlier try
// committed) are not run again. An entry whose statement fails is left out
// of the transaction (the server undid the statement alone) with its
// home's later entries, unless the failure ended the transaction: then
// the whole batch is tried again later.
func (e *Engine) applyBatch(ctx context.Context, origin string, batch []pendingEntry) (applied []pendingEntry, failed []failedEntry) {
	sh := batch[0].target
	failAll := func(err error) ([]pendingEntry, []failedEntry) {
		var out []failedEntry
		for _, en := range batch {
			out = append(out, failedEntry{en, err})
		}
		return applied, out
	}
	// Markers first, on the shard's side as the routes say now: after a
	// crash between a target's COMMIT and the entries' removal they say
	// what must not run again. (If the shard moves meanwhile, the markers
	// move with it and the final marker insert finds them.)
	var maybe []pendingEntry
	for _, en := range batch {
		if en.attempted {
			maybe = append(maybe, en)
		}
	}
	already, err := e.appliedMarkers(ctx, origin, maybe)
	if err != nil {
		return failAll(err)
	}
	todo := batch[:0:0]
	for _, en := range batch {
		if already[entryKey{en.home, en.seq}] {
			applied = append(applied, en)
		} else {
			todo = append(todo, en)
		}
	}
	if len(todo) == 0 {
		return applied, nil
	}
	s := e.NewSession(todo[0].db)
	s.ownerCtx = ctx
	s.priv = Privileges{Read: true, Write: true}
	s.user, s.host = "convoy-outbox", "localhost"
	defer s.Close()
	if _, err := s.begin("BEGIN"); err != nil {
		return failAll(err)
	}
	var ran []pendingEntry
	held := map[int]bool{}
	for _, en := range todo {
		if held[en.home] {
			continue
		}
		if err := s.entryVars(en); err != nil {
			return e.batchLost(s, applied, batch, err)
		}
		_, err := s.query(en.stmt)
		if c := s.txn.conn; c != nil && s.txn.pin != int(sh) {
			return e.batchLost(s, applied, batch, sqlerr.Errorf(sqlerr.Internal, "[BUG] outbox entry %d/%d for shard %s ran on %s", en.home, en.seq, sh, pinName(s.txn.pin)))
		}
		if err == nil {
			ran = append(ran, en)
			continue
		}
		if s.txn.aborted || s.txn.conn == nil && len(ran) > 0 {
			return e.batchLost(s, applied, batch, err)
		}
		failed = append(failed, failedEntry{en, err})
		held[en.home] = true
	}
	if len(ran) == 0 {
		_, _ = s.endTxn(false)
		return applied, failed
	}
	c := s.txn.conn
	database := s.txn.at.Database
	mark := markerInsert(database, origin, ran)
	_, err = c.Exec(mark)
	if err != nil && isMissingTable(err) {
		// First delivery to this database: the table is created on
		// another connection (DDL would commit this transaction).
		if err = e.outboxTables.ensureApplied(ctx, e.backends, c.Datasource(), database); err == nil {
			_, err = c.Exec(mark)
		}
	}
	if err != nil {
		// A duplicate marker: another worker applied one of them since
		// the check (a leader paused past its lease). The next pass sorts
		// them out from the markers.
		return e.batchLost(s, applied, batch, err)
	}
	if _, err := s.endTxn(true); err != nil {
		// Committed or not: the markers tell the next pass.
		return e.batchLost(nil, applied, batch, err)
	}
	// A drill's crash here leaves entries applied and still in the
	// outbox: the next worker must find their markers.
	failpoint.Inject("outbox/after-apply")
	return append(applied, ran...), failed
}

// batchLost rolls the batch's transaction back (s nil: it is over) and
// fails every entry not found applied before.
func (e *Engine) batchLost(s *Session, applied, batch []pendingEntry, err error) ([]pendingEntry, []failedEntry) {
	if s != nil {
		_, _ = s.endTxn(false)
	}
	before := map[entryKey]bool{}
	for _, en := range applied {
		before[entryKey{en.home, en.seq}] = true
	}
	var failed []failedEntry
	for _, en := range batch {
		if !before[entryKey{en.home, en.seq}] {
			failed = append(failed, failedEntry{en, err})
		}
	}
	return applied, failed
}

// entryVars gives the session the database and variables en was recorded
// with, the variables on its transaction's connection too once it has one
// (the statement names logical tables only, rendered qualified: the
// database needs no USE).
func (s *Session) entryVars(en pendingEntry) error {
	s.db = en.db
	vars := make(map[string]string, len(en.vars))
	for k, v := range en.vars {
		vars[k] = v
	}
	s.vars = vars
	if c := s.txn.conn; c != nil {
		return c.SyncVars(mergeVars(s.vars, s.txn.vars))
	}
	return nil
}

type entryKey struct {
	home int
	seq  uint64
}

// appliedMarkers reads which of batch's entries (all of one shard) have a
// marker on the shard's side; a missing table: none.
func (e *Engine) appliedMarkers(ctx context.Context, origin string, batch []pendingEntry) (map[entryKey]bool, error) {
	if len(batch) == 0 {
		return nil, nil
	}
	at := e.routes.Current().Target(batch[0].target)
	var b strings.Builder
	fmt.Fprintf(&b, "SELECT home, seq FROM %s.%s WHERE origin = %s AND (%s, home, seq) IN (", sqlq.Ident(at.Database), sqlq.Ident(outbox.AppliedTable),
		rewrite.QuoteString(origin), router.CompanionKey)
	for i, en := range batch {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "(%d,%d,%d)", en.key, en.home, en.seq)
	}
	b.WriteByte(')')
	r, err := e.outboxQuery(ctx, at.Datasource, b.String())
	if err != nil || r == nil {
		return nil, err
	}
	out := make(map[entryKey]bool, len(r.RowDatas))
	for i := range r.RowDatas {
		home, _ := r.GetInt(i, 0)
		seq, _ := r.GetUint(i, 1)
		out[entryKey{int(home), seq}] = true
	}
	return out, nil
}

// markerInsert is the applied markers of entries in database.
func markerInsert(database, origin string, entries []pendingEntry) string {
	var b strings.Builder
	fmt.Fprintf(&b, "INSERT INTO %s.%s (%s, origin, home, seq, applied_at) VALUES ", sqlq.Ident(database), sqlq.Ident(outbox.AppliedTable), router.CompanionKey)
	for i, en := range entries {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "(%d,%s,%d,%d,NOW(3))", en.key, rewrite.QuoteString(origin), en.home, en.seq)
	}
	return b.String()
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

// entriesAttempted counts a pass's attempt on entries.
func entriesAttempted(c Conn, entries []pendingEntry) error {
	return entriesWhere(c, "UPDATE %s.%s SET attempts = attempts + 1 WHERE (home, seq) IN (", entries)
}

// entriesWhere runs stmt (a format with the outbox table's database and
// name, ending in "IN (") over entries' keys, 500 at a time.
func entriesWhere(c Conn, stmt string, entries []pendingEntry) error {
	for len(entries) > 0 {
		n := min(len(entries), 500)
		var b strings.Builder
		fmt.Fprintf(&b, stmt, sqlq.Ident(outbox.Database), sqlq.Ident(outbox.HomeTable))
		for i, en := range entries[:n] {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "(%d,%d)", en.home, en.seq)
		}
		b.WriteByte(')')
		if _, err := c.Exec(b.String()); err != nil {
			return err
		}
		entries = entries[n:]
	}
	return nil
}

// deleteEntries removes applied entries from the outbox (their markers on
// the targets keep them from being applied twice should this fail).
func deleteEntries(c Conn, done []pendingEntry) error {
	return entriesWhere(c, "DELETE FROM %s.%s WHERE (home, seq) IN (", done)
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

// OutboxStopped drops the delivery gauges of ds: this process no longer
// delivers it (another one reports them).
func (e *Engine) OutboxStopped(ds string) {
	if m := e.metrics; m != nil {
		m.outboxOldest.DeleteLabelValues(ds)
		m.outboxDeadNow.DeleteLabelValues(ds)
	}
}

// PurgeOutboxMarkers deletes the applied markers older than keep in every
// shard database of ds, in chunks: a marker is needed only while its entry
// may still be tried again (its home has not removed it yet), which is
// seconds, or as long as the home datasource is down. It returns how many
// it deleted.
func (e *Engine) PurgeOutboxMarkers(ctx context.Context, ds string, keep time.Duration) (int64, error) {
	const chunk = 5000
	var n int64
	for _, d := range e.routes.Current().Databases() {
		if d[0] != ds {
			continue
		}
		for ctx.Err() == nil {
			r, err := e.outboxQuery(ctx, ds, fmt.Sprintf("DELETE FROM %s.%s WHERE applied_at < NOW(3) - INTERVAL %d SECOND LIMIT %d",
				sqlq.Ident(d[1]), sqlq.Ident(outbox.AppliedTable), int64(keep.Seconds()), chunk))
			if err != nil {
				return n, err
			}
			if r == nil {
				break // no table: nothing delivered there
			}
			n += int64(r.AffectedRows)
			if r.AffectedRows < chunk {
				break
			}
		}
	}
	return n, ctx.Err()
}
