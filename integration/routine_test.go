package integration

import (
	"context"
	"database/sql"
	"encoding/binary"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	gmysql "github.com/go-mysql-org/go-mysql/mysql"
)

// rcase is one statement of the routine session; every result set it
// answers is compared. colsOnly: the rows hold creation times.
type rcase struct {
	sql      string
	args     []any
	colsOnly bool
}

func rq(sql string, args ...any) rcase { return rcase{sql: sql, args: args} }

// routineCases create, use, alter and drop stored code on an unsharded
// table, in order.
func routineCases() []rcase {
	return []rcase{
		rq("DROP TABLE IF EXISTS audit"),
		rq("CREATE TABLE audit (id INT AUTO_INCREMENT PRIMARY KEY, note VARCHAR(50), n INT)"),
		rq("DROP PROCEDURE IF EXISTS p_two"),
		rq(`CREATE PROCEDURE p_two(IN a INT)
BEGIN
  IF a < 0 THEN
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'negative input';
  END IF;
  SELECT a AS x;
  SELECT 'y' AS y, a * 2 AS z;
END`),
		rq("CALL p_two(3)"),
		rq("CALL p_two(?)", 4),
		rq("CALL p_two(-1)"),
		rq("CALL p_two(?)", -2),
		rq("CALL nope()"),
		rq("DROP PROCEDURE IF EXISTS p_out"),
		rq("CREATE PROCEDURE p_out(IN a INT, OUT b INT) BEGIN SET b = a * 10; END"),
		rq("CALL p_out(4, @b)"),
		rq("SELECT @b"),
		rq("CALL p_out(?, @b)", 5),
		rq("SELECT @b + 1"),
		rq("DROP PROCEDURE IF EXISTS p_err"),
		rq("CREATE PROCEDURE p_err() BEGIN SELECT 1 AS one; SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'after a result'; END"),
		rq("CALL p_err()"),
		rq("DROP FUNCTION IF EXISTS f_twice"),
		rq("CREATE FUNCTION f_twice(x INT) RETURNS INT DETERMINISTIC RETURN x * 2"),
		rq("SELECT f_twice(21)"),
		rq("SELECT f_twice(?)", 5),
		rq("DROP TRIGGER IF EXISTS audit_bi"),
		rq("CREATE TRIGGER audit_bi BEFORE INSERT ON audit FOR EACH ROW SET NEW.n = CHAR_LENGTH(NEW.note)"),
		rq("INSERT INTO audit (note) VALUES ('hello')"),
		rq("INSERT INTO audit (note) VALUES (?)", "wörld!"),
		rq("SELECT id, note, n FROM audit ORDER BY id"),
		rq("DROP EVENT IF EXISTS ev_cleanup"),
		// The event scheduler is off on test servers: creating works anyway.
		rq("CREATE EVENT ev_cleanup ON SCHEDULE EVERY 1 DAY DO DELETE FROM audit WHERE n > 100"),
		rq("ALTER EVENT ev_cleanup DISABLE"),
		rq("ALTER PROCEDURE p_two COMMENT 'two result sets'"),
		rq("SHOW CREATE PROCEDURE p_out"),
		rq("SHOW CREATE FUNCTION f_twice"),
		{sql: "SHOW CREATE TRIGGER audit_bi", colsOnly: true},
		{sql: "SHOW CREATE EVENT ev_cleanup", colsOnly: true},
		{sql: "SHOW PROCEDURE STATUS WHERE Db = 'im'", colsOnly: true},
		{sql: "SHOW FUNCTION STATUS WHERE Db = 'im'", colsOnly: true},
		{sql: "SHOW TRIGGERS", colsOnly: true},
		{sql: "SHOW EVENTS", colsOnly: true},
		// An anonymous compound statement answers like a CALL.
		rq("BEGIN NOT ATOMIC SELECT 1 AS one; SELECT 2 AS two; END"),
		// Transactions: a CALL inside one is part of it; a procedure that
		// opens one leaves the session in it, as on MariaDB.
		rq("DROP PROCEDURE IF EXISTS p_ins"),
		rq("CREATE PROCEDURE p_ins(IN t VARCHAR(50)) INSERT INTO audit (note) VALUES (t)"),
		rq("START TRANSACTION"),
		rq("CALL p_ins('rolled back')"),
		rq("ROLLBACK"),
		rq("DROP PROCEDURE IF EXISTS p_begin"),
		rq("CREATE PROCEDURE p_begin() BEGIN START TRANSACTION; INSERT INTO audit (note) VALUES ('opened inside'); END"),
		rq("CALL p_begin()"),
		rq("SELECT @@in_transaction"),
		rq("COMMIT"),
		rq("SELECT note, n FROM audit ORDER BY id"),
		rq("DROP EVENT ev_cleanup"),
		rq("DROP TRIGGER audit_bi"),
		rq("DROP FUNCTION f_twice"),
		rq("DROP FUNCTION f_twice"),
		rq("DROP PROCEDURE p_two"),
		rq("DROP PROCEDURE IF EXISTS p_two"),
		rq("DROP PROCEDURE p_out"),
	}
}

