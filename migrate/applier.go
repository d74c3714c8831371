package migrate

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"

	"github.com/convoy-im/convoy/binlog"
	"github.com/convoy-im/convoy/router"
)

// CheckpointTable is the table, in a target database, where an Applier
// keeps its position: one row per (job, shard), written in the same target
// transaction as the rows of each source transaction it applies.
const CheckpointTable = "_convoy_migration_checkpoint"

const checkpointDDL = `CREATE TABLE IF NOT EXISTS %s (
  job         VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  shard       SMALLINT UNSIGNED NOT NULL,
  origin      VARCHAR(2048) CHARACTER SET ascii NOT NULL COMMENT 'GTID position the replay started from (P_min)',
  position    VARCHAR(2048) CHARACTER SET ascii NOT NULL COMMENT 'GTID position after the last source transaction applied',
  gtid        VARCHAR(64) CHARACTER SET ascii NOT NULL DEFAULT '' COMMENT 'that transaction',
  source_time DATETIME NULL COMMENT 'its commit time on the source (UTC)',
  applied_at  DATETIME(6) NOT NULL,
  PRIMARY KEY (job, shard)
) ENGINE=InnoDB COMMENT='Convoy shard migration: binlog apply checkpoints (migrate.Applier)'`

// Errors an Applier returns instead of going on.
var (
	// ErrCheckpointMoved: the checkpoint row is not where this applier left
	// it, so another applier of the same job and shard is applying (a
	// migrator that lost its lease and has not noticed). The transaction
	// that found it rolled back; this applier must stop.
	ErrCheckpointMoved = errors.New("migrate: the apply checkpoint moved under this applier")
	// ErrCheckpointOrigin: the checkpoint row records a replay from another
	// start position than the one Run was given: it belongs to an earlier
	// backfill of the same job and shard. Reset it (a fresh replay) or pass
	// its origin.
	ErrCheckpointOrigin = errors.New("migrate: the apply checkpoint belongs to a replay from another position")
)

const (
	// checkpointEvery bounds how long the checkpoint row may stay behind
	// source transactions that had nothing of the shard (other shards of a
	// shared table): writing a target transaction for each of them would
	// cost the target one commit per write of 127 other shards. Reading
	// them again after a restart applies nothing.
	checkpointEvery = time.Second
	// applyAttempts: a deadlock or a lock wait timeout on the target (a
	// dual-write or a segment repair holding the same rows) rolls back the
	// transaction; it is tried again this many times in all.
	applyAttempts = 5
)

// TableMove is one physical table of a shard migration: the rows of
// Filter's shard in Source belong in Target (Filter nil: every row).
type TableMove struct {
	Source, Target Side
	Filter         *ShardFilter
}

// ApplierConfig says what an Applier replays and where.
type ApplierConfig struct {
	// Job and Shard name the checkpoint row; Job is at most 64 bytes and
	// unique per migration (two appliers of one job and shard fence each
	// other off, see Run).
	Job   string
	Shard router.Shard
	// Tables all have their Source on one server and their Target on one
	// server. A Filter, if set, must be of Shard.
	Tables []TableMove
	// Binlog is the source's replication connection (Addr, User, Password,
	// a ServerID unique among the source's replicas and readers). Filter
	// is replaced by the Tables' sources.
	Binlog binlog.Config
	// CheckpointDatabase holds CheckpointTable on the target; "" means the
	// first table's target database.
	CheckpointDatabase string
}

// ApplierStats is an Applier's progress. Replication lag: 0 when CaughtUp,
// else time.Since(SourceTime) (whole seconds, the binlog's resolution).
type ApplierStats struct {
	// Position is after the last source transaction handled (applied, or
	// delivered with nothing of the shard); Saved is the checkpoint row's
	// position, at or before Position.
	Position, Saved binlog.Position
	// Txns counts the source transactions applied (each with at least one
	// change of the shard), Skipped the ones delivered with none.
	Txns, Skipped uint64
	// Upserts and Deletes count the row operations sent to the target.
	Upserts, Deletes uint64
	// SourceTime is the source commit time of the last transaction handled.
	SourceTime time.Time
	// Reader is the binlog reader's own state (connection, reconnects).
	Reader binlog.Stats
}

