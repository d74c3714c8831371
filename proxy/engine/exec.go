package engine

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/pingcap/tidb/pkg/parser/ast"

	"github.com/convoy-im/convoy/internal/sqlq"
	"github.com/convoy-im/convoy/proxy/mysqlrow"
	"github.com/convoy-im/convoy/proxy/planbuilder"
	"github.com/convoy-im/convoy/proxy/sqlerr"
	"github.com/convoy-im/convoy/rewrite"
	"github.com/convoy-im/convoy/router"
)

// run executes a plan. binary selects the prepared-statement protocol (the
// backend runs the statement prepared, its binary rows go to the client
// unchanged).
func (s *Session) run(pl *plan, args []any, binary bool) (res *mysql.Result, err error) {
	if err := s.authorize(pl); err != nil {
		return nil, err
	}
	s.diag.keep = pl.Local() || pl.Tableless()
	s.calcFound = pl.CalcFound
	if s.nextTx != nil && !pl.Local() && !pl.Tableless() {
		// SET TRANSACTION's characteristics belong to the next transaction:
		// the one this statement opens (autocommit=0), or this autocommit
		// statement, which uses them up only if it succeeds (as in MariaDB,
		// where a failed autocommit statement leaves them for the next).
		if s.inTxn() {
			s.txn.vars, s.nextTx = s.nextTx, nil
		} else {
			s.stmtVars = s.nextTx
			defer func() {
				if s.stmtVars = nil; err == nil {
					s.nextTx = nil
				}
			}()
		}
	}
	if pl.StmtSet != nil {
		if s.inTxn() {
			return nil, sqlerr.Errorf(sqlerr.NotSupported, "SET STATEMENT ... FOR inside a transaction is not supported through Convoy: the transaction's connection keeps the session's settings; use SET SESSION before the transaction")
		}
		prev := s.stmtVars
		s.stmtVars = mergeVars(prev, pl.StmtSet)
		defer func() { s.stmtVars = prev }()
	}
	switch pl.Op {
	case planbuilder.OpEmpty:
		return okResult(), nil
	case planbuilder.OpBegin:
		s.e.metrics.countStatement("transaction")
		return s.begin(pl.SQL)
	case planbuilder.OpEndTxn:
		s.e.metrics.countStatement("transaction")
		return s.endTxn(pl.A.Kind == rewrite.KindCommit)
	case planbuilder.OpSavepoint:
		s.e.metrics.countStatement("transaction")
		return s.savepoint(pl)
	case planbuilder.OpSet:
		s.e.metrics.countStatement("session")
		return s.set(pl.A)
	case planbuilder.OpUse:
		s.e.metrics.countStatement("session")
		return s.use(pl.A.UseDB)
	case planbuilder.OpKill:
		return s.kill(pl)
	case planbuilder.OpShowGrants:
		return s.showGrants(pl, binary)
	case planbuilder.OpProcessList:
		s.e.metrics.countStatement("session")
		return s.processList(pl, binary)
	case planbuilder.OpDiagnostics:
		s.e.metrics.countStatement("session")
		return s.showWarnings(pl, binary)
	case planbuilder.OpIntrospect:
		if r, ok, err := s.introspect(pl, args, binary); ok {
			return r, err
		}
		s.e.metrics.countStatement("unsharded")
		return s.passthrough(pl, args, binary) // (no logical name to put back after all)
	case planbuilder.OpPassthrough:
		s.e.metrics.countStatement("unsharded")
		return s.passthrough(pl, args, binary)
	case planbuilder.OpRoutine:
		return s.runRoutine(pl, args, binary)
	case planbuilder.OpSearch:
		return s.runSearch(pl, args, binary)
	case planbuilder.OpLoadData:
		return s.loadData(pl)
	case planbuilder.OpMaintenance:
		s.e.metrics.countStatement("ddl")
		return s.maintenance(pl, binary)
	}
	return s.runOnShards(pl, args, binary)
}

// use answers USE db.
func (s *Session) use(db string) (*mysql.Result, error) {
	if err := s.UseDB(db); err != nil {
		return nil, err
	}
	return okResult(), nil
}

