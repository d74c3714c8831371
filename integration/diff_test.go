package integration

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
)

// A differential case runs the same statement against the reference MariaDB
// (all rows in plain tables) and through Convoy, and requires the same
// result: rows, column metadata, affected rows, last insert id, or errno.
type dcase struct {
	sql       string
	args      []any
	unordered bool // rows may arrive in another order (multi-shard IN without ORDER BY)
}

func q(sql string, args ...any) dcase { return dcase{sql: sql, args: args} }

// differentialCases is one IM session's worth of statements, in order; later
// statements see the effects of earlier ones.
func differentialCases() []dcase {
	cs := introspectionCases()
	// Writes: single row, multi-row spanning shards, every logical table.
	cs = append(cs,
		q("INSERT INTO conv_msg (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES (?, ?, ?, ?, ?, ?)", 42, 1, 4201, 7, 1, "2026-01-01 10:00:00.001"),
		q("INSERT INTO conv_msg (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES (42, 2, 4202, 8, 1, '2026-01-01 10:00:01.000'), (1, 1, 101, 7, 2, '2026-01-01 10:00:02.000'), (2, 1, 201, 9, 1, '2026-01-01 10:00:03.000'), (1, 2, 102, 7, 1, '2026-01-01 10:00:04.500')"),
		q("INSERT INTO conv_msg (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES (?, ?, ?, ?, ?, ?), (?, ?, ?, ?, ?, ?)", 3, 1, 301, 5, 1, "2026-01-02 00:00:00.000", 1000003, 1, 9001, 5, 3, "2026-01-02 00:00:01.000"),
		q("INSERT INTO msg_content (msg_id, conv_id, sender_uid, msg_type, content, created_at) VALUES (?, ?, ?, ?, ?, ?)", 4201, 42, 7, 1, "hello 😀 emoji, 中文, 'quote', back\\slash", "2026-01-01 10:00:00.001"),
		q("INSERT INTO msg_content (msg_id, conv_id, sender_uid, msg_type, content, created_at) VALUES (4202, 42, 8, 1, 'second 🚀 \\\\ \\' \"', '2026-01-01 10:00:01.000'), (101, 1, 7, 2, x'00ff10', '2026-01-01 10:00:02.000')"),
		// Binary bodies (encrypted payloads are never UTF-8): prepared, they
		// reach the backend inline as binary literals, where stored.
		q("INSERT INTO msg_content (msg_id, conv_id, sender_uid, msg_type, content, created_at) VALUES (?, ?, ?, ?, ?, ?)", 4203, 42, 7, 1, []byte{0xff, 0x00, '\'', '\\', 0xc3, ';'}, "2026-01-01 10:00:02.000"),
		q("UPDATE msg_content SET content = ? WHERE conv_id = ? AND msg_id = ?", []byte{0xfe, 0x80, '"'}, 42, 4203),
		q("SELECT HEX(content), LENGTH(content) FROM msg_content WHERE conv_id = ? AND msg_id = ?", 42, 4203),
		q("UPDATE msg_content SET msg_type = ? WHERE conv_id = ? AND msg_id = ?", []byte{0xff, '7'}, 42, 4203), // not an integer: the server's error
		q("SELECT msg_id FROM msg_content WHERE conv_id = ? AND content = ?", 42, []byte{0xfe, 0x80, '"'}),
		q("INSERT INTO im_conv_seq (conv_id, max_seq, member_cnt) VALUES (42, 2, 3), (1, 2, 2), (2, 1, 2)"),
		q("INSERT INTO im_conv_seq (conv_id, max_seq) VALUES (?, 1) ON DUPLICATE KEY UPDATE max_seq = max_seq + 1", 42),
		q("REPLACE INTO im_conv_seq (conv_id, max_seq, member_cnt) VALUES (3, 1, 1)"),
		q("INSERT INTO im_conv_member (uid, conv_id, last_read_seq, mute, updated_at) VALUES (7, 42, 1, 0, '2026-01-01 10:00:00.000'), (7, 1, 2, 1, '2026-01-01 10:00:04.500'), (8, 42, 2, 0, '2026-01-01 10:00:01.000'), (9, 2, 0, 0, '2026-01-01 10:00:03.000')"),
		q("INSERT INTO im_inbox (uid, conv_id, seq, msg_id, send_time) VALUES (?, ?, ?, ?, ?)", 8, 42, 1, 4201, "2026-01-01 10:00:00.001"),
		q("INSERT INTO im_inbox SET uid = 9, conv_id = 2, seq = 1, msg_id = 201, send_time = '2026-01-01 10:00:03.000'"),
		// Extreme keys route and round-trip.
		q("INSERT INTO conv_msg (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES (18446744073709551615, 1, 77, 1, 1, '2026-01-03 00:00:00.000'), (0, 1, 78, 1, 1, '2026-01-03 00:00:00.000'), (9223372036854775813, 1, 79, 1, 1, '2026-01-03 00:00:00.000')"),
	)
	// History reads by key (the shapes of docs/design.md §4) and friends.
	cs = append(cs,
		q("SELECT seq, msg_id, sender_uid, msg_type, created_at FROM conv_msg WHERE conv_id = ? AND seq < ? ORDER BY seq DESC LIMIT 20", 42, 3),
		q("SELECT seq, msg_id FROM conv_msg WHERE conv_id = ? AND seq > ? ORDER BY seq ASC LIMIT 50", 1, 0),
		q("SELECT seq, msg_id, created_at FROM conv_msg WHERE conv_id = ? AND msg_id = ?", 42, 4202),
		// The restorer prints LIMIT ? OFFSET ? as LIMIT ?,? (offset first):
		// values must follow their placeholders.
		q("SELECT seq, msg_id FROM conv_msg WHERE conv_id = ? ORDER BY seq LIMIT ? OFFSET ?", 42, 1, 1),
		q("SELECT seq, msg_id FROM conv_msg WHERE conv_id = ? AND seq >= ? ORDER BY seq LIMIT ? OFFSET ?", 1, 1, 1, 1),
		q("SELECT seq, msg_id FROM conv_msg WHERE conv_id = 42 ORDER BY seq LIMIT 1 OFFSET 1"),
		// Text statements that share a cached plan, and forms that must not.
		q("SELECT msg_id FROM conv_msg WHERE conv_id = 1 AND seq = 2"),
		q("SELECT msg_id FROM conv_msg WHERE conv_id = 2 AND seq = 1"),
		q("SELECT msg_id FROM conv_msg WHERE conv_id = '42' AND seq = 1"),
		q("SELECT msg_id FROM conv_msg WHERE conv_id = 42 AND seq = 1 LIMIT 1"),
		q("SELECT msg_id FROM conv_msg WHERE conv_id = 42 AND seq = 1 LIMIT '1'"),
		q("SELECT msg_id, 'conv_id = 1' AS note FROM conv_msg WHERE conv_id = 42 AND seq = 1"),
		q("SELECT * FROM conv_msg WHERE conv_id = 18446744073709551615"),
		q("SELECT * FROM conv_msg WHERE conv_id = '42' ORDER BY seq"),
		q("SELECT * FROM conv_msg WHERE conv_id = 0x2A ORDER BY seq"),
		q("SELECT * FROM conv_msg WHERE conv_id = 0"),
		q("SELECT m.seq, m.msg_id, c.content FROM conv_msg AS m JOIN msg_content c ON c.msg_id = m.msg_id WHERE m.conv_id = 42 ORDER BY m.seq"),
		q("SELECT conv_msg.seq, `conv_msg`.`msg_id` FROM `conv_msg` WHERE `conv_msg`.`conv_id` = 1 ORDER BY 1"),
		q("SELECT COUNT(*), MAX(seq), MIN(created_at) FROM conv_msg WHERE conv_id = 42"),
		q("SELECT msg_id, content, HEX(content), LENGTH(content) FROM msg_content WHERE conv_id = ? AND msg_id IN (?, ?)", 42, 4201, 4202),
		q("SELECT content FROM msg_content WHERE conv_id = 1 AND msg_id = 101"),
		dcase{sql: "SELECT conv_id, seq, msg_id FROM conv_msg WHERE conv_id IN (1, 2, 3, 42)", unordered: true},
		dcase{sql: "SELECT conv_id, seq FROM conv_msg WHERE conv_id IN (?, ?, ?)", args: []any{2, 3, 1000003}, unordered: true},
		q("SELECT * FROM im_conv_seq WHERE conv_id = 42"),
		q("SELECT * FROM im_conv_seq WHERE conv_id = 3"),
		q("SELECT conv_id, last_read_seq, mute FROM im_conv_member WHERE uid = ? ORDER BY updated_at DESC", 7),
		q("SELECT * FROM im_inbox WHERE uid = 9"),
		q("SELECT * FROM conv_msg WHERE conv_id = 424242"),
		q("SELECT seq FROM conv_msg WHERE conv_id = 42 AND (seq = 1 OR seq = 2) ORDER BY seq FOR UPDATE"),
		// MariaDB's only spelling of a shared-lock read (the parser prints
		// FOR SHARE, which MariaDB refuses).
		q("SELECT seq FROM conv_msg WHERE conv_id = 42 AND seq = 1 LOCK IN SHARE MODE"),
		q("SELECT seq, msg_id FROM conv_msg WHERE conv_id = ? ORDER BY seq LIMIT ? LOCK IN SHARE MODE", 42, 2),
		q("SELECT seq FROM conv_msg WHERE conv_id = 42 ORDER BY seq LOCK IN SHARE MODE NOWAIT"),
		q("SELECT seq FROM conv_msg WHERE conv_id = ? ORDER BY seq LOCK IN SHARE MODE SKIP LOCKED", 42),
		q("INSERT INTO im_conv_seq (conv_id, max_seq) VALUES (?, 5) ON DUPLICATE KEY UPDATE max_seq = VALUE(max_seq) + 1", 42),
		q("SELECT max_seq FROM im_conv_seq WHERE conv_id = 42"),
		// Restricted table references besides the statement's own (a join's
		// other table, subqueries, derived tables) on the same shard; a
		// statement whose only sharded tables are nested is routed by them
		// (Laravel's exists(): SELECT EXISTS (SELECT * ... WHERE ...)).
		q("SELECT EXISTS(SELECT * FROM conv_msg WHERE conv_id = ? AND seq = ?) AS `exists`", 42, 1),
		q("SELECT EXISTS(SELECT * FROM conv_msg WHERE conv_id = 42 AND seq = 99) AS `exists`"),
		q("SELECT (SELECT COUNT(*) FROM conv_msg WHERE conv_id = 42) AS n, (SELECT MAX(seq) FROM conv_msg WHERE conv_id = 42) AS top"),
		q("SELECT * FROM (SELECT seq, msg_id FROM conv_msg WHERE conv_id = 1) AS t ORDER BY seq"),
		q("SELECT m.seq FROM conv_msg m JOIN msg_content c ON c.msg_id = m.msg_id WHERE m.conv_id = 42 AND c.conv_id = 42 ORDER BY m.seq"),
		q("SELECT seq FROM conv_msg WHERE conv_id = 42 AND msg_id IN (SELECT msg_id FROM msg_content WHERE conv_id = ?) ORDER BY seq", 42),
		// SET STATEMENT ... FOR: one statement's own settings, on every
		// backend connection it uses, and the session's afterwards.
		q("SET STATEMENT sql_select_limit = 1 FOR SELECT seq FROM conv_msg WHERE conv_id = 42 ORDER BY seq"),
		q("SET STATEMENT sql_select_limit=1, max_statement_time = 10 FOR SELECT conv_id FROM conv_msg WHERE conv_id IN (1, 2, 42) ORDER BY conv_id DESC"),
		q("SET STATEMENT max_statement_time = 0.01 FOR SELECT SLEEP(1)"),
		q("SELECT @@sql_select_limit, @@max_statement_time"),
		q("SELECT seq FROM conv_msg WHERE conv_id = 42 ORDER BY seq"),
		q("set statement sql_select_limit = 1 for (select 'for' AS `for`) union all (select 'x')"),
		q("SET SESSION sql_select_limit = 2"),
		q("SELECT conv_id, seq FROM conv_msg WHERE conv_id IN (1, 2, 42) ORDER BY conv_id DESC, seq"),
		q("SELECT conv_id, seq FROM conv_msg WHERE conv_id IN (1, 2, 42) ORDER BY conv_id DESC, seq LIMIT 3"),
		q("SET SESSION sql_select_limit = DEFAULT"),
		// Table maintenance of a sharded table: every physical table, one
		// answer as for one table.
		q("ANALYZE TABLE conv_msg"),
		q("ANALYZE NO_WRITE_TO_BINLOG TABLE im_conv_seq, msg_content"),
		q("OPTIMIZE TABLE im_conv_member"),
		q("OPTIMIZE LOCAL TABLE msg_content"),
		q("CHECK TABLE conv_msg"),
		q("CHECK TABLE im_conv_seq, msg_content EXTENDED"),
		q("REPAIR TABLE im_inbox QUICK"),
		q("CHECKSUM TABLE conv_msg"),
		q("CHECKSUM TABLE msg_content, im_conv_seq EXTENDED"),
		q("CHECKSUM TABLE conv_msg QUICK"),
		q("CHECKSUM TABLE notes"),
		// Set operations whose branches are all restricted to one shard run
		// there whole.
		q("SELECT seq, msg_id FROM conv_msg WHERE conv_id = 42 AND seq = 1 UNION ALL SELECT seq, msg_id FROM conv_msg WHERE conv_id = ? AND seq = 2 ORDER BY seq DESC", 42),
		q("(SELECT msg_id FROM conv_msg WHERE conv_id = 42) UNION (SELECT msg_id FROM msg_content WHERE conv_id = 42) ORDER BY msg_id"),
		q("SELECT msg_id FROM conv_msg WHERE conv_id = 42 EXCEPT SELECT msg_id FROM msg_content WHERE conv_id = 42"),
		q("SELECT msg_id FROM conv_msg WHERE conv_id = 42 INTERSECT SELECT msg_id FROM msg_content WHERE conv_id = 42 ORDER BY 1"),
		// FOUND_ROWS() and ROW_COUNT() are the session's: a pooled
		// connection would answer for whatever ran on it last.
		q("SELECT SQL_CALC_FOUND_ROWS seq FROM conv_msg WHERE conv_id = 42 ORDER BY seq LIMIT 1"),
		q("SELECT FOUND_ROWS(), ROW_COUNT()"),
		q("SELECT seq FROM conv_msg WHERE conv_id = 1 ORDER BY seq"),
		q("SELECT FOUND_ROWS() AS f"),
		q("INSERT INTO im_conv_seq (conv_id, max_seq) VALUES (777, 1), (778, 1)"),
		q("SELECT ROW_COUNT(), FOUND_ROWS()"),
		q("UPDATE im_conv_seq SET max_seq = max_seq WHERE conv_id = 777"),
		q("SELECT ROW_COUNT()"),
		q("DELETE FROM im_conv_seq WHERE conv_id IN (777, 778)"),
		q("SELECT ROW_COUNT()"),
		q("SELECT SQL_CALC_FOUND_ROWS conv_id, seq FROM conv_msg WHERE conv_id IN (1, 42) ORDER BY conv_id, seq LIMIT 1"), // several shards: their totals summed
		q("SELECT FOUND_ROWS()"),
		// Multi-table DELETE by alias (MariaDB resolves the targets under a
		// current database only).
		q("INSERT INTO conv_msg (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES (42, 50, 4250, 7, 1, '2026-01-05 00:00:00.000'), (42, 51, 4251, 7, 1, '2026-01-05 00:00:01.000')"),
		q("INSERT INTO msg_content (msg_id, conv_id, sender_uid, msg_type, content, created_at) VALUES (4250, 42, 7, 1, 'gone', '2026-01-05 00:00:00.000')"),
		q("DELETE m, c FROM conv_msg m JOIN msg_content c ON c.msg_id = m.msg_id WHERE m.conv_id = ? AND c.conv_id = ? AND m.seq = 50", 42, 42),
		q("DELETE conv_msg FROM conv_msg WHERE conv_id = 42 AND seq = 51"),
		q("SELECT COUNT(*) FROM conv_msg WHERE conv_id = 42 AND seq >= 50"),
		q("SELECT * FROM conv_msg /* a comment */ WHERE conv_id = 2 -- trailing\n"),
		q("SELECT 'conv_msg' AS conv_msg, seq FROM conv_msg WHERE conv_id = 2"),
	)
	// Reads without the shard key (or with an IN list spanning shards) read
	// every shard and merge.
	cs = append(cs,
		q("SELECT COUNT(*) FROM conv_msg"),
		q("SELECT COUNT(*), SUM(seq), MIN(seq), MAX(seq), AVG(seq), MIN(created_at), MAX(msg_id) FROM conv_msg"),
		q("SELECT COUNT(*), SUM(seq), MAX(seq), AVG(seq) FROM conv_msg WHERE msg_type = 99"),
		q("SELECT conv_id, COUNT(*), SUM(msg_type), AVG(msg_type) FROM conv_msg GROUP BY conv_id ORDER BY conv_id"),
		q("SELECT sender_uid, COUNT(*) AS n FROM conv_msg GROUP BY sender_uid HAVING n > 1 ORDER BY n DESC, sender_uid"),
		q("SELECT sender_uid FROM conv_msg GROUP BY sender_uid HAVING COUNT(*) >= 2 ORDER BY sender_uid"),
		// Expressions over aggregates (docs/sql-reference.md): evaluated over the merged
		// operands, values and column types MariaDB's.
		q("SELECT MAX(seq) - MIN(seq), COUNT(*) > 0, SUM(msg_type) / COUNT(*), MAX(msg_id) * 2 AS twice FROM conv_msg"),
		q("SELECT MAX(seq) - MIN(seq) AS span, COUNT(*) + 1 FROM conv_msg WHERE msg_type < ?", 99),
		q("SELECT COUNT(*) > 0, MAX(seq) + 1 FROM conv_msg WHERE msg_type = 99"),
		q("SELECT conv_id, MAX(seq) - MIN(seq) AS span, CONCAT(conv_id, ':', COUNT(*)) FROM conv_msg GROUP BY conv_id ORDER BY conv_id"),
		q("SELECT conv_id, MAX(created_at) + INTERVAL 1 DAY, DATE(MIN(created_at)) FROM conv_msg GROUP BY conv_id ORDER BY conv_id LIMIT 3"),
		q("SELECT conv_id, COUNT(*) + 1 FROM conv_msg WHERE msg_type = ? GROUP BY conv_id", 99),
		q("SELECT LENGTH(MAX(content)), HEX(MIN(content)), UPPER(MAX(CAST(sender_uid AS CHAR))) FROM msg_content"),
		q("SELECT SUM(seq) / 2e0, MAX(seq) * 1.5e0 FROM conv_msg WHERE msg_type < ?", 99),
		q("SELECT COUNT(DISTINCT conv_id) * 10, MAX(seq) IS NULL FROM conv_msg"),
		q("SELECT AVG(seq) * 2, ROUND(AVG(msg_type), 1), AVG(DISTINCT msg_type) + 0 FROM conv_msg"),
		q("SELECT conv_id, AVG(seq) + 1 FROM conv_msg GROUP BY conv_id ORDER BY conv_id"),
		// WITH ROLLUP: the merge adds the super-aggregate rows.
		q("SELECT conv_id, COUNT(*), MAX(seq), SUM(msg_type) FROM conv_msg GROUP BY conv_id WITH ROLLUP"),
		q("SELECT msg_type, sender_uid, COUNT(*), MIN(created_at) FROM conv_msg WHERE seq < ? GROUP BY msg_type DESC, sender_uid WITH ROLLUP", 100),
		q("SELECT msg_type, COUNT(*) FROM conv_msg GROUP BY msg_type WITH ROLLUP ORDER BY msg_type"), // 1221, as MariaDB
		q("SELECT conv_id, seq, msg_id FROM conv_msg ORDER BY conv_id DESC, seq LIMIT 3"),
		q("SELECT conv_id, seq, msg_id FROM conv_msg ORDER BY conv_id, seq LIMIT 2, 3"),
		q("SELECT msg_id FROM conv_msg ORDER BY created_at DESC, msg_id LIMIT 4"),
		q("SELECT DISTINCT sender_uid FROM conv_msg ORDER BY sender_uid"),
		q("SELECT DISTINCT msg_type FROM conv_msg ORDER BY 1 DESC LIMIT 2"),
		q("SELECT msg_id, conv_id FROM msg_content WHERE msg_id IN (4201, 101, 4202) ORDER BY msg_id"),
		q("SELECT * FROM msg_content WHERE msg_id IN (?, ?) ORDER BY msg_id DESC", 101, 4201),
		q("SELECT conv_id, seq FROM conv_msg WHERE conv_id IN (1, 2, 3, 42) ORDER BY conv_id, seq LIMIT 4"),
		q("SELECT COUNT(*) FROM conv_msg WHERE conv_id IN (1, 2, 42)"),
		dcase{sql: "SELECT conv_id, seq FROM conv_msg WHERE msg_type = 1", unordered: true},
		dcase{sql: "SELECT uid, conv_id FROM im_conv_member", unordered: true},
		q("SELECT MAX(uid), MIN(uid), COUNT(*) FROM im_conv_member"),
		// COUNT / SUM / AVG(DISTINCT): each shard groups by the argument too,
		// the proxy de-duplicates across shards.
		q("SELECT COUNT(DISTINCT sender_uid) FROM conv_msg"),
		q("SELECT conv_id, COUNT(DISTINCT sender_uid), COUNT(*) FROM conv_msg GROUP BY conv_id"),
		q("SELECT msg_type, COUNT(DISTINCT sender_uid) AS senders, COUNT(*), MAX(seq) FROM conv_msg GROUP BY msg_type HAVING COUNT(DISTINCT sender_uid) > 1 ORDER BY senders DESC, msg_type"),
		q("SELECT msg_type FROM conv_msg GROUP BY msg_type HAVING COUNT(DISTINCT conv_id) >= 1 ORDER BY COUNT(DISTINCT sender_uid) DESC, msg_type LIMIT 2"),
		q("SELECT COUNT(DISTINCT msg_type, sender_uid), SUM(DISTINCT sender_uid), AVG(DISTINCT sender_uid), MIN(DISTINCT seq), AVG(seq) FROM conv_msg"),
		q("SELECT COUNT(DISTINCT sender_uid), SUM(DISTINCT msg_type), AVG(DISTINCT seq) FROM conv_msg WHERE msg_type = 99"),
		q("SELECT COUNT(DISTINCT sender_uid) FROM conv_msg WHERE msg_type = ?", 1),
		q("SELECT COUNT(DISTINCT sender_uid) FROM conv_msg WHERE conv_id IN (?, ?, ?)", 1, 2, 42),
		q("SELECT COUNT(DISTINCT 1), COUNT(DISTINCT ?, sender_uid) FROM conv_msg WHERE msg_type = ?", "x", 99),
		q("SELECT COUNT(DISTINCT 1), SUM(DISTINCT 2) FROM conv_msg WHERE msg_type = ?", 99),
		q("SELECT COUNT(DISTINCT 1), COUNT(DISTINCT ?, sender_uid) FROM conv_msg WHERE msg_type = ?", "x", 1),
		// LIMIT placeholders (GORM's ColumnTypes sends SELECT * ... LIMIT ?),
		// bound at EXECUTE; the text protocol gets them as literals.
		q("SELECT * FROM conv_msg LIMIT ?", 0),
		q("SELECT * FROM conv_msg WHERE msg_id = ? LIMIT ?", 77, 1),
		q("SELECT conv_id, seq, msg_id FROM conv_msg ORDER BY conv_id, seq LIMIT ?, ?", 2, 3),
		q("SELECT conv_id, seq, msg_id FROM conv_msg ORDER BY conv_id DESC, seq LIMIT ? OFFSET ?", 3, 1),
		q("SELECT conv_id, seq FROM conv_msg WHERE msg_type = ? ORDER BY conv_id, seq LIMIT ? OFFSET ?", 1, 2, 1),
		q("SELECT conv_id, seq FROM conv_msg ORDER BY conv_id, seq LIMIT 2 OFFSET ?", 3),
		q("SELECT sender_uid, COUNT(*) FROM conv_msg GROUP BY sender_uid ORDER BY sender_uid LIMIT ? OFFSET ?", 2, 1),
		q("SELECT DISTINCT sender_uid FROM conv_msg ORDER BY sender_uid DESC LIMIT ?", 2),
		q("SELECT conv_id, seq FROM conv_msg WHERE conv_id IN (?, ?, ?) ORDER BY conv_id, seq LIMIT ?", 1, 2, 42, 3),
		// Bound values MariaDB converts without an error (prepared): a
		// negative count is no limit, 2.5 rounds to even, '2x' reads 2. As
		// literals (text) they are syntax errors.
		q("SELECT conv_id, seq FROM conv_msg ORDER BY conv_id, seq LIMIT ?", -1),
		q("SELECT conv_id, seq FROM conv_msg ORDER BY conv_id, seq LIMIT ?", 2.5),
		q("SELECT conv_id, seq FROM conv_msg ORDER BY conv_id, seq LIMIT ?, 2", "2x"),
		q("SELECT conv_id, seq FROM conv_msg ORDER BY conv_id, seq LIMIT ? OFFSET ?", 2, -1),
		// NULLs: a nullable column added through the DDL fan-out.
		q("ALTER TABLE msg_content ADD COLUMN note VARCHAR(16) NULL"),
		q("UPDATE msg_content SET note = 'b' WHERE conv_id = 42 AND msg_id = 4201"),
		q("UPDATE msg_content SET note = 'A' WHERE conv_id = 1 AND msg_id = 101"),
		q("UPDATE msg_content SET note = ? WHERE conv_id = ? AND msg_id = ?", []byte{'x', 0xff}, 1, 101), // not utf8mb4: the server's error
		q("INSERT INTO msg_content (msg_id, conv_id, sender_uid, msg_type, content, note, created_at) VALUES (?, 1, 1, 1, '', ?, NOW())", 102, []byte{0xc3, 0x28}),
		q("SELECT msg_id, note FROM msg_content ORDER BY note, msg_id"),
		q("SELECT msg_id, note FROM msg_content ORDER BY note DESC, msg_id LIMIT 2"),
		q("SELECT COUNT(note), COUNT(*), MIN(note), MAX(note) FROM msg_content"),
		q("SELECT note, COUNT(*) FROM msg_content GROUP BY note ORDER BY note"),
		q("SELECT DISTINCT note FROM msg_content ORDER BY note"),
		// 'a' (conv 42, shard 136) and 'A' (conv 1, shard 951) are one value
		// under utf8mb4_general_ci; NULL is no value.
		q("UPDATE msg_content SET note = 'a' WHERE conv_id = 42 AND msg_id = 4202"),
		q("SELECT COUNT(DISTINCT note), COUNT(note), COUNT(*) FROM msg_content"),
		q("SELECT msg_type, COUNT(DISTINCT note) AS n FROM msg_content GROUP BY msg_type ORDER BY n, msg_type"),
		q("SELECT COUNT(DISTINCT note, msg_type), COUNT(DISTINCT conv_id, note) FROM msg_content"),
		q("ALTER TABLE msg_content DROP COLUMN note"),
		q("SELECT COUNT(*) FROM im_inbox WHERE send_time > '2030-01-01'"),
	)
	// Updates and deletes by key.
	cs = append(cs,
		q("UPDATE im_conv_member SET last_read_seq = ?, updated_at = '2026-01-05 00:00:00.000' WHERE uid = ? AND conv_id = ?", 2, 7, 42),
		q("UPDATE im_conv_member SET mute = 1 WHERE uid = 7"),
		q("UPDATE conv_msg SET msg_type = 9 WHERE conv_id = 42 AND seq = 99"),
		// Rows matched but unchanged: 0 affected, or 1 with CLIENT_FOUND_ROWS
		// (the "found rows" mode below; Connector/J's default).
		q("UPDATE conv_msg SET msg_type = msg_type WHERE conv_id = 42 AND seq = 1"),
		q("UPDATE im_conv_member SET mute = mute WHERE uid = 7 AND conv_id = 42"),
		q("INSERT INTO im_conv_seq (conv_id, max_seq, member_cnt) VALUES (2, 1, 2) ON DUPLICATE KEY UPDATE max_seq = max_seq"),
		q("DELETE FROM im_inbox WHERE uid = 8 AND conv_id = 42 AND seq = 1"),
		q("DELETE FROM conv_msg WHERE conv_id IN (0, 9223372036854775813)"),
		q("SELECT * FROM im_conv_member WHERE uid = 7 ORDER BY conv_id"),
		q("SELECT COUNT(*) FROM im_inbox WHERE uid = 8"),
	)
	// Errors the server itself raises must reach the client unchanged.
	cs = append(cs,
		q("INSERT INTO conv_msg (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES (42, 1, 1, 1, 1, '2026-01-01 00:00:00')"), // 1062 duplicate
		q("SELECT nosuchcol FROM conv_msg WHERE conv_id = 42"),                                                                            // 1054
		q("SELECT * FROM conv_msg WHERE conv_id = 42 ORDER BY"),                                                                           // 1064
		q("INSERT INTO conv_msg (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES (5, 1, 501, 1, 1000, '2026-01-01')"),      // 1264 out of range (strict)
		q("SELECT * FROM no_such_table"), // 1146 (unsharded passthrough)
	)
	// Unsharded tables and session statements pass through.
	cs = append(cs,
		q("CREATE TABLE app_settings (id INT PRIMARY KEY, v VARCHAR(64)) DEFAULT CHARSET=utf8mb4"),
		q("INSERT INTO app_settings VALUES (1, 'a🙂'), (2, NULL)"),
		q("SELECT * FROM app_settings ORDER BY id"),
		q("SELECT id FROM app_settings WHERE v = ?", "a🙂"),
		q("SELECT 1 + 1, 'x', NULL, 3.5, DATABASE()"),
		q("SELECT @@character_set_client, @@collation_connection"),
		q("SELECT @@sql_mode, @@SESSION.sql_mode, @@sql_mode LIKE '%STRICT%' AS strict"),
		q("SHOW TABLES LIKE 'app%'"),
		q("SHOW TABLES"),
		q("SHOW FULL TABLES WHERE Tables_in_im <> 'im_inbox'"),
		q("DROP TABLE app_settings"),
		q("CREATE TABLE app_log (id BIGINT AUTO_INCREMENT PRIMARY KEY, v INT)"),
		q("INSERT INTO app_log (v) VALUES (1), (2)"),
		q("INSERT INTO app_log (v) VALUES (?)", 3),
		q("SELECT * FROM conv_msg WHERE conv_id = 1 ORDER BY seq"),
		q("SELECT LAST_INSERT_ID()"),
		q("UPDATE im_conv_seq SET max_seq = max_seq + 1 WHERE conv_id = 1"),
		q("SELECT LAST_INSERT_ID() AS id, 1"),
		q("SELECT LAST_INSERT_ID(77), @@last_insert_id"),
		q("SELECT LAST_INSERT_ID(), @@identity"),
		q("UPDATE app_log SET v = LAST_INSERT_ID(v + 10) WHERE id = 1"),
		q("SELECT LAST_INSERT_ID()"),
		// ... also inside statements on the shards, whose pooled
		// connections would answer for themselves.
		q("SELECT seq, LAST_INSERT_ID(), DATABASE(), @@autocommit FROM conv_msg WHERE conv_id = 1 AND seq <= LAST_INSERT_ID() ORDER BY seq"),
		q("SELECT seq FROM conv_msg WHERE conv_id = ? AND seq < LAST_INSERT_ID() - ?", 1, 9),
		q("SELECT DATABASE(), COUNT(*) FROM conv_msg GROUP BY 1"),
		q("DROP TABLE app_log"),
	)
	// Session state Convoy keeps itself reads back as the client set it
	// (a pooled backend connection would answer for itself).
	cs = append(cs,
		q("SELECT @@autocommit, @@session.autocommit, @@in_transaction, DATABASE(), SCHEMA()"),
		q("SET autocommit = 0"),
		q("SELECT @@autocommit, @@`autocommit`, @@LOCAL.autocommit, @@in_transaction"),
		q("SHOW VARIABLES LIKE 'autocommit'"),
		q("INSERT INTO im_inbox (uid, conv_id, seq, msg_id, send_time) VALUES (31, 3, 1, 301, '2026-01-02 00:00:00.000')"),
		q("SELECT @@autocommit, @@in_transaction"),
		q("SHOW SESSION VARIABLES WHERE Variable_name IN ('autocommit', 'in_transaction', 'last_insert_id', 'identity', 'max_allowed_packet')"),
		q("ROLLBACK"),
		q("SELECT COUNT(*) FROM im_inbox WHERE uid = 31"),
		q("SET autocommit = 1"),
		q("SELECT @@autocommit, @@max_allowed_packet, @@global.autocommit"),
		// Transaction characteristics: per session, or for the next
		// transaction only (SET TRANSACTION), enforced by the backends.
		q("SET SESSION TRANSACTION READ ONLY"),
		q("SELECT @@tx_read_only"),
		q("INSERT INTO im_inbox (uid, conv_id, seq, msg_id, send_time) VALUES (32, 3, 1, 301, '2026-01-02 00:00:00.000')"),
		q("SET SESSION TRANSACTION READ WRITE"),
		q("SET TRANSACTION READ ONLY"),
		q("SELECT @@tx_read_only"),
		q("INSERT INTO im_inbox (uid, conv_id, seq, msg_id, send_time) VALUES (32, 3, 1, 301, '2026-01-02 00:00:00.000')"),
		q("INSERT INTO im_inbox (uid, conv_id, seq, msg_id, send_time) VALUES (32, 3, 1, 301, '2026-01-02 00:00:00.000')"),
		q("BEGIN"),
		q("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE"),
		q("INSERT INTO im_inbox (uid, conv_id, seq, msg_id, send_time) VALUES (32, 3, 1, 301, '2026-01-02 00:00:00.000')"),
		q("ROLLBACK"),
		q("INSERT INTO im_inbox (uid, conv_id, seq, msg_id, send_time) VALUES (32, 3, 1, 301, '2026-01-02 00:00:00.000')"),
		q("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED"),
		q("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE"),
		q("SELECT @@tx_isolation"),
		q("START TRANSACTION READ ONLY"),
		q("SELECT @@tx_isolation, @@in_transaction"),
		q("DELETE FROM im_inbox WHERE uid = 32"),
		q("COMMIT"),
		q("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ"),
		q("SELECT COUNT(*) FROM im_inbox WHERE uid = 32"),
		// Savepoints belong to the transaction, whichever shard it is pinned
		// to (GORM's nested transactions); rows by composite key route by
		// the key's place in the row.
		q("SAVEPOINT a"),
		q("ROLLBACK TO SAVEPOINT a"),
		q("RELEASE SAVEPOINT a"),
		q("BEGIN"),
		q("SAVEPOINT a"),
		q("SAVEPOINT b"),
		q("ROLLBACK TO a"),
		q("RELEASE SAVEPOINT b"),
		q("SAVEPOINT B"),
		q("INSERT INTO conv_msg (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES (77, 1, 7701, 1, 1, '2026-01-01')"),
		q("SAVEPOINT c"),
		q("INSERT INTO conv_msg (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES (77, 2, 7702, 1, 1, '2026-01-01')"),
		q("ROLLBACK TO SAVEPOINT c"),
		q("RELEASE SAVEPOINT b"),
		q("ROLLBACK TO SAVEPOINT b"),
		q("ROLLBACK TO SAVEPOINT a"),
		q("INSERT INTO conv_msg (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES (77, 3, 7703, 1, 1, '2026-01-01')"),
		q("COMMIT"),
		q("SELECT seq FROM conv_msg WHERE conv_id = 77"),
		q("DELETE FROM conv_msg WHERE (conv_msg.conv_id, conv_msg.seq) IN ((77, 3), (78, 1))"),
		q("DELETE FROM conv_msg WHERE (conv_id, seq) = (77, 1)"),
		q("SELECT seq FROM conv_msg WHERE conv_id = 77"),
		// RETURNING (MariaDB 10.5+; GORM adds it to inserts of models with an
		// auto-increment key): unsharded tables pass through, sharded writes
		// return their rows, a split INSERT in the statement's VALUES order.
		q("CREATE TABLE notes (id BIGINT AUTO_INCREMENT PRIMARY KEY, conv_id BIGINT, title VARCHAR(20))"),
		q("INSERT INTO notes (conv_id, title) VALUES (42, 'a') RETURNING id"),
		q("INSERT INTO notes (conv_id, title) VALUES (?, ?), (?, ?) RETURNING id, title", 42, "b", 1, "c"),
		q("INSERT INTO notes (conv_id, title) VALUES (42, 'returning') RETURNING `id`, LENGTH(title) AS n"),
		q("REPLACE INTO notes (id, conv_id, title) VALUES (1, 5, 'z') RETURNING *"),
		q("DELETE FROM notes WHERE id > ? RETURNING id", 2),
		q("DROP TABLE notes"),
		q("INSERT INTO conv_msg (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES (?, 11, 4211, 7, 1, '2026-01-01 10:00:00.001') RETURNING seq, msg_id", 42),
		q("INSERT INTO conv_msg (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES (1, 11, 111, 7, 1, '2026-01-01 10:00:00.001'), (42, 12, 4212, 7, 1, '2026-01-01'), (2, 11, 211, 7, 1, '2026-01-01'), (1, 12, 112, 7, 1, '2026-01-01') RETURNING conv_id, seq, msg_id, created_at"),
		q("INSERT INTO im_inbox (uid, conv_id, seq, msg_id, send_time) VALUES (?, 1, 1, 1, '2026-01-01'), (?, 1, 1, 1, '2026-01-01') RETURNING uid, send_time", 77, 78),
		dcase{sql: "DELETE FROM conv_msg WHERE conv_id IN (1, 2) AND seq > 10 RETURNING conv_id, seq", unordered: true},
		q("DELETE FROM conv_msg WHERE conv_id = ? AND seq > 10 RETURNING *", 42),
		q("DELETE FROM im_inbox WHERE uid IN (77, 78) RETURNING uid"),
		q("INSERT INTO im_inbox (uid, conv_id, seq, msg_id, send_time) VALUES (1, 1, 1, 1, '2026-01-01') RETURNING"),
		// INSERT / REPLACE without a column list: the columns come from the
		// backends, so the key is found by position (and refreshed by DDL).
		q("INSERT INTO conv_msg VALUES (5, 1, 501, 1, 1, '2026-01-01 00:00:00.000')"),
		q("INSERT INTO conv_msg VALUES (5, 2, 502, 1, 1, '2026-01-01 00:00:00.000'), (6, 1, 601, 1, 1, '2026-01-01'), (7, 1, 701, 2, 1, '2026-01-01')"),
		q("INSERT INTO conv_msg VALUES (5, 3, 503, 1, 1)"),
		q("INSERT INTO conv_msg VALUES (5, 3, 503, 1, 1, NOW(), 7)"),
		q("REPLACE INTO im_inbox VALUES (9, 5, 1, 501, '2026-01-01')"),
		q("INSERT INTO im_conv_seq VALUES (5, 3, 2, NOW(3)) ON DUPLICATE KEY UPDATE max_seq = 9"),
		q("SELECT * FROM conv_msg WHERE conv_id IN (5, 6, 7) ORDER BY conv_id, seq"),
		q("SELECT * FROM im_conv_seq WHERE conv_id = 5"),
		q("INSERT INTO conv_msg SET conv_id = 5, seq = 4, msg_id = 504, sender_uid = 1, msg_type = 1, created_at = '2026-01-01'"),
		q("INSERT INTO conv_msg VALUES (5, 5, 505, 1, 1, '2026-01-01') RETURNING seq"),
		q("ALTER TABLE conv_msg ADD COLUMN note VARCHAR(10) NULL"),
		q("INSERT INTO conv_msg VALUES (5, 6, 506, 1, 1, '2026-01-01', 'n')"),
		q("INSERT INTO conv_msg VALUES (5, 7, 507, 1, 1, '2026-01-01')"),
		q("ALTER TABLE conv_msg DROP COLUMN note"),
		q("INSERT INTO conv_msg VALUES (5, 7, 507, 1, 1, '2026-01-01')"),
		q("SELECT * FROM conv_msg WHERE conv_id = 5 ORDER BY seq"),
		// Comment-only statements are answered OK; only an empty one is 1065.
		q("-- a comment line"),
		q("--"),
		q("# a hash comment"),
		q("/* a block comment */"),
		q("/* a comment */ ;"),
		q(";"),
		q("-x"),
	)
	// The diagnostics area (SHOW WARNINGS, @@warning_count): the session's,
	// whichever pooled backend connection ran the statement; cleared by a
	// statement on a table or with conditions of its own, kept by SET or a
	// SELECT without a table; an error is in it too.
	cs = append(cs,
		q("SELECT CAST('x' AS SIGNED)"),
		q("SHOW WARNINGS"),
		q("SET @w = 1"),
		q("SELECT 1"),
		q("SHOW WARNINGS"),
		q("SELECT @@warning_count, @@error_count"),
		q("SHOW COUNT(*) WARNINGS"),
		q("SELECT CAST('y' AS SIGNED), seq FROM conv_msg WHERE conv_id = ? AND seq = 1", 42),
		q("SHOW WARNINGS"),
		q("SELECT seq FROM conv_msg WHERE conv_id = 42 AND seq = 1"),
		q("SHOW WARNINGS"),
		q("SELECT CAST('z' AS SIGNED), conv_id FROM conv_msg WHERE conv_id IN (1, 2, 3) ORDER BY conv_id, seq"),
		q("SHOW WARNINGS"),
		q("INSERT IGNORE INTO im_conv_seq (conv_id, max_seq) VALUES (42, 1), (42, 2)"),
		q("SHOW WARNINGS"),
		q("SELECT * FROM no_such_table"),
		q("SHOW WARNINGS"),
		q("SHOW ERRORS"),
		q("SHOW COUNT(*) ERRORS"),
		q("SELECT @@warning_count, @@error_count"),
		q("CREATE TABLE IF NOT EXISTS im_conv_seq (conv_id BIGINT UNSIGNED PRIMARY KEY)"),
		q("SHOW WARNINGS"),
		q("SELECT 1"),
		q("SHOW ERRORS"),
		// Past max_error_count (64): listed up to it, counted in full.
		q("SELECT "+strings.Repeat("CAST('w' AS SIGNED) + ", 69)+"CAST('w' AS SIGNED) AS s"),
		q("SHOW COUNT(*) WARNINGS"),
		q("SELECT @@warning_count"),
		q("SHOW WARNINGS"),
		q("SHOW WARNINGS LIMIT 2"),
		q("SHOW WARNINGS LIMIT 62, 5"),
		q("show warnings limit 0"),
		q("SHOW ERRORS LIMIT 1"),
	)
	return cs
}

