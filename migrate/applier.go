package migrate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"

	"github.com/convoy-im/convoy/binlog"
	"github.com/convoy-im/convoy/internal/sqlq"
	"github.com/convoy-im/convoy/migrate/internal/physical"
	"github.com/convoy-im/convoy/router"
)

// CheckpointTable is the table, in a target database, where an Applier
// keeps its position: one row per (job, shard), written in the same target
// transaction as the rows of each source transaction it applies (named in
// package physical: the proxies' dual-write reads it).
const CheckpointTable = physical.CheckpointTable

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
	// shared table) while they keep coming: writing a target transaction
	// for each of them would cost the target one commit per write of 127
	// other shards. Reading them again after a restart applies nothing;
	// a dual-write that waits for a position (inproxy's applywait.go)
	// reaches it within this much, or checkpointIdle once the source goes
	// quiet.
	checkpointEvery = 100 * time.Millisecond
	checkpointIdle  = 20 * time.Millisecond // saveIdle
	// applyAttempts: a deadlock or a lock wait timeout on the target (a
	// dual-write or a segment repair holding the same rows) rolls back the
	// transaction; it is tried again this many times in all.
	applyAttempts = 5
	// applyBatchTxns and applyBatchChanges bound how many source
	// transactions already received one target transaction applies when
	// the apply is behind (one at a time it managed ~830 single-row
	// transactions/s here, less than a busy shard writes).
	applyBatchTxns    = 256
	applyBatchChanges = 4096
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
	// a ServerID unique among the source's replicas and readers), to the
	// server of the Tables' Source pool: the apply reads rows there in
	// snapshots compared with this stream's binlog offsets. Filter is
	// replaced by the Tables' sources.
	Binlog binlog.Config
	// CheckpointDatabase holds CheckpointTable on the target; "" means the
	// first table's target database.
	CheckpointDatabase string
}

// ApplierStats is an Applier's progress.
type ApplierStats struct {
	// Position is after the last source transaction handled (applied, or
	// delivered with nothing of the shard); Saved is the checkpoint row's
	// position, at or before Position.
	Position, Saved binlog.Position
	// Txns counts the source transactions applied (each with at least one
	// change of the shard), Skipped the ones delivered with none.
	Txns, Skipped uint64
	// Applying is the number of source transactions in the batch under
	// way (0 between batches): a batch stuck on a target lock shows here.
	Applying int
	// Upserts and Deletes count the row operations sent to the target.
	Upserts, Deletes uint64
	// SourceTime is the source commit time of the last transaction handled
	// (whole seconds, the binlog's resolution).
	SourceTime time.Time
	// Lag is the replication lag measured by the CaughtUp checks (lagMeter:
	// exact to their period), -1 before anything is known.
	Lag time.Duration
	// Reader is the binlog reader's own state (connection, reconnects).
	Reader binlog.Stats
}