// runOnShards runs the ops on sharded tables (op.sharded): the session's
// values put into the statement, then a write (or a transaction's locking
// read) admitted behind any migration hold on its shards and mirrored for a
// read ramp, then the op's own path.
func (s *Session) runOnShards(pl *plan, args []any, binary bool) (res *mysql.Result, err error) {
	a := pl.A
	if a.SessionRefs != 0 {
		if pl, err = s.sessionPlan(pl); err != nil {
			return nil, err
		}
	}
	if pl.Op == planbuilder.OpExplain {
		return s.runExplain(pl, args, binary)
	}
	if write := pl.Write(); write || s.inTxn() && lockingRead(a.Stmt) {
		// Before any route is read: a write queued behind a migration hold
		// is routed under the routes served when the hold ends. A locking
		// read in a transaction counts as its first write (hold.go).
		shards, err := s.admitWrite(pl, args)
		if err != nil {
			return nil, err
		}
		defer s.endWrite(shards)
		// The mirror runs before endWrite: while the write still counts on
		// its shards, no switch can flip them under it.
		if !write {
		} else if ws := s.mirrorPlan(pl, args); ws != nil {
			if pl.Op == planbuilder.OpInsertSeq {
				s.seqs = map[int]uint64{}
			}
			s.commits = make(map[router.Shard]string, 1)
			for _, w := range ws {
				s.commits[w.shard] = ""
			}
			defer func() {
				seqs := s.seqs
				s.seqs = nil
				switch {
				case err != nil:
				case res != nil && res.AffectedRows == 0 && !res.HasResultset():
					// Nothing changed: nothing for the target to show.
				case s.inTxn():
					s.txn.mirror = append(s.txn.mirror, txnMirror{ws, seqs})
				default:
					s.mirror([]txnMirror{{ws, seqs}})
				}
				s.commits = nil
			}()
		}
	}
	switch pl.Op {
	case planbuilder.OpDDL:
		s.e.metrics.countStatement("ddl")
		return s.ddl(pl)
	case planbuilder.OpShowSharded:
		return s.showSharded(pl, args, binary)
	case planbuilder.OpHistory:
		return s.history(pl, args, binary)
	}
	if s.e.hot != nil && pl.TouchesHistory() {
		return s.historyWrite(pl, args, binary)
	}
	return s.readSharded(pl, args, binary)
}

// history runs a history read of docs/design.md §4 (planbuilder.OpHistory:
// the hot tier is on). Its pages are exact with archived rows too (package
// histcache, "The cold tier"): a hit needs no cold check.
func (s *Session) history(pl *plan, args []any, binary bool) (*mysql.Result, error) {
	if s.inTxn() || s.readsTarget(pl, args) {
		// In a transaction: its connection's snapshot. Read from a
		// migration's target: the hot tier is filled only from the
		// authoritative side, so this read neither uses nor fills it.
		return s.readSharded(pl, args, binary)
	}
	if r, ok := s.hotRead(pl, args, binary); ok {
		s.e.metrics.countStatement("hot")
		return r, nil
	}
	r, err := s.readSharded(pl, args, binary)
	if err == nil {
		s.afterHistoryMiss(pl, args, binary, r)
	}
	return r, err
}

// historyWrite runs a conv_msg write with the hot tier on: markers before
// the commit, write-through or invalidation after, so its pages stay exact.
func (s *Session) historyWrite(pl *plan, args []any, binary bool) (*mysql.Result, error) {
	convs, known := historyConvs(pl, args)
	if s.inTxn() {
		s.txn.noteHistory(convs, known)
		return s.runSharded(pl, args, binary)
	}
	w := s.e.beginHistWrite(convs)
	s.histEntries = nil
	r, err := s.runSharded(pl, args, binary)
	w.end(err, s.histEntries)
	if !known && err == nil {
		s.e.invalidateAllHistory()
	}
	return r, err
}

// runSharded executes a statement on sharded tables.
func (s *Session) runSharded(pl *plan, args []any, binary bool) (*mysql.Result, error) {
	a := pl.A
	s.e.metrics.countStatement("sharded")
	keys, others := a.Keys, a.OtherKeys
	switch {
	case pl.Op == planbuilder.OpInsert || pl.Op == planbuilder.OpInsertSeq:
		return s.insert(pl, args, binary)
	case pl.Op == planbuilder.OpScatter:
		return s.scatter(pl, nil, args, binary)
	case a.RoutedByNested && a.Kind == rewrite.KindSelect:
		// Only nested blocks name sharded tables (SELECT EXISTS (SELECT
		// ... WHERE conv_id = ?)): they say where the statement runs.
		keys, others = others[0], others[1:]
	case !a.HasKey:
		return nil, sqlerr.Errorf(sqlerr.NotSupported, "%s on %s needs a %s = ... or %s IN (...) condition; refusing to touch every shard",
			a.Kind, a.Sharded[0], a.KeyColumn, a.KeyColumn)
	}
	mode, err := s.coldWriteCheck(pl, args)
	if err != nil {
		return nil, err
	}
	shards, err := s.shardsOf(keys, args)
	if err != nil {
		return nil, err
	}
	if err := s.colocated(shards, others, args); err != nil {
		return nil, err
	}
	if mode != coldWarm && len(shards) == 1 {
		snap := s.e.routes.Current()
		p := s.partFor(pl, snap, shards[0], snap.Target(shards[0]).Datasource, args, binary)
		if mode == coldErase {
			return s.coldErase(pl, p, args, binary)
		}
		return s.coldWrite(pl, p, args, binary)
	}
	return s.onShards(pl, shards, args, binary)
}