// Applier is the second half of step 3 (backfill): it follows the source's
// binlog and applies the changes of one shard's rows to the target, so that
// a target filled by the Copier becomes, and stays, equal to the source
// (the Copier's doc comment states the argument and what the caller must
// do first).
//
// Per source transaction (binlog.Txn, delivered only once committed, in
// commit order): the changes of the mapped tables whose row belongs to the
// shard are applied in ONE target transaction, which also moves the
// checkpoint row to Txn.Next. A row belongs to the shard if its shard key
// (the Filter's column, router.ShardOf of its value) names the shard: the
// After image's for inserts and updates, the Before image's for deletes;
// an update that changes the key (impossible through Convoy, handled
// anyway) is a delete when the row leaves the shard and an upsert when it
// enters it. The After image is upserted whole (INSERT ... ON DUPLICATE KEY
// UPDATE of every column); a delete removes the Before image's primary key;
// an update that changed the primary key removes the old key, then upserts
// the new row. Values are bound exactly as the binlog gives them, on a
// connection set up as the Copier's (utf8mb4, UTC, strict, binary protocol).
//
// Guarantees:
//   - Effectively once: a source transaction's rows and the checkpoint that
//     says it is applied commit together, and Run resumes from the
//     checkpoint row, so no restart applies a transaction twice and the
//     target never goes back to an older value of a row. (Replaying anyway
//     would be harmless for the end state: every operation is idempotent,
//     so a replay from any earlier position, in order, converges; only
//     while it runs could a reader of the target see older values.)
//   - In order: transactions are applied one at a time in source commit
//     order; a transaction is never split.
//   - Fenced: each target transaction first moves the checkpoint row from
//     the position this applier last wrote, under its row lock; a second
//     applier of the same job and shard that finds it moved gets
//     ErrCheckpointMoved and its transaction rolls back. Two appliers can
//     never interleave their writes.
//
// Transactions with nothing of the shard move the checkpoint at most once
// a second (checkpointEvery), in a transaction of its own.
type Applier struct {
	job          string
	shard        router.Shard
	srcDB, dstDB *sql.DB
	tables       map[tableName]*applyTable
	ckpt         string // the checkpoint table, qualified
	reader       *binlog.Reader

	mu    sync.Mutex
	stats ApplierStats
}

type tableName struct{ schema, table string }

// applyTable is one mapped table: src describes the source (the binlog's
// column names are the source's), dst the target in the same column order.
type applyTable struct {
	src, dst *table
	filter   *ShardFilter
	// cols and idx cache the column mapping of the last change seen: a
	// change's Columns are the table's as the binlog logged them, the same
	// until an ALTER TABLE.
	cols []string
	idx  []int // idx[i]: position in the change's row of src.Columns[i]
}

