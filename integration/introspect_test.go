package integration

import (
	"context"
	"database/sql"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/convoy-im/convoy/internal/testsvc"
	"github.com/convoy-im/convoy/router"
)

// introspectionCases are the schema questions GUI tools, ORMs and migration
// tools ask (GORM's Migrator, SQLAlchemy's reflection, Flyway, DBeaver).
// The reference holds the logical tables as plain tables in database im, so
// its answers are exactly what Convoy must give. They run first, while
// every table is empty (index cardinalities and row counts then agree).
func introspectionCases() []dcase {
	return []dcase{
		q("SHOW TABLES"),
		q("SHOW FULL TABLES"),
		q("SHOW TABLES FROM im"),
		q("SHOW FULL TABLES FROM `im`"), // SQLAlchemy get_table_names
		q("SHOW TABLES IN im LIKE 'conv%'"),
		q("SHOW TABLES LIKE 'CONV%'"), // table names are case-sensitive
		q("SHOW TABLES LIKE 'im\\_conv\\_%'"),
		q("SHOW FULL TABLES WHERE Table_type = 'BASE TABLE'"),
		q("SHOW TABLES WHERE Tables_in_im LIKE '%msg%' OR Tables_in_im = 'IM_INBOX'"),
		q("SHOW FULL TABLES FROM im WHERE Table_type = 'VIEW'"),
		q("SHOW FULL TABLES WHERE Tables_in_im = ? OR Tables_in_im LIKE ?", "conv_msg", "%seq"), // prepared: binary rows
		q("SHOW COLUMNS FROM conv_msg WHERE Field = ? OR `Type` LIKE ?", "seq", "datetime%"),
		q("SHOW DATABASES WHERE `Database` = ?", "im"),
		q("SHOW TABLES FROM no_such_db"), // 1049
		q("DESCRIBE conv_msg"),
		q("DESC im_inbox"),
		q("EXPLAIN msg_content"),
		q("DESCRIBE conv_msg seq"),
		q("SHOW COLUMNS FROM conv_msg"),
		q("SHOW FULL COLUMNS FROM msg_content"),
		q("SHOW FIELDS FROM im.im_conv_seq"),
		q("SHOW COLUMNS FROM im_conv_member FROM im"),
		q("SHOW COLUMNS FROM im_inbox LIKE 'u%'"),
		q("SHOW COLUMNS FROM im_inbox WHERE `Key` = 'PRI'"),
		q("SHOW CREATE TABLE conv_msg"),
		q("SHOW CREATE TABLE `im`.`msg_content`"), // SQLAlchemy reflection
		q("SHOW CREATE TABLE im_inbox"),
		q("SHOW INDEX FROM conv_msg"),
		q("SHOW KEYS FROM im_conv_member"),
		q("SHOW INDEXES FROM im_inbox IN im"),
		q("SHOW INDEX FROM msg_content WHERE Key_name = 'idx_conv'"),
		// A DBA's EXPLAIN of a routed statement: the plan of the physical
		// table it reaches, under the logical names (tables are empty
		// here, so the plans agree with the reference's).
		q("EXPLAIN SELECT seq, msg_id FROM conv_msg WHERE conv_id = ? AND seq < ? ORDER BY seq DESC LIMIT 20", 42, 100),
		q("DESCRIBE SELECT * FROM conv_msg WHERE conv_id = 42 AND msg_id = 7"),
		q("EXPLAIN SELECT m.seq, c.content FROM conv_msg m JOIN msg_content c ON c.msg_id = m.msg_id AND c.conv_id = m.conv_id WHERE m.conv_id = ?", 7),
		q("EXPLAIN FORMAT=JSON SELECT * FROM msg_content WHERE conv_id = 42 AND msg_id = 7"),
		q("EXPLAIN UPDATE im_conv_seq SET max_seq = max_seq + 1 WHERE conv_id = ?", 42),
		q("EXPLAIN DELETE FROM im_inbox WHERE uid = ? AND conv_id = 3", 8),
		q("EXPLAIN FORMAT=JSON DELETE FROM im_inbox WHERE uid = 8"),
		q("EXPLAIN SELECT COUNT(*) FROM conv_msg WHERE msg_type = 1"), // every shard: one table's plan
		q("SHOW DATABASES LIKE 'im%'"),
		q("SHOW DATABASES LIKE 'im\\_%'"), // the shard databases are not there
		q("SHOW SCHEMAS WHERE `Database` = 'im'"),
		q("SELECT SCHEMA_NAME, DEFAULT_CHARACTER_SET_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME LIKE 'im%' ORDER BY 1"),
		// GORM Migrator: HasTable, ColumnTypes, HasColumn, HasIndex,
		// GetIndexes, HasConstraint, GetTables, CurrentDatabase.
		q("SELECT count(*) FROM information_schema.tables WHERE table_schema = ? AND table_name = ? AND table_type = ?", "im", "conv_msg", "BASE TABLE"),
		q("SELECT count(*) FROM information_schema.tables WHERE table_schema = ? AND table_name = ? AND table_type = ?", "im", "no_such_table", "BASE TABLE"),
		q("SELECT column_name, column_default, is_nullable = 'YES', data_type, character_maximum_length, column_type, column_key, extra, column_comment, numeric_precision, numeric_scale , datetime_precision FROM information_schema.columns WHERE table_schema = ? AND table_name = ? ORDER BY ORDINAL_POSITION", "im", "conv_msg"),
		q("SELECT count(*) FROM INFORMATION_SCHEMA.columns WHERE table_schema = ? AND table_name = ? AND column_name = ?", "im", "im_inbox", "send_time"),
		q("SELECT count(*) FROM information_schema.statistics WHERE table_schema = ? AND table_name = ? AND index_name = ?", "im", "conv_msg", "uk_msg"),
		q("SELECT TABLE_NAME, COLUMN_NAME, INDEX_NAME, NON_UNIQUE FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY INDEX_NAME, SEQ_IN_INDEX", "im", "im_inbox"),
		q("SELECT count(*) FROM INFORMATION_SCHEMA.TABLE_CONSTRAINTS WHERE constraint_schema = ? AND table_name = ? AND constraint_name = ?", "im", "conv_msg", "uk_msg"),
		dcase{sql: "SELECT TABLE_NAME FROM information_schema.tables where TABLE_SCHEMA=?", args: []any{"im"}, unordered: true},
		// SQLAlchemy has_table, Flyway, DBeaver.
		q("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = 'im' AND table_name = 'msg_content'"),
		q("SELECT table_name FROM information_schema.tables WHERE table_schema=? AND table_type='BASE TABLE' ORDER BY table_name", "im"),
		q("SELECT t.TABLE_NAME, t.TABLE_TYPE, t.ENGINE, t.ROW_FORMAT, t.TABLE_ROWS, t.TABLE_COLLATION, t.TABLE_COMMENT FROM information_schema.TABLES t WHERE t.TABLE_SCHEMA = ? ORDER BY t.TABLE_NAME", "im"),
		q("SELECT * FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = 'im' AND TABLE_NAME = 'im_conv_seq' ORDER BY ORDINAL_POSITION"),
		q("SELECT kc.CONSTRAINT_NAME, kc.TABLE_SCHEMA, kc.TABLE_NAME, kc.COLUMN_NAME, kc.ORDINAL_POSITION, kc.REFERENCED_TABLE_NAME FROM information_schema.KEY_COLUMN_USAGE kc WHERE kc.TABLE_SCHEMA = ? AND kc.REFERENCED_TABLE_NAME IS NULL ORDER BY kc.TABLE_NAME, kc.CONSTRAINT_NAME, kc.ORDINAL_POSITION", "im"),
		q("SELECT * FROM information_schema.TABLE_CONSTRAINTS WHERE TABLE_SCHEMA = 'im' ORDER BY TABLE_NAME, CONSTRAINT_NAME"),
		q("SELECT c.TABLE_NAME, c.COLUMN_NAME, s.INDEX_NAME FROM information_schema.COLUMNS c JOIN information_schema.STATISTICS s ON s.TABLE_SCHEMA = c.TABLE_SCHEMA AND s.TABLE_NAME = c.TABLE_NAME AND s.COLUMN_NAME = c.COLUMN_NAME WHERE c.TABLE_SCHEMA = DATABASE() ORDER BY 1, 2, 3"),
		q("SELECT information_schema.tables.table_name FROM information_schema.tables WHERE information_schema.tables.table_schema = 'im' ORDER BY 1 LIMIT ? OFFSET ?", 2, 1),
		q("SELECT TABLE_SCHEMA, COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA LIKE 'im%' GROUP BY TABLE_SCHEMA"),
		q("SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_NAME = 'conv_msg'"),
		q("SELECT DATABASE()"),
		q("DESCRIBE no_such_table"),
		q("DESCRIBE `im`.`conv_msg`"), // SQLAlchemy 2 has_table
		q("SHOW COLUMNS FROM `conv_msg` FROM `im` LIKE 'c%'"),
		// Unqualified names while information_schema is the current database.
		q("USE information_schema"),
		q("SELECT TABLE_NAME, INDEX_NAME FROM STATISTICS WHERE TABLE_SCHEMA = 'im' AND SEQ_IN_INDEX = 1 ORDER BY 1, 2"),
		q("SHOW TABLES LIKE 'COLUMNS'"),
		q("USE im"),
	}
}

