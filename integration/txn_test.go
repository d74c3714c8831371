package integration

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
)

func errno(err error) uint16 {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

func mustExec(t testing.TB, c interface {
	ExecContext(context.Context, string, ...any) (sql.Result, error)
}, q string, args ...any) sql.Result {
	t.Helper()
	r, err := c.ExecContext(context.Background(), q, args...)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return r
}

func count(t *testing.T, db *sql.DB, q string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow(q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// countOn is count on one connection (inside its transaction).
func countOn(t *testing.T, c *sql.Conn, q string, args ...any) int {
	t.Helper()
	var n int
	if err := c.QueryRowContext(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// TestTransactionsAndRefusals covers the pinned transaction, its cross-shard
// refusal (the transaction stays usable), and the statements Convoy refuses
// with a clear errno instead of guessing.
func TestTransactionsAndRefusals(t *testing.T) {
	s := newStack(t)
	db := s.convoy.open(t, "convoy", "convoy", "im")
	ctx := context.Background()

	t.Run("commit and rollback on one shard", func(t *testing.T) {
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		mustExec(t, c, "BEGIN")
		mustExec(t, c, "INSERT INTO conv_msg (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES (500, 1, 50001, 1, 1, NOW())")
		mustExec(t, c, "UPDATE im_conv_seq SET max_seq = 1 WHERE conv_id = 500")
		// Another connection does not see the uncommitted row.
		if n := count(t, db, "SELECT COUNT(*) FROM conv_msg WHERE conv_id = 500"); n != 0 {
			t.Fatalf("uncommitted row visible: %d", n)
		}
		// A statement for another shard is refused with 1235 ...
		_, err = c.ExecContext(ctx, "INSERT INTO conv_msg (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES (42, 1, 50002, 1, 1, NOW())")
		if errno(err) != 1235 || !strings.Contains(err.Error(), "pinned to shard") {
			t.Fatalf("cross-shard statement in a transaction: %v", err)
		}
		// ... and the transaction is still usable.
		mustExec(t, c, "INSERT INTO conv_msg (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES (500, 2, 50003, 1, 1, NOW())")
		mustExec(t, c, "COMMIT")
		if n := count(t, db, "SELECT COUNT(*) FROM conv_msg WHERE conv_id = 500"); n != 2 {
			t.Fatalf("after COMMIT: %d rows, want 2", n)
		}
		mustExec(t, c, "START TRANSACTION")
		mustExec(t, c, "DELETE FROM conv_msg WHERE conv_id = 500")
		mustExec(t, c, "ROLLBACK")
		if n := count(t, db, "SELECT COUNT(*) FROM conv_msg WHERE conv_id = 500"); n != 2 {
			t.Fatalf("after ROLLBACK: %d rows, want 2", n)
		}
	})

	t.Run("autocommit=0 and database/sql Tx", func(t *testing.T) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		mustExec(t, tx, "INSERT INTO im_inbox (uid, conv_id, seq, msg_id, send_time) VALUES (?, 1, 1, 1, NOW())", 77)
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		if n := count(t, db, "SELECT COUNT(*) FROM im_inbox WHERE uid = 77"); n != 0 {
			t.Fatalf("rolled back row visible")
		}
		c, _ := db.Conn(ctx)
		defer c.Close()
		mustExec(t, c, "SET autocommit = 0")
		mustExec(t, c, "INSERT INTO im_inbox (uid, conv_id, seq, msg_id, send_time) VALUES (78, 1, 1, 1, NOW())")
		if n := count(t, db, "SELECT COUNT(*) FROM im_inbox WHERE uid = 78"); n != 0 {
			t.Fatalf("autocommit=0 row visible before COMMIT")
		}
		mustExec(t, c, "COMMIT")
		mustExec(t, c, "SET autocommit = 1")
		if n := count(t, db, "SELECT COUNT(*) FROM im_inbox WHERE uid = 78"); n != 1 {
			t.Fatalf("autocommit=0 row missing after COMMIT")
		}
	})

	// Every read of an ORM session is inside a transaction: a read of every
	// shard there sees the transaction's own writes on its shard and the
	// others as they are; a locking one is refused.
	t.Run("multi-shard read in a transaction", func(t *testing.T) {
		c, _ := db.Conn(ctx)
		defer c.Close()
		before := count(t, db, "SELECT COUNT(*) FROM im_inbox")
		mustExec(t, c, "BEGIN")
		if n := countOn(t, c, "SELECT COUNT(*) FROM im_inbox"); n != before {
			t.Fatalf("scatter read before any write: %d rows, want %d", n, before)
		}
		mustExec(t, c, "INSERT INTO im_inbox (uid, conv_id, seq, msg_id, send_time) VALUES (601, 1, 1, 1, NOW())")
		mustExec(t, db, "INSERT INTO im_inbox (uid, conv_id, seq, msg_id, send_time) VALUES (602, 1, 1, 1, NOW())")
		if n := countOn(t, c, "SELECT COUNT(*) FROM im_inbox"); n != before+2 {
			t.Fatalf("scatter read in the transaction: %d rows, want %d (own write + another's commit)", n, before+2)
		}
		if n := countOn(t, c, "SELECT COUNT(*) FROM im_inbox WHERE uid IN (601, 602, 603)"); n != 2 {
			t.Fatalf("multi-shard IN read in the transaction: %d rows, want 2", n)
		}
		_, err := c.ExecContext(ctx, "SELECT * FROM im_inbox WHERE conv_id = 1 FOR UPDATE")
		if errno(err) != 1235 || !strings.Contains(err.Error(), "locking") {
			t.Fatalf("locking multi-shard read in a transaction: %v", err)
		}
		// One other shard follows the same rule as several (docs/sql-reference.md): a
		// plain read by key of another user's shard sees it as committed
		// now, through the text and the binary protocol; a locking read or
		// a write of it is still refused, and the transaction goes on.
		for _, q := range []string{"SELECT COUNT(*) FROM im_inbox WHERE uid = 602", "SELECT COUNT(*) FROM im_inbox WHERE uid = ? AND 1 = 1"} {
			args := []any{}
			if strings.Contains(q, "?") {
				args = append(args, 602)
			}
			if n := countOn(t, c, q, args...); n != 1 {
				t.Fatalf("%s in a transaction pinned to uid 601's shard: %d rows, want 1", q, n)
			}
		}
		_, err = c.ExecContext(ctx, "SELECT * FROM im_inbox WHERE uid = 602 FOR UPDATE")
		if errno(err) != 1235 || !strings.Contains(err.Error(), "pinned to shard") {
			t.Fatalf("locking read of another shard in a transaction: %v", err)
		}
		_, err = c.ExecContext(ctx, "UPDATE im_inbox SET seq = 2 WHERE uid = 602")
		if errno(err) != 1235 {
			t.Fatalf("write of another shard in a transaction: %v", err)
		}
		if n := countOn(t, c, "SELECT COUNT(*) FROM im_inbox WHERE uid = 601"); n != 1 {
			t.Fatalf("the transaction's own row after the refusals: %d, want 1", n)
		}
		mustExec(t, c, "ROLLBACK")
		if n := count(t, db, "SELECT COUNT(*) FROM im_inbox WHERE uid IN (601, 602)"); n != 1 {
			t.Fatalf("after ROLLBACK: %d rows, want 1", n)
		}
	})

	t.Run("multi-row insert in a transaction must stay on one shard", func(t *testing.T) {
		c, _ := db.Conn(ctx)
		defer c.Close()
		mustExec(t, c, "BEGIN")
		_, err := c.ExecContext(ctx, "INSERT INTO im_inbox (uid, conv_id, seq, msg_id, send_time) VALUES (1, 1, 1, 1, NOW()), (2, 1, 1, 1, NOW())")
		if errno(err) != 1235 {
			t.Fatalf("multi-shard insert in txn: %v", err)
		}
		mustExec(t, c, "ROLLBACK")
	})

	refusals := []struct {
		sql   string
		errno uint16
		want  string
	}{
		{"SELECT GROUP_CONCAT(DISTINCT sender_uid) FROM conv_msg", 1235, "DISTINCT"},
		{"SELECT SUM(DISTINCT content) FROM msg_content", 1235, "not a number"},
		{"SELECT * FROM conv_msg WHERE msg_id IN (SELECT msg_id FROM msg_content)", 1235, "subquery"},
		{"UPDATE conv_msg SET msg_type = 1", 1235, "needs a conv_id"},
		{"DELETE FROM im_inbox WHERE conv_id = 5", 1235, "needs a uid"},
		{"UPDATE conv_msg SET conv_id = 5 WHERE conv_id = 4", 1235, ""},
		{"SELECT * FROM conv_msg WHERE conv_id = NULL", 1525, "NULL"},
		{"SELECT * FROM conv_msg WHERE conv_id = -1", 1525, "negative"},
		{"SELECT * FROM conv_msg WHERE conv_id = 18446744073709551616", 1525, ""},
		{"SELECT * FROM conv_msg WHERE conv_id = 1.5", 1525, "not an integer"},
		{"SELECT * FROM conv_msg WHERE conv_id = 'abc'", 1525, "not an integer"},
		{"INSERT INTO conv_msg VALUES (1, 1, 1, 1, NOW())", 1136, "Column count"},
		{"INSERT INTO conv_msg (seq, msg_id) VALUES (1, 1)", 1235, ""},
		{"SELECT * FROM conv_msg JOIN im_inbox ON 1 = 1 WHERE conv_msg.conv_id = 1", 1235, ""},
		{"SELECT 1; SELECT 2", 1064, ""},
		{"", 1065, ""},
		{"SET NAMES gbk", 1235, "gbk"},
		{"SET sql_mode = 'ANSI_QUOTES'", 1235, "ANSI_QUOTES"},
		{"SET GLOBAL max_connections = 10", 1235, "GLOBAL"},
		{"SELECT conv_id FROM conv_msg WHERE conv_id = ?", 1064, ""}, // a ? in COM_QUERY is a syntax error, as in MySQL
		{"SET @@session.no_such_var = 1", 1193, ""},
	}
	for _, r := range refusals {
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.ExecContext(ctx, r.sql)
		if got := errno(err); got != r.errno || (r.want != "" && !strings.Contains(err.Error(), r.want)) {
			t.Errorf("%q: got %v (errno %d), want errno %d containing %q", r.sql, err, got, r.errno, r.want)
		}
		// The connection survives every refusal.
		if err := c.PingContext(ctx); err != nil {
			t.Errorf("%q: connection broken afterwards: %v", r.sql, err)
		}
		c.Close()
	}
}
