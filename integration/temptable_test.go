package integration

import (
	"context"
	"testing"
)

// TestTemporaryTables (issue 26): a session's temporary table lives on one
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
