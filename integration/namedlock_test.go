package integration

import (
	"context"
	"database/sql"
	"testing"
	"time"
)

// TestNamedLocks (docs/sql-reference.md): GET_LOCK and its kin keep MariaDB's semantics
// through Convoy's pool. A session's lock stays with it while its other
// statements use pooled connections; another session through the same
// proxy, or through another proxy, cannot take it (before, the pooled
// connection holding it could be handed to the other session, whose
// GET_LOCK then succeeded, re-entrantly); the holder's RELEASE_LOCK
// releases it (1, never 0 or NULL from another connection); a client
// that disconnects releases its locks.
func TestNamedLocks(t *testing.T) {
	s := newStack(t)
	other := startConvoy(t, s.etcd.Endpoints())
	ctx := context.Background()
	db, db2 := s.convoy.open(t, "convoy", "convoy", "im"), other.open(t, "convoy", "convoy", "im")
	session := func(db *sql.DB) *sql.Conn {
		t.Helper()
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ask := func(c *sql.Conn, q string, args ...any) sql.NullInt64 {
		t.Helper()
		var v sql.NullInt64
		if err := c.QueryRowContext(ctx, q, args...).Scan(&v); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return v
	}
	const name = "convoy_it_lock"
	a := session(db)
	defer a.Close()
	if v := ask(a, "SELECT GET_LOCK(?, 0)", name); v.Int64 != 1 {
		t.Fatalf("the first GET_LOCK: %v, want 1", v)
	}
	// The holder's other statements: pooled connections come and go.
	for range 5 {
		ask(a, "SELECT 1")
		ask(a, "SELECT COUNT(*) FROM conv_msg WHERE conv_id = 42")
	}
	if v := ask(a, "SELECT IS_USED_LOCK('"+name+"') IS NOT NULL"); v.Int64 != 1 {
		t.Fatalf("IS_USED_LOCK through the holder: %v, want the lock in use", v)
	}
	// Another session through the same proxy, then through the other one:
	// the lock is taken (text and prepared).
	for i, c := range []*sql.Conn{session(db), session(db2)} {
		if v := ask(c, "SELECT GET_LOCK('"+name+"', 0)"); v.Int64 != 0 {
			t.Errorf("session %d: GET_LOCK of a lock another session holds: %v, want 0", i, v)
		}
		if v := ask(c, "SELECT IS_FREE_LOCK(?)", name); v.Int64 != 0 {
			t.Errorf("session %d: IS_FREE_LOCK: %v, want 0", i, v)
		}
		c.Close()
	}
	if v := ask(a, "SELECT RELEASE_LOCK(?)", name); v.Int64 != 1 {
		t.Fatalf("RELEASE_LOCK by the holder: %v, want 1", v)
	}
	if v := ask(a, "SELECT RELEASE_LOCK(?)", name); v.Valid && v.Int64 != 0 {
		t.Fatalf("RELEASE_LOCK of a lock no longer held: %v, want 0 or NULL", v)
	}

	// Taken through the other proxy, released by its client's disconnect.
	b := session(db2)
	if v := ask(b, "SELECT GET_LOCK(?, 0)", name); v.Int64 != 1 {
		t.Fatalf("GET_LOCK through the other proxy: %v, want 1", v)
	}
	if v := ask(a, "SELECT GET_LOCK(?, 0)", name); v.Int64 != 0 {
		t.Fatalf("GET_LOCK while the other proxy's client holds it: %v, want 0", v)
	}
	db2.SetMaxIdleConns(0) // so that the client connection really closes
	b.Close()
	start := time.Now()
	if v := ask(a, "SELECT GET_LOCK(?, 10)", name); v.Int64 != 1 {
		t.Fatalf("GET_LOCK after the holder disconnected: %v, want 1", v)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the disconnected client's lock was released after %v", took)
	}
	if v := ask(a, "SELECT RELEASE_ALL_LOCKS()"); v.Int64 != 1 {
		t.Errorf("RELEASE_ALL_LOCKS: %v, want 1 lock released", v)
	}
	// A statement that mixes a named lock with a sharded table is refused.
	if _, err := a.ExecContext(ctx, "SELECT GET_LOCK('x', 0), COUNT(*) FROM conv_msg WHERE conv_id = 42"); errno(err) != 1235 {
		t.Errorf("GET_LOCK with a sharded table: %v, want 1235", err)
	}
}