type outcome struct {
	errno    uint16
	errText  string
	cols     []string
	types    []string
	rows     [][]string
	affected int64
	lastID   int64
}

func run(ctx context.Context, c *sql.Conn, dc dcase) outcome {
	var o outcome
	verb := strings.ToUpper(strings.Fields(strings.TrimLeft(dc.sql, " (/"))[0])
	if strings.HasPrefix(strings.ToUpper(dc.sql), "SET STATEMENT") {
		verb = "SELECT" // (every such case here is a SELECT)
	}
	switch verb {
	case "SELECT", "SHOW", "DESCRIBE", "DESC", "EXPLAIN", "ANALYZE", "OPTIMIZE", "CHECK", "REPAIR", "CHECKSUM":
		verb = "SELECT"
	}
	if verb == "SELECT" || strings.HasPrefix(dc.sql, "/*") || strings.Contains(dc.sql, " RETURNING ") {
		rows, err := c.QueryContext(ctx, dc.sql, dc.args...)
		if err != nil {
			return errOutcome(err)
		}
		return readOutcome(rows)
	}
	res, err := c.ExecContext(ctx, dc.sql, dc.args...)
	if err != nil {
		return errOutcome(err)
	}
	o.affected, _ = res.RowsAffected()
	o.lastID, _ = res.LastInsertId()
	return o
}