// colocated checks the statement's other key restrictions (OtherKeys)
// against the shards it is sent to: each of them reads the physical table
// the statement runs on, so every restricted value must live there, and a
// statement spread over several tables may have none. Otherwise the other
// references would silently see nothing of conversations kept elsewhere.
func (s *Session) colocated(shards []router.Shard, others [][]rewrite.Value, args []any) error {
	if len(others) == 0 {
		return nil
	}
	snap := s.e.routes.Current()
	at := snap.Target(shards[0])
	for _, sh := range shards[1:] {
		if snap.Target(sh) != at {
			return sqlerr.Errorf(sqlerr.NotSupported, "this statement restricts the shard key of more than one table reference (a join, a subquery or a derived table) and its rows are on several shards: each shard would answer only for its own rows; send one statement per shard")
		}
	}
	for _, o := range others {
		osh, err := s.shardsOf(o, args)
		if err != nil {
			return err
		}
		for _, sh := range osh {
			if snap.Target(sh) != at {
				return sqlerr.Errorf(sqlerr.NotSupported, "this statement reads shard %s and, in another table reference (a join, a subquery or a derived table), shard %s: one statement runs on one shard, where the other one's rows are not; send one statement per shard", shards[0], sh)
			}
		}
	}
	return nil
}

// shardsOf resolves key values (literals or bound arguments) to distinct
// shards, in order of first appearance.
func (s *Session) shardsOf(vals []rewrite.Value, args []any) ([]router.Shard, error) {
	if len(vals) > s.e.opt.MaxInList {
		return nil, sqlerr.Errorf(sqlerr.TooLarge, "the shard key IN list has %d values; the limit is %d", len(vals), s.e.opt.MaxInList)
	}
	return shardsOfValues(vals, args)
}

// shardsOfValues is shardsOf without the IN-list bound.
func shardsOfValues(vals []rewrite.Value, args []any) ([]router.Shard, error) {
	if len(vals) == 1 { // the common case: no dedup table needed
		k, err := keyOf(vals[0], args)
		if err != nil {
			return nil, err
		}
		return []router.Shard{router.ShardOf(k)}, nil
	}
	var seen [router.NumShards]bool
	out := make([]router.Shard, 0, len(vals))
	for _, v := range vals {
		k, err := keyOf(v, args)
		if err != nil {
			return nil, err
		}
		sh := router.ShardOf(k)
		if !seen[sh] {
			seen[sh] = true
			out = append(out, sh)
		}
	}
	return out, nil
}

func keyOf(v rewrite.Value, args []any) (uint64, error) {
	if v.Param >= 0 {
		if v.Param >= len(args) {
			return 0, sqlerr.Errorf(sqlerr.WrongArguments, "placeholder %d has no bound value", v.Param+1)
		}
		if l, ok := args[v.Param].(rewrite.Literal); ok {
			return router.KeyFromValue(l.Val)
		}
		return router.KeyFromValue(args[v.Param])
	}
	return router.KeyFromValue(v.Lit)
}

// part is one physical statement of a plan.
type part struct {
	shard router.Shard
	ds    string
	sql   string
	args  []any
	// inline is sql with args printed as literals, for a binary-protocol
	// statement sent as text (see rewrite.InlineShape); pl is its plan.
	inline string
	pl     *plan
	// rows are the VALUES rows of the statement an INSERT part writes.
	rows []int
	// untimed parts run without the statement timeout: DDL (an ALTER of a
	// big table takes minutes; the read timeout bounds it, as before).
	untimed bool
	// ramp is the side of a read ramp this read takes (ramp.go).
	ramp rampSide
	// quiet: Convoy's own statement (CREATE DATABASE before a sharded
	// CREATE TABLE), whose conditions are not the client's.
	quiet bool
	// assigns are the user variables the statement assigns (plan.assigns),
	// read back from the connection once it ran.
	assigns []string
	// db, when set, becomes the connection's current database first: a
	// multi-table DELETE names its targets by alias (DELETE m FROM conv_msg
	// m JOIN ...), which MariaDB resolves only under a current database
	// (1046 otherwise). Other statements name their tables in full, and
	// whatever needs the session's database sets it (passthrough).
	db string
}

// otherShardRead reports a plain read of sh inside a transaction pinned to
// another shard (or to the unsharded tables): it reads sh as it is now, on
// a pooled connection, as a read of several shards reads those other than
// the pinned one (scatter): one rule whatever their number. There is no
// distributed snapshot; a locking read or a write of a second shard is
// still refused.
func (s *Session) otherShardRead(pl *plan, sh router.Shard) bool {
	return s.inTxn() && s.txn.conn != nil && !s.txn.aborted && s.txn.pin != int(sh) &&
		pl.A.Kind == rewrite.KindSelect && !pl.Write() && !lockingRead(pl.A.Stmt)
}