// physicalName matches what must never reach a client: a physical shard
// table or a shard database (the test layout's im_0, im_1).
var physicalName = regexp.MustCompile(`\b(conv_msg|msg_content|im_conv_seq|im_conv_member|im_inbox)_[0-9]{4}\b|\bim_[0-9]+\b`)

// leakCases list and describe everything; no answer may name a physical
// table or database.
var leakCases = []string{
	"SHOW DATABASES",
	"SHOW TABLES",
	"SHOW FULL TABLES",
	"SHOW TABLE STATUS",
	"SHOW CREATE TABLE conv_msg",
	"SHOW INDEX FROM im_inbox",
	"SHOW FULL COLUMNS FROM msg_content",
	"SELECT * FROM information_schema.SCHEMATA",
	"SELECT * FROM information_schema.TABLES",
	"SELECT * FROM information_schema.COLUMNS",
	"SELECT * FROM information_schema.STATISTICS",
	"SELECT * FROM information_schema.KEY_COLUMN_USAGE",
	"SELECT * FROM information_schema.TABLE_CONSTRAINTS",
	"SELECT * FROM information_schema.PARTITIONS",
	"EXPLAIN SELECT m.seq, c.content FROM conv_msg m JOIN msg_content c ON c.msg_id = m.msg_id AND c.conv_id = m.conv_id WHERE m.conv_id = 7",
	"EXPLAIN FORMAT=JSON DELETE FROM im_inbox WHERE uid = 5",
	"EXPLAIN SELECT * FROM im_conv_member WHERE uid IN (1, 2, 3, 4, 5)",
}