// readOutcome records the columns, types and rows of a result and closes it.
func readOutcome(rows *sql.Rows) outcome {
	defer rows.Close()
	return readSet(rows)
}

// readSet records the columns, types and rows of the current result set.
func readSet(rows *sql.Rows) outcome {
	var o outcome
	o.cols, _ = rows.Columns()
	cts, _ := rows.ColumnTypes()
	for _, ct := range cts {
		n, _ := ct.Nullable()
		o.types = append(o.types, fmt.Sprintf("%s/%v", ct.DatabaseTypeName(), n))
	}
	for rows.Next() {
		raw := make([]sql.RawBytes, len(o.cols))
		ptrs := make([]any, len(raw))
		for i := range raw {
			ptrs[i] = &raw[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return errOutcome(err)
		}
		row := make([]string, len(raw))
		for i, b := range raw {
			if b == nil {
				row[i] = "NULL"
			} else {
				row[i] = "'" + string(b) + "'"
			}
		}
		o.rows = append(o.rows, row)
	}
	if err := rows.Err(); err != nil {
		return errOutcome(err)
	}
	return o
}

func errOutcome(err error) outcome {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return outcome{errno: me.Number, errText: me.Message}
	}
	return outcome{errno: 65535, errText: err.Error()}
}

func (o outcome) String() string {
	if o.errno != 0 {
		return fmt.Sprintf("error %d: %s", o.errno, o.errText)
	}
	if o.cols == nil {
		return fmt.Sprintf("affected=%d lastid=%d", o.affected, o.lastID)
	}
	return fmt.Sprintf("cols=%v types=%v rows=%v", o.cols, o.types, o.rows)
}