// onShards runs a SELECT / UPDATE / DELETE on the physical tables of shards.
func (s *Session) onShards(pl *plan, shards []router.Shard, args []any, binary bool) (*mysql.Result, error) {
	snap := s.e.routes.Current()
	if len(shards) == 1 {
		sh := shards[0]
		alt, side := s.rampedRead(pl, snap, args)
		if alt != nil {
			snap = alt
		}
		p := s.partFor(pl, snap, sh, snap.Target(sh).Datasource, args, binary)
		p.ramp = side
		if s.otherShardRead(pl, sh) {
			r, err := s.autonomous(p, false, binary)
			if err != nil {
				return nil, err
			}
			fixFields(r, s.db)
			return r, nil
		}
		return s.single(p, pl.Write(), binary)
	}
	if s.inTxn() && (pl.A.Kind != rewrite.KindSelect || lockingRead(pl.A.Stmt)) {
		return nil, sqlerr.Errorf(sqlerr.CrossShardTxn, "this statement reaches %d shards; inside a transaction every statement must stay on one shard (no distributed transactions)", len(shards))
	}
	// Several shards of one physical table (small layouts) are one statement:
	// the full key condition is still in it, so each table returns or touches
	// exactly its own rows.
	var parts []part
	seen := map[router.Target]bool{}
	for _, sh := range shards {
		t := snap.Target(sh)
		if seen[t] {
			continue
		}
		seen[t] = true
		parts = append(parts, s.partFor(pl, snap, sh, t.Datasource, args, binary))
	}
	if len(parts) == 1 {
		return s.single(parts[0], pl.Write(), binary)
	}
	switch pl.A.Kind {
	case rewrite.KindSelect:
		return s.scatter(pl, shards, args, binary)
	default:
		if limited(pl.A.Stmt) {
			return nil, sqlerr.Errorf(sqlerr.NotSupported, "%s with ORDER BY / LIMIT reaching %d shards is not supported", pl.A.Kind, len(shards))
		}
		return s.writeParts(parts, binary)
	}
}

// partFor builds pl's statement for shard sh: with the values printed in
// when they allow it (always for a plan-cache plan, whose arguments are the
// client's own literals; for a prepared statement when inlinable), else
// with placeholders and the arguments in the order they are printed.
func (s *Session) partFor(pl *plan, snap *router.Snapshot, sh router.Shard, ds string, args []any, binary bool) part {
	p := part{shard: sh, ds: ds, args: pl.Tmpl.Bind(args), assigns: pl.Assigns}
	switch {
	case pl.textArgs:
		p.sql = pl.renderInline(s, snap, sh, args) // inlinable was checked at lookup
	case binary && pl.inlinable(args):
		if p.inline = pl.renderInline(s, snap, sh, pl.inlineArgs(args, s.utf8Client())); p.inline != "" {
			p.pl = pl
		}
	}
	if p.inline == "" && p.sql == "" {
		p.sql = pl.render(s, snap, sh)
	}
	if d, ok := pl.A.Stmt.(*ast.DeleteStmt); ok && d.IsMultiTable {
		p.db = snap.Target(sh).Database
	}
	return p
}

// exec runs one physical statement of the client's on c and reads the
// conditions it left there (backendWarnings).
func (s *Session) exec(c Conn, p part, binary bool) (*mysql.Result, error) {
	r, err := s.execPart(c, p, binary)
	if err == nil {
		s.noteFoundRows(c)
	}
	if err == nil && !p.quiet {
		s.backendWarnings(c, r, int(p.shard), p.untimed)
	}
	return r, err
}

func (s *Session) execPart(c Conn, p part, binary bool) (*mysql.Result, error) {
	if p.db != "" {
		if err := c.UseDB(p.db); err != nil {
			return nil, err
		}
	}
	if binary && p.inline != "" {
		r, err := c.Exec(p.inline)
		if err != nil || r.Resultset == nil || mysqlrow.TextToBinary(r.Resultset) {
			s.e.metrics.countBackendPS("inline")
			return r, err
		}
		// A column without an exact binary form (FLOAT, DOUBLE): this plan
		// is prepared on the backend from now on, and this SELECT runs again
		// that way (a plain SELECT without locking reads: harmless). Only a
		// SELECT returns rows here (a write with RETURNING is never inlined), and only
		// a SELECT may ever run twice.
		if p.pl.A.Kind != rewrite.KindSelect {
			return nil, sqlerr.Errorf(sqlerr.Internal, "[BUG] an inlined %s returned rows without an exact binary form", p.pl.A.Kind)
		}
		p.pl.noInline = true
		p.sql = p.pl.render(s, s.e.routes.Current(), p.shard)
	}
	if binary {
		s.e.metrics.countBackendPS("prepared")
		return c.ExecPrepared(p.sql, p.args)
	}
	return c.Exec(p.sql)
}