// checkNoPhysicalNames runs leakCases through Convoy.
func checkNoPhysicalNames(t *testing.T, c *sql.Conn) {
	t.Helper()
	ctx := context.Background()
	for _, stmt := range leakCases {
		o := run(ctx, c, q(stmt))
		if o.errno != 0 {
			t.Errorf("%s: %v", stmt, o)
			continue
		}
		if len(o.rows) == 0 {
			t.Errorf("%s: no rows", stmt)
		}
		if m := physicalName.FindString(fmt.Sprint(o.cols, o.rows)); m != "" {
			t.Errorf("%s: answer names %s", stmt, m)
		}
	}
}

func query(t *testing.T, c *sql.Conn, stmt string, args ...any) outcome {
	t.Helper()
	o := run(context.Background(), c, q(stmt, args...))
	if o.errno != 0 {
		t.Fatalf("%s: %v", stmt, o)
	}
	return o
}

func column(t *testing.T, o outcome, name string) int {
	t.Helper()
	i := slices.Index(o.cols, name)
	if i < 0 {
		t.Fatalf("no column %s in %v", name, o.cols)
	}
	return i
}

// checkIntrospection asserts what the reference cannot answer: the
// databases a client sees, and the sizes of the logical tables (summed over
// their physical tables, which the reference does not have).
func checkIntrospection(t *testing.T, s *stack) {
	ctx := context.Background()
	cv, err := s.convoy.open(t, "convoy", "convoy", "im").Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cv.Close()
	checkNoPhysicalNames(t, cv)

	// SHOW DATABASES: the default datasource's databases without the shard
	// databases and the system schemas; information_schema stays.
	ds0, err := s.ds[0].Open(t, "").Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ds0.Close()
	var want [][]string
	for _, row := range query(t, ds0, "SHOW DATABASES").rows {
		switch row[0] {
		case "'im_0'", "'im_1'", "'mysql'", "'performance_schema'", "'sys'":
		default:
			want = append(want, row)
		}
	}
	got := query(t, cv, "SHOW DATABASES")
	if !reflect.DeepEqual(got.rows, want) || !strings.Contains(fmt.Sprint(got.rows), "'information_schema'") {
		t.Errorf("SHOW DATABASES through Convoy: %v, want %v", got.rows, want)
	}
	if got := query(t, cv, "SELECT SCHEMA_NAME FROM information_schema.SCHEMATA ORDER BY 1"); !reflect.DeepEqual(got.rows, want) {
		t.Errorf("information_schema.SCHEMATA through Convoy: %v, want %v", got.rows, want)
	}

	// Sizes: exact row counts once InnoDB's statistics are fresh on every
	// physical table.
	for i, ds := range s.ds {
		c, err := ds.Open(t, "").Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, row := range query(t, c, fmt.Sprintf("SELECT CONCAT('`', TABLE_SCHEMA, '`.`', TABLE_NAME, '`') FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'im_%d'", i)).rows {
			query(t, c, "ANALYZE TABLE "+strings.Trim(row[0], "'"))
		}
		c.Close()
	}
	status := query(t, cv, "SHOW TABLE STATUS")
	name, rows, data := column(t, status, "Name"), column(t, status, "Rows"), column(t, status, "Data_length")
	var names []string
	for _, row := range status.rows {
		names = append(names, strings.Trim(row[name], "'"))
	}
	if want := []string{"conv_msg", "im_conv_member", "im_conv_seq", "im_inbox", "msg_content"}; !reflect.DeepEqual(names, want) {
		t.Errorf("SHOW TABLE STATUS lists %v, want %v", names, want)
	}
	for i, tbl := range names {
		count := query(t, cv, "SELECT COUNT(*) FROM "+tbl).rows[0][0]
		if got := status.rows[i][rows]; got != count {
			t.Errorf("SHOW TABLE STATUS: %s has Rows %s, COUNT(*) %s", tbl, got, count)
		}
		// 8 physical tables of at least one 16 KiB page each.
		if n, _ := strconv.Atoi(strings.Trim(status.rows[i][data], "'")); n < 8*16384 {
			t.Errorf("SHOW TABLE STATUS: %s has Data_length %d, want the sum over its 8 physical tables", tbl, n)
		}
		is := query(t, cv, "SELECT TABLE_ROWS, DATA_LENGTH FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?", tbl)
		if !reflect.DeepEqual(is.rows[0], []string{count, status.rows[i][data]}) {
			t.Errorf("information_schema.TABLES: %s has %v, SHOW TABLE STATUS %v", tbl, is.rows[0], []string{status.rows[i][rows], status.rows[i][data]})
		}
	}
	if got := query(t, cv, "SHOW TABLE STATUS LIKE 'im\\_conv%'"); len(got.rows) != 2 {
		t.Errorf("SHOW TABLE STATUS LIKE 'im\\_conv%%': %v", got.rows)
	}
	if got := query(t, cv, "SHOW TABLE STATUS WHERE Name = 'conv_msg' AND Engine = 'InnoDB'"); len(got.rows) != 1 {
		t.Errorf("SHOW TABLE STATUS WHERE Name = 'conv_msg': %v", got.rows)
	}
}

