package backend

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/convoy-im/convoy/internal/testsvc"
	"github.com/convoy-im/convoy/router"
)

func newTestManager(t *testing.T, m *testsvc.MariaDB, opt Options) *Manager {
	t.Helper()
	return newTestManagerAt(t, m.Addr(), opt)
}

// newTestManagerAt: one datasource ds0 at addr (a real server or a fake).
func newTestManagerAt(t *testing.T, addr string, opt Options) *Manager {
	t.Helper()
	doc, err := router.DefaultLayout([]router.Datasource{{Name: "ds0", Addr: addr, User: "root"}}, 8)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := router.NewSnapshot(doc)
	if err != nil {
		t.Fatal(err)
	}
	mgr := NewManager(opt)
	if err := mgr.Update(snap); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mgr.Close)
	return mgr
}

func scalar(t *testing.T, c *Conn, q string) string {
	t.Helper()
	r, err := c.Exec(q)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	if len(r.RowDatas) == 0 {
		t.Fatalf("%s: no row", q)
	}
	vals, err := r.RowDatas[0].Parse(r.Fields, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if vals[0].Type == mysql.FieldValueTypeString {
		return string(vals[0].AsString())
	}
	return vals[0].String()
}

// TestPoolAgainstMariaDB covers the pool's promises on a real server:
// utf8mb4 on every connection, reuse, session state never leaking between
// users of a pooled connection, the MaxOpen bound, and broken connections
// never coming back.
func TestPoolAgainstMariaDB(t *testing.T) {
	m := testsvc.StartMariaDB(t)
	mgr := newTestManager(t, m, Options{MaxOpen: 2, WaitTimeout: 200 * time.Millisecond, ReadTimeout: 5 * time.Second})
	ctx := context.Background()

	c, err := mgr.Acquire(ctx, "ds0", false)
	if err != nil {
		t.Fatal(err)
	}
	if got := scalar(t, c, "SELECT @@collation_connection"); got != Collation {
		t.Fatalf("collation_connection = %s, want %s", got, Collation)
	}
	if got := scalar(t, c, "SELECT HEX('😀')"); got != "F09F9880" {
		t.Fatalf("emoji bytes changed on the way: %s", got)
	}
	id := c.ConnectionID()
	if err := c.SyncVars(map[string]string{"@@sql_mode": "'STRICT_ALL_TABLES'", "@u": "7", "names": "latin1"}); err != nil {
		t.Fatal(err)
	}
	if got := scalar(t, c, "SELECT CONCAT(@@sql_mode, '/', @u, '/', @@character_set_client)"); got != "STRICT_ALL_TABLES/7/latin1" {
		t.Fatalf("vars not applied: %s", got)
	}
	c.Release()

	// The next user gets the same (warm) connection with its own state.
	c, err = mgr.Acquire(ctx, "ds0", false)
	if err != nil {
		t.Fatal(err)
	}
	if c.ConnectionID() != id {
		t.Fatalf("idle connection not reused")
	}
	if err := c.SyncVars(map[string]string{}); err != nil {
		t.Fatal(err)
	}
	if got := scalar(t, c, "SELECT CONCAT(@@sql_mode <> 'STRICT_ALL_TABLES', '/', @u IS NULL, '/', @@character_set_client)"); got != "1/1/utf8mb4" {
		t.Fatalf("previous session state leaked: %s", got)
	}

	// MaxOpen=2: a third Acquire waits WaitTimeout, then fails clearly.
	c2, err := mgr.Acquire(ctx, "ds0", false)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = mgr.Acquire(ctx, "ds0", false)
	if !errors.Is(err, ErrPoolTimeout) || time.Since(start) < 150*time.Millisecond {
		t.Fatalf("third acquire: %v after %s", err, time.Since(start))
	}
	c2.Release()

	// A server error leaves the connection usable; a killed connection is
	// reported as unavailable and dropped instead of pooled.
	if _, err := c.Exec("SELECT * FROM no_such_db.t"); err == nil || !IsServerError(err) {
		t.Fatalf("server error: %v", err)
	}
	if got := scalar(t, c, "SELECT 1"); got != "1" {
		t.Fatal("connection unusable after a server error")
	}
	killer, err := mgr.Acquire(ctx, "ds0", false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := killer.Exec("KILL " + scalar(t, c, "SELECT CONNECTION_ID()")); err != nil {
		t.Fatal(err)
	}
	killer.Release()
	_, err = c.Exec("SELECT 1")
	var ue *UnavailableError
	if !errors.As(err, &ue) {
		t.Fatalf("query on a killed connection: %v", err)
	}
	c.Release()
	if inUse, idle := mgr.Stats()[0].InUse, mgr.Stats()[0].Idle; inUse != 0 || idle != 1 {
		t.Fatalf("after release: in use %d idle %d, want 0 and 1 (the broken one closed)", inUse, idle)
	}
	c, err = mgr.Acquire(ctx, "ds0", false)
	if err != nil {
		t.Fatal(err)
	}
	if got := scalar(t, c, "SELECT 1"); got != "1" {
		t.Fatal("pool handed out a broken connection")
	}
	c.Release()
}

func TestUnreachableDatasource(t *testing.T) {
	doc, _ := router.DefaultLayout([]router.Datasource{{Name: "ds0", Addr: "127.0.0.1:1", User: "root"}}, 8)
	snap, _ := router.NewSnapshot(doc)
	mgr := NewManager(Options{ConnectTimeout: 500 * time.Millisecond})
	defer mgr.Close()
	if err := mgr.Update(snap); err != nil {
		t.Fatal(err)
	}
	_, err := mgr.Acquire(context.Background(), "ds0", false)
	var ue *UnavailableError
	if !errors.As(err, &ue) || ue.Datasource != "ds0" {
		t.Fatalf("unreachable datasource: %v", err)
	}
	if _, err := mgr.Acquire(context.Background(), "nope", false); !errors.Is(err, ErrUnknownDatasource) {
		t.Fatalf("unknown datasource: %v", err)
	}
}
