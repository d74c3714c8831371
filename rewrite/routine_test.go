package rewrite

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestClassifyRoutine(t *testing.T) {
	cases := []struct {
		sql    string
		kind   RoutineKind // 0: not a routine statement
		what   string
		params int
		vars   []string
	}{
		{sql: "CREATE PROCEDURE p() BEGIN SELECT 1; SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'x'; END", kind: RoutineDefine, what: "CREATE PROCEDURE"},
		{sql: "create or replace definer = 'root'@'%' procedure p() select 1", kind: RoutineDefine, what: "CREATE PROCEDURE"},
		{sql: "CREATE DEFINER=CURRENT_USER() FUNCTION f() RETURNS INT RETURN 1", kind: RoutineDefine, what: "CREATE FUNCTION"},
		{sql: "CREATE DEFINER=CURRENT_USER FUNCTION f() RETURNS INT RETURN 1", kind: RoutineDefine, what: "CREATE FUNCTION"},
		{sql: "CREATE DEFINER=root@localhost AGGREGATE FUNCTION f(x INT) RETURNS INT BEGIN RETURN 1; END", kind: RoutineDefine, what: "CREATE FUNCTION"},
		// mysqldump's trigger form: the clauses in version comments.
		{sql: "/*!50003 CREATE*/ /*!50017 DEFINER=`root`@`localhost`*/ /*!50003 TRIGGER t BEFORE INSERT ON audit FOR EACH ROW SET NEW.n = 1 */", kind: RoutineDefine, what: "CREATE TRIGGER"},
		{sql: "-- note\nCREATE EVENT IF NOT EXISTS e ON SCHEDULE EVERY 1 HOUR DO DELETE FROM audit", kind: RoutineDefine, what: "CREATE EVENT"},
		{sql: "ALTER PROCEDURE p COMMENT 'x'", kind: RoutineDefine, what: "ALTER PROCEDURE"},
		{sql: "ALTER DEFINER = u EVENT e DISABLE", kind: RoutineDefine, what: "ALTER EVENT"},
		{sql: "DROP PROCEDURE IF EXISTS p", kind: RoutineDrop, what: "DROP PROCEDURE"},
		{sql: "drop trigger t", kind: RoutineDrop, what: "DROP TRIGGER"},
		{sql: "DROP EVENT e", kind: RoutineDrop, what: "DROP EVENT"},
		{sql: "DROP FUNCTION conv_msg", kind: RoutineDrop, what: "DROP FUNCTION"}, // names nothing it could touch
		{sql: "CALL p(?, @out, @`Quoted Name`, @@session.sql_mode, '@notvar')", kind: RoutineCall, what: "CALL", params: 1, vars: []string{"out"}},
		{sql: "CALL p(@A, @a, @b)", kind: RoutineCall, what: "CALL", vars: []string{"a", "b"}},
		{sql: "CALL p", kind: RoutineCall, what: "CALL"},
		{sql: "BEGIN NOT ATOMIC SELECT 1; END", kind: RoutineCall, what: "BEGIN NOT ATOMIC"},
		{sql: "IF 1 THEN SELECT 1; END IF", kind: RoutineCall, what: "IF"},
		{sql: "lbl: LOOP LEAVE lbl; END LOOP", kind: RoutineCall, what: "LOOP"},
		{sql: "SHOW CREATE PROCEDURE p", kind: RoutineShow, what: "SHOW CREATE PROCEDURE"},
		{sql: "SHOW PROCEDURE STATUS WHERE Db = ?", kind: RoutineShow, what: "SHOW PROCEDURE STATUS", params: 1},
		{sql: "SHOW FUNCTION CODE f", kind: RoutineShow, what: "SHOW FUNCTION CODE"},
		{sql: "SHOW TRIGGERS LIKE 'conv_msg'", kind: RoutineShow, what: "SHOW TRIGGERS"},
		{sql: "SHOW EVENTS", kind: RoutineShow, what: "SHOW EVENTS"},
		// Not routine statements: the parser's.
		{sql: "BEGIN"},
		{sql: "BEGIN WORK"},
		{sql: "SELECT 1"},
		{sql: "SELECT * FROM `procedure`"},
		{sql: "CREATE TABLE procedure_log (id INT)"},
		{sql: "CREATE OR REPLACE DEFINER = u VIEW v AS SELECT 1"},
		{sql: "CREATE DEFINER = u SQL SECURITY INVOKER VIEW v AS SELECT 1"},
		{sql: "ALTER TRIGGER t"},
		{sql: "DROP TABLE procedure"},
		{sql: "SHOW CREATE TABLE t"},
		{sql: "SHOW PROCESSLIST"},
		{sql: "/* CALL p() */ SELECT 1"},
		{sql: "SELECT 'CALL p()'"},
		{sql: "DO 1"},
	}
	for _, c := range cases {
		r, err := ClassifyRoutine(c.sql)
		if err != nil {
			t.Errorf("%q: %v", c.sql, err)
			continue
		}
		if c.kind == 0 {
			if r != nil {
				t.Errorf("%q: classified as %+v, want not a routine statement", c.sql, r)
			}
			continue
		}
		if r == nil {
			t.Errorf("%q: not recognised, want %s", c.sql, c.what)
			continue
		}
		if r.Kind != c.kind || r.What != c.what || r.Params != c.params || !reflect.DeepEqual(r.UserVars, c.vars) {
			t.Errorf("%q: got kind %d %q params %d vars %v, want kind %d %q params %d vars %v",
				c.sql, r.Kind, r.What, r.Params, r.UserVars, c.kind, c.what, c.params, c.vars)
		}
	}
}