// TestIntrospectionRemoteRepresentative runs the introspection cases with a
// default datasource that holds no shard: the representative tables live
// on another server, and their information_schema rows reach the default
// datasource as literals.
func TestIntrospectionRemoteRepresentative(t *testing.T) {
	s := newStackLayout(t, func(ds ...*testsvc.MariaDB) router.Document {
		doc := testLayout(ds[1])
		doc.Datasources = append(doc.Datasources, router.Datasource{Name: "ds9", Addr: ds[0].Addr(), User: "root"})
		doc.DefaultDatasource = "ds9"
		return doc
	})
	ctx := context.Background()
	for _, mode := range []string{"&interpolateParams=true", "&interpolateParams=false"} {
		h := openPair(t, s, mode)
		for i, dc := range introspectionCases() {
			want, got := run(ctx, h.ref, dc), run(ctx, h.cv, dc)
			if !same(want, got, dc.unordered) {
				t.Errorf("%s case %d: %s %v\n  mariadb: %v\n  convoy:  %v", mode, i, dc.sql, dc.args, want, got)
			}
		}
		checkNoPhysicalNames(t, h.cv)
	}
}

// checkExplain asserts what the differential cases cannot: an EXPLAIN of
// a write runs nothing, a statement reaching several physical tables shows
// each one's plan with a note saying whose rows are whose, one reaching
// every shard says that one table's plan stands for all, and the forms
// Convoy cannot route are refused with 1235.
func checkExplain(t *testing.T, s *stack) {
	ctx := context.Background()
	cv, err := s.convoy.open(t, "convoy", "convoy", "im").Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cv.Close()
	if _, err := cv.ExecContext(ctx, "INSERT INTO im_conv_seq (conv_id, max_seq) VALUES (4242, 7) ON DUPLICATE KEY UPDATE max_seq = 7"); err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{
		"EXPLAIN UPDATE im_conv_seq SET max_seq = max_seq + 1 WHERE conv_id = 4242",
		"EXPLAIN DELETE FROM im_conv_seq WHERE conv_id = 4242",
	} {
		if o := query(t, cv, stmt); len(o.rows) == 0 || o.cols[0] != "id" {
			t.Errorf("%s: %v", stmt, o)
		}
	}
	if o := query(t, cv, "SELECT max_seq FROM im_conv_seq WHERE conv_id = 4242"); fmt.Sprint(o.rows) != "[['7']]" {
		t.Fatalf("an EXPLAIN changed the row: max_seq %v, want 7", o.rows)
	}
	notes := func() []string {
		var out []string
		for _, r := range query(t, cv, "SHOW WARNINGS").rows {
			if r[0] == "'Note'" && r[1] == "'1105'" {
				out = append(out, r[2])
			}
		}
		return out
	}
	// Keys on three shards in three physical tables (a 2 x 4 shared layout).
	var keys []string
	tables := map[string]bool{}
	snapDoc := testLayout(s.ds[0], s.ds[1])
	snap, err := router.NewSnapshot(snapDoc)
	if err != nil {
		t.Fatal(err)
	}
	for k := uint64(1); len(keys) < 3; k++ {
		p := snap.Physical("conv_msg", router.ShardOf(k))
		if !tables[p.Database+"."+p.Table] {
			tables[p.Database+"."+p.Table] = true
			keys = append(keys, strconv.FormatUint(k, 10))
		}
	}
	o := query(t, cv, "EXPLAIN SELECT * FROM conv_msg WHERE conv_id IN ("+strings.Join(keys, ", ")+")")
	if n := notes(); len(o.rows) != 3 || len(n) != 3 || !strings.Contains(n[0], "plan rows 1-1: shard ") || !strings.Contains(n[2], "plan rows 3-3: shard ") {
		t.Errorf("EXPLAIN over three tables: rows %v, notes %v", o.rows, n)
	}
	o = query(t, cv, "EXPLAIN SELECT * FROM conv_msg WHERE msg_type = 1")
	if n := notes(); len(o.rows) != 1 || len(n) != 1 || !strings.Contains(n[0], "reaches every shard of conv_msg: the plan shown is shard ") {
		t.Errorf("EXPLAIN of a scatter: rows %v, notes %v", o.rows, n)
	}
	for _, stmt := range []string{
		"EXPLAIN INSERT INTO conv_msg (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES (1, 1, 1, 1, 1, NOW())",
		"EXPLAIN SELECT conv_id FROM conv_msg WHERE conv_id = 1 UNION SELECT conv_id FROM conv_msg WHERE conv_id = 2",
	} {
		if o := run(ctx, cv, q(stmt)); o.errno != 1235 {
			t.Errorf("%s: %v, want 1235", stmt, o)
		}
	}
}

// checkWarningsPrivate: a statement's conditions are its session's. One
// session's warning, on an unsharded or a sharded statement, is never what
// another session's SHOW WARNINGS lists, although both use the same pooled
// backend connections.
func checkWarningsPrivate(t *testing.T, s *stack) {
	ctx := context.Background()
	db := s.convoy.open(t, "convoy", "convoy", "im")
	a, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, stmt := range []string{"SELECT CAST('secret-a' AS SIGNED)", "SELECT CAST('secret-b' AS SIGNED), seq FROM conv_msg WHERE conv_id = 42 AND seq = 1"} {
		query(t, a, stmt)
		if o := query(t, b, "SHOW WARNINGS"); len(o.rows) != 0 {
			t.Errorf("after %q in another session, SHOW WARNINGS lists %v", stmt, o.rows)
		}
		if o := query(t, a, "SHOW WARNINGS"); len(o.rows) != 1 || !strings.Contains(o.rows[0][2], "secret-") {
			t.Errorf("after %q, its session's SHOW WARNINGS lists %v", stmt, o.rows)
		}
	}
}
