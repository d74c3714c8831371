package integration

import (
	"context"
	"testing"
)

// TestUnparsedStatements (issue 26): MariaDB syntax the parser does not
// know (system versioning here) runs on unsharded tables, text and
// prepared, as MariaDB answers it: before, every such statement got 1064.
// Privileges still apply (by the statement's leading keyword), the
// datasources' own databases stay an admin's, and a statement naming a
// sharded table, a named lock or a := assignment still gets the syntax
// error (1064): Convoy could neither route it nor follow the session
// state, and cannot tell MariaDB syntax from a typo.
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
		{"writer", "w", "SELECT COUNT(*) FROM test.vt FOR SYSTEM_TIME ALL", 1235}, // outside its databases
		{"convoy", "convoy", "SELECT COUNT(*) FROM conv_msg FOR SYSTEM_TIME ALL", 1064},
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