// single runs one physical statement (in the pinned transaction if any).
func (s *Session) single(p part, write, binary bool) (*mysql.Result, error) {
	start := time.Now()
	c, release, err := s.conn(int(p.shard), p.ds)
	if err != nil {
		s.e.observeRefused(p.shard, p.ds, write, start, err)
		if backendFailure(err) {
			s.e.observeRamp(p.ramp, p.shard, start, err)
		}
		return nil, err
	}
	start = time.Now()
	r, err := s.exec(c, p, binary)
	s.e.observe(p.shard, c.Datasource(), write, start, err)
	s.e.observeRamp(p.ramp, p.shard, start, err)
	s.afterError(c, err)
	if write && err == nil && !s.inTxn() {
		s.noteCommit(c, p.shard)
	}
	if err == nil {
		s.readBack(c, p.assigns)
	}
	release()
	if err != nil {
		return nil, err
	}
	fixFields(r, s.db)
	return r, nil
}

// job is one shard's share of a write: run executes it on a connection
// that already has a transaction open. rows, for an INSERT, are the
// statement's VALUES rows it writes, in order: rows it RETURNs are put back
// in the statement's order.
type job struct {
	shard router.Shard
	ds    string
	rows  []int
	run   func(c Conn) (*mysql.Result, error)
}

// writeParts runs one write per physical table; see writeJobs.
func (s *Session) writeParts(parts []part, binary bool) (*mysql.Result, error) {
	jobs := make([]job, len(parts))
	for i, p := range parts {
		p := p
		jobs[i] = job{shard: p.shard, ds: p.ds, rows: p.rows, run: func(c Conn) (*mysql.Result, error) { return s.exec(c, p, binary) }}
	}
	return s.writeJobs(jobs)
}

// writeJobs runs each job in its own local transaction and commits them
// only if every one succeeded. Without 2PC a failure between two COMMITs can
// still leave some applied; the error then names what committed.
func (s *Session) writeJobs(jobs []job) (*mysql.Result, error) {
	type open struct {
		c  Conn
		sh router.Shard
	}
	var opened []open
	rollback := func() {
		for _, o := range opened {
			_, _ = o.c.Exec("ROLLBACK")
			o.c.Release()
		}
	}
	total := okResult()
	var returned []*mysql.Result // RETURNING rows, per job
	var rows int                 // VALUES rows of an INSERT
	for _, j := range jobs {
		rows += len(j.rows)
	}
	for _, j := range jobs {
		start := time.Now()
		c, err := s.acquire(j.ds)
		if err == nil {
			if _, err = c.Exec("BEGIN"); err != nil {
				c.Release()
			}
		}
		if err != nil {
			s.e.observeRefused(j.shard, j.ds, true, start, err)
			rollback()
			return nil, err
		}
		opened = append(opened, open{c, j.shard})
		start = time.Now()
		r, err := j.run(c)
		s.e.observe(j.shard, c.Datasource(), true, start, err)
		if err != nil {
			rollback()
			return nil, err
		}
		total.AffectedRows += r.AffectedRows
		if total.InsertId == 0 {
			total.InsertId = r.InsertId
		}
		total.Warnings += r.Warnings
		info := r.StatusMessage
		if info == "" && len(j.rows) == 1 && rows > 1 {
			info = oneRowInsertInfo(r.AffectedRows, r.Warnings)
		}
		total.StatusMessage = addInfo(total.StatusMessage, info)
		if r.HasResultset() {
			returned = append(returned, r)
		}
	}
	var committed []string
	for i, o := range opened {
		if _, err := o.c.Exec("COMMIT"); err != nil {
			for _, rest := range opened[i:] {
				_, _ = rest.c.Exec("ROLLBACK")
				rest.c.Release()
			}
			if len(committed) == 0 {
				return nil, err
			}
			return nil, sqlerr.Errorf(sqlerr.BackendUnavailable, "COMMIT failed on shard %s after shards %s committed: %v", o.sh, strings.Join(committed, ","), classify(err))
		}
		committed = append(committed, o.sh.String())
		s.noteCommit(o.c, o.sh)
		o.c.Release()
	}
	if len(returned) > 0 {
		r := mergeReturned(jobs, returned)
		fixFields(r, s.db)
		return r, nil
	}
	return total, nil
}

