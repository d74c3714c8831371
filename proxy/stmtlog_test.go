package proxy

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/convoy-im/convoy/proxy/engine"
	"github.com/convoy-im/convoy/router"
)

// secret is a value only ever sent as a literal or a bound argument: it
// must never reach the log.
const secret = "s3cret-body-4711"

// dupBackends answer like fuzzBackends, except that a statement carrying
// the secret fails as MariaDB's duplicate-key error does, quoting it.
type dupBackends struct{}

func (dupBackends) Acquire(_ context.Context, ds string, _ bool) (engine.Conn, error) {
	return &dupConn{fuzzConn{ds: ds}}, nil
}

type dupConn struct{ fuzzConn }

func dupErr() error {
	return &mysql.MyError{Code: mysql.ER_DUP_ENTRY, State: "23000", Message: "Duplicate entry '" + secret + "' for key 'PRIMARY'"}
}

func (c *dupConn) Exec(sql string) (*mysql.Result, error) {
	if strings.Contains(sql, secret) {
		return nil, dupErr()
	}
	return c.fuzzConn.Exec(sql)
}

func (c *dupConn) ExecPrepared(sql string, args []any) (*mysql.Result, error) {
	if strings.Contains(fmt.Sprint(args...), secret) {
		return nil, dupErr()
	}
	return c.fuzzConn.ExecPrepared(sql, args)
}