// NewApplier checks the configuration and every table pair (as the Copier
// does), creates CheckpointTable if needed, and returns an applier. Nothing
// streams until Run.
func NewApplier(ctx context.Context, cfg ApplierConfig) (*Applier, error) {
	if cfg.Job == "" || len(cfg.Job) > 64 {
		return nil, fmt.Errorf("migrate: applier job name %q: 1 to 64 bytes", cfg.Job)
	}
	if len(cfg.Tables) == 0 {
		return nil, errors.New("migrate: applier without tables")
	}
	a := &Applier{job: cfg.Job, shard: cfg.Shard, srcDB: cfg.Tables[0].Source.DB, dstDB: cfg.Tables[0].Target.DB,
		tables: map[tableName]*applyTable{}}
	for _, m := range cfg.Tables {
		if m.Source.DB != a.srcDB || m.Target.DB != a.dstDB {
			return nil, fmt.Errorf("migrate: %s -> %s: an applier's tables share one source and one target pool", m.Source, m.Target)
		}
		if m.Filter != nil && m.Filter.Shard != cfg.Shard {
			return nil, fmt.Errorf("migrate: %s filters shard %d, the applier applies shard %d", m.Source, m.Filter.Shard, cfg.Shard)
		}
		name := tableName{m.Source.Database, m.Source.Table}
		if a.tables[name] != nil {
			return nil, fmt.Errorf("migrate: %s is mapped twice", m.Source)
		}
		st, dt, err := loadPair(ctx, m.Source, m.Target, m.Filter)
		if err != nil {
			return nil, err
		}
		a.tables[name] = &applyTable{src: st, dst: dt, filter: m.Filter}
	}
	db := cfg.CheckpointDatabase
	if db == "" {
		db = cfg.Tables[0].Target.Database
	}
	a.ckpt = quoteIdent(db) + "." + quoteIdent(CheckpointTable)
	if _, err := a.dstDB.ExecContext(ctx, fmt.Sprintf(checkpointDDL, a.ckpt)); err != nil {
		return nil, fmt.Errorf("migrate: create %s: %w", a.ckpt, err)
	}

	bcfg := cfg.Binlog
	tables := a.tables // read only from here on: Filter runs on two goroutines
	bcfg.Filter = func(schema, table string) bool { return tables[tableName{schema, table}] != nil }
	r, err := binlog.NewReader(bcfg)
	if err != nil {
		return nil, err
	}
	a.reader = r
	return a, nil
}

// Stats returns the applier's progress.
func (a *Applier) Stats() ApplierStats {
	a.mu.Lock()
	s := a.stats
	a.mu.Unlock()
	s.Reader = a.reader.Stats()
	return s
}

// CaughtUp reports whether every source transaction committed before the
// call has been applied (or had nothing of the shard): the binlog reader's
// position, which moves only after a delivered transaction was applied,
// has reached the source's current one.
func (a *Applier) CaughtUp(ctx context.Context) (bool, error) {
	cur, err := binlog.CurrentPosition(ctx, a.srcDB)
	if err != nil {
		return false, err
	}
	return a.Reached(cur)
}

// Reached reports whether every source transaction up to pos (a fence's,
// or the source's current position) has been applied, or had nothing of
// the shard, by the running stream.
func (a *Applier) Reached(pos binlog.Position) (bool, error) {
	st := a.reader.Stats()
	if !st.Streaming {
		// Between a Reset (or a restart) and the Run's stream: the reader
		// still shows where the previous stream ended.
		return false, nil
	}
	return st.Position.Reached(pos)
}

// Reset makes the checkpoint row say "a replay from origin, nothing applied
// yet", whatever it said: the start of a fresh replay (the backfill does it
// when its copy is done, before it records that it applies). A Run in
// progress for the same job and shard then stops with ErrCheckpointMoved.
func (a *Applier) Reset(ctx context.Context, origin binlog.Position) error {
	origin, err := binlog.ParsePosition(string(origin))
	if err != nil {
		return err
	}
	_, err = a.dstDB.ExecContext(ctx, "INSERT INTO "+a.ckpt+
		" (job, shard, origin, position, gtid, source_time, applied_at) VALUES (?, ?, ?, ?, '', NULL, NOW(6))"+
		" ON DUPLICATE KEY UPDATE origin = VALUES(origin), position = VALUES(position), gtid = '', source_time = NULL, applied_at = NOW(6)",
		a.job, uint64(a.shard), string(origin), string(origin))
	if err != nil {
		return fmt.Errorf("migrate: reset %s: %w", a.ckpt, err)
	}
	a.mu.Lock()
	a.stats.Position, a.stats.Saved = origin, origin
	a.mu.Unlock()
	return nil
}