// mergeReturned joins the RETURNING rows of a write split over shards into
// one result set. Rows of an INSERT come back in the statement's VALUES
// order, as from one server (ORMs assign returned ids by position); when a
// shard returned another number of rows than it was given (INSERT IGNORE
// skipping one), and for DELETE, they follow in shard order.
func mergeReturned(jobs []job, returned []*mysql.Result) *mysql.Result {
	out := &mysql.Result{Resultset: &mysql.Resultset{Fields: returned[0].Fields}}
	total, inOrder := 0, len(returned) == len(jobs)
	for i, r := range returned {
		total += len(r.RowDatas)
		inOrder = inOrder && jobs[i].rows != nil && len(jobs[i].rows) == len(r.RowDatas)
	}
	if !inOrder {
		for _, r := range returned {
			out.RowDatas = append(out.RowDatas, r.RowDatas...)
		}
		return out
	}
	out.RowDatas = make([]mysql.RowData, total)
	for i, r := range returned {
		for k, row := range r.RowDatas {
			out.RowDatas[jobs[i].rows[k]] = row
		}
	}
	return out
}

// autonomous runs one statement on its own pooled connection, outside any
// session transaction.
func (s *Session) autonomous(p part, write, binary bool) (*mysql.Result, error) {
	start := time.Now()
	c, err := s.acquire(p.ds)
	if err != nil {
		s.e.observeRefused(p.shard, p.ds, write, start, err)
		return nil, err
	}
	defer c.Release()
	if p.untimed {
		setTimeout(c, 0)
	}
	start = time.Now()
	r, err := s.exec(c, p, binary)
	if !p.untimed {
		// DDL and maintenance run for seconds by nature: counted, they
		// would fire the shard's write-P99 trigger (docs/design.md §7) on every
		// schema change.
		s.e.observe(p.shard, c.Datasource(), write, start, err)
	}
	return r, err
}

// parallelN runs fn(0..n-1) with at most limit running at once.
func (s *Session) parallelN(n, limit int, fn func(i int)) {
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func(i int) {
			defer func() { <-sem; wg.Done() }()
			fn(i)
		}(i)
	}
	wg.Wait()
}

// insert splits a (multi-row) INSERT / REPLACE by the shard of each row.
func (s *Session) insert(pl *plan, args []any, binary bool) (*mysql.Result, error) {
	a := pl.A
	if rewrite.NeedsSeq(a) {
		return s.insertWithSeq(pl, args, binary)
	}
	snap := s.e.routes.Current()
	rowsByTarget := map[router.Target][]int{}
	var order []router.Target
	shardOfTarget := map[router.Target]router.Shard{}
	var shards []router.Shard
	seenShard := map[router.Shard]bool{}
	for i, v := range a.InsertRows {
		k, err := keyOf(v, args)
		if err != nil {
			return nil, fmt.Errorf("row %d: %w", i+1, err)
		}
		sh := router.ShardOf(k)
		if !seenShard[sh] {
			seenShard[sh] = true
			shards = append(shards, sh)
		}
		t := snap.Target(sh)
		if _, ok := rowsByTarget[t]; !ok {
			order = append(order, t)
			shardOfTarget[t] = sh
		}
		rowsByTarget[t] = append(rowsByTarget[t], i)
	}
	if s.inTxn() && s.outboxOn() && !s.txn.aborted {
		if home, ok := s.outboxHome(shards[0]); ok && (len(shards) > 1 || int(shards[0]) != home) {
			return s.outboxInsert(pl, args, binary, home)
		}
	}
	if len(shards) > 1 && s.inTxn() {
		return nil, sqlerr.Errorf(sqlerr.CrossShardTxn, "this INSERT has rows for %d shards; inside a transaction all rows must belong to the transaction's shard (no distributed transactions): send such a batch outside a transaction (autocommit; GORM: SkipDefaultTransaction or CreateInBatches without a transaction), or one transaction per conversation / user", len(shards))
	}
	if len(order) == 1 {
		sh := shards[0]
		return s.single(s.partFor(pl, snap, sh, order[0].Datasource, args, binary), true, binary)
	}
	parts := make([]part, 0, len(order))
	for _, t := range order {
		p, err := s.rowsPart(a, snap, shardOfTarget[t], t.Datasource, rowsByTarget[t], args, binary)
		if err != nil {
			return nil, err
		}
		parts = append(parts, p)
	}
	return s.writeParts(parts, binary)
}

// rowsPart is the part of a multi-row INSERT / REPLACE that writes rows
// (VALUES indexes) on shard sh's physical tables: its bound arguments go
// with it when binary, a text statement's values are in its template.
func (s *Session) rowsPart(a *rewrite.Analysis, snap *router.Snapshot, sh router.Shard, ds string, rows []int, args []any, binary bool) (part, error) {
	tmpl, params, err := rewrite.SubsetInsert(a, rows)
	if err != nil {
		return part{}, err
	}
	var sub []any
	if binary {
		sub = make([]any, len(params))
		for i, p := range params {
			sub[i] = args[p]
		}
	}
	return part{shard: sh, ds: ds, sql: renderTemplate(s, tmpl, snap, sh), args: sub, rows: rows}, nil
}

