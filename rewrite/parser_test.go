package rewrite

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/pingcap/tidb/pkg/parser/ast"
)

// TestParseHugeDecimal: the parser's literal driver panics on a decimal of
// more than 81 digits; Parse answers a 1064 syntax error, and the parser
// keeps working with its SQL mode (found by FuzzInfoSchemaTemplate).
func TestParseHugeDecimal(t *testing.T) {
	p := NewParser()
	if err := p.SetSQLMode("ANSI_QUOTES"); err != nil {
		t.Fatal(err)
	}
	_, err := p.Parse("SELECT " + strings.Repeat("9", 100) + ".5")
	var se *SyntaxError
	if !errors.As(err, &se) || se.Code != 1064 {
		t.Fatalf("Parse of a 100-digit decimal: %v, want a 1064 syntax error", err)
	}
	stmts, err := p.Parse(`SELECT "a" FROM t`)
	if err != nil || len(stmts) != 1 {
		t.Fatalf("the parser after the refusal: %v", err)
	}
	// ANSI_QUOTES survived the fresh parser: "a" is a column, not a string.
	sel := stmts[0].(*ast.SelectStmt)
	if _, ok := sel.Fields.Fields[0].Expr.(*ast.ColumnNameExpr); !ok {
		t.Fatalf(`"a" parsed as %T: the SQL mode was lost`, sel.Fields.Fields[0].Expr)
	}
}

// TestRestoreShareLock: a shared-lock read is printed as MariaDB spells it
// (the parser prints FOR SHARE, which MariaDB refuses with 1064), and only
// the clause: the words inside strings and names stay as they were.
func TestRestoreShareLock(t *testing.T) {
	p := NewParser()
	for _, c := range []struct{ in, want string }{
		{"SELECT seq FROM conv_msg WHERE conv_id = 1 LOCK IN SHARE MODE",
			"SELECT `seq` FROM `conv_msg` WHERE `conv_id`=1 LOCK IN SHARE MODE"},
		{"SELECT seq FROM conv_msg WHERE conv_id = 1 FOR SHARE",
			"SELECT `seq` FROM `conv_msg` WHERE `conv_id`=1 LOCK IN SHARE MODE"},
		{"SELECT seq FROM conv_msg WHERE conv_id = 1 ORDER BY seq LIMIT 2 FOR SHARE SKIP LOCKED",
			"SELECT `seq` FROM `conv_msg` WHERE `conv_id`=1 ORDER BY `seq` LIMIT 2 LOCK IN SHARE MODE SKIP LOCKED"},
		{"SELECT ' FOR SHARE', `a FOR SHARE` FROM t WHERE b = 'it\\'s FOR SHARE' LOCK IN SHARE MODE",
			"SELECT ' FOR SHARE',`a FOR SHARE` FROM `t` WHERE `b`='it''s FOR SHARE' LOCK IN SHARE MODE"},
		{"SELECT a FROM t WHERE b = 'x\\\\' FOR SHARE", "SELECT `a` FROM `t` WHERE `b`='x\\\\' LOCK IN SHARE MODE"},
		{"SELECT a FROM t WHERE a IN (SELECT a FROM u LOCK IN SHARE MODE) FOR UPDATE",
			"SELECT `a` FROM `t` WHERE `a` IN (SELECT `a` FROM `u` LOCK IN SHARE MODE) FOR UPDATE"},
		{"SELECT ' FOR SHARE' FROM t", "SELECT ' FOR SHARE' FROM `t`"},
	} {
		stmts, err := p.Parse(c.in)
		if err != nil {
			t.Fatalf("%s: %v", c.in, err)
		}
		got, err := Restore(stmts[0])
		if err != nil || got != c.want {
			t.Errorf("Restore(%s)\n got %s (%v)\nwant %s", c.in, got, err, c.want)
		}
	}
}

