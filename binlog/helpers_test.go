package binlog

import (
	"context"
	"database/sql"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/convoy-im/convoy/internal/testsvc"
	"go.uber.org/zap/zaptest"
)

// readerIDs gives every reader of a test process its own replica id
// (testsvc's servers use 1000+).
var readerIDs atomic.Uint32

// startIM starts a MariaDB with database im_0 holding the five IM tables
// of schema/im.sql, and returns it with a pool on im_0.
func startIM(t *testing.T) (*testsvc.MariaDB, *sql.DB) {
	t.Helper()
	m := testsvc.StartMariaDB(t)
	ddl, err := os.ReadFile("../schema/im.sql")
	if err != nil {
		t.Fatal(err)
	}
	m.Exec(t, "CREATE DATABASE im_0", "USE im_0;\n"+string(ddl))
	return m, m.Open(t, "im_0")
}

func newReader(t *testing.T, m *testsvc.MariaDB, cfg Config) *Reader {
	t.Helper()
	cfg.Addr, cfg.User = m.Addr(), "root"
	cfg.ServerID = 5000 + readerIDs.Add(1)
	cfg.Log = zaptest.NewLogger(t)
	r, err := NewReader(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func currentPos(t *testing.T, db *sql.DB) Position {
	t.Helper()
	p, err := CurrentPosition(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// collector runs Reader.Stream in a goroutine and hands the transactions
// to the test.
type collector struct {
	r      *Reader
	txns   chan Txn
	done   chan error
	cancel context.CancelFunc
	once   sync.Once
	err    error
}

func collect(t *testing.T, r *Reader, from Position) *collector {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c := &collector{r: r, txns: make(chan Txn, 100_000), done: make(chan error, 1), cancel: cancel}
	go func() {
		c.done <- r.Stream(ctx, from, func(x Txn) error { c.txns <- x; return nil })
	}()
	t.Cleanup(func() { c.stop() })
	return c
}

// stop ends the stream and returns what Stream returned.
func (c *collector) stop() error {
	c.once.Do(func() {
		c.cancel()
		c.err = <-c.done
	})
	return c.err
}

// next returns the next transaction, failing the test if Stream ended or
// nothing came within 10 s.
func (c *collector) next(t *testing.T) Txn {
	t.Helper()
	select {
	case x := <-c.txns:
		return x
	case err := <-c.done:
		c.done <- err
		t.Fatalf("Stream returned %v while a transaction was expected", err)
	case <-time.After(10 * time.Second):
		t.Fatalf("no transaction within 10 s; stats %+v", c.r.Stats())
	}
	return Txn{}
}

// failure waits for Stream to return on its own and returns its error.
func (c *collector) failure(t *testing.T) error {
	t.Helper()
	select {
	case x := <-c.txns:
		t.Fatalf("unexpected transaction %s: %+v", x.GTID, x.Changes)
	case err := <-c.done:
		c.done <- err
		t.Logf("Stream returned: %v", err)
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("Stream still running after 10 s; stats %+v", c.r.Stats())
	}
	return nil
}

// caughtUp waits until the reader has read everything the server has
// logged so far.
func (c *collector) caughtUp(t *testing.T, db *sql.DB) {
	t.Helper()
	target := currentPos(t, db)
	deadline := time.Now().Add(15 * time.Second)
	for {
		ok, err := c.r.Stats().Position.Reached(target)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("reader at %q, server at %q after 15 s; stats %+v", c.r.Stats().Position, target, c.r.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func mustExec(t *testing.T, db interface {
	ExecContext(context.Context, string, ...any) (sql.Result, error)
}, q string, args ...any) {
	t.Helper()
	if _, err := db.ExecContext(context.Background(), q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// inTxn runs stmts in one transaction and commits it, or rolls it back.
func inTxn(t *testing.T, db *sql.DB, commit bool, stmts ...string) {
	t.Helper()
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range stmts {
		mustExec(t, tx, q)
	}
	if commit {
		err = tx.Commit()
	} else {
		err = tx.Rollback()
	}
	if err != nil {
		t.Fatal(err)
	}
}