// ddl fans a CREATE / ALTER / DROP / TRUNCATE on a logical table out to
// every physical table, with bounded parallelism. It can be re-run: with IF
// [NOT] EXISTS it converges, and every failed table is named in the error.
func (s *Session) ddl(pl *plan) (*mysql.Result, error) {
	if s.txn.explicit || s.txn.conn != nil {
		// MySQL commits an open transaction before DDL; so do we.
		if _, err := s.endTxn(true); err != nil {
			return nil, err
		}
	}
	snap := s.e.routes.Current()
	if _, ok := pl.A.Stmt.(*ast.CreateTableStmt); ok {
		var dbParts []part
		for _, d := range snap.Databases() {
			dbParts = append(dbParts, part{ds: d[0], sql: "CREATE DATABASE IF NOT EXISTS " + sqlq.Ident(d[1]), quiet: true})
		}
		if _, err := s.fanout(dbParts, "CREATE DATABASE"); err != nil {
			return nil, err
		}
	}
	groups := snap.AllPhysical(pl.A.Sharded[0])
	parts := make([]part, len(groups))
	for i, g := range groups {
		parts[i] = part{shard: g.Shards[0], ds: g.Datasource, sql: pl.render(s, snap, g.Shards[0])}
	}
	info, err := s.fanout(parts, "DDL")
	s.e.schemaChanged()
	for _, t := range pl.A.Sharded {
		if t == planbuilder.HistoryTable {
			s.e.invalidateAllHistory() // TRUNCATE / DROP / ALTER: cached pages may no longer hold
		}
	}
	if err != nil {
		return nil, err
	}
	r := okResult()
	r.StatusMessage = info // an ALTER's "Records: ..." over every table
	return r, nil
}

// fanout runs parts in parallel and returns their info texts summed.
func (s *Session) fanout(parts []part, what string) (string, error) {
	for i := range parts {
		parts[i].untimed = true
	}
	errs := make([]error, len(parts))
	infos := make([]string, len(parts))
	s.parallelN(len(parts), s.e.opt.DDLParallelism, func(i int) {
		var r *mysql.Result
		r, errs[i] = s.autonomous(parts[i], true, false)
		if r != nil {
			infos[i] = r.StatusMessage
		}
	})
	info := ""
	for _, in := range infos {
		info = addInfo(info, in)
	}
	var failed []string
	var first error
	for i, err := range errs {
		if err == nil {
			continue
		}
		if first == nil {
			first = classify(err)
		}
		if len(failed) < 5 {
			failed = append(failed, fmt.Sprintf("%s (%v)", targetName(parts[i]), err))
		}
	}
	n := 0
	for _, err := range errs {
		if err != nil {
			n++
		}
	}
	if n == 0 {
		return info, nil
	}
	msg := fmt.Sprintf("%s failed on %d of %d physical targets: %s", what, n, len(parts), strings.Join(failed, "; "))
	if me, ok := first.(*mysql.MyError); ok {
		return "", &mysql.MyError{Code: me.Code, State: me.State, Message: msg}
	}
	return "", sqlerr.Errorf(sqlerr.BackendUnavailable, "%s", msg)
}

func targetName(p part) string {
	sql := p.sql
	if len(sql) > 60 {
		sql = sql[:60] + "..."
	}
	return p.ds + ": " + sql
}

