package integration

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"
)

// TestTemporaryTables (docs/sql-reference.md): a session's temporary table lives on one
// backend connection of its own, as on MariaDB: the session sees it on
// every statement (text, prepared, inside a transaction, while other
// sessions churn the pool) and no other session ever does; dropped, it is
// gone. Before, it was created on a pooled connection: the creator's next
// statements could miss it and another session could read it.
func TestTemporaryTables(t *testing.T) {
	s := newStack(t)
	db := s.convoy.open(t, "convoy", "convoy", "im")
	ctx := context.Background()
	a, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	mustExec(t, a, "CREATE TEMPORARY TABLE tmp_ids (id INT PRIMARY KEY) ENGINE=InnoDB")
	mustExec(t, a, "INSERT INTO tmp_ids VALUES (1), (2)")
	others := make([]interface{ Close() error }, 0, 4)
	for i := range 6 {
		// Another session reads through the pool meanwhile: never the table.
		b, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		others = append(others, b)
		var n int
		if err := b.QueryRowContext(ctx, "SELECT COUNT(*) FROM tmp_ids").Scan(&n); errno(err) != 1146 {
			t.Fatalf("round %d: another session read the temporary table: %d rows, %v; want 1146", i, n, err)
		}
		if n := countOn(t, a, "SELECT COUNT(*) FROM tmp_ids"); n != 2 {
			t.Fatalf("round %d: the creator sees %d rows, want 2", i, n)
		}
		if n := countOn(t, a, "SELECT COUNT(*) FROM tmp_ids WHERE id > ?", 1); n != 1 {
			t.Fatalf("round %d: prepared, the creator sees %d rows, want 1", i, n)
		}
		countOn(t, a, "SELECT COUNT(*) FROM conv_msg WHERE conv_id = 42") // a sharded read between
	}
	for _, o := range others {
		o.Close()
	}
	// In transactions.
	mustExec(t, a, "BEGIN")
	mustExec(t, a, "INSERT INTO tmp_ids VALUES (3)")
	if n := countOn(t, a, "SELECT COUNT(*) FROM tmp_ids"); n != 3 {
		t.Fatalf("in a transaction: %d rows, want 3", n)
	}
	mustExec(t, a, "ROLLBACK")
	if n := countOn(t, a, "SELECT COUNT(*) FROM tmp_ids"); n != 2 {
		t.Fatalf("after ROLLBACK: %d rows, want 2", n)
	}
	mustExec(t, a, "START TRANSACTION")
	mustExec(t, a, "INSERT INTO tmp_ids VALUES (4)")
	mustExec(t, a, "COMMIT")
	if n := countOn(t, a, "SELECT COUNT(*) FROM tmp_ids"); n != 3 {
		t.Fatalf("after COMMIT: %d rows, want 3", n)
	}
	mustExec(t, a, "DROP TEMPORARY TABLE tmp_ids")
	var n int
	if err := a.QueryRowContext(ctx, "SELECT COUNT(*) FROM tmp_ids").Scan(&n); errno(err) != 1146 {
		t.Fatalf("after DROP TEMPORARY TABLE: %d rows, %v; want 1146", n, err)
	}
	if _, err := a.ExecContext(ctx, "CREATE TEMPORARY TABLE conv_msg (id INT)"); errno(err) != 1235 {
		t.Fatalf("a temporary table named like a sharded table: %v, want 1235", err)
	}
}