// startLoggedServer runs a proxy over dupBackends whose log is observed at
// level, with rate lines per errno and second.
func startLoggedServer(t *testing.T, level zapcore.Level, rate int) (*client.Conn, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(level)
	addr := serveProxy(t, Config{Users: []User{{Name: "app", Password: "pw"}}, StatementLogRate: rate}, dupBackends{}, zap.New(core))
	c, err := client.ConnectWithTimeout(addr, "app", "pw", "im", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, logs
}

// statementLines are the log lines about failed statements.
func statementLines(logs *observer.ObservedLogs) []observer.LoggedEntry {
	return logs.Filter(func(e observer.LoggedEntry) bool { return e.LoggerName == "client" }).All()
}

func errnoOf(err error) uint16 {
	if me, ok := err.(*mysql.MyError); ok {
		return me.Code
	}
	return 0
}

// TestStatementLogged: a refused statement, a backend error on one shard
// and a failed prepared EXECUTE are each logged once with errno, reason,
// user, command, shard and digest, and none of the lines holds a literal
// or bound value.
func TestStatementLogged(t *testing.T) {
	c, logs := startLoggedServer(t, zapcore.DebugLevel, 100)
	const key = 4242
	shard := router.ShardOf(key).String()

	refused := "UPDATE conv_msg SET body = '" + secret + "', n = 918273"
	if _, err := c.Execute(refused); errnoOf(err) != mysql.ER_NOT_SUPPORTED_YET {
		t.Fatalf("%s: %v, want errno 1235", refused, err)
	}
	backend := fmt.Sprintf("SELECT * FROM conv_msg WHERE conv_id = %d AND body = '%s'", key, secret)
	if _, err := c.Execute(backend); errnoOf(err) != mysql.ER_DUP_ENTRY {
		t.Fatalf("%s: %v, want errno 1062", backend, err)
	}
	st, err := c.Prepare("SELECT * FROM conv_msg WHERE conv_id = ? AND body = ?")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Execute(key, secret); errnoOf(err) != mysql.ER_DUP_ENTRY {
		t.Fatalf("EXECUTE: %v, want errno 1062", err)
	}

	lines := statementLines(logs)
	want := []struct {
		level  zapcore.Level
		errno  uint16
		reason string
		cmd    string
		shard  string
		stmt   string
	}{
		{zapcore.InfoLevel, 1235, "not_supported", cmdQuery, "", "UPDATE conv_msg SET body = ?, n = ?"},
		{zapcore.DebugLevel, 1062, "", cmdQuery, shard, "SELECT * FROM conv_msg WHERE conv_id = ? AND body = ?"},
		{zapcore.DebugLevel, 1062, "", cmdStmtExecute, shard, "SELECT * FROM conv_msg WHERE conv_id = ? AND body = ?"},
	}
	if len(lines) != len(want) {
		t.Fatalf("%d statement lines, want %d: %+v", len(lines), len(want), lines)
	}
	for i, w := range want {
		l := lines[i]
		f := l.ContextMap()
		if all := fmt.Sprint(l.Message, f); strings.Contains(all, secret) || strings.Contains(all, "918273") || strings.Contains(all, "4242") {
			t.Errorf("line %d holds a client value: %s", i, all)
		}
		if l.Level != w.level || f["errno"] != w.errno || f["user"] != "app" || f["command"] != w.cmd || f["stmt"] != w.stmt {
			t.Errorf("line %d: %s %q %v, want level %s errno %d user app command %s stmt %q", i, l.Level, l.Message, f, w.level, w.errno, w.cmd, w.stmt)
		}
		if r, _ := f["reason"].(string); r != w.reason {
			t.Errorf("line %d: reason %q, want %q", i, r, w.reason)
		}
		if s, _ := f["shard"].(string); s != w.shard {
			t.Errorf("line %d: shard %q, want %q", i, s, w.shard)
		}
		if d, _ := f["digest"].(string); len(d) != 16 {
			t.Errorf("line %d: digest %q, want 16 hex digits", i, d)
		}
		if f["remote"] == nil {
			t.Errorf("line %d: no remote address", i)
		}
	}
	if lines[1].ContextMap()["digest"] != lines[2].ContextMap()["digest"] {
		t.Errorf("the same statement as text and prepared has two digests")
	}
}

// TestStatementLogRateLimit: an application repeating a refused statement
// gets at most rate lines a second; the first line after a pause counts
// the left-out ones, so lines + suppressed = statements sent.
func TestStatementLogRateLimit(t *testing.T) {
	const rate, sent = 3, 40
	c, logs := startLoggedServer(t, zapcore.InfoLevel, rate)
	start := time.Now()
	for i := 0; i < sent; i++ {
		if _, err := c.Execute(fmt.Sprintf("DELETE FROM conv_msg WHERE body = '%s-%d'", secret, i)); errnoOf(err) != mysql.ER_NOT_SUPPORTED_YET {
			t.Fatalf("keyless DELETE: %v, want errno 1235", err)
		}
	}
	elapsed := time.Since(start)
	logged := len(statementLines(logs))
	if max := rate * (int(elapsed/time.Second) + 2); logged > max || logged >= sent {
		t.Fatalf("%d statements in %s wrote %d lines; the limit allows at most %d", sent, elapsed, logged, max)
	}
	// A backend error at debug is off at info: it neither shows nor uses
	// the budget of another errno.
	if _, err := c.Execute("SELECT * FROM conv_msg WHERE conv_id = 1 AND body = '" + secret + "'"); errnoOf(err) != mysql.ER_DUP_ENTRY {
		t.Fatalf("want errno 1062, got %v", err)
	}
	time.Sleep(1100 * time.Millisecond)
	if _, err := c.Execute("DELETE FROM conv_msg WHERE body = 'x'"); errnoOf(err) != mysql.ER_NOT_SUPPORTED_YET {
		t.Fatalf("keyless DELETE: %v, want errno 1235", err)
	}
	lines := statementLines(logs)
	if len(lines) != logged+1 {
		t.Fatalf("after a pause: %d lines, want %d", len(lines), logged+1)
	}
	var suppressed uint64
	for _, l := range lines {
		if l.ContextMap()["errno"] != uint16(1235) {
			t.Errorf("unexpected line %s %v", l.Message, l.ContextMap())
		}
		if s, ok := l.ContextMap()["suppressed"].(uint64); ok {
			suppressed += s
		}
	}
	if got := uint64(len(lines)) + suppressed; got != sent+1 {
		t.Errorf("lines %d + suppressed %d = %d, want the %d statements sent", len(lines), suppressed, got, sent+1)
	}
	if s, _ := lines[len(lines)-1].ContextMap()["suppressed"].(uint64); s == 0 {
		t.Errorf("the line after the pause does not report the left-out lines: %v", lines[len(lines)-1].ContextMap())
	}
}