// TestOtherKeys: the key restrictions of table references besides the one
// a statement is routed by, and when nested blocks alone route it.
func TestOtherKeys(t *testing.T) {
	p := NewParser()
	for _, c := range []struct {
		sql    string
		others int
		nested bool
	}{
		{"SELECT seq FROM conv_msg WHERE conv_id = 1 AND conv_id = 2", 0, false}, // one reference
		{"SELECT m.seq FROM conv_msg m JOIN msg_content c ON c.msg_id = m.msg_id WHERE m.conv_id = 1", 0, false},
		{"SELECT m.seq FROM conv_msg m JOIN msg_content c ON c.msg_id = m.msg_id WHERE m.conv_id = 1 AND c.conv_id = ?", 1, false},
		{"SELECT seq FROM conv_msg WHERE conv_id = 1 AND msg_id IN (SELECT msg_id FROM msg_content WHERE conv_id = 2)", 1, false},
		{"SELECT seq FROM conv_msg m WHERE conv_id = 1 AND EXISTS (SELECT 1 FROM msg_content c WHERE c.msg_id = m.msg_id)", 0, false},
		{"SELECT EXISTS (SELECT * FROM conv_msg WHERE conv_id = ? AND seq = ?) AS e", 1, true},
		{"SELECT * FROM (SELECT seq FROM conv_msg WHERE conv_id = 3) t", 1, true},
		{"SELECT (SELECT COUNT(*) FROM conv_msg WHERE conv_id = 1), (SELECT COUNT(*) FROM msg_content)", 1, false}, // an unrestricted one reads every shard
		{"SELECT * FROM conv_msg WHERE msg_id IN (SELECT msg_id FROM msg_content WHERE conv_id = 2)", 1, false},    // the statement's own table is unrestricted
		{"UPDATE conv_msg SET msg_type = 1 WHERE conv_id = 1 AND msg_id IN (SELECT msg_id FROM msg_content WHERE conv_id = 2)", 1, false},
		{"SELECT seq FROM conv_msg WHERE conv_id = 1 UNION ALL SELECT seq FROM conv_msg WHERE conv_id = ?", 2, true},
		{"SELECT seq FROM conv_msg WHERE conv_id = 1 UNION SELECT seq FROM conv_msg", 1, false},
	} {
		a := analyzeOne(t, p, c.sql)
		if len(a.OtherKeys) != c.others || a.RoutedByNested != c.nested {
			t.Errorf("%s: %d other restrictions (routed by nested %v), want %d (%v)", c.sql, len(a.OtherKeys), a.RoutedByNested, c.others, c.nested)
		}
	}
}

func TestWordOffsets(t *testing.T) {
	for _, c := range []struct {
		text string
		want []int
	}{
		{"a = 1 FOR SELECT 1", []int{6}},
		{"a = 'x FOR y' FOR SELECT `for` FROM t", []int{14}},
		{"a = 1 for (select 'for') union all select \"for\"", []int{6}},
		{"forward = 1 FOR SELECT before, fortune", []int{12}},
		{"a = 'it\\'s for' FOR x", []int{16}},
		{"a /* for */ FOR -- for\n @for # for\n for", []int{12, 36}}, // not in comments or variable names
		{"/*!50003 FOR */", []int{9}},                                // an executable comment's content is SQL
	} {
		if got := WordOffsets(c.text, "FOR"); !slices.Equal(got, c.want) {
			t.Errorf("WordOffsets(%q) = %v, want %v", c.text, got, c.want)
		}
	}
}

func TestMariaDBSpellings(t *testing.T) {
	p := NewParser()
	for _, c := range []struct{ in, want string }{
		{"SELECT a FROM t WHERE b = 1 LOCK IN SHARE MODE NOWAIT", "SELECT `a` FROM `t` WHERE `b`=1 LOCK IN SHARE MODE NOWAIT"},
		{"SELECT a FROM t lock  in share\nmode skip locked", "SELECT `a` FROM `t` LOCK IN SHARE MODE SKIP LOCKED"},
		{"INSERT INTO t (a, b) VALUES (1, 'value(') ON DUPLICATE KEY UPDATE b = VALUE (b), a = VALUE(a) + 1",
			"INSERT INTO `t` (`a`,`b`) VALUES (1,'value(') ON DUPLICATE KEY UPDATE `b`=VALUES(`b`),`a`=VALUES(`a`)+1"},
		{"SELECT a FROM t ORDER BY a OFFSET 2 ROWS FETCH NEXT 3 ROWS ONLY", "SELECT `a` FROM `t` ORDER BY `a` LIMIT 2,3"},
		{"SELECT a FROM t ORDER BY a offset ? row fetch first ? row only", "SELECT `a` FROM `t` ORDER BY `a` LIMIT ?,?"},
		{"SELECT a FROM t ORDER BY a FETCH NEXT 4 ROWS ONLY", "SELECT `a` FROM `t` ORDER BY `a` LIMIT 4"},
	} {
		alt, ok := MariaDBSpellings(c.in)
		if !ok {
			t.Fatalf("%s: nothing rewritten", c.in)
		}
		stmts, err := p.Parse(alt)
		if err != nil {
			t.Fatalf("%s -> %s: %v", c.in, alt, err)
		}
		if got, err := Restore(stmts[0]); err != nil || got != c.want {
			t.Errorf("%s\n got %s (%v)\nwant %s", c.in, got, err, c.want)
		}
	}
	if _, ok := MariaDBSpellings("SELECT 'LOCK IN SHARE MODE NOWAIT', `value`(1), 'OFFSET 1 ROWS FETCH NEXT 2 ROWS ONLY'"); ok {
		t.Errorf("quoted words rewritten")
	}
}

