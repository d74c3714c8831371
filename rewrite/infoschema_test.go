package rewrite

import (
	"reflect"
	"strings"
	"testing"

	"github.com/pingcap/tidb/pkg/parser/ast"
)

func analyzeOne(t *testing.T, p *Parser, query string) *Analysis {
	t.Helper()
	a, err := parseOne(t, p, query)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func testSchema() *LogicalSchema {
	return &LogicalSchema{
		Hidden: []string{"im_0", "im_1", "mysql", "performance_schema", "sys"},
		RepDB:  "im_0",
		Tables: []RepTable{{"conv_msg", "conv_msg_0000"}, {"im_inbox", "im_inbox_0000"}},
	}
}

// The views stand in for information_schema tables where they are read,
// keep the statement's aliases and qualifiers working, and the arguments
// follow the placeholders as the restored text prints them.
func TestInfoSchemaTemplate(t *testing.T) {
	p := NewParser()
	view := func(name string) string { return "{" + name + "}" }
	for _, c := range []struct {
		db, query, want string
		args, bound     []any
	}{
		{
			db:    "im",
			query: "SELECT count(*) FROM information_schema.tables WHERE table_schema = ? AND table_name = ? AND table_type = ?",
			want:  "SELECT COUNT(1) AS `count(*)` FROM {TABLES} AS `tables` WHERE `table_schema`=? AND `table_name`=? AND `table_type`=?",
		},
		{
			db:    "",
			query: "SELECT c.TABLE_NAME FROM INFORMATION_SCHEMA.Columns c JOIN information_schema.STATISTICS ON STATISTICS.TABLE_NAME = c.TABLE_NAME WHERE c.TABLE_SCHEMA = DATABASE()",
			want:  "SELECT `c`.`TABLE_NAME` FROM {COLUMNS} AS `c` JOIN {STATISTICS} AS `STATISTICS` ON `STATISTICS`.`TABLE_NAME`=`c`.`TABLE_NAME` WHERE `c`.`TABLE_SCHEMA`=DATABASE()",
		},
		{
			db:    "im",
			query: "SELECT information_schema.tables.table_name, information_schema.tables.* FROM information_schema.tables LIMIT ? OFFSET ?",
			want:  "SELECT `tables`.`table_name`,`tables`.* FROM {TABLES} AS `tables` LIMIT ?,?",
			args:  []any{10, 2}, bound: []any{2, 10},
		},
		{
			db:    "information_schema",
			query: "SELECT * FROM tables t WHERE t.table_schema IN (SELECT schema_name FROM schemata)",
			want:  "SELECT * FROM {TABLES} AS `t` WHERE `t`.`table_schema` IN (SELECT `schema_name` FROM {SCHEMATA} AS `schemata`)",
		},
	} {
		a := analyzeOne(t, p, c.query)
		tmpl, err := NewInfoSchemaTemplate(a, c.db)
		if err != nil {
			t.Fatalf("%s: %v", c.query, err)
		}
		if got := string(tmpl.FillViews(nil, view)); got != c.want {
			t.Errorf("%s\n got: %s\nwant: %s", c.query, got, c.want)
		}
		if c.args != nil && !reflect.DeepEqual(tmpl.Bind(c.args), c.bound) {
			t.Errorf("%s: arguments bound as %v, want %v", c.query, tmpl.Bind(c.args), c.bound)
		}
		if again, _ := Restore(a.Stmt); !strings.Contains(strings.ToLower(again), "information_schema") && c.db != "information_schema" {
			t.Errorf("%s: the AST was not put back: %s", c.query, again)
		}
	}
}

// Only information_schema tables the rewrite knows, read by a SELECT, are
// references; a user table of the same name is not.
func TestInfoSchemaRefs(t *testing.T) {
	p := NewParser()
	for _, c := range []struct {
		db, query string
		want      []string
	}{
		{"im", "SELECT * FROM information_schema.TABLES t JOIN information_schema.columns c USING (TABLE_NAME) JOIN information_schema.tables t2", []string{"TABLES", "COLUMNS"}},
		{"im", "SELECT * FROM tables", nil},
		{"im", "SELECT * FROM information_schema.PROCESSLIST", nil},
		{"information_schema", "SELECT * FROM key_column_usage", []string{"KEY_COLUMN_USAGE"}},
		{"im", "SHOW TABLES", nil},
		{"im", "DELETE FROM t WHERE x IN (SELECT TABLE_NAME FROM information_schema.TABLES)", nil},
	} {
		if got := InfoSchemaRefs(analyzeOne(t, p, c.query), c.db); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s in %s: %v, want %v", c.query, c.db, got, c.want)
		}
	}
}