// Applier is the second half of step 3 (backfill): it follows the source's
// binlog and applies the changes of one shard's rows to the target, so that
// a target filled by the Copier becomes, and stays, equal to the source
// (the Copier's doc comment states the argument and what the caller must
// do first).
//
// The binlog says which rows changed; what the apply writes is the
// source's current row of each, never the binlog's image of it. The
// mirror (dual-write) writes a row's newest value to the target as soon
// as the source has committed it; an apply that wrote the images of
// source transactions it handles later would bring back older values
// (an edited or recalled message reverting on the new side, which reads
// on the read ramp would see). So the apply follows the protocol of every
// live writer of the target (resync.go): lock the keys' target rows, read
// the source's rows of those keys, write them, in one target transaction.
//
// While it is the target's only writer (SetSoleWriter: a ready job, whose
// dual-write waits for the apply and whose compensation replay writes
// nothing), the apply writes the binlog's images instead: applied in the
// source's commit order by the only writer, they can only move a row
// forward, and a batch costs a third of the round trips (no row locks, no
// source snapshot, no re-read), which is what a write on the read ramp
// waits for.
//
// Per batch of source transactions (binlog.Txn, delivered in commit order;
// the ones already received, up to applyBatchTxns): the primary keys of
// the rows of the shard the batch changed, per mapped table, are synced in
// ONE target transaction, which also moves the checkpoint row to the last
// transaction's Next. A row is of the shard if its shard key (the Filter's
// column, router.ShardOf of its value) names the shard, in the change's
// Before or After image: a row moved to another shard (impossible through
// Convoy, handled anyway), or deleted, has its key named and its target
// row deleted, as the source no longer has it in the shard. The source is
// read in a consistent snapshot that shows the whole batch
// (binlog.SnapshotCovering: the binlog streams a transaction before the
// source's engine has committed it), on a connection set up as the
// Copier's (utf8mb4, UTC, strict, binary protocol), a few queries a table
// (keysPerStatement keys each).
//
// Guarantees:
//   - Never older: every write of a row of the target (this apply's, the
//     mirror's, a repair's) holds the row's lock from its read of the
//     source until it commits, so a write never replaces a value with an
//     older one, whichever writer is late (resync.go states the argument).
//   - Complete: the checkpoint moves past a batch only in the transaction
//     that wrote its keys' rows as the source had them after the batch, or
//     later. Reached and CaughtUp (positions the checkpoint passed) hence
//     mean every source change before the position is on the target, or a
//     later value of its row.
//   - Restartable: Run resumes from the checkpoint row. Replaying from an
//     earlier position (a Reset) writes current rows again: it converges on
//     the source and, unlike a replay of images, never shows an older
//     value while it runs.
//   - Fenced: each target transaction first moves the checkpoint row from
//     the position this applier last wrote, under its row lock; a second
//     applier of the same job and shard that finds it moved gets
//     ErrCheckpointMoved and its transaction rolls back. Two appliers can
//     never interleave their writes.
//
// The target shows each row at a state the source had, in the source's
// order; it does not show rows of different keys at one source commit
// (neither did it with the mirror writing beside an image apply).
//
// Transactions with nothing of the shard move the checkpoint at most every
// checkpointEvery while they keep coming, or checkpointIdle after the
// last, in a transaction of its own.
type Applier struct {
	job          string
	shard        router.Shard
	srcDB, dstDB *sql.DB
	tables       map[tableName]*applyTable
	ckpt         string // the checkpoint table, qualified
	reader       *binlog.Reader

	mu    sync.Mutex
	stats ApplierStats
	// pending are the GTIDs of the transactions the reader handed over and
	// the target has not applied yet, oldest first (Reached).
	pending []string

	lag lagMeter // fed by CaughtUp

	// sole: the apply is the target's only writer (SetSoleWriter). It
	// changes only between batches: batch is held while one is applied.
	sole  atomic.Bool
	batch chan struct{}
}

