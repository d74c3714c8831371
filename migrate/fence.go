package migrate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/convoy-im/convoy/binlog"
	"github.com/convoy-im/convoy/internal/sqlq"
	"github.com/convoy-im/convoy/router"
)

// The storage fence (docs/design.md §5, "Fail closed"). The
// migration lock stops every live proxy's writes of a switching shard, but
// a proxy can be alive and not know it: paused past its lease (a long GC
// pause, SIGSTOP), cut off from etcd, or holding a write the server is
// still running after the proxy gave up on it. Such a write must not commit
// on the side that stopped being authoritative: the forward stream stops at
// the switch, so it would be acknowledged and lost. So each side refuses,
// in MariaDB itself, the writes of a shard it is not authoritative for:
//
//   - FenceTable, in every database a migration reads or writes, has one
//     row per logical shard (all 1024, so a lookup never lands in a gap);
//     fenced = 1 means "this database is not where the shard lives".
//   - Triggers on each of the shard's physical tables (BEFORE INSERT,
//     UPDATE and DELETE, installed by prepare, outside any lock) read the
//     row's shard's fence row with a shared lock. fenced = 1 raises
//     MariaDB's "Table ... is read only" (1036) naming where the shard
//     went; else the shared lock is kept to the end of the writer's
//     transaction.
//   - The switch sets the old side's row under the migration lock, and
//     that update is also the fence marker the stream must pass (switch.go).
//     The update waits for every transaction that wrote the shard there and
//     is still open (they hold the shared lock): those commit before the
//     marker, so the stream applies them, or they are rolled back. Every
//     later write of the shard there reads fenced = 1 and fails. Nothing of
//     the shard can commit on the old side after the marker, whoever sends
//     it. A transaction that keeps the update waiting is, by then, one no
//     live proxy answers for (they all hold the shard and acknowledged it):
//     it is killed (fenceBlockers), so a paused proxy cannot stall a switch.
//
// The migration's own sessions (copy, apply both ways, mirror, repair,
// rollback and purge deletes) set migrationVar, which the triggers let
// pass; Convoy refuses that variable from clients (engine). The fence
// guards against stale proxies and mistakes, not a hostile account: a
// session that can set a user variable or drop a trigger gets past it.
//
// A side stays fenced after the job (the old side is read-only for the
// shard: step 7 of docs/design.md §5), and its triggers stay with the
// table: each row write of a table that took part in a migration pays one
// primary-key lookup of the small fence table (BENCHMARKS.md "Storage
// fence"). Rows replicated in ROW format skip triggers (MariaDB's
// slave_run_triggers_for_rbr is off by default), so replicas are unaffected.

// FenceTable is the fence table in every database a migration touches.
const FenceTable = "_convoy_shard_fence"

// migrationVar is the session variable the migration's own sessions set:
// the fence triggers let their writes pass.
const migrationVar = "@convoy_migration"

const fenceDDL = `CREATE TABLE IF NOT EXISTS %s (
  shard      SMALLINT UNSIGNED NOT NULL,
  fenced     TINYINT NOT NULL DEFAULT 0 COMMENT '1: this database is not authoritative for the shard; its writes are refused',
  job        VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '',
  moved_to   VARCHAR(200) NOT NULL DEFAULT '' COMMENT 'where the shard lives, for the error message',
  token      BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'bumped by every change: a fence marker is always a row event',
  changed_at DATETIME(6) NULL,
  PRIMARY KEY (shard)
) ENGINE=InnoDB COMMENT='Convoy shard migration: the storage fence (see the _convoy_fence_ triggers)'`

// fenceTriggers are the triggers of one table: name suffix, event, and the
// row images whose shard decides (an update checks both: a row may neither
// leave nor enter a fenced shard).
var fenceTriggers = []struct{ suffix, event, rows string }{
	{"bi", "INSERT", "NEW"},
	{"bu", "UPDATE", "OLD NEW"},
	{"bd", "DELETE", "OLD"},
}

// fenceTriggerName is a table's fence trigger for suffix (trigger names
// are unique per database; MariaDB allows 64 characters and physical table
// names are far shorter).
func fenceTriggerName(table, suffix string) string { return "_convoy_fence_" + table + "_" + suffix }

