package backend

import (
	"context"
	"errors"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/convoy-im/convoy/internal/testsvc"
)

// TestCallChain: a CALL's results arrive as a chain (result sets flagged
// SERVER_MORE_RESULTS_EXISTS, OUT parameters flagged SERVER_PS_OUT_PARAMS,
// then the OK), a CALL that reaches Exec leaves no unread packet behind in
// the pool, connections that ran stored code are not reused, and a
// connection opened without CLIENT_MULTI_RESULTS gets MariaDB's 1312.
func TestCallChain(t *testing.T) {
	m := testsvc.StartMariaDB(t)
	m.Exec(t, "CREATE DATABASE r",
		"CREATE PROCEDURE r.p(IN a INT, OUT b INT) BEGIN SELECT a AS x; SELECT a + 1 AS y; SET b = a * 10; END",
		"CREATE PROCEDURE r.e() BEGIN SELECT 1; SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'boom'; END")
	mgr := newTestManager(t, m, Options{MaxOpen: 4})
	ctx := context.Background()
	acquire := func() *Conn {
		c, err := mgr.Acquire(ctx, "ds0", false)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.UseDB("r"); err != nil {
			t.Fatal(err)
		}
		return c
	}

	c := acquire()
	rs, err := c.ExecAll("CALL p(1, @b)")
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 3 || !rs[0].HasResultset() || !rs[1].HasResultset() || rs[2].HasResultset() ||
		rs[0].Status&mysql.SERVER_MORE_RESULTS_EXISTS == 0 || rs[2].Status&mysql.SERVER_MORE_RESULTS_EXISTS != 0 {
		t.Fatalf("text CALL chain: %d results %+v", len(rs), rs)
	}
	rs, err = c.ExecPreparedAll("CALL p(?, ?)", []any{int64(2), nil})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 4 || rs[2].Status&mysql.SERVER_PS_OUT_PARAMS == 0 || len(rs[2].RowDatas) != 1 {
		t.Fatalf("prepared CALL chain: %d results %+v", len(rs), rs)
	}
	rs, err = c.ExecAll("CALL e()")
	if !isErrno(err, 1644) || len(rs) != 1 {
		t.Fatalf("CALL e(): %d results, %v", len(rs), err)
	}
	if got := scalar(t, c, "SELECT 'still in step'"); got != "still in step" {
		t.Fatalf("after the chains: %q", got)
	}
	id := c.ConnectionID()
	c.Release()
	c = acquire()
	if c.ConnectionID() == id {
		t.Fatal("a connection that ran stored code went back to the pool")
	}

	// A CALL through Exec (an admin's raw statement) returns its first
	// result; the rest dies with the connection.
	id = c.ConnectionID()
	r, err := c.Exec("CALL p(3, @b)")
	if err != nil || !r.HasResultset() {
		t.Fatalf("Exec of a CALL: %+v, %v", r, err)
	}
	c.Release()
	c = acquire()
	if c.ConnectionID() == id {
		t.Fatal("a connection with unread results went back to the pool")
	}
	if got := scalar(t, c, "SELECT 7"); got != "7" {
		t.Fatalf("next user of the pool: %q", got)
	}
	c.Release()

	// A connection for a client without CLIENT_MULTI_RESULTS.
	c, err = mgr.AcquireOnce(ctx, "ds0", false, mysql.CLIENT_MULTI_RESULTS|mysql.CLIENT_PS_MULTI_RESULTS)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.UseDB("r"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ExecAll("CALL p(1, @b)"); !isErrno(err, 1312) {
		t.Fatalf("CALL without CLIENT_MULTI_RESULTS: %v", err)
	}
	c.Release()
	if inUse, _ := mgr.pools["ds0"].Stats(); inUse != 0 {
		t.Fatalf("%d connections still in use", inUse)
	}
}

func isErrno(err error, code uint16) bool {
	var me *mysql.MyError
	return errors.As(err, &me) && me.Code == code
}