// applyRun is one Run's target connection and what it last wrote.
type applyRun struct {
	conn    *sql.Conn
	saved   binlog.Position
	savedAt time.Time
}

// Run replays the source's binlog onto the target until ctx ends or an
// error stops it: from the checkpoint row if it records a replay from
// origin, from origin itself if there is no row (it is created), and not at
// all (ErrCheckpointOrigin) if the row records another origin. A lost
// source connection is retried inside (binlog.Reader); a target error
// returns (the caller retries Run, which resumes from the row). One Run at
// a time.
func (a *Applier) Run(ctx context.Context, origin binlog.Position) error {
	origin, err := binlog.ParsePosition(string(origin))
	if err != nil {
		return err
	}
	conn, err := sessionConn(ctx, a.dstDB)
	if err != nil {
		return fmt.Errorf("migrate: applier target: %w", err)
	}
	defer discard(conn)
	from, err := a.resume(ctx, conn, origin)
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.stats.Position, a.stats.Saved = from, from
	a.mu.Unlock()
	run := &applyRun{conn: conn, saved: from, savedAt: time.Now()}
	return a.reader.Stream(ctx, from, func(t binlog.Txn) error { return a.handle(ctx, run, t) })
}

// resume reads (or creates) the checkpoint row and returns where to start.
func (a *Applier) resume(ctx context.Context, conn *sql.Conn, origin binlog.Position) (binlog.Position, error) {
	var o, p string
	err := conn.QueryRowContext(ctx, "SELECT origin, position FROM "+a.ckpt+" WHERE job = ? AND shard = ?",
		a.job, uint64(a.shard)).Scan(&o, &p)
	if errors.Is(err, sql.ErrNoRows) {
		// A plain INSERT: if another applier created the row meanwhile,
		// this one fails rather than share it.
		_, err = conn.ExecContext(ctx, "INSERT INTO "+a.ckpt+
			" (job, shard, origin, position, gtid, source_time, applied_at) VALUES (?, ?, ?, ?, '', NULL, NOW(6))",
			a.job, uint64(a.shard), string(origin), string(origin))
		var me *mysqldrv.MySQLError
		if errors.As(err, &me) && me.Number == 1062 { // ER_DUP_ENTRY
			return "", fmt.Errorf("%w: another applier of job %q shard %d created it in %s meanwhile", ErrCheckpointMoved, a.job, a.shard, a.ckpt)
		}
		if err != nil {
			return "", fmt.Errorf("migrate: create the checkpoint row in %s: %w", a.ckpt, err)
		}
		return origin, nil
	}
	if err != nil {
		return "", fmt.Errorf("migrate: read %s: %w", a.ckpt, err)
	}
	if o != string(origin) {
		return "", fmt.Errorf("%w: %s holds job %q shard %d from %q, Run was asked to replay from %q",
			ErrCheckpointOrigin, a.ckpt, a.job, a.shard, o, origin)
	}
	pos, err := binlog.ParsePosition(p)
	if err != nil {
		return "", fmt.Errorf("migrate: %s: %w", a.ckpt, err)
	}
	if ok, err := pos.Reached(origin); err != nil || !ok {
		return "", fmt.Errorf("migrate: %s: position %q is before its origin %q", a.ckpt, pos, origin)
	}
	return pos, nil
}

