package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	sqldriver "github.com/go-sql-driver/mysql"
)

// TestUnparsedStatements (docs/sql-reference.md): MariaDB syntax the parser does not
// know (system versioning here) runs on unsharded tables, text and
// prepared, as MariaDB answers it: before, every such statement got 1064.
// Privileges still apply (by the statement's leading keyword), the
// datasources' own databases stay an admin's; a statement naming a
// sharded table gets 1235 naming the MariaDB clause Convoy cannot route,
// or the syntax error (1064) when it recognises none (a typo), as a named
// lock or a := assignment does: Convoy could not follow the session state.
func TestUnparsedStatements(t *testing.T) {
	s := newStack(t)
	p := startConvoyUsers(t, s.etcd.Endpoints(), `  - {name: convoy, password: convoy, admin: true}
  - {name: reader, password: r, privileges: [read]}
  - {name: writer, password: w, privileges: [read, write], databases: [im]}`)
	ctx := context.Background()
	admin := openDSN(t, p.dsn("convoy", "convoy", "im"))
	mustExec(t, admin, "CREATE TABLE vt (id INT PRIMARY KEY, v INT) WITH SYSTEM VERSIONING")
	mustExec(t, admin, "INSERT INTO vt VALUES (1, 10)")
	mustExec(t, admin, "UPDATE vt SET v = 11 WHERE id = 1")
	count := func(user, pw, q string, args ...any) (int, error) {
		t.Helper()
		db := openDSN(t, p.dsn(user, pw, "im"))
		defer db.Close()
		var n int
		err := db.QueryRowContext(ctx, q, args...).Scan(&n)
		return n, err
	}
	// Text (no arguments) and prepared (one).
	if n, err := count("reader", "r", "SELECT COUNT(*) FROM vt FOR SYSTEM_TIME ALL"); err != nil || n != 2 {
		t.Fatalf("SELECT ... FOR SYSTEM_TIME ALL: %d, %v; want both versions", n, err)
	}
	if n, err := count("reader", "r", "SELECT COUNT(*) FROM vt FOR SYSTEM_TIME ALL WHERE id = ?", 1); err != nil || n != 2 {
		t.Fatalf("prepared SELECT ... FOR SYSTEM_TIME ALL: %d, %v; want both versions", n, err)
	}
	for _, c := range []struct {
		user, pw, sql string
		errno         uint16
	}{
		{"reader", "r", "DELETE HISTORY FROM vt", 1142},                          // a write
		{"writer", "w", "SELECT User FROM mysql.user FOR SYSTEM_TIME ALL", 1044}, // the datasource's accounts
		{"writer", "w", "SELECT * FROM information_schema.PROCESSLIST FOR SYSTEM_TIME ALL", 1044},
		{"writer", "w", "SELECT COUNT(*) FROM test.vt FOR SYSTEM_TIME ALL", 1235},       // outside its databases
		{"convoy", "convoy", "SELECT COUNT(*) FROM conv_msg FOR SYSTEM_TIME ALL", 1235}, // MariaDB syntax on a sharded table: the reason
		{"convoy", "convoy", "SELECT COUNT(*) FORM conv_msg WHERE conv_id = 1", 1064},   // a typo naming a sharded table: MariaDB's error
		{"convoy", "convoy", "SELECT GET_LOCK('x', 0) FROM vt FOR SYSTEM_TIME ALL", 1064},
		{"convoy", "convoy", "SELECT @a := v FROM vt FOR SYSTEM_TIME ALL", 1064},
		{"convoy", "convoy", "SELEC 1", 1064},                                           // not SQL: the parser's error stands
		{"convoy", "convoy", "SELECT COUNT(*) FROM vt FOR SYSTEM_TIME ALL WHERE", 1064}, // MariaDB's own
	} {
		db := openDSN(t, p.dsn(c.user, c.pw, "im"))
		_, err := db.ExecContext(ctx, c.sql)
		db.Close()
		if errno(err) != c.errno {
			t.Errorf("%s: %s: %v, want %d", c.user, c.sql, err, c.errno)
		}
	}
	writer := openDSN(t, p.dsn("writer", "w", "im"))
	mustExec(t, writer, "DELETE HISTORY FROM vt")
	if n, err := count("reader", "r", "SELECT COUNT(*) FROM vt FOR SYSTEM_TIME ALL"); err != nil || n != 1 {
		t.Fatalf("after DELETE HISTORY: %d versions, %v; want the current one", n, err)
	}
	// In a transaction: on its connection (the default datasource's).
	tx, err := writer.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "UPDATE vt SET v = 12 WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM vt FOR SYSTEM_TIME ALL").Scan(&n); err != nil || n != 2 {
		t.Fatalf("inside the transaction: %d versions, %v; want its own update's too", n, err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if n, err := count("reader", "r", "SELECT COUNT(*) FROM vt FOR SYSTEM_TIME ALL"); err != nil || n != 1 {
		t.Fatalf("after the rollback: %d versions, %v", n, err)
	}
}

// TestMariaDBClausesOnShards (docs/sql-reference.md): MariaDB clauses the parser does
// not know, on sharded tables: OFFSET n ROWS FETCH NEXT m ROWS ONLY reads
// as LIMIT n, m; LOCK IN SHARE MODE WAIT n waits n seconds for a row lock
// and fails with 1205 (not innodb_lock_wait_timeout's 50); FETCH ... WITH
// TIES and ROWS EXAMINED are refused with 1235 naming the clause, never
// 1064.
func TestMariaDBClausesOnShards(t *testing.T) {
	s := newStack(t)
	p := startConvoy(t, s.etcd.Endpoints())
	ctx := context.Background()
	db := p.open(t, "convoy", "convoy", "im")
	const conv = 4242
	for i := range 8 {
		mustExec(t, db, "INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (?, ?, 1, 1, NOW(3))", conv, 1000+i)
	}
	seqs := func(q string, args ...any) []int {
		t.Helper()
		rows, err := db.QueryContext(ctx, q, args...)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		defer rows.Close()
		var out []int
		for rows.Next() {
			var v int
			if err := rows.Scan(&v); err != nil {
				t.Fatal(err)
			}
			out = append(out, v)
		}
		return out
	}
	for _, q := range []string{
		fmt.Sprintf("SELECT seq FROM conv_msg WHERE conv_id = %d ORDER BY seq OFFSET 2 ROWS FETCH NEXT 3 ROWS ONLY", conv),
		"SELECT seq FROM conv_msg WHERE conv_id = ? ORDER BY seq OFFSET ? ROWS FETCH FIRST ? ROWS ONLY",
	} {
		args := []any{}
		if strings.Contains(q, "?") {
			args = []any{conv, 2, 3}
		}
		if got := seqs(q, args...); fmt.Sprint(got) != "[3 4 5]" {
			t.Fatalf("%s: %v, want [3 4 5]", q, got)
		}
	}
	// Another session holds the row: WAIT 1 gives up after about a second.
	holder, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback()
	if _, err := holder.ExecContext(ctx, "SELECT seq FROM conv_msg WHERE conv_id = ? AND seq = 1 FOR UPDATE", conv); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = db.ExecContext(ctx, fmt.Sprintf("SELECT seq FROM conv_msg WHERE conv_id = %d AND seq = 1 LOCK IN SHARE MODE WAIT 1", conv))
	if took := time.Since(start); errno(err) != 1205 || took > 10*time.Second {
		t.Fatalf("LOCK IN SHARE MODE WAIT 1 on a locked row: %v after %s, want 1205 after about 1 s", err, took)
	}
	if err := holder.Rollback(); err != nil {
		t.Fatal(err)
	}
	if got := seqs(fmt.Sprintf("SELECT seq FROM conv_msg WHERE conv_id = %d AND seq = 1 LOCK IN SHARE MODE WAIT 1", conv)); fmt.Sprint(got) != "[1]" {
		t.Fatalf("LOCK IN SHARE MODE WAIT 1 on a free row: %v", got)
	}
	for q, clause := range map[string]string{
		fmt.Sprintf("SELECT seq FROM conv_msg WHERE conv_id = %d ORDER BY seq FETCH FIRST 2 ROWS WITH TIES", conv): "WITH TIES",
		fmt.Sprintf("SELECT seq FROM conv_msg WHERE conv_id = %d LIMIT 2 ROWS EXAMINED 5", conv):                   "ROWS EXAMINED",
	} {
		_, err := db.ExecContext(ctx, q)
		var me *sqldriver.MySQLError
		if !errors.As(err, &me) || me.Number != 1235 || !strings.Contains(me.Message, clause) {
			t.Errorf("%s: %v, want 1235 naming %s", q, err, clause)
		}
	}
}