// ensureFenceTable creates the database's fence table with a row per shard.
func ensureFenceTable(ctx context.Context, db *sql.DB, database string) error {
	name := sqlq.Ident(database) + "." + sqlq.Ident(FenceTable)
	if _, err := db.ExecContext(ctx, fmt.Sprintf(fenceDDL, name)); err != nil {
		return fmt.Errorf("migrate: create %s: %w", name, err)
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+name).Scan(&n); err != nil {
		return fmt.Errorf("migrate: read %s: %w", name, err)
	}
	if n == router.NumShards {
		return nil
	}
	var b strings.Builder
	b.WriteString("INSERT IGNORE INTO " + name + " (shard) VALUES ")
	for sh := range router.NumShards {
		if sh > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "(%d)", sh)
	}
	if _, err := db.ExecContext(ctx, b.String()); err != nil {
		return fmt.Errorf("migrate: fill %s: %w", name, err)
	}
	return nil
}

// installFence puts the fence triggers on the side's table (idempotent).
// CREATE TRIGGER waits for the table's metadata lock, which every open
// transaction on the table holds, and makes the table's new statements
// queue behind it meanwhile: the wait is bounded to a second, and the
// caller (prepare) retries later.
func installFence(ctx context.Context, s Side, f *ShardFilter) error {
	// Already there (an earlier job of the table): no metadata lock to wait
	// for at all.
	args := []any{s.Database, s.Table}
	for _, tr := range fenceTriggers {
		args = append(args, fenceTriggerName(s.Table, tr.suffix))
	}
	var have int
	if err := s.DB.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = ? AND EVENT_OBJECT_TABLE = ? AND TRIGGER_NAME IN (?, ?, ?)",
		args...).Scan(&have); err != nil {
		return fmt.Errorf("migrate: look for the fence triggers of %s: %w", s, err)
	}
	if have == len(fenceTriggers) {
		return nil
	}
	conn, err := s.DB.Conn(ctx)
	if err != nil {
		return err
	}
	defer discard(conn) // its lock_wait_timeout must not go back to the pool
	if _, err := conn.ExecContext(ctx, "SET SESSION lock_wait_timeout = 1"); err != nil {
		return err
	}
	fence := sqlq.Ident(s.Database) + "." + sqlq.Ident(FenceTable)
	table := sqlq.Ident(s.Database) + "." + sqlq.Ident(s.Table)
	for _, tr := range fenceTriggers {
		var checks []string
		for _, img := range strings.Fields(tr.rows) {
			checks = append(checks, fmt.Sprintf(`  SELECT fenced, moved_to INTO f, dest FROM %s WHERE shard = CRC32(%s.%s) %% 1024 LOCK IN SHARE MODE;
  IF f = 1 THEN
    SET dest = CONCAT('Table ''%s'' is read only for shard ', CRC32(%s.%s) %% 1024, ': Convoy moved it to ', dest, '; write through Convoy');
    SIGNAL SQLSTATE 'HY000' SET MESSAGE_TEXT = dest, MYSQL_ERRNO = 1036;
  END IF;`, fence, img, sqlq.Ident(f.Column), strings.ReplaceAll(s.String(), "'", "''"), img, sqlq.Ident(f.Column)))
		}
		body := fmt.Sprintf("BEGIN\n DECLARE f TINYINT;\n DECLARE dest VARCHAR(300);\n IF %s IS NULL THEN\n%s\n END IF;\nEND",
			migrationVar, strings.Join(checks, "\n"))
		ddl := fmt.Sprintf("CREATE TRIGGER IF NOT EXISTS %s.%s BEFORE %s ON %s FOR EACH ROW %s",
			sqlq.Ident(s.Database), sqlq.Ident(fenceTriggerName(s.Table, tr.suffix)), tr.event, table, body)
		if _, err := conn.ExecContext(ctx, ddl); err != nil {
			return fmt.Errorf("migrate: create the fence trigger %s on %s (the migration account needs the TRIGGER privilege, and SUPER or log_bin_trust_function_creators with the binlog on): %w",
				fenceTriggerName(s.Table, tr.suffix), s, err)
		}
	}
	return nil
}

// fenceChange is one update of a shard's fence row.
type fenceChange struct {
	database string
	shard    router.Shard
	fenced   bool
	job      string
	movedTo  string // where the shard lives when fenced
}

// fenceBlockerGrace is how long setFence lets the transactions that keep
// its update waiting end by themselves before it kills them: the hold
// fails its own transactions asynchronously, and their ROLLBACKs take
// about a millisecond.
const fenceBlockerGrace = 100 * time.Millisecond

