package migrate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"

	"github.com/convoy-im/convoy/internal/sqlq"
)

// ErrPrecheck wraps every reason prepare refuses a migration; the message
// says what to fix. A refused job waits for RESUME (after the fix) or
// ROLLBACK.
var ErrPrecheck = errors.New("migration refused")

// serverVars are the settings both sides of a migration are compared on.
type serverVars struct {
	version, charset, collation, sqlMode string
	logBin, format, image, metadata      string
	// expire is how long the server keeps binary logs (0: until purged by
	// hand): expire_logs_days, which MariaDB 10.6+ keeps in step with
	// binlog_expire_logs_seconds.
	expire time.Duration
}

func readServerVars(ctx context.Context, db *sql.DB) (serverVars, error) {
	var v serverVars
	var days float64
	// GLOBAL: what new connections (the proxy's, the applier's) get, not
	// this pooled session's own values.
	err := db.QueryRowContext(ctx, `SELECT @@version, @@GLOBAL.character_set_server, @@GLOBAL.collation_server, @@GLOBAL.sql_mode,
		@@log_bin, @@GLOBAL.binlog_format, @@GLOBAL.binlog_row_image, @@GLOBAL.binlog_row_metadata, @@GLOBAL.expire_logs_days`).
		Scan(&v.version, &v.charset, &v.collation, &v.sqlMode, &v.logBin, &v.format, &v.image, &v.metadata, &days)
	v.expire = time.Duration(days * float64(24*time.Hour)).Round(time.Second)
	return v, err
}

// minSourceRetention is the shortest binary log retention a source may
// have: the backfill's apply reads the source's binlog from the copy's
// start, and a shard copy at the seed's scale (5 M rows at 2000 rows/s)
// takes 42 minutes; a day leaves room for a paused or slow copy.
const minSourceRetention = 24 * time.Hour

// family is the server flavour and major.minor version ("MariaDB 10.11"):
// a replica of another family may store or compare values differently.
func (v serverVars) family() string {
	flavour := "MySQL"
	if strings.Contains(strings.ToLower(v.version), "mariadb") {
		flavour = "MariaDB"
	}
	parts := strings.SplitN(v.version, ".", 3)
	if len(parts) < 2 {
		return flavour + " " + v.version
	}
	return flavour + " " + parts[0] + "." + parts[1]
}

// binlogProblems lists what keeps the server's binlog from carrying whole,
// named rows (what package binlog needs to replay it).
func (v serverVars) binlogProblems() []string {
	var out []string
	if v.logBin != "1" && !strings.EqualFold(v.logBin, "ON") {
		out = append(out, "log_bin is OFF (start mariadbd with --log-bin)")
	}
	if !strings.EqualFold(v.format, "ROW") {
		out = append(out, "binlog_format is "+v.format+" (SET GLOBAL binlog_format=ROW)")
	}
	if !strings.EqualFold(v.image, "FULL") {
		out = append(out, "binlog_row_image is "+v.image+" (SET GLOBAL binlog_row_image=FULL)")
	}
	if !strings.EqualFold(v.metadata, "FULL") {
		out = append(out, "binlog_row_metadata is "+v.metadata+" (SET GLOBAL binlog_row_metadata=FULL)")
	}
	return out
}

// checkServers compares the source and the target server: same version
// family, character set, collation and sql_mode, and a binlog the applier
// can read on the source and, for the reverse replication of the rollback
// window, on the target. srcName and dstName name the datasources in the
// message.
func checkServers(ctx context.Context, src, dst *sql.DB, srcName, dstName string, rollbackWindow time.Duration) error {
	s, err := readServerVars(ctx, src)
	if err != nil {
		return fmt.Errorf("migrate: read the settings of source %s: %w", srcName, err)
	}
	d, err := readServerVars(ctx, dst)
	if err != nil {
		return fmt.Errorf("migrate: read the settings of target %s: %w", dstName, err)
	}
	var problems []string
	if s.family() != d.family() {
		problems = append(problems, fmt.Sprintf("target %s runs %s (%s), source %s runs %s: use the same server version",
			dstName, d.family(), d.version, srcName, s.family()))
	}
	if s.charset != d.charset || s.collation != d.collation {
		problems = append(problems, fmt.Sprintf("target %s has character_set_server=%s collation_server=%s, source %s has %s %s: configure the target alike",
			dstName, d.charset, d.collation, srcName, s.charset, s.collation))
	}
	if s.sqlMode != d.sqlMode {
		problems = append(problems, fmt.Sprintf("target %s has sql_mode=%q, source %s has %q: set the same sql_mode",
			dstName, d.sqlMode, srcName, s.sqlMode))
	}
	for _, p := range s.binlogProblems() {
		problems = append(problems, "source "+srcName+": "+p)
	}
	for _, p := range d.binlogProblems() {
		problems = append(problems, "target "+dstName+" (its binlog carries the rollback window's reverse replication): "+p)
	}
	if s.expire > 0 && s.expire < minSourceRetention {
		problems = append(problems, fmt.Sprintf("source %s keeps binary logs %s (expire_logs_days): the backfill's apply reads them from the copy's start; keep them at least %s (SET GLOBAL binlog_expire_logs_seconds = %d)",
			srcName, s.expire, minSourceRetention, int(minSourceRetention.Seconds())))
	}
	if d.expire > 0 && d.expire < rollbackWindow {
		problems = append(problems, fmt.Sprintf("target %s keeps binary logs %s (expire_logs_days), less than the rollback window %s: reverse replication resumes from them after an outage; keep them longer (SET GLOBAL binlog_expire_logs_seconds = %d) or shorten migration.rollback_window",
			dstName, d.expire, rollbackWindow, int(rollbackWindow.Seconds())))
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", ErrPrecheck, strings.Join(problems, "; "))
	}
	return nil
}