// runAll runs a statement and reads every result set it answers.
func runAll(ctx context.Context, c *sql.Conn, rc rcase) []outcome {
	rows, err := c.QueryContext(ctx, rc.sql, rc.args...)
	if err != nil {
		return []outcome{errOutcome(err)}
	}
	defer rows.Close()
	var out []outcome
	for {
		o := readSet(rows)
		if o.errno != 0 {
			return append(out, o)
		}
		if rc.colsOnly {
			o.rows = nil
		}
		out = append(out, o)
		if !rows.NextResultSet() {
			break
		}
	}
	if err := rows.Err(); err != nil {
		out = append(out, errOutcome(err))
	}
	return out
}

func sameAll(a, b []outcome) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].errno != 0 || b[i].errno != 0 {
			if a[i].errno != b[i].errno {
				return false
			}
			continue
		}
		if !reflect.DeepEqual(a[i].cols, b[i].cols) || !reflect.DeepEqual(a[i].types, b[i].types) || !reflect.DeepEqual(a[i].rows, b[i].rows) {
			return false
		}
	}
	return true
}

// TestRoutines: stored procedures, functions, triggers, events and compound
// statements through Convoy answer as on MariaDB (text and prepared, every
// result set of a CALL, packet for packet); those that could touch a
// sharded table are refused.
func TestRoutines(t *testing.T) {
	s := newStack(t)
	ctx := context.Background()
	for _, mode := range []struct{ name, params string }{{"text", "&interpolateParams=true"}, {"prepared", "&interpolateParams=false"}} {
		t.Run(mode.name, func(t *testing.T) {
			rc, cc := connPair(t, s, mode.params)
			for i, c := range routineCases() {
				want, got := runAll(ctx, rc, c), runAll(ctx, cc, c)
				if !sameAll(want, got) {
					t.Errorf("case %d: %s %v\n  mariadb: %v\n  convoy:  %v", i, c.sql, c.args, want, got)
				}
			}
		})
	}

	t.Run("multi-statements", func(t *testing.T) {
		rc, cc := connPair(t, s, "&multiStatements=true")
		for _, c := range []rcase{
			rq("DROP PROCEDURE IF EXISTS p_ms; CREATE PROCEDURE p_ms() BEGIN SELECT 1 AS a; SELECT 2 AS b; END"),
			rq("CALL p_ms(); SELECT 3 AS c"),
			rq("SELECT 0 AS z; CALL p_ms()"),
			rq("DROP PROCEDURE p_ms; DROP PROCEDURE p_ms"),
		} {
			want, got := runAll(ctx, rc, c), runAll(ctx, cc, c)
			if !sameAll(want, got) {
				t.Errorf("%s\n  mariadb: %v\n  convoy:  %v", c.sql, want, got)
			}
		}
	})

	t.Run("refusals", func(t *testing.T) {
		db := s.convoy.open(t, "convoy", "convoy", "im")
		for q, want := range map[string]string{
			"CREATE PROCEDURE p_bad() BEGIN SELECT COUNT(*) FROM conv_msg; END":                                          "sharded table conv_msg",
			"CREATE TRIGGER t_bad AFTER INSERT ON conv_msg FOR EACH ROW SET @n = 1":                                      "sharded table conv_msg",
			"CREATE EVENT e_bad ON SCHEDULE EVERY 1 DAY DO DELETE FROM im_inbox WHERE send_time < NOW()":                 "sharded table im_inbox",
			"CREATE PROCEDURE p_bad(t TEXT) BEGIN SET @q = CONCAT('DELETE FROM ', t); PREPARE s FROM @q; EXECUTE s; END": "dynamic SQL",
			"CALL p_none((SELECT MAX(seq) FROM conv_msg WHERE conv_id = 1))":                                             "sharded table conv_msg",
		} {
			_, err := db.Exec(q)
			if errno(err) != 1235 || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "cannot see") {
				t.Errorf("%s: %v; want 1235 about %s", q, err, want)
			}
		}
		// Nothing was created on the default datasource.
		var n int
		if err := s.ds[0].Open(t, "im").QueryRow("SELECT COUNT(*) FROM information_schema.ROUTINES WHERE ROUTINE_NAME = 'p_bad'").Scan(&n); err != nil || n != 0 {
			t.Errorf("p_bad exists on the backend (%d, %v)", n, err)
		}
		// A transaction pinned to a shard cannot CALL (the procedure runs on
		// the default datasource); the transaction stays usable.
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		mustExec(t, c, "BEGIN")
		mustExec(t, c, "SELECT seq FROM conv_msg WHERE conv_id = 42")
		if _, err := c.ExecContext(ctx, "CALL p_ins('x')"); errno(err) != 1235 {
			t.Errorf("CALL in a transaction pinned to a shard: %v", err)
		}
		mustExec(t, c, "COMMIT")
	})

	t.Run("raw protocol", func(t *testing.T) { routineRaw(t, s) })

	t.Run("mariadb CLI", func(t *testing.T) {
		script := `DROP PROCEDURE IF EXISTS cli_p;
DELIMITER //
CREATE PROCEDURE cli_p(IN a INT)
BEGIN
  -- two result sets
  SELECT a AS first;
  SELECT a + 1 AS second, 'x;y' AS semi;
END //
DELIMITER ;
CALL cli_p(5);
SHOW CREATE PROCEDURE cli_p;
DROP PROCEDURE cli_p;
`
		want := runCLI(t, s.ref.Addr(), "root", "", script)
		got := runCLI(t, s.convoy.addr, "convoy", "convoy", script)
		if got != want || !strings.Contains(got, "second\tsemi\n6\tx;y") {
			t.Errorf("mariadb CLI output differs\n--- mariadb:\n%s\n--- convoy:\n%s", want, got)
		}
	})
}