// handle applies one source transaction.
func (a *Applier) handle(ctx context.Context, run *applyRun, t binlog.Txn) error {
	ops, err := a.plan(t)
	if err != nil {
		return fmt.Errorf("migrate: source transaction %s: %w", t.GTID, err)
	}
	if len(ops) == 0 && time.Since(run.savedAt) < checkpointEvery {
		a.mu.Lock()
		a.stats.Position, a.stats.SourceTime = t.Next, t.Time
		a.stats.Skipped++
		a.mu.Unlock()
		return nil
	}
	var upserts, deletes int
	for _, op := range ops {
		upserts += len(op.rows)
		deletes += len(op.keys)
	}
	for attempt := 1; ; attempt++ {
		err = txn(ctx, run.conn, func(tx *sql.Tx) error {
			if err := a.advance(ctx, tx, run.saved, t); err != nil {
				return err
			}
			for _, op := range ops {
				var err error
				if op.rows != nil {
					err = upsert(ctx, tx, op.t, op.rows)
				} else {
					err = deleteKeys(ctx, tx, op.t, op.keys)
				}
				if err != nil {
					return err
				}
			}
			return nil
		})
		if err == nil || attempt == applyAttempts || !retryable(err) {
			break
		}
		if err := sleep(ctx, time.Duration(attempt)*50*time.Millisecond); err != nil {
			return err
		}
	}
	if err != nil {
		return fmt.Errorf("migrate: apply source transaction %s: %w", t.GTID, err)
	}
	run.saved, run.savedAt = t.Next, time.Now()
	a.mu.Lock()
	a.stats.Position, a.stats.Saved, a.stats.SourceTime = t.Next, t.Next, t.Time
	if len(ops) > 0 {
		a.stats.Txns++
	} else {
		a.stats.Skipped++
	}
	a.stats.Upserts += uint64(upserts)
	a.stats.Deletes += uint64(deletes)
	a.mu.Unlock()
	return nil
}