// The views are SQL the parser reads back, with the logical rows and
// (for TABLES) the summed sizes where the representative's were.
func TestInfoSchemaView(t *testing.T) {
	ls := testSchema()
	ls.Sizes = map[string]TableSizes{"conv_msg": {Rows: 10, DataLength: 1000}}
	cols := []string{"TABLE_CATALOG", "TABLE_SCHEMA", "TABLE_NAME", "TABLE_ROWS", "AVG_ROW_LENGTH", "REFERENCED_TABLE_NAME", "REFERENCED_TABLE_SCHEMA"}
	v := InfoSchemaView("TABLES", cols, ls, nil)
	for _, want := range []string{
		"(SELECT `TABLE_CATALOG`,`TABLE_SCHEMA`,`TABLE_NAME`,`TABLE_ROWS`,",
		" FROM `information_schema`.`TABLES` WHERE `TABLE_SCHEMA` NOT IN ('im_0','im_1','mysql','performance_schema','sys') UNION ALL ",
		"SELECT `t`.`TABLE_CATALOG`,`d`.`SCHEMA_NAME`,_utf8'conv_msg',CAST(10 AS UNSIGNED),CAST(100 AS UNSIGNED),CASE `t`.`REFERENCED_TABLE_NAME` WHEN 'conv_msg_0000' THEN _utf8'conv_msg' WHEN 'im_inbox_0000' THEN _utf8'im_inbox' ELSE `t`.`REFERENCED_TABLE_NAME` END,IF(`t`.`REFERENCED_TABLE_SCHEMA`='im_0',`d`.`SCHEMA_NAME`,`t`.`REFERENCED_TABLE_SCHEMA`)",
		" JOIN (SELECT `SCHEMA_NAME` FROM `information_schema`.`SCHEMATA` WHERE `SCHEMA_NAME` NOT IN ('im_0','im_1','mysql','performance_schema','sys','information_schema')) AS `d` WHERE `t`.`TABLE_SCHEMA`='im_0' AND `t`.`TABLE_NAME`='conv_msg_0000'",
		"SELECT `t`.`TABLE_CATALOG`,`d`.`SCHEMA_NAME`,_utf8'im_inbox',`t`.`TABLE_ROWS`,`t`.`AVG_ROW_LENGTH`,", // no sizes: its own
	} {
		if !strings.Contains(v, want) {
			t.Errorf("view lacks %s\n%s", want, v)
		}
	}
	if _, err := NewParser().Parse("SELECT * FROM " + v + " AS `tables`"); err != nil {
		t.Errorf("view does not parse: %v\n%s", err, v)
	}
	if v := InfoSchemaView("SCHEMATA", []string{"CATALOG_NAME", "SCHEMA_NAME"}, ls, nil); v != "(SELECT `CATALOG_NAME`,`SCHEMA_NAME` FROM `information_schema`.`SCHEMATA` WHERE `SCHEMA_NAME` NOT IN ('im_0','im_1','mysql','performance_schema','sys'))" {
		t.Errorf("SCHEMATA view: %s", v)
	}

	// The representative on another server: its rows, read there with a
	// marker for the logical database, become literal rows.
	q := InfoSchemaRepQuery("COLUMNS", []string{"TABLE_SCHEMA", "TABLE_NAME", "ORDINAL_POSITION"}, ls, "M")
	if want := "SELECT 'M',_utf8'conv_msg',`t`.`ORDINAL_POSITION` FROM `information_schema`.`COLUMNS` AS `t` WHERE `t`.`TABLE_SCHEMA`='im_0' AND `t`.`TABLE_NAME`='conv_msg_0000' UNION ALL SELECT 'M',_utf8'im_inbox',`t`.`ORDINAL_POSITION` FROM `information_schema`.`COLUMNS` AS `t` WHERE `t`.`TABLE_SCHEMA`='im_0' AND `t`.`TABLE_NAME`='im_inbox_0000'"; q != want {
		t.Errorf("rep query\n got: %s\nwant: %s", q, want)
	}
	rows := [][]string{{RepSchema, RepLiteral([]byte("conv_msg"), false, LiteralString), RepLiteral([]byte("1"), false, LiteralUnsigned)},
		{RepSchema, RepLiteral(nil, true, LiteralString), RepLiteral(nil, true, LiteralUnsigned)}}
	v = InfoSchemaView("COLUMNS", []string{"TABLE_SCHEMA", "TABLE_NAME", "ORDINAL_POSITION"}, ls, rows)
	if want := " UNION ALL SELECT `d`.`SCHEMA_NAME`,_utf8'conv_msg',CAST(1 AS UNSIGNED) FROM (SELECT `SCHEMA_NAME` FROM `information_schema`.`SCHEMATA` WHERE `SCHEMA_NAME` NOT IN ('im_0','im_1','mysql','performance_schema','sys','information_schema')) AS `d` UNION ALL SELECT `d`.`SCHEMA_NAME`,NULL,CAST(NULL AS UNSIGNED) FROM "; !strings.Contains(v, want) {
		t.Errorf("literal view lacks %s\n%s", want, v)
	}
	if strings.Contains(v, "`t`") {
		t.Errorf("literal view reads the local information_schema: %s", v)
	}
}