// SetSoleWriter says whether the apply is the only writer of the target's
// rows from its next batch on: it then writes the binlog's row images
// rather than the source's current rows under the target's row locks.
// Only a caller that knows no repair, replay or mirror writes the target
// may turn it on (the job: step ready).
//
// Turning it on waits for the batch being applied (or ctx): an earlier
// batch wrote rows as the source had them when it read them, possibly
// past its own end, and an image of a change between the two would bring
// such a row back for a moment. Once this returns, every such read is
// done, so a position read afterwards is past all of them, and an apply
// that has reached it has healed any such row (the read ramp's
// confirmation waits for exactly that: confirmRamp).
func (a *Applier) SetSoleWriter(ctx context.Context, on bool) error {
	if !on || a.sole.Load() {
		a.sole.Store(on)
		return nil
	}
	select {
	case a.batch <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	a.sole.Store(true)
	<-a.batch
	return nil
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
	a := &Applier{job: cfg.Job, shard: cfg.Shard, srcDB: cfg.Tables[0].Source.DB, dstDB: cfg.Tables[0].Target.DB, batch: make(chan struct{}, 1),
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
	a.ckpt = sqlq.Ident(db) + "." + sqlq.Ident(CheckpointTable)
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
	s.Lag = a.lag.lag(time.Now(), s.SourceTime)
	return s
}

// caughtUpWait bounds how long CaughtUp waits for source transactions the
// stream has already handed over. Under a steady stream of writes the
// apply is busy with a batch at almost every instant even when it keeps
// up (a batch reads the source under the target's locks: a dozen round
// trips), so a check that did not wait for the batch under way would
// almost never find it caught up.
const caughtUpWait = 250 * time.Millisecond

// CaughtUp reports whether every source transaction committed before the
// call has been applied (or had nothing of the shard): the applied
// position has reached the source's current one, waiting up to
// caughtUpWait when the stream has received them all and only their apply
// is under way. Each call is also a sample of the lag (Stats().Lag).
func (a *Applier) CaughtUp(ctx context.Context) (bool, error) {
	// The moment before the position is read: everything the source
	// committed before it is at or before the position.
	at := time.Now()
	cur, err := binlog.CurrentPosition(ctx, a.srcDB)
	if err != nil {
		return false, err
	}
	ok, err := a.Reached(cur)
	if err != nil {
		return false, err
	}
	if st := a.reader.Stats(); !ok && st.Streaming {
		if received, err := st.Position.Reached(cur); err == nil && received {
			wctx, cancel := context.WithTimeout(ctx, caughtUpWait)
			ok = waitReached(wctx, cur, a.Reached) == nil
			cancel()
		}
	}
	a.lag.observe(at, cur, ok, a.Reached)
	return ok, nil
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
	if ok, err := st.Position.Reached(pos); err != nil || !ok {
		return false, err
	}
	// The reader has read past pos (transactions with nothing mapped,
	// such as a fence marker's, are never handed over); what it handed
	// over up to pos must be applied too. It registered each one before
	// its position moved past it, so the oldest one still pending decides.
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.pending) == 0 {
		return true, nil
	}
	within, err := pos.Reached(binlog.Position(a.pending[0]))
	return !within, err
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

// applyRun is one Run's connections and what it last wrote.
type applyRun struct {
	conn    *sql.Conn     // the target: the checkpoint and the rows
	dst     *preparedConn // conn's statements, prepared once
	src     *sql.Conn     // the source: its rows read under conn's locks
	saved   binlog.Position
	savedAt time.Time
	// skipped is the last transaction with nothing of the shard that the
	// checkpoint row has not passed yet (nil: none).
	skipped *binlog.Txn
}

// Run replays the source's binlog onto the target until ctx ends or an
// error stops it: from the checkpoint row if it records a replay from
// origin, from origin itself if there is no row (it is created), and not at
// all (ErrCheckpointOrigin) if the row records another origin. A lost
// binlog connection is retried inside (binlog.Reader); an error of the
// target or of the source's rows returns (the caller retries Run, which
// resumes from the row). One Run at a time.
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
	// Whatever the target's default: the gap locks of REPEATABLE READ are
	// what keep the apply's inserts in order (resync.go, sourceRead.follows).
	if _, err := conn.ExecContext(ctx, "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ"); err != nil {
		return fmt.Errorf("migrate: applier target: %w", err)
	}
	sconn, err := sessionConn(ctx, a.srcDB)
	if err != nil {
		return fmt.Errorf("migrate: applier source: %w", err)
	}
	defer discard(sconn)
	from, err := a.resume(ctx, conn, origin)
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.stats.Position, a.stats.Saved = from, from
	a.mu.Unlock()
	run := &applyRun{conn: conn, dst: newPreparedConn(conn), src: sconn, saved: from, savedAt: time.Now()}
	defer run.dst.close()
	// The reader receives while the target applies: what arrives meanwhile
	// is the next batch. Either side's error ends both.
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	q := make(chan binlog.Txn, applyBatchTxns)
	applied := make(chan error, 1)
	go func() {
		err := a.applyLoop(sctx, run, q)
		stop()
		applied <- err
	}()
	a.mu.Lock()
	a.pending = a.pending[:0]
	a.mu.Unlock()
	err = a.reader.Stream(sctx, from, func(t binlog.Txn) error {
		a.mu.Lock()
		a.pending = append(a.pending, t.GTID)
		a.mu.Unlock()
		select {
		case q <- t:
			return nil
		case <-sctx.Done():
			return sctx.Err()
		}
	})
	stop()
	if aerr := <-applied; aerr != nil {
		return aerr
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// applyLoop applies what the reader queued, in batches, until ctx ends
// (nil) or a batch fails.
func (a *Applier) applyLoop(ctx context.Context, run *applyRun, q <-chan binlog.Txn) error {
	batch := make([]binlog.Txn, 0, applyBatchTxns)
	idle := time.NewTimer(checkpointIdle)
	defer idle.Stop()
	for {
		idle.Reset(checkpointIdle)
		select {
		case t := <-q:
			batch = append(batch[:0], t)
		case <-idle.C:
			if err := a.saveIdle(ctx, run); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			continue
		case <-ctx.Done():
			return nil
		}
		changes := len(batch[0].Changes)
	fill:
		for len(batch) < applyBatchTxns && changes < applyBatchChanges {
			select {
			case t := <-q:
				batch = append(batch, t)
				changes += len(t.Changes)
			default:
				break fill
			}
		}
		a.batch <- struct{}{}
		err := a.handle(ctx, run, batch)
		<-a.batch
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
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

// handle applies a batch of source transactions in one target
// transaction: the source's current rows of the keys the batch changed,
// read under the target's row locks in a snapshot that shows the whole
// batch (resync.go), and the checkpoint row moved past the batch.
func (a *Applier) handle(ctx context.Context, run *applyRun, batch []binlog.Txn) error {
	a.mu.Lock()
	a.stats.Applying = len(batch)
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		a.stats.Applying = 0
		a.mu.Unlock()
	}()
	last := batch[len(batch)-1]
	sole := a.sole.Load()
	var p keyPlan
	var img imagePlan
	withOps := 0
	for _, t := range batch {
		var n int
		var err error
		if sole {
			n, err = a.planImages(&img, t)
		} else {
			n, err = a.plan(&p, t)
		}
		if err != nil {
			return fmt.Errorf("migrate: source transaction %s: %w", t.GTID, err)
		}
		if n > 0 {
			withOps++
		}
	}
	items := p.items()
	if len(items) == 0 && len(img.tables) == 0 && time.Since(run.savedAt) < checkpointEvery {
		run.skipped = &last
		a.mu.Lock()
		a.stats.Position, a.stats.SourceTime = last.Next, last.Time
		a.stats.Skipped += uint64(len(batch))
		a.donePending(len(batch))
		a.mu.Unlock()
		return nil
	}
	if len(items) > 0 && last.End.File == "" {
		return fmt.Errorf("[BUG] migrate: source transaction %s without its binlog end", last.GTID)
	}
	var n syncCounts
	var err error
	for attempt := 1; ; attempt++ {
		err = run.dst.txn(ctx, func(tx queryer) error {
			if err := a.advance(ctx, tx, run.saved, last); err != nil {
				return err
			}
			if sole {
				var err error
				n, err = img.write(ctx, tx)
				return err
			}
			if len(items) == 0 {
				return nil
			}
			// The source shows the batch once its snapshot reaches the
			// last transaction's end: every earlier one is before it.
			var err error
			n, err = syncKeys(ctx, tx, sourceRead{conn: run.src, covers: &last.End, follows: true}, items)
			return err
		})
		if err == nil || attempt == applyAttempts || !retryable(err) {
			break
		}
		if err := sleep(ctx, time.Duration(attempt)*50*time.Millisecond); err != nil {
			return err
		}
	}
	if err != nil && len(batch) > 1 && ctx.Err() == nil && !errors.Is(err, ErrCheckpointMoved) {
		// One transaction's rows the target refuses fail the batch: apply
		// them one by one, so that the ones before it are applied and the
		// error names it.
		for i := range batch {
			if err := a.handle(ctx, run, batch[i:i+1]); err != nil {
				return err
			}
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("migrate: apply source transaction %s: %w", last.GTID, err)
	}
	run.saved, run.savedAt, run.skipped = last.Next, time.Now(), nil
	a.mu.Lock()
	a.stats.Position, a.stats.Saved, a.stats.SourceTime = last.Next, last.Next, last.Time
	a.stats.Txns += uint64(withOps)
	a.stats.Skipped += uint64(len(batch) - withOps)
	a.stats.Upserts += uint64(n.upserts)
	a.stats.Deletes += uint64(n.deletes)
	a.donePending(len(batch))
	a.mu.Unlock()
	return nil
}

// saveIdle moves the checkpoint row to where the binlog reader is, once
// nothing has arrived for checkpointIdle and every transaction it handed
// over is applied: past the transactions with nothing of the shard (run.
// skipped) and those the reader filtered out (other tables: never handed
// over), so that a position the apply has passed shows on the target soon
// (a waiting dual-write, a replay's confirmation), not only with the
// shard's next write. A move by filtered transactions alone is written at
// most every checkpointEvery.
//
// Why the reader's position is safe: the reader notes a transaction as
// pending before it hands it over and moves its position after, so with
// nothing pending after the position was read, every transaction up to it
// is applied or has nothing of the shard.
func (a *Applier) saveIdle(ctx context.Context, run *applyRun) error {
	at := a.reader.Stats().Position
	a.mu.Lock()
	busy := len(a.pending) > 0
	a.mu.Unlock()
	if busy || at == "" || at == run.saved || run.skipped == nil && time.Since(run.savedAt) < checkpointEvery {
		return nil
	}
	if ok, err := at.Reached(run.saved); err != nil || !ok {
		return err // a reader restarted behind the row: the row stays
	}
	t := binlog.Txn{Next: at}
	if run.skipped != nil {
		t.GTID, t.Time = run.skipped.GTID, run.skipped.Time
	}
	if err := run.dst.txn(ctx, func(tx queryer) error { return a.advance(ctx, tx, run.saved, t) }); err != nil {
		return fmt.Errorf("migrate: move the checkpoint to %s: %w", at, err)
	}
	run.saved, run.savedAt, run.skipped = at, time.Now(), nil
	a.mu.Lock()
	a.stats.Saved = at
	a.mu.Unlock()
	return nil
}

// donePending drops the n oldest pending transactions, applied; a.mu held.
func (a *Applier) donePending(n int) {
	n = min(n, len(a.pending))
	a.pending = a.pending[:copy(a.pending, a.pending[n:])]
}

// advance moves the checkpoint row from prev to t.Next inside tx, first
// in tx so that its row lock serialises appliers of one job and shard.
func (a *Applier) advance(ctx context.Context, tx queryer, prev binlog.Position, t binlog.Txn) error {
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

// keyPlan is the primary keys a batch's source transactions changed, of
// rows of the shard before or after the change, per table in the order the
// tables first appear. The apply writes each key's current source row, so
// the order of the changes within the batch no longer matters: the keys
// are a set.
type keyPlan struct {
	tables []*applyTable
	keys   map[*applyTable][]Key
}

func (p *keyPlan) add(at *applyTable, k Key) {
	if p.keys == nil {
		p.keys = map[*applyTable][]Key{}
	}
	if _, seen := p.keys[at]; !seen {
		p.tables = append(p.tables, at)
	}
	p.keys[at] = append(p.keys[at], k)
}

// items is the plan as syncKeys takes it: each table's keys distinct, the
// target's rows of the table's shard only.
func (p *keyPlan) items() []keySync {
	out := make([]keySync, 0, len(p.tables))
	for _, at := range p.tables {
		out = append(out, keySync{src: at.src, dst: at.dst, filter: at.filter, keys: distinctKeys(p.keys[at])})
	}
	return out
}

// plan adds the keys of a source transaction's changes of the shard to p
// and returns how many changes were of the shard. It reads no server.
//
// A change is of the shard when its Before or its After image is (a delete
// has no After, an insert no Before): an update that moves a row out of
// the shard (impossible through Convoy, handled anyway) names a key whose
// target row must go, one that moves a row in names a key whose row must
// come; an update of the primary key names both keys. A change of rows of
// other shards only (a shared table) names nothing.
func (a *Applier) plan(p *keyPlan, t binlog.Txn) (int, error) {
	return a.eachOfShard(t, func(at *applyTable, k Key, _ []any) { p.add(at, k) })
}

// eachOfShard calls fn, in order, for each image of t's changes that is a
// row of the shard: the Before image's key with a nil row, then the After
// image's key with the row. It returns how many changes were of the shard.
func (a *Applier) eachOfShard(t binlog.Txn, fn func(at *applyTable, k Key, after []any)) (int, error) {
	n := 0
	for i := range t.Changes {
		c := &t.Changes[i]
		at := a.tables[tableName{c.Schema, c.Table}]
		if at == nil {
			continue // the reader's filter lets only mapped tables through
		}
		before, after, err := at.images(c)
		if err != nil {
			return n, err
		}
		of := false
		for j, img := range [][]any{before, after} {
			ok, err := at.owns(img)
			if err != nil {
				return n, err
			}
			if !ok {
				continue
			}
			k, err := at.src.keyOf(img)
			if err != nil {
				return n, err
			}
			var row []any
			if j == 1 {
				row = after
			}
			fn(at, k, row)
			of = true
		}
		if of {
			n++
		}
	}
	return n, nil
}

// imagePlan is what a batch's source transactions leave of the shard's
// rows, per table in the order the tables first appear: each key's last
// image (nil: deleted).
type imagePlan struct {
	tables []*applyTable
	rows   map[*applyTable]map[string]imageRow
}

type imageRow struct {
	key Key
	row []any // source column order; nil: deleted
}

func (p *imagePlan) set(at *applyTable, k Key, row []any) {
	if p.rows == nil {
		p.rows = map[*applyTable]map[string]imageRow{}
	}
	m := p.rows[at]
	if m == nil {
		m = map[string]imageRow{}
		p.rows[at] = m
		p.tables = append(p.tables, at)
	}
	m[k.String()] = imageRow{key: k, row: row}
}

// planImages is plan for the sole writer: a change of the shard deletes
// its Before key and writes its After image, in order, so the batch's
// last word on each key is kept.
func (a *Applier) planImages(p *imagePlan, t binlog.Txn) (int, error) {
	// The Before key is deleted unless an After image of it follows.
	return a.eachOfShard(t, p.set)
}

// write applies the plan in tx: each table's deleted keys first (a row
// that is gone cannot then block an upsert through a secondary unique
// key), then its rows.
func (p *imagePlan) write(ctx context.Context, tx queryer) (syncCounts, error) {
	var n syncCounts
	for _, at := range p.tables {
		var gone []Key
		var rows [][]any
		for _, r := range p.rows[at] {
			if r.row == nil {
				gone = append(gone, r.key)
			} else {
				rows = append(rows, r.row)
			}
		}
		if err := deleteKeys(ctx, tx, at.dst, distinctKeys(gone)); err != nil {
			return n, err
		}
		if err := upsert(ctx, tx, at.dst, rows); err != nil {
			return n, err
		}
		n.add(syncCounts{upserts: len(rows), deletes: len(gone)})
	}
	return n, nil
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
		i := at.src.IndexOf(name)
		if i < 0 {
			if slices.ContainsFunc(at.src.Generated, func(g string) bool { return strings.EqualFold(g, name) }) {
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