// same compares two outcomes; error texts may differ (Convoy's parser words
// syntax errors its own way), errnos may not.
func same(a, b outcome, unordered bool) bool {
	if a.errno != 0 || b.errno != 0 {
		return a.errno == b.errno
	}
	if unordered {
		sortRows(a.rows)
		sortRows(b.rows)
	}
	return reflect.DeepEqual(a.cols, b.cols) && reflect.DeepEqual(a.types, b.types) &&
		reflect.DeepEqual(a.rows, b.rows) && a.affected == b.affected && a.lastID == b.lastID
}

func sortRows(rows [][]string) {
	sort.Slice(rows, func(i, j int) bool { return strings.Join(rows[i], "\x00") < strings.Join(rows[j], "\x00") })
}

func openDSN(t testing.TB, dsn string) *sql.DB {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// TestDifferential runs the cases in the text protocol (client-side
// interpolation) and in the binary protocol (server-side prepared
// statements), against the reference and through Convoy.
func TestDifferential(t *testing.T) {
	s := newStack(t)
	for _, mode := range []struct {
		name   string
		params string
	}{{"text", "&interpolateParams=true"}, {"prepared", "&interpolateParams=false"}, {"found rows", "&interpolateParams=true&clientFoundRows=true"}} {
		t.Run(mode.name, func(t *testing.T) {
			ctx := context.Background()
			rc, cc := connPair(t, s, mode.params)
			for _, tbl := range []string{"conv_msg", "msg_content", "im_conv_seq", "im_conv_member", "im_inbox"} {
				for _, c := range []*sql.Conn{rc, cc} {
					if _, err := c.ExecContext(ctx, "TRUNCATE TABLE "+tbl); err != nil {
						t.Fatalf("truncate %s: %v", tbl, err)
					}
				}
			}
			mismatches := 0
			for i, dc := range differentialCases() {
				want := run(ctx, rc, dc)
				got := run(ctx, cc, dc)
				if !same(want, got, dc.unordered) {
					mismatches++
					t.Errorf("case %d: %s %v\n  mariadb: %v\n  convoy:  %v", i, dc.sql, dc.args, want, got)
				}
			}
			t.Logf("%d cases, %d mismatches", len(differentialCases()), mismatches)
		})
	}
	checkIntrospection(t, s)
	checkExplain(t, s)
	checkWarningsPrivate(t, s)
	checkColocation(t, s)
	// The identical answers above came through the fast paths, not around
	// them: text statements shared cached plans and prepared SELECTs went to
	// the backend as text.
	body := scrape(t, s.convoy.metrics)
	hits := metricValue(t, body, `convoy_plan_cache_total{result="hit"}`)
	inline := metricValue(t, body, `convoy_prepared_backend_total{path="inline"}`)
	t.Logf("plan cache hits %v, prepared EXECUTEs sent inline %v", hits, inline)
	if hits < 1 || inline < 5 {
		t.Errorf("fast paths not taken: plan cache hits %v, inline EXECUTEs %v", hits, inline)
	}
}

// checkColocation: a statement runs on one shard, so a table reference
// restricted to a conversation of another shard (a join's other table, a
// subquery, a derived table) would find nothing there. MariaDB answers
// these with rows; Convoy refuses them (1235) instead of answering wrong.
func checkColocation(t *testing.T, s *stack) {
	ctx := context.Background()
	rc, cc := connPair(t, s, "&interpolateParams=false")
	for _, dc := range []dcase{
		q("SELECT seq FROM conv_msg WHERE conv_id = 42 AND 101 IN (SELECT msg_id FROM msg_content WHERE conv_id = 1)"),
		q("SELECT seq FROM conv_msg WHERE conv_id = ? AND EXISTS (SELECT 1 FROM msg_content WHERE conv_id = ?)", 42, 1),
		q("SELECT m.seq, c.content FROM conv_msg m JOIN msg_content c ON c.msg_id = 101 AND c.conv_id = 1 WHERE m.conv_id = 42"),
		q("SELECT m.seq FROM conv_msg m, msg_content c WHERE m.conv_id = 42 AND c.conv_id = 1"),
		q("SELECT (SELECT COUNT(*) FROM conv_msg WHERE conv_id = 42) + (SELECT COUNT(*) FROM conv_msg WHERE conv_id = 1) AS n"),
		q("SELECT * FROM (SELECT seq FROM conv_msg WHERE conv_id = 42) a, (SELECT seq FROM conv_msg WHERE conv_id = 1) b"),
		q("SELECT seq FROM conv_msg WHERE conv_id IN (42, 1) AND msg_id IN (SELECT msg_id FROM msg_content WHERE conv_id = 42)"),
		q("UPDATE conv_msg SET msg_type = msg_type WHERE conv_id = 42 AND 101 IN (SELECT msg_id FROM msg_content WHERE conv_id = 1)"),
		q("SELECT seq FROM conv_msg WHERE conv_id = 42 UNION ALL SELECT seq FROM conv_msg WHERE conv_id = 1"),
	} {
		want, got := run(ctx, rc, dc), run(ctx, cc, dc)
		if want.errno != 0 {
			t.Errorf("%s: the reference failed (%v): the case proves nothing", dc.sql, want)
			continue
		}
		if got.errno != 1235 {
			t.Errorf("%s %v: convoy %v, want 1235 (mariadb: %v)", dc.sql, dc.args, got, want)
		}
	}
}
