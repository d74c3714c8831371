package migrate

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// Read-only old tables (step 7, cleanup). Once a job is done its reverse
// replication has stopped: the source's rows of the shard are a stale copy
// that nothing keeps current. Convoy no longer routes there, but a script,
// a forgotten client or a tool connected to the server directly still
// could write them, and that write would be lost without a trace (or, for
// a later migration back, resurrect an old row). So the job marks them:
// a row per (table, shard) in ReadOnlyTable of the source database, and
// triggers on the table that refuse inserts, updates and deletes of a
// marked shard's rows with MariaDB's "Table '%s' is read only" (1036),
// naming where the shard went. The other shards of a shared table write as
// before (each of their row writes costs the trigger's primary-key lookup
// of the small mark table: the price of a small layout).
//
// PURGE removes the rows (its session sets @convoy_purge, which the
// triggers let pass), then the mark, then the triggers once no mark of the
// table is left. The triggers are a guard against mistakes, not a
// privilege: an account that can set a user variable can get past them,
// and DROP TRIGGER undoes them.
//
// The triggers fire only for statements run on the source itself: rows
// replicated from it in ROW format are applied without them (MariaDB's
// slave_run_triggers_for_rbr is off by default).

// ReadOnlyTable is the mark table in the source database.
const ReadOnlyTable = "_convoy_readonly"

// purgeVar is the session variable purge sets to get past the triggers.
const purgeVar = "@convoy_purge"

// readOnlyTriggers are the triggers of one table: name suffix, event and
// the row image whose shard key decides (an update checks both: a row may
// neither leave nor enter a marked shard).
var readOnlyTriggers = []struct{ suffix, event, rows string }{
	{"bi", "INSERT", "NEW"},
	{"bu", "UPDATE", "OLD NEW"},
	{"bd", "DELETE", "OLD"},
}

// triggerName is a table's read-only trigger for suffix (MariaDB names are
// at most 64 characters; physical table names are far shorter).
func triggerName(table, suffix string) string {
	return "_convoy_ro_" + table + "_" + suffix
}

// markReadOnly makes the shard's rows of the source's table read-only
// (idempotent). movedTo names the shard's new place for the error message.
func markReadOnly(ctx context.Context, s Side, f *ShardFilter, job, movedTo string) error {
	marks := quoteIdent(s.Database) + "." + quoteIdent(ReadOnlyTable)
	if _, err := s.DB.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+marks+` (
  tbl      VARBINARY(64)  NOT NULL,
  shard    SMALLINT UNSIGNED NOT NULL,
  job      VARBINARY(64)  NOT NULL,
  moved_to VARCHAR(200)   NOT NULL,
  marked_at DATETIME(6)   NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  PRIMARY KEY (tbl, shard)
) COMMENT 'Convoy: shards whose rows in this database were migrated away (read-only, see the _convoy_ro_ triggers)'`); err != nil {
		return fmt.Errorf("migrate: create %s: %w", marks, err)
	}
	if _, err := s.DB.ExecContext(ctx, "INSERT INTO "+marks+" (tbl, shard, job, moved_to) VALUES (?, ?, ?, ?)"+
		" ON DUPLICATE KEY UPDATE job = VALUES(job), moved_to = VALUES(moved_to)", s.Table, uint64(f.Shard), job, movedTo); err != nil {
		return fmt.Errorf("migrate: mark shard %d of %s read-only: %w", f.Shard, s, err)
	}
	table := quoteIdent(s.Database) + "." + quoteIdent(s.Table)
	for _, tr := range readOnlyTriggers {
		var checks []string
		for _, img := range strings.Fields(tr.rows) {
			checks = append(checks, fmt.Sprintf("(SELECT moved_to FROM %s WHERE tbl = %s AND shard = CRC32(%s.%s) %% 1024)",
				marks, quoteLiteral(s.Table), img, quoteIdent(f.Column)))
		}
		// COALESCE of scalar subqueries: NULL (no mark) raises nothing and,
		// unlike SELECT ... INTO, no "no data" warning for every write of
		// the table's other shards.
		body := fmt.Sprintf(`BEGIN
  DECLARE dest VARCHAR(200);
  IF %s IS NULL THEN
    SET dest = COALESCE(%s);
    IF dest IS NOT NULL THEN
      SET dest = CONCAT('Table ''%s'' is read only for this shard: Convoy migrated it to ', dest, '; write through Convoy');
      SIGNAL SQLSTATE 'HY000' SET MESSAGE_TEXT = dest, MYSQL_ERRNO = 1036;
    END IF;
  END IF;
END`, purgeVar, strings.Join(checks, ", "), strings.ReplaceAll(s.String(), "'", "''"))
		ddl := fmt.Sprintf("CREATE TRIGGER IF NOT EXISTS %s.%s BEFORE %s ON %s FOR EACH ROW %s",
			quoteIdent(s.Database), quoteIdent(triggerName(s.Table, tr.suffix)), tr.event, table, body)
		if _, err := s.DB.ExecContext(ctx, ddl); err != nil {
			return fmt.Errorf("migrate: create the read-only trigger %s on %s (the migration account needs the TRIGGER privilege): %w",
				triggerName(s.Table, tr.suffix), s, err)
		}
	}
	return nil
}

// unmarkReadOnly removes the shard's mark of the table, and the table's
// triggers once it has no mark left (a missing mark table or table is
// fine: nothing was marked, or the purge dropped the table).
func unmarkReadOnly(ctx context.Context, s Side, f *ShardFilter) error {
	marks := quoteIdent(s.Database) + "." + quoteIdent(ReadOnlyTable)
	if _, err := s.DB.ExecContext(ctx, "DELETE FROM "+marks+" WHERE tbl = ? AND shard = ?", s.Table, uint64(f.Shard)); err != nil {
		if mysqlErrno(err) == 1146 {
			return nil
		}
		return fmt.Errorf("migrate: unmark shard %d of %s: %w", f.Shard, s, err)
	}
	var left int
	if err := s.DB.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+marks+" WHERE tbl = ?", s.Table).Scan(&left); err != nil {
		return fmt.Errorf("migrate: read %s: %w", marks, err)
	}
	if left > 0 {
		return nil
	}
	for _, tr := range readOnlyTriggers {
		if _, err := s.DB.ExecContext(ctx, "DROP TRIGGER IF EXISTS "+quoteIdent(s.Database)+"."+quoteIdent(triggerName(s.Table, tr.suffix))); err != nil {
			return fmt.Errorf("migrate: drop the read-only trigger on %s: %w", s, err)
		}
	}
	return nil
}

// quoteLiteral quotes s as an SQL string literal (physical table names:
// no backslashes, which NO_BACKSLASH_ESCAPES would read differently).
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// purgeConn is a connection of db on which the read-only triggers let the
// purge's deletes pass.
func purgeConn(ctx context.Context, db *sql.DB) (*sql.Conn, error) {
	c, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := c.ExecContext(ctx, "SET "+purgeVar+" = 1"); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}