func TestLockWaitAsSetStatement(t *testing.T) {
	got, ok := LockWaitAsSetStatement("SELECT a FROM t WHERE b = ? lock in share mode\nWAIT 7")
	if want := "SET STATEMENT lock_wait_timeout = 7, innodb_lock_wait_timeout = 7 FOR SELECT a FROM t WHERE b = ? lock in share mode"; !ok || got != want {
		t.Fatalf("got %q, %v\nwant %q", got, ok, want)
	}
	for _, sql := range []string{
		"SELECT 'LOCK IN SHARE MODE WAIT 7' FROM t",
		"SELECT a FROM t LOCK IN SHARE MODE",
		"SELECT a FROM t LOCK IN SHARE MODE WAIT 1 UNION SELECT a FROM u LOCK IN SHARE MODE WAIT 2",
	} {
		if got, ok := LockWaitAsSetStatement(sql); ok {
			t.Errorf("%s: rewritten as %s", sql, got)
		}
	}
}

func TestUnparsedShardedReason(t *testing.T) {
	for sql, want := range map[string]string{
		"SELECT * FROM conv_msg WHERE conv_id = 1 ORDER BY seq FETCH FIRST 5 ROWS WITH TIES": "WITH TIES",
		"SELECT * FROM conv_msg WHERE conv_id = 1 LIMIT 5 ROWS EXAMINED 100":                 "ROWS EXAMINED",
		"ANALYZE TABLE conv_msg PERSISTENT FOR ALL":                                          "PERSISTENT FOR",
		"SELECT COUNT(*) FROM conv_msg FOR SYSTEM_TIME ALL":                                  "SYSTEM_TIME",
		"SELECT * FROM conv_msg WHERE conv_id IN (VALUES (1), (2))":                          "table value constructor",
		"SELECT * FROM vt FETCH FIRST 5 ROWS WITH TIES":                                      "", // not sharded: MariaDB reads it
		"SELECT * FORM conv_msg WHERE conv_id = 1":                                           "", // a typo: 1064
		"SELECT 'WITH TIES' FROM conv_msg WHERE conv_id = 1 ORDER BY":                        "",
	} {
		got := UnparsedShardedReason(sql)
		if want == "" && got != "" || want != "" && (!strings.Contains(got, want) || !strings.Contains(got, "conv_msg")) {
			t.Errorf("%s: %q, want one naming %q", sql, got, want)
		}
	}
}

func TestAnalyzeMaintenance(t *testing.T) {
	p := NewParser()
	for _, c := range []struct {
		sql, op, options string
		local            bool
		tables           int
	}{
		{"CHECK TABLE conv_msg", "check", "", false, 1},
		{"check table conv_msg, im_conv_seq extended;", "check", "extended", false, 2},
		{"CHECK TABLE `conv_msg` FOR UPGRADE", "check", "FOR UPGRADE", false, 1},
		{"REPAIR NO_WRITE_TO_BINLOG TABLE im.conv_msg QUICK USE_FRM", "repair", "QUICK USE_FRM", true, 1},
		{"CHECKSUM TABLE conv_msg, msg_content EXTENDED", "checksum", "EXTENDED", false, 2},
		{"CHECKSUM TABLE quick", "checksum", "", false, 1},
	} {
		a, ok, err := AnalyzeMaintenance(p, c.sql)
		if !ok || err != nil {
			t.Fatalf("%s: %v %v", c.sql, ok, err)
		}
		m := a.Maintenance
		if a.Kind != KindMaintenance || m.Op != c.op || m.Options != c.options || m.Local != c.local || len(m.Tables) != c.tables {
			t.Errorf("%s: %+v", c.sql, m)
		}
	}
	if _, ok, _ := AnalyzeMaintenance(p, "CHECKSUM TABLE (SELECT 1)"); ok {
		t.Errorf("a non-table list was taken")
	}
}