// advance moves the checkpoint row from prev to t.Next inside tx, first
// in tx so that its row lock serialises appliers of one job and shard.
func (a *Applier) advance(ctx context.Context, tx *sql.Tx, prev binlog.Position, t binlog.Txn) error {
	var srcTime any
	if !t.Time.IsZero() {
		srcTime = t.Time.UTC().Format(time.DateTime)
	}
	res, err := tx.ExecContext(ctx, "UPDATE "+a.ckpt+
		" SET position = ?, gtid = ?, source_time = ?, applied_at = NOW(6) WHERE job = ? AND shard = ? AND position = ?",
		string(t.Next), t.GTID, srcTime, a.job, uint64(a.shard), string(prev))
	if err != nil {
		return fmt.Errorf("migrate: move the checkpoint in %s: %w", a.ckpt, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("migrate: move the checkpoint in %s: %w", a.ckpt, err)
	}
	if n != 1 {
		return fmt.Errorf("%w: job %q shard %d in %s is no longer at %q (another applier, or a Reset, moved it)",
			ErrCheckpointMoved, a.job, a.shard, a.ckpt, prev)
	}
	return nil
}

// retryable: the target rolled the transaction back for a lock conflict.
func retryable(err error) bool {
	var me *mysqldrv.MySQLError
	return errors.As(err, &me) && (me.Number == 1213 || me.Number == 1205) // ER_LOCK_DEADLOCK, ER_LOCK_WAIT_TIMEOUT
}

// applyOp is a run of consecutive operations of one kind on one target
// table: upserts of rows (target column order) or deletes of keys. Merging
// consecutive operations keeps the source's order where it matters: a
// multi-row INSERT ... ON DUPLICATE KEY UPDATE handles its rows in order,
// and deletes of a set of keys commute.
type applyOp struct {
	t    *table
	rows [][]any
	keys []Key
}

// plan turns a source transaction into the target operations of the
// shard, in order. It reads no server.
func (a *Applier) plan(t binlog.Txn) ([]applyOp, error) {
	var ops []applyOp
	add := func(dst *table, row []any, key Key) {
		if n := len(ops); n > 0 && ops[n-1].t == dst && (ops[n-1].rows != nil) == (row != nil) {
			if row != nil {
				ops[n-1].rows = append(ops[n-1].rows, row)
			} else {
				ops[n-1].keys = append(ops[n-1].keys, key)
			}
			return
		}
		if row != nil {
			ops = append(ops, applyOp{t: dst, rows: [][]any{row}})
		} else {
			ops = append(ops, applyOp{t: dst, keys: []Key{key}})
		}
	}
	for i := range t.Changes {
		c := &t.Changes[i]
		at := a.tables[tableName{c.Schema, c.Table}]
		if at == nil {
			continue // the reader's filter lets only mapped tables through
		}
		before, after, err := at.images(c)
		if err != nil {
			return nil, err
		}
		inBefore, err := at.owns(before)
		if err != nil {
			return nil, err
		}
		inAfter, err := at.owns(after)
		if err != nil {
			return nil, err
		}
		if inBefore {
			oldKey, err := at.src.keyOf(before)
			if err != nil {
				return nil, err
			}
			gone := !inAfter
			if !gone {
				newKey, err := at.src.keyOf(after)
				if err != nil {
					return nil, err
				}
				gone = !sameKey(oldKey, newKey)
			}
			if gone {
				add(at.dst, nil, oldKey)
			}
		}
		if inAfter {
			add(at.dst, after, nil)
		}
	}
	return ops, nil
}

// images returns a change's Before and After rows in the table's column
// order (nil where the change has none).
func (at *applyTable) images(c *binlog.Change) (before, after []any, err error) {
	idx, err := at.mapping(c.Columns)
	if err != nil {
		return nil, nil, err
	}
	pick := func(img []any) []any {
		if img == nil {
			return nil
		}
		row := make([]any, len(idx))
		for i, j := range idx {
			row[i] = img[j]
		}
		return row
	}
	if c.Kind != binlog.Insert && c.Before == nil || c.Kind != binlog.Delete && c.After == nil {
		return nil, nil, fmt.Errorf("binlog %s on %s.%s without its row image", c.Kind, c.Schema, c.Table)
	}
	return pick(c.Before), pick(c.After), nil
}

// mapping finds each stored column of the table in a change's column list.
// A column the table lacks, or a stored column the change lacks, means the
// source's schema changed during the migration: refused, since applying a
// partial or shifted row would corrupt the target. Generated columns are
// skipped: the target computes them.
func (at *applyTable) mapping(cols []string) ([]int, error) {
	if at.idx != nil && slices.Equal(cols, at.cols) {
		return at.idx, nil
	}
	idx := make([]int, len(at.src.Columns))
	for i := range idx {
		idx[i] = -1
	}
	for j, name := range cols {
		i := at.src.indexOf(name)
		if i < 0 {
			if slices.ContainsFunc(at.src.generated, func(g string) bool { return strings.EqualFold(g, name) }) {
				continue
			}
			return nil, fmt.Errorf("%w: the binlog logs column %s of %s.%s, which the migration does not know (ALTER TABLE during the migration?)",
				ErrSchemaMismatch, name, at.src.Database, at.src.Name)
		}
		idx[i] = j
	}
	for i, j := range idx {
		if j < 0 {
			return nil, fmt.Errorf("%w: the binlog logs %s.%s without column %s (ALTER TABLE during the migration?)",
				ErrSchemaMismatch, at.src.Database, at.src.Name, at.src.Columns[i].Name)
		}
	}
	at.cols, at.idx = cols, idx
	return idx, nil
}

// owns reports whether a row (table column order; nil: no row) is of the
// shard: router.ShardOf of its shard key, what the copier's CRC32 filter
// computes in SQL. A NULL key belongs to no shard (CRC32(NULL) matches
// nothing either); a key no shard can own (negative) is an error.
func (at *applyTable) owns(row []any) (bool, error) {
	if row == nil {
		return false, nil
	}
	if at.filter == nil {
		return true, nil
	}
	v := row[at.src.filterCol]
	if v == nil {
		return false, nil
	}
	k, err := router.KeyFromValue(v)
	if err != nil {
		return false, fmt.Errorf("%s.%s.%s: %w", at.src.Database, at.src.Name, at.filter.Column, err)
	}
	return router.ShardOf(k) == at.filter.Shard, nil
}

func sameKey(a, b Key) bool {
	return slices.EqualFunc(a, b, bytes.Equal)
}