// setFence changes a shard's fence row on db and returns the GTID of that
// transaction (a fence marker). The update waits for the transactions
// that wrote the shard there and are still open; those still open after
// fenceBlockerGrace are killed (see the file comment). log may be nil.
func setFence(ctx context.Context, db *sql.DB, c fenceChange, log *zap.Logger) (binlog.Position, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	var thread uint64
	if err := conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&thread); err != nil {
		return "", err
	}
	fenced := 0
	if c.fenced {
		fenced = 1
	}
	done := make(chan struct{})
	killed := make(chan []uint64, 1)
	go func() {
		killed <- killFenceBlockers(ctx, db, thread, done)
	}()
	_, err = conn.ExecContext(ctx, "UPDATE "+sqlq.Ident(c.database)+"."+sqlq.Ident(FenceTable)+
		" SET fenced = ?, job = ?, moved_to = ?, token = token + 1, changed_at = NOW(6) WHERE shard = ?",
		fenced, c.job, c.movedTo, uint64(c.shard))
	close(done)
	if ids := <-killed; len(ids) > 0 && log != nil {
		log.Warn("killed the transactions that held the shard's writes open on a side the switch fences (no live proxy answers for them: a paused or cut-off proxy, or a direct client)",
			zap.String("database", c.database), zap.Int("shard", int(c.shard)), zap.Uint64s("threads", ids))
	}
	if err != nil {
		return "", fmt.Errorf("migrate: set the fence of shard %d in %s to %d: %w", c.shard, c.database, fenced, err)
	}
	var gtid string
	if err := conn.QueryRowContext(ctx, "SELECT @@last_gtid").Scan(&gtid); err != nil || gtid == "" {
		return "", fmt.Errorf("migrate: the GTID of the fence update in %s: %q, %v", c.database, gtid, err)
	}
	return binlog.ParsePosition(gtid)
}

// killFenceBlockers waits fenceBlockerGrace, then until done, and kills
// the connections whose transactions keep thread's lock request waiting
// (InnoDB's lock waits). It returns the thread ids it killed.
func killFenceBlockers(ctx context.Context, db *sql.DB, thread uint64, done <-chan struct{}) []uint64 {
	var ids []uint64
	t := time.NewTimer(fenceBlockerGrace)
	defer t.Stop()
	for {
		select {
		case <-done:
			return ids
		case <-ctx.Done():
			return ids
		case <-t.C:
		}
		rows, err := db.QueryContext(ctx, `SELECT DISTINCT b.trx_mysql_thread_id
FROM information_schema.INNODB_LOCK_WAITS w
JOIN information_schema.INNODB_TRX r ON r.trx_id = w.requesting_trx_id
JOIN information_schema.INNODB_TRX b ON b.trx_id = w.blocking_trx_id
WHERE r.trx_mysql_thread_id = ?`, thread)
		var blockers []uint64
		if err == nil {
			for rows.Next() {
				var id uint64
				if rows.Scan(&id) == nil {
					blockers = append(blockers, id)
				}
			}
			rows.Close()
		}
		for _, id := range blockers {
			// KILL CONNECTION: an idle transaction has no query to stop;
			// only ending its session rolls it back.
			if _, err := db.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", id)); err == nil || mysqlErrno(err) == 1094 {
				ids = append(ids, id)
			}
		}
		t.Reset(20 * time.Millisecond)
	}
}

// fenceState reads a shard's fence row on db (false when the table or the
// row is missing: nothing was fenced there).
func fenceState(ctx context.Context, db *sql.DB, database string, shard router.Shard) (bool, error) {
	var f int
	err := db.QueryRowContext(ctx, "SELECT fenced FROM "+sqlq.Ident(database)+"."+sqlq.Ident(FenceTable)+" WHERE shard = ?", uint64(shard)).Scan(&f)
	if errors.Is(err, sql.ErrNoRows) || mysqlErrno(err) == 1146 {
		return false, nil
	}
	return f == 1, err
}

// purgeConn is a connection of db whose writes the fence triggers let
// pass (the rollback's and the purge's deletes).
func purgeConn(ctx context.Context, db *sql.DB) (*sql.Conn, error) {
	c, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := c.ExecContext(ctx, "SET "+migrationVar+" = 1"); err != nil {
		discard(c)
		return nil, err
	}
	return c, nil
}