func TestRepLiteral(t *testing.T) {
	for _, c := range []struct {
		v    string
		null bool
		kind LiteralKind
		want string
	}{
		{"it's", false, LiteralString, `_utf8'it\'s'`},
		{"-5", false, LiteralSigned, "CAST(-5 AS SIGNED)"},
		{"5; DROP TABLE x", false, LiteralUnsigned, `_utf8'5; DROP TABLE x'`}, // not a number: stays a string
		{"2026-01-01 00:00:00", false, LiteralDatetime, "CAST('2026-01-01 00:00:00' AS DATETIME)"},
		{"1.50", false, LiteralDecimal, "1.50"},
		{"", true, LiteralString, "NULL"},
		{"", true, LiteralSigned, "CAST(NULL AS SIGNED)"},
	} {
		if got := RepLiteral([]byte(c.v), c.null, c.kind); got != c.want {
			t.Errorf("RepLiteral(%q, %v, %d) = %s, want %s", c.v, c.null, c.kind, got, c.want)
		}
	}
}

func TestShowCondition(t *testing.T) {
	p := NewParser()
	for _, c := range []struct{ query, want string }{
		{"SHOW TABLES LIKE 'conv%'", "CAST(`Tables_in_im (conv%)` AS BINARY) LIKE 'conv%'"},
		{"SHOW FULL TABLES WHERE Table_type = 'VIEW' OR Tables_in_im = ?", "`Table_type`='VIEW' OR `Tables_in_im`=?"},
		{"SHOW TABLES", ""},
	} {
		stmts, err := p.Parse(c.query)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ShowCondition(stmts[0].(*ast.ShowStmt), "Tables_in_im (conv%)")
		if err != nil || got != c.want {
			t.Errorf("%s: %q %v, want %q", c.query, got, err, c.want)
		}
	}
	q := RowsQuery([]string{"Name", "Rows"}, [][]string{{"_utf8'a'", "CAST(1 AS UNSIGNED)"}, {"_utf8'b'", "NULL"}}, "`Rows` > 0")
	if want := "SELECT `cvy_row` FROM (SELECT 0 AS `cvy_row`,_utf8'a' AS `Name`,CAST(1 AS UNSIGNED) AS `Rows` UNION ALL SELECT 1,_utf8'b',NULL) AS `cvy_rows` WHERE `Rows` > 0"; q != want {
		t.Errorf("RowsQuery\n got: %s\nwant: %s", q, want)
	}
}

// Any SELECT on information_schema gets a template whose views fill in as
// SQL the parser reads back, and the statement is left as parsed.
func FuzzInfoSchemaTemplate(f *testing.F) {
	for _, q := range []string{
		"SELECT count(*) FROM information_schema.tables WHERE table_schema = ? AND table_name = ? AND table_type = ?",
		"SELECT column_name, is_nullable = 'YES' FROM information_schema.columns WHERE table_schema = ? AND table_name = ? ORDER BY ORDINAL_POSITION",
		"SELECT information_schema.tables.* FROM information_schema.tables WHERE 0x2A = 42 LIMIT ? OFFSET ?",
		"SELECT * FROM tables t JOIN (SELECT * FROM statistics) s USING (table_name) WHERE t.table_schema IN (SELECT schema_name FROM schemata)",
		"SELECT 1 UNION SELECT COUNT(*) FROM information_schema.KEY_COLUMN_USAGE kc WHERE kc.REFERENCED_TABLE_NAME IS NULL",
	} {
		f.Add(q)
	}
	p := NewParser()
	f.Fuzz(func(t *testing.T, q string) {
		if CheckComments(q) != nil {
			return
		}
		stmts, err := p.Parse(q)
		if err != nil || len(stmts) != 1 {
			return
		}
		a, err := Analyze(stmts[0])
		if err != nil || len(InfoSchemaRefs(a, "information_schema")) == 0 {
			return
		}
		before, err := Restore(a.Stmt)
		if err != nil {
			return
		}
		tmpl, err := NewInfoSchemaTemplate(a, "information_schema")
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		if after, _ := Restore(a.Stmt); after != before {
			t.Fatalf("%s: the AST changed:\n%s\n%s", q, before, after)
		}
		sql := string(tmpl.FillViews(nil, func(string) string { return "(SELECT 1 AS `x`)" }))
		if _, err := p.Parse(sql); err != nil {
			t.Fatalf("%s: filled template does not parse: %v\n%s", q, err, sql)
		}
		if tmpl.Params() != a.ParamCount {
			t.Fatalf("%s: %d placeholders in the template, %d in the statement", q, tmpl.Params(), a.ParamCount)
		}
	})
}
