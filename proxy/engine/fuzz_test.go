package engine

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/convoy-im/convoy/proxy/sqlerr"
)

// FuzzQuery feeds arbitrary SQL to a Session over the recording fake, as
// COM_QUERY, as PREPARE + EXECUTE and, for an admin, as the statement of
// the targeting directives (RunTargeted: shard=3, all, datasource=ds1): no
// panic, and every error is an *sqlerr.Error or a *mysql.MyError (the
// proxy maps nothing else). The directives themselves are proxy/admin's.
func FuzzQuery(f *testing.F) {
	for _, s := range []string{
		"SELECT 1",
		"SELECT * FROM conv_msg WHERE conv_id = 42",
		"SELECT * FROM conv_msg WHERE conv_id = ? AND seq < ? ORDER BY seq DESC LIMIT 20",
		"SELECT * FROM conv_msg WHERE conv_id IN (1, 2, 3, 18446744073709551615)",
		"SELECT COUNT(*), MAX(seq) FROM conv_msg",
		"SELECT MAX(seq) - MIN(seq), COUNT(*) > 0, AVG(seq) * 2 FROM conv_msg",
		"SELECT conv_id, CONCAT(conv_id, ':', COUNT(DISTINCT msg_type)) FROM conv_msg GROUP BY conv_id ORDER BY conv_id",
		"SELECT ROW_NUMBER() OVER () + COUNT(*) FROM conv_msg", "SELECT COUNT(*) > ? FROM conv_msg",
		"SELECT seq FROM conv_msg WHERE conv_id = 1 LOCK IN SHARE MODE WAIT 3",
		"SELECT seq FROM conv_msg WHERE conv_id = 1 ORDER BY seq OFFSET 1 ROWS FETCH NEXT 2 ROWS ONLY",
		"SELECT seq FROM conv_msg WHERE conv_id = 1 ORDER BY seq FETCH FIRST 2 ROWS WITH TIES",
		"DELETE FROM conv_msg WHERE conv_id = 1 AND seq < 10 AND sender_uid = 3",
		"SELECT msg_type, sender_uid, COUNT(*) FROM conv_msg GROUP BY msg_type DESC, sender_uid WITH ROLLUP",
		"SELECT msg_type, COUNT(*) FROM conv_msg GROUP BY msg_type WITH ROLLUP ORDER BY msg_type",
		"SELECT conv_id, COUNT(*) FROM conv_msg GROUP BY conv_id ORDER BY conv_id LIMIT 3",
		"INSERT INTO conv_msg (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES (1, 1, 1, 1, 1, NOW()), (2, 1, 2, 1, 1, NOW())",
		"INSERT INTO im_conv_seq (conv_id, max_seq) VALUES (?, 1) ON DUPLICATE KEY UPDATE max_seq = max_seq + 1",
		"REPLACE INTO im_inbox SET uid = 1, conv_id = 2, seq = 3, msg_id = 4, send_time = NOW()",
		"UPDATE conv_msg SET msg_type = 2 WHERE conv_id = 1 AND seq = 1",
		"UPDATE conv_msg SET conv_id = 5 WHERE conv_id = 4",
		"DELETE FROM im_inbox WHERE uid IN (1, 2) AND conv_id = 3",
		"BEGIN", "COMMIT", "ROLLBACK", "START TRANSACTION READ ONLY", "SET autocommit = 0",
		"SET NAMES utf8mb4", "SET NAMES gbk", "SET sql_mode = 'NO_BACKSLASH_ESCAPES'", "SET @@session.time_zone = '+00:00'",
		"SET GLOBAL max_connections = 1", "USE im", "SHOW TABLES", "SHOW CREATE TABLE conv_msg",
		"CREATE TABLE IF NOT EXISTS conv_msg (conv_id BIGINT UNSIGNED)", "DROP TABLE IF EXISTS im_inbox", "TRUNCATE TABLE msg_content",
		"SELECT LAST_INSERT_ID()", "SELECT 1; SELECT 2", "", "/* only */", "-- x\n", "#",
		"SELECT seq FROM conv_msg WHERE conv_id = 42 /*! AND seq = 2 */",
		"SELECT seq FROM conv_msg WHERE conv_id = 42 /*M! AND seq = 2 */",
		"SELECT /*+ MAX_EXECUTION_TIME(1) */ 1",
		"SELECT seq FROM conv_msg WHERE conv_id = 1 LOCK IN SHARE MODE NOWAIT",
		"INSERT INTO im_conv_seq (conv_id, max_seq) VALUES (1, 1) ON DUPLICATE KEY UPDATE max_seq = VALUE(max_seq)",
		"SET STATEMENT max_statement_time = 1 FOR SELECT seq FROM conv_msg WHERE conv_id = 1",
		"SHOW WARNINGS LIMIT 1, 2", "KILL QUERY 1", "SHOW FULL PROCESSLIST", "SHOW GRANTS FOR x",
		"ANALYZE TABLE conv_msg", "OPTIMIZE TABLE im_inbox",
		"SELECT EXISTS (SELECT * FROM conv_msg WHERE conv_id = 1 AND seq = 2)",
		"SELECT seq FROM conv_msg WHERE conv_id = 1 UNION ALL SELECT seq FROM conv_msg WHERE conv_id = 2",
		"SELECT SQL_CALC_FOUND_ROWS * FROM conv_msg WHERE conv_id IN (1, 2) LIMIT 1", "SELECT FOUND_ROWS(), ROW_COUNT()",
		"SELECT `a``b` FROM `conv``msg` WHERE conv_id = 0x2A",
		"SELECT * FROM conv_msg WHERE conv_id = NULL",
		"SELECT * FROM conv_msg WHERE conv_id = -1",
		"SELECT * FROM conv_msg WHERE conv_id = '123'",
		"SELECT * FROM conv_msg WHERE conv_id = 1e3",
		"SELECT * FROM conv_msg m JOIN msg_content c ON c.msg_id = m.msg_id WHERE m.conv_id = 1",
		"SELECT * FROM conv_msg WHERE msg_id IN (SELECT msg_id FROM msg_content)",
		"SELECT * FROM conv_msg WHERE conv_id = 1 UNION SELECT * FROM conv_msg WHERE conv_id = 2",
		" DELETE FROM conv_msg", " SELECT COUNT(*) FROM conv_msg c JOIN im_inbox i ON i.conv_id = c.conv_id",
		" ALTER TABLE conv_msg ADD COLUMN x INT", "SHOW ENGINE INNODB STATUS",
		"LOAD DATA LOCAL INFILE '/etc/passwd' INTO TABLE conv_msg",
		"SELECT * FROM conv_msg WHERE conv_id = 1 FOR UPDATE",
		"WITH x AS (SELECT * FROM conv_msg WHERE conv_id = 1) SELECT * FROM x",
		"SELECT * FROM conv_msg WHERE conv_id = ? OR conv_id = ?",
		"INSERT INTO conv_msg SELECT * FROM conv_msg WHERE conv_id = 1",
		"SELECT conv_id, COUNT(DISTINCT sender_uid, ?), SUM(DISTINCT 1) FROM conv_msg GROUP BY conv_id HAVING COUNT(DISTINCT seq) > 1 ORDER BY AVG(DISTINCT seq)",
		"SELECT * FROM conv_msg WHERE msg_type = ? ORDER BY seq LIMIT ? OFFSET ?",
		"SELECT conv_id, COUNT(*) FROM conv_msg WHERE conv_id IN (?, ?) GROUP BY conv_id LIMIT ?, ?",
	} {
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, sql string, admin bool) {
		rec := &recorder{cols: 1, quiet: true}
		sess := New(rowsBackends{rec}, staticRoutes{defaultSnapshot()}, nil, nil, Options{}).NewSession("im")
		sess.SetPrivileges(Privileges{Read: true, Write: true, DDL: true, Admin: admin})
		defer sess.Close()
		check := func(what string, err error) {
			if err == nil {
				return
			}
			var ee *sqlerr.Error
			var me *mysql.MyError
			if !errors.As(err, &ee) && !errors.As(err, &me) {
				t.Fatalf("%s %q: error %T (%v) is neither *sqlerr.Error nor *mysql.MyError", what, sql, err, err)
			}
			// "[BUG]" internal errors are not failures here: the fake's
			// one-column result sets do not carry the merge columns a
			// real shard returns.
		}
		_, err := sess.Query(sql)
		check("Query", err)
		if admin {
			for _, tg := range []struct {
				shard int
				ds    string
			}{{3, ""}, {-1, ""}, {-1, "ds1"}} {
				_, err := sess.RunTargeted(tg.shard, tg.ds, sql)
				check("RunTargeted", classify(err)) // as Answer hands it on
			}
		}
		p, err := sess.Prepare(sql)
		check("Prepare", err)
		if err != nil || p == nil {
			return
		}
		for _, args := range [][]any{
			fill(p.Params, func(i int) any { return int64(i + 1) }),
			fill(p.Params, func(i int) any { return nil }),
			fill(p.Params, func(i int) any { return []byte("x'\\") }),
			fill(p.Params, func(i int) any { return uint64(18446744073709551615) }),
			fill(p.Params+1, func(i int) any { return int64(1) }),
		} {
			_, err := sess.Execute(p, args)
			check("Execute", err)
		}
	})
}