func TestClassifyRoutineRefusals(t *testing.T) {
	refused := map[string]string{
		"CREATE PROCEDURE p() BEGIN SELECT COUNT(*) FROM conv_msg; END":                                  "sharded table conv_msg",
		"CREATE PROCEDURE p() SELECT * FROM im.`msg_content`":                                            "sharded table msg_content",
		"CREATE TRIGGER t AFTER INSERT ON conv_msg FOR EACH ROW SET @n = 1":                              "sharded table conv_msg",
		"CREATE TRIGGER t AFTER INSERT ON audit FOR EACH ROW INSERT INTO im_inbox VALUES (1)":            "sharded table im_inbox",
		"CREATE EVENT e ON SCHEDULE EVERY 1 DAY DO DELETE FROM im_conv_member":                           "sharded table im_conv_member",
		"CREATE FUNCTION f() RETURNS INT RETURN (SELECT max_seq FROM im_conv_seq LIMIT 1)":               "sharded table im_conv_seq",
		"ALTER EVENT e DO DELETE FROM conv_msg":                                                          "sharded table conv_msg",
		"CALL p((SELECT MAX(seq) FROM conv_msg))":                                                        "sharded table conv_msg",
		"BEGIN NOT ATOMIC DELETE FROM conv_msg; END":                                                     "sharded table conv_msg",
		"/*!50003 CREATE PROCEDURE p() SELECT * FROM conv_msg */":                                        "sharded table conv_msg",
		"CREATE PROCEDURE p() BEGIN PREPARE s FROM 'SELECT 1'; EXECUTE s; END":                           "dynamic SQL",
		"CREATE PROCEDURE p(t TEXT) BEGIN SET @q = CONCAT('DELETE FROM ', t); EXECUTE IMMEDIATE @q; END": "dynamic SQL",
		"create procedure p() begin prepare s from @q; end":                                              "dynamic SQL",
	}
	for q, want := range refused {
		r, err := ClassifyRoutine(q)
		var ue *UnsupportedError
		if !errors.As(err, &ue) || !strings.Contains(ue.Msg, want) {
			t.Errorf("%q: got %+v, %v; want a refusal about %s", q, r, err, want)
		}
	}
	// Names compare case-sensitively (lower_case_table_names=0), and
	// strings, comments and quoted names are not code.
	accepted := []string{
		"CREATE PROCEDURE p() SELECT * FROM CONV_MSG",
		"CREATE PROCEDURE p() SELECT 'conv_msg', \"EXECUTE\" /* conv_msg */ -- conv_msg\n",
		"CREATE PROCEDURE p() SELECT `execute` FROM conv_msg_archive # conv_msg",
		"CREATE PROCEDURE conv_msg_cleanup() DELETE FROM audit",
		"SHOW CREATE PROCEDURE conv_msg",
	}
	for _, q := range accepted {
		if r, err := ClassifyRoutine(q); err != nil || r == nil {
			t.Errorf("%q: %+v, %v; want accepted", q, r, err)
		}
	}
}