// passthrough sends a statement on unsharded tables (or none) to the default
// datasource, byte for byte as the client wrote it, unless it reads session
// values Convoy keeps itself (rewrite.SessionTemplate).
func (s *Session) passthrough(pl *plan, args []any, binary bool) (*mysql.Result, error) {
	pin := pinUnsharded
	if pl.Tableless() {
		pin = pinAny
	}
	def := s.e.routes.Current().DefaultDatasource()
	var c Conn
	release := func() {}
	var err error
	switch {
	case pl.NamedLock:
		pin = pinUnsharded
		c, err = s.lockConn(def)
		defer func() { s.afterLockError(err) }()
	case s.usesTempConn(pl) && !s.inTxn():
		pin = pinUnsharded
		c, err = s.tempConn(def)
	case s.usesTempConn(pl):
		// In a transaction: it runs on (or opens on) the temporary-table
		// connection (Session.conn), unless it already runs on another.
		if pl.Temp != nil && (pl.Temp.Creates() || pl.Temp.Execute) && s.txn.conn != nil && s.txn.conn != s.temp {
			return nil, sqlerr.Errorf(sqlerr.NotSupported, "CREATE TEMPORARY TABLE, PREPARE and EXECUTE inside a transaction that has already run a statement elsewhere are not supported through Convoy: run them before the transaction, or as its first statement")
		}
		if s.temp == nil {
			if _, err = s.tempConn(def); err != nil {
				return nil, err
			}
		}
		pin = pinUnsharded
		c, release, err = s.conn(pin, def)
	default:
		c, release, err = s.conn(pin, def)
	}
	if err != nil {
		return nil, err
	}
	defer release()
	// A statement without a table may run in a transaction pinned to a shard
	// on another datasource, where the session's database does not exist;
	// it needs none (DATABASE() is answered from the session).
	if pin != pinAny || c.Datasource() == def {
		if err := c.UseDB(s.db); err != nil {
			s.afterError(c, err)
			return nil, err
		}
	}
	sql := pl.SQL
	values := s.sessionValue
	if pl.SetsLastID {
		// The statement sets LAST_INSERT_ID and may read it back: the server
		// answers, from the session's value installed first.
		if _, err := c.Exec("SELECT LAST_INSERT_ID(" + strconv.FormatUint(s.lastID, 10) + ")"); err != nil {
			s.afterError(c, err)
			return nil, err
		}
		values = func(r rewrite.SessionRef) rewrite.SessionValue {
			if r == rewrite.RefLastInsertID {
				return rewrite.SessionValue{Keep: true}
			}
			return s.sessionValue(r)
		}
	}
	if pl.ProcessList {
		if sql, err = s.processListSQL(c, pl); err != nil {
			s.afterError(c, err)
			return nil, err
		}
	} else if pl.A.SessionRefs != 0 {
		t, err := rewrite.SessionTemplate(pl.A, values)
		if err != nil {
			return nil, classify(err)
		}
		sql = string(t.Render(nil, nil))
		if binary {
			args = t.Bind(args)
		}
	}
	var r *mysql.Result
	if binary {
		r, err = c.ExecPrepared(sql, args)
	} else {
		r, err = c.Exec(sql)
	}
	if err == nil {
		s.noteFoundRows(c)
		s.backendWarnings(c, r, -1, false)
	}
	if err == nil && pl.SetsLastID {
		err = s.readLastID(c)
	}
	s.afterError(c, err)
	if err == nil {
		s.noteTemp(pl)
		s.readBack(c, pl.Assigns)
	} else if c == s.temp && s.txn.conn != c && connLost(classify(err)) {
		s.dropTemps() // its temporary tables went with it
	}
	if err == nil && pl.A.Kind == rewrite.KindShow {
		s.showSession(pl.A, r, binary)
	}
	return r, err
}

// savepoint runs SAVEPOINT, ROLLBACK TO SAVEPOINT and RELEASE SAVEPOINT on
// the transaction's connection, whichever shard it is pinned to. Before the
// transaction has a connection (BEGIN; SAVEPOINT a; ...) nothing has been
// done that could be undone: the names are kept, checked as MariaDB checks
// them, and set on the connection right after its BEGIN. Outside a
// transaction any connection answers as MariaDB would (SAVEPOINT is
// accepted, ROLLBACK TO fails with 1305).
func (s *Session) savepoint(pl *plan) (*mysql.Result, error) {
	if c := s.txn.conn; c != nil {
		r, err := c.Exec(pl.SQL)
		s.afterError(c, err)
		if err == nil {
			s.outboxSavepoint(pl.A.Savepoint.Op, pl.A.Savepoint.Name)
		}
		return r, err
	}
	if !s.inTxn() || s.txn.aborted {
		c, release, err := s.conn(pinAny, s.e.routes.Current().DefaultDatasource())
		if err != nil {
			return nil, err
		}
		defer release()
		return c.Exec(pl.SQL)
	}
	sp := pl.A.Savepoint
	at := slices.IndexFunc(s.txn.savepoints, func(n string) bool { return strings.EqualFold(n, sp.Name) })
	if at < 0 && sp.Op != rewrite.SavepointSet {
		return nil, &mysql.MyError{Code: mysql.ER_SP_DOES_NOT_EXIST, State: "42000", Message: "SAVEPOINT " + sp.Name + " does not exist"}
	}
	switch sp.Op {
	case rewrite.SavepointSet:
		if at >= 0 {
			s.txn.savepoints = slices.Delete(s.txn.savepoints, at, at+1)
		}
		s.txn.savepoints = append(s.txn.savepoints, sp.Name)
	case rewrite.SavepointRollback:
		s.txn.savepoints = s.txn.savepoints[:at+1]
	case rewrite.SavepointRelease:
		s.txn.savepoints = s.txn.savepoints[:at]
	}
	return okResult(), nil
}

// begin opens a transaction; MySQL commits an open one first.
func (s *Session) begin(sql string) (*mysql.Result, error) {
	if s.txn.explicit || s.txn.conn != nil {
		if _, err := s.endTxn(true); err != nil {
			return nil, err
		}
	}
	s.txn = txnState{explicit: true, beginSQL: sql, vars: s.nextTx}
	s.nextTx = nil
	return okResult(), nil
}