// rowsBackends wraps the recording fake so that statements which return rows
// on a real server (SELECT, SHOW, ...) return a one-column, one-row result
// set, as MariaDB would, instead of an OK packet.
type rowsBackends struct{ r *recorder }

func (b rowsBackends) Acquire(ctx context.Context, ds string, foundRows bool) (Conn, error) {
	c, err := b.r.Acquire(ctx, ds, foundRows)
	if err != nil {
		return nil, err
	}
	return rowsConn{c}, nil
}

type rowsConn struct{ Conn }

func returnsRows(sql string) bool {
	s := strings.ToUpper(strings.TrimLeft(sql, " \t\r\n("))
	for _, p := range []string{"SELECT", "SHOW", "WITH", "DESC", "EXPLAIN", "VALUES", "TABLE"} {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

func rowsResult(sql string, binary bool) (*mysql.Result, error) {
	rs, err := mysql.BuildSimpleResultset([]string{"c"}, [][]any{{int64(1)}}, binary)
	if err != nil {
		return nil, err
	}
	return &mysql.Result{Resultset: rs}, nil
}

func (c rowsConn) Exec(sql string) (*mysql.Result, error) {
	r, err := c.Conn.Exec(sql)
	if err == nil && returnsRows(sql) {
		return rowsResult(sql, false)
	}
	return r, err
}

func (c rowsConn) ExecPrepared(sql string, args []any) (*mysql.Result, error) {
	r, err := c.Conn.ExecPrepared(sql, args)
	if err == nil && returnsRows(sql) {
		return rowsResult(sql, true)
	}
	return r, err
}

func fill(n int, v func(i int) any) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = v(i)
	}
	return out
}