// prepareTable makes the target table of one move exist with the source's
// definition and hold no row of the shard; beforeCreate runs (the job
// records that the table is its own, so a rollback drops it) before it
// creates one. An existing table must have the source's shape (same
// columns, types, collations, primary key; checked by NewCopier later too).
func prepareTable(ctx context.Context, m TableMove, dstName string, beforeCreate func() error) error {
	var n int
	err := m.Target.DB.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
		m.Target.Database, m.Target.Table).Scan(&n)
	if err != nil {
		return fmt.Errorf("migrate: look for %s on %s: %w", m.Target, dstName, err)
	}
	if n == 0 {
		var name, ddl string
		err := m.Source.DB.QueryRowContext(ctx, "SHOW CREATE TABLE "+sqlq.Ident(m.Source.Database)+"."+sqlq.Ident(m.Source.Table)).Scan(&name, &ddl)
		if err != nil {
			return fmt.Errorf("migrate: read the definition of source table %s: %w", m.Source, err)
		}
		// SHOW CREATE TABLE names the table unqualified: qualify it with the
		// target's database and name.
		head := "CREATE TABLE " + sqlq.Ident(m.Source.Table)
		if !strings.HasPrefix(ddl, head) {
			return fmt.Errorf("migrate: [BUG] SHOW CREATE TABLE %s does not start with %s", m.Source, head)
		}
		ddl = "CREATE TABLE " + sqlq.Ident(m.Target.Database) + "." + sqlq.Ident(m.Target.Table) + ddl[len(head):]
		if err := beforeCreate(); err != nil {
			return err
		}
		if _, err := m.Target.DB.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS "+sqlq.Ident(m.Target.Database)); err != nil {
			return fmt.Errorf("migrate: create database %s on %s: %w", m.Target.Database, dstName, err)
		}
		// 1050: another job of a shared target table created it meanwhile
		// (shards moving together into one table); its shape is checked
		// below like any existing table's.
		if _, err := m.Target.DB.ExecContext(ctx, ddl); err != nil && mysqlErrno(err) != 1050 {
			return fmt.Errorf("migrate: create %s on %s: %w", m.Target, dstName, err)
		}
	}
	if _, _, err := loadPair(ctx, m.Source, m.Target, m.Filter); err != nil {
		return fmt.Errorf("%w: target table %s on %s does not match the source: %w; drop it (the migration creates it) or alter it to match",
			ErrPrecheck, m.Target, dstName, err)
	}
	var any int
	err = m.Target.DB.QueryRowContext(ctx, "SELECT COUNT(*) FROM (SELECT 1 FROM "+sqlq.Ident(m.Target.Database)+"."+sqlq.Ident(m.Target.Table)+
		" WHERE "+shardPredicate(m.Filter)+" LIMIT 1) x", uint64(m.Filter.Shard)).Scan(&any)
	if err != nil {
		return fmt.Errorf("migrate: check that %s on %s is empty: %w", m.Target, dstName, err)
	}
	if any > 0 {
		return fmt.Errorf("%w: target table %s on %s already holds rows of shard %d; empty it (DELETE FROM %s WHERE %s) or choose another DATABASE",
			ErrPrecheck, m.Target, dstName, m.Filter.Shard, m.Target, strings.ReplaceAll(shardPredicate(m.Filter), "?", fmt.Sprint(uint64(m.Filter.Shard))))
	}
	return nil
}

// mysqlErrno is the server's error number of err, 0 if it is not a server
// error.
func mysqlErrno(err error) uint16 {
	var me *mysqldrv.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

// shardPredicate is the SQL condition on a table's rows of the filter's
// shard, with the shard as its one parameter.
func shardPredicate(f *ShardFilter) string {
	return "CRC32(" + sqlq.Ident(f.Column) + ") % 1024 = ?"
}