func TestSplitRoutines(t *testing.T) {
	cases := []struct {
		sql   string
		parts []string
		ok    bool
	}{
		{"SELECT 1; SELECT 2", nil, false},
		{"CALL p(); CALL q(';')", []string{"CALL p()", " CALL q(';')"}, true},
		{"CALL p();", []string{"CALL p()"}, true},
		{"SET @a = 1; CREATE PROCEDURE p() BEGIN SELECT 1; SELECT 2; END; SELECT 3",
			[]string{"SET @a = 1", " CREATE PROCEDURE p() BEGIN SELECT 1; SELECT 2; END; SELECT 3"}, true},
		{"DROP FUNCTION f; -- done\n", []string{"DROP FUNCTION f"}, true},
		{"SELECT ';' /* ; */; DROP EVENT e", []string{"SELECT ';' /* ; */", " DROP EVENT e"}, true},
	}
	for _, c := range cases {
		parts, ok := SplitRoutines(c.sql)
		if ok != c.ok || ok && !reflect.DeepEqual(parts, c.parts) {
			t.Errorf("%q: got %q %v, want %q %v", c.sql, parts, ok, c.parts, c.ok)
		}
	}
}

func FuzzClassifyRoutine(f *testing.F) {
	for _, s := range []string{"CREATE PROCEDURE p() BEGIN SELECT 1; END", "CALL p(@x, ?)", "SELECT a FROM t FOR SYSTEM_TIME ALL WHERE x := 1", "DELETE HISTORY FROM db.t", "/*!50003 CREATE*/ /*!50017 DEFINER=`a`@`b`*/ /*!50003 TRIGGER", "CREATE DEFINER='a'@", "@", "`", "'", "x:", "/*!"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		_, _ = ClassifyRoutine(s) // must not panic or hang
		_, _ = SplitRoutines(s)
		if r := ClassifyUnparsed(s); r != nil {
			if r.Kind != RoutineUnparsed || r.Need == "" {
				t.Fatalf("ClassifyUnparsed(%q) = %+v", s, r)
			}
		}
	})
}

func TestClassifyUnparsed(t *testing.T) {
	for _, c := range []struct {
		sql, need  string // "": the parser's error stands
		qualifiers string
	}{
		{"SELECT * FROM t FOR SYSTEM_TIME ALL", "read", ""},
		{"  /* c */ select x.a FROM im.t x FOR SYSTEM_TIME ALL", "read", "x im"},
		{"SELECT NEXTVAL(s)", "write", ""},
		{"DELETE HISTORY FROM t", "write", ""},
		{"CREATE OR REPLACE TABLE t (a INT) WITH SYSTEM VERSIONING", "ddl", ""},
		{"CREATE USER u IDENTIFIED VIA x", "admin", ""},
		{"SHOW ENGINE whatever", "admin", ""},
		{"SELECT * FROM conv_msg FOR SYSTEM_TIME ALL", "", ""},   // a sharded table
		{"SELECT * FROM `im_inbox` FOR SYSTEM_TIME ALL", "", ""}, // quoted too
		{"SELECT GET_LOCK('a', 1) FOR SYSTEM_TIME", "", ""},      // a named lock
		{"SELECT @a := 1 FROM t FOR SYSTEM_TIME ALL", "", ""},    // an assignment
		{"CREATE TEMPORARY TABLE t (a INT) WITH SYSTEM VERSIONING", "", ""},
		{"SELECT 1 INTO OUTFILE '/tmp/x' FOR SYSTEM_TIME", "", ""},
		{"SET x = 1", "", ""}, // changes the session
		{"SELEC 1", "", ""},   // not a statement Convoy passes
	} {
		r := ClassifyUnparsed(c.sql)
		switch {
		case c.need == "" && r != nil:
			t.Errorf("%s: passed on (%+v), want the syntax error", c.sql, r)
		case c.need != "" && (r == nil || r.Need != c.need || strings.Join(r.Qualifiers, " ") != c.qualifiers):
			t.Errorf("%s: %+v, want need %s, qualifiers %q", c.sql, r, c.need, c.qualifiers)
		}
	}
}