// TestSessionStatementsAndVariables (docs/sql-reference.md): SQL-level prepared
// statements (PREPARE / EXECUTE / DEALLOCATE PREPARE) live on the
// session's own connection and user variables assigned inside a SELECT
// (`SELECT @n := ...`) are kept by the session, whatever other sessions do
// to the pool meanwhile (before: EXECUTE got 1243 Unknown prepared
// statement, and @n read NULL, once another session held the idle
// connection). A PREPARE of a statement on sharded tables is refused with
// 1235 (it would run on one datasource, which lacks them).
func TestSessionStatementsAndVariables(t *testing.T) {
	s := newStack(t)
	db := s.convoy.open(t, "convoy", "convoy", "im")
	ctx := context.Background()
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
	// Each step of a runs while b holds a pooled connection.
	step := func(q string) (string, error) {
		t.Helper()
		done := make(chan struct{})
		go func() {
			_, _ = b.ExecContext(ctx, "SELECT SLEEP(0.2)")
			close(done)
		}()
		defer func() { <-done }()
		time.Sleep(20 * time.Millisecond)
		var v sql.NullString
		err := a.QueryRowContext(ctx, q).Scan(&v)
		if errors.Is(err, sql.ErrNoRows) {
			err = nil
		}
		return v.String, err
	}
	for _, c := range []struct{ q, want string }{
		{"SET @x = 5", ""},
		{"PREPARE p FROM 'SELECT ? + 1'", ""},
		{"SELECT @n := 41 + 1", "42"},
		{"EXECUTE p USING @x", "6"},
		{"SELECT @n", "42"},
		{"SELECT CONCAT(@n, '/', @x)", "42/5"},
		{"DEALLOCATE PREPARE p", ""},
	} {
		got, err := step(c.q)
		if err != nil || got != c.want {
			t.Fatalf("%s: %q, %v; want %q", c.q, got, err, c.want)
		}
	}
	if _, err := step("EXECUTE p USING @x"); errno(err) != 1243 {
		t.Fatalf("EXECUTE after DEALLOCATE: %v, want 1243", err)
	}
	if _, err := a.ExecContext(ctx, "PREPARE q FROM 'SELECT COUNT(*) FROM conv_msg WHERE conv_id = ?'"); errno(err) != 1235 {
		t.Fatalf("PREPARE of a statement on a sharded table: %v, want 1235", err)
	}
	// A SELECT on one shard assigns on the connection it ran on; the
	// session keeps the value (before: @last read NULL, the assignment was
	// left on a pooled connection). Text and prepared.
	for i := 1; i <= 3; i++ {
		mustExec(t, a, "INSERT INTO conv_msg (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES (7707, ?, ?, 1, 1, NOW())", i, 770700+i)
	}
	for _, c := range []struct {
		q    string
		args []any
		want string
	}{
		{"SELECT @last := seq FROM conv_msg WHERE conv_id = 7707 ORDER BY seq DESC LIMIT 1", nil, "3"},
		{"SELECT @last", nil, "3"},
		{"SELECT @first := msg_id FROM conv_msg WHERE conv_id = ? ORDER BY seq LIMIT 1", []any{7707}, "770701"},
		{"SELECT CONCAT(@first, '/', @last)", nil, "770701/3"},
	} {
		var v sql.NullString
		if err := a.QueryRowContext(ctx, c.q, c.args...).Scan(&v); err != nil || v.String != c.want {
			t.Fatalf("%s: %q, %v; want %q", c.q, v.String, err, c.want)
		}
	}
	// Over several shards the value MariaDB would keep (the last row's) is
	// unknowable, and an INSERT's assignment is not read back: refused.
	for _, q := range []string{
		"SELECT @z := seq FROM conv_msg WHERE seq > 0",
		"UPDATE conv_msg SET msg_type = (@z := 2) WHERE conv_id = 7707 AND seq = 1",
	} {
		if _, err := a.ExecContext(ctx, q); errno(err) != 1235 {
			t.Fatalf("%s: %v, want 1235", q, err)
		}
	}
	// Another session never sees the first one's statement.
	mustExec(t, a, "PREPARE mine FROM 'SELECT 1'")
	if _, err := b.ExecContext(ctx, "EXECUTE mine"); errno(err) != 1243 {
		t.Fatalf("another session's EXECUTE of a's statement: %v, want 1243", err)
	}
}