// connPair opens one connection to the reference MariaDB and one through
// Convoy, both to database im with the same extra DSN parameters.
func connPair(t *testing.T, s *stack, params string) (ref, cv *sql.Conn) {
	t.Helper()
	ctx := context.Background()
	var err error
	if ref, err = openDSN(t, fmt.Sprintf("root@tcp(%s)/im?collation=utf8mb4_general_ci%s", s.ref.Addr(), params)).Conn(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ref.Close() })
	if cv, err = openDSN(t, s.convoy.dsn("convoy", "convoy", "im")+params).Conn(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cv.Close() })
	return ref, cv
}

// capConnect opens a raw connection announcing extra capabilities.
func capConnect(t *testing.T, addr, user, pass string, set uint32) *client.Conn {
	t.Helper()
	c, err := client.ConnectWithTimeout(addr, user, pass, "im", 5*time.Second, func(c *client.Conn) error {
		c.ReadTimeout = 20 * time.Second
		c.UnsetCapability(gmysql.CLIENT_DEPRECATE_EOF) // see rawConnect
		for flag := uint32(1); flag != 0; flag <<= 1 {
			// One flag a call: go-mysql refuses (and ignores) a set of several.
			if set&flag != 0 {
				if err := c.SetCapability(flag); err != nil {
					return err
				}
			}
		}
		return c.SetCollation("utf8mb4_general_ci")
	})
	if err != nil {
		t.Fatalf("connect %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// rawChain sends one command and returns every packet of its reply, through
// the last result of a SERVER_MORE_RESULTS_EXISTS chain, as hex.
func rawChain(t *testing.T, c *client.Conn, payload []byte) []string {
	t.Helper()
	c.ResetSequence()
	if err := c.WritePacket(append(make([]byte, 4), payload...)); err != nil {
		t.Fatal(err)
	}
	var out []string
	read := func() []byte {
		p, err := c.ReadPacket()
		if err != nil {
			t.Fatalf("reading the reply: %v (so far %q)", err, out)
		}
		out = append(out, fmt.Sprintf("%x", p))
		return p
	}
	for {
		p := read()
		switch {
		case p[0] == 0xff:
			return out
		case p[0] == 0x00:
			_, n1 := lenencAt(p[1:])
			_, n2 := lenencAt(p[1+n1:])
			if binary.LittleEndian.Uint16(p[1+n1+n2:])&gmysql.SERVER_MORE_RESULTS_EXISTS == 0 {
				return out
			}
			continue
		}
		cols, _ := lenencAt(p)
		for range cols {
			read()
		}
		if !isEOF(read()) {
			t.Fatalf("no EOF after the column definitions: %q", out)
		}
		for {
			p = read()
			if p[0] == 0xff {
				return out
			}
			if isEOF(p) {
				break
			}
		}
		if binary.LittleEndian.Uint16(p[3:])&gmysql.SERVER_MORE_RESULTS_EXISTS == 0 {
			return out
		}
	}
}

func lenencAt(p []byte) (uint64, int) {
	v, _, n := gmysql.LengthEncodedInt(p)
	return v, n
}

// prepareRaw prepares q and returns the statement id.
func prepareRaw(t *testing.T, c *client.Conn, q string) uint32 {
	t.Helper()
	r := rawCommand(c, comPrepare(q), true)
	if !r.ok {
		t.Fatalf("PREPARE %s: %v", q, r)
	}
	return r.stmtID
}

// routineRaw compares the packets of CALL replies, status flags included:
// result sets flagged SERVER_MORE_RESULTS_EXISTS, the OUT parameters of a
// prepared CALL flagged SERVER_PS_OUT_PARAMS, the final OK or error; and
// what clients without CLIENT_MULTI_RESULTS / CLIENT_PS_MULTI_RESULTS get.
func routineRaw(t *testing.T, s *stack) {
	const all = gmysql.CLIENT_MULTI_RESULTS | gmysql.CLIENT_PS_MULTI_RESULTS
	setup := []string{
		"DROP PROCEDURE IF EXISTS r_two",
		"CREATE PROCEDURE r_two(IN a INT, OUT b INT) BEGIN SELECT a AS x; SELECT 'y' AS y, a * 2 AS z; SET b = a * 10; END",
		"DROP PROCEDURE IF EXISTS r_out",
		"CREATE PROCEDURE r_out(OUT b VARCHAR(10)) SET b = 'out'",
		"DROP PROCEDURE IF EXISTS r_err",
		"CREATE PROCEDURE r_err() BEGIN SELECT 1 AS one; SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'boom'; END",
	}
	pair := func(set uint32) (ref, cv *client.Conn) {
		return capConnect(t, s.ref.Addr(), "root", "", set), capConnect(t, s.convoy.addr, "convoy", "convoy", set)
	}
	ref, cv := pair(all)
	for _, q := range setup {
		for _, c := range []*client.Conn{ref, cv} {
			if r := rawCommand(c, comQuery(q), false); !r.ok {
				t.Fatalf("%s: %v", q, r)
			}
		}
	}
	compare := func(what string, ref, cv *client.Conn, payload func(c *client.Conn) []byte) {
		want, got := rawChain(t, ref, payload(ref)), rawChain(t, cv, payload(cv))
		if !reflect.DeepEqual(want, got) {
			t.Errorf("%s: packets differ\n  mariadb: %q\n  convoy:  %q", what, want, got)
		} else {
			t.Logf("%s: %d packets, identical", what, len(got))
		}
	}
	text := func(q string) func(*client.Conn) []byte {
		return func(*client.Conn) []byte { return comQuery(q) }
	}
	execute := func(q string, args ...any) func(*client.Conn) []byte {
		return func(c *client.Conn) []byte { return comExecute(prepareRaw(t, c, q), args...) }
	}
	compare("text CALL, two result sets", ref, cv, text("CALL r_two(3, @b)"))
	compare("text CALL, error after a result set", ref, cv, text("CALL r_err()"))
	compare("text CALL, no result set", ref, cv, text("CALL r_out(@o)"))
	compare("SELECT of the OUT value", ref, cv, text("SELECT @b, @o"))
	compare("prepared CALL with OUT parameters", ref, cv, execute("CALL r_two(?, ?)", int64(4), nil))
	compare("prepared CALL, OUT parameters only", ref, cv, execute("CALL r_out(?)", nil))
	compare("prepared CALL, error after a result set", ref, cv, execute("CALL r_err()"))

	// Without CLIENT_PS_MULTI_RESULTS the OUT parameters are not sent.
	ref, cv = pair(gmysql.CLIENT_MULTI_RESULTS)
	compare("prepared CALL, client without PS_MULTI_RESULTS", ref, cv, execute("CALL r_two(?, ?)", int64(4), nil))
	// Without CLIENT_MULTI_RESULTS a procedure returning rows is refused
	// (1312) before it runs; one without rows runs.
	ref, cv = pair(0)
	compare("text CALL returning rows, client without MULTI_RESULTS", ref, cv, text("CALL r_two(1, @b)"))
	compare("text CALL without rows, client without MULTI_RESULTS", ref, cv, text("CALL r_out(@o)"))
	compare("prepared CALL returning rows, client without MULTI_RESULTS", ref, cv, execute("CALL r_two(?, ?)", int64(4), nil))
	// The connection is still in step.
	compare("after", ref, cv, text("SELECT @o, 1 + 1"))
}
