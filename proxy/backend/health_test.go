package backend

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/convoy-im/convoy/internal/testsvc"
)

// waitState waits until ds0's breaker reports want and returns how long it took.
func waitState(t *testing.T, mgr *Manager, want State, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		if s := mgr.Stats(); len(s) == 1 && s[0].Health.State == want {
			return time.Since(start)
		}
		if time.Since(start) > within {
			t.Fatalf("ds0 not %s within %s: %+v", want, within, mgr.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestStatementTimeout: a statement running past the statement timeout
// fails with a TimeoutError soon after it, its connection is dropped, and
// the datasource stays up (its probes answer: a slow statement is not a hung
// server).
func TestStatementTimeout(t *testing.T) {
	m := testsvc.StartMariaDB(t)
	mgr := newTestManager(t, m, Options{StatementTimeout: 300 * time.Millisecond})
	ctx := context.Background()
	c, err := mgr.Acquire(ctx, "ds0", false)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = c.Exec("SELECT SLEEP(5)")
	d := time.Since(start)
	var te *TimeoutError
	if !errors.As(err, &te) || te.Datasource != "ds0" || te.Timeout != 300*time.Millisecond {
		t.Fatalf("SELECT SLEEP(5) with a 300ms statement timeout: %v", err)
	}
	// The server's max_statement_time timer may fire a little before
	// the client's 300 ms have passed (it measured 299.7 ms in a CI run
	// under -race): 10 ms of slack below, none of substance.
	if d < 290*time.Millisecond || d > 800*time.Millisecond {
		t.Errorf("failed after %s, want 300ms plus at most a watchdog tick", d)
	}
	if !strings.Contains(err.Error(), "max_statement_time exceeded") || !strings.Contains(err.Error(), "outcome is unknown") {
		t.Errorf("message: %v", err)
	}
	if !c.broken {
		t.Errorf("the timed-out connection is still marked reusable")
	}
	c.Release()
	// A per-call timeout (admin directives) replaces the statement timeout.
	c, err = mgr.Acquire(ctx, "ds0", false)
	if err != nil {
		t.Fatal(err)
	}
	c.SetTimeout(2 * time.Second)
	if _, err := c.Exec("SELECT SLEEP(0.5)"); err != nil {
		t.Errorf("SLEEP(0.5) with a 2s per-call timeout: %v", err)
	}
	c.Release()
	c, err = mgr.Acquire(ctx, "ds0", false)
	if err != nil {
		t.Fatal(err)
	}
	if got := scalar(t, c, "SELECT 1"); got != "1" {
		t.Errorf("after the timeout: %s", got)
	}
	c.Release()
	time.Sleep(300 * time.Millisecond)
	if h := mgr.Stats()[0].Health; h.State != StateUp {
		t.Errorf("a slow statement marked the datasource %s: %+v", h.State, h)
	}
}

// TestStatementTimeoutKillsTheWrite: a write blocked on a row lock past
// the statement timeout is stopped on the server too (KILL QUERY), not only
// abandoned: once the lock is released it must not commit, since its client
// was told it failed.
func TestStatementTimeoutKillsTheWrite(t *testing.T) {
	m := testsvc.StartMariaDB(t)
	m.Exec(t, "CREATE DATABASE k", "CREATE TABLE k.t (id INT PRIMARY KEY, v INT)", "INSERT INTO k.t VALUES (1, 0)")
	mgr := newTestManager(t, m, Options{StatementTimeout: 300 * time.Millisecond})
	ctx := context.Background()
	locker, err := mgr.Acquire(ctx, "ds0", false)
	if err != nil {
		t.Fatal(err)
	}
	locker.SetTimeout(time.Minute)
	for _, q := range []string{"BEGIN", "UPDATE k.t SET v = 1 WHERE id = 1"} {
		if _, err := locker.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	c, err := mgr.Acquire(ctx, "ds0", false)
	if err != nil {
		t.Fatal(err)
	}
	thread := c.ConnectionID()
	_, err = c.Exec("UPDATE k.t SET v = 2 WHERE id = 1")
	var te *TimeoutError
	if !errors.As(err, &te) {
		t.Fatalf("a write blocked on a row lock past the timeout: %v", err)
	}
	c.Release()
	// The KILL QUERY reaches the server asynchronously: wait until the
	// abandoned write's server thread is gone (it ends once its statement
	// is stopped and it finds its socket closed).
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if scalar(t, locker, fmt.Sprintf("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = %d", thread)) == "0" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the abandoned write still runs on the server")
		}
	}
	if _, err := locker.Exec("COMMIT"); err != nil {
		t.Fatal(err)
	}
	locker.Release()
	time.Sleep(100 * time.Millisecond)
	c, err = mgr.Acquire(ctx, "ds0", false)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	if got := scalar(t, c, "SELECT v FROM k.t WHERE id = 1"); got != "1" {
		t.Fatalf("after the lock was released the row holds %s: the write its client was told failed committed", got)
	}
}

// TestBreakerHungAndDown: ds0 paused (SIGSTOP) is marked hung within the
// probe interval plus the probe timeout; a statement running at that moment
// is interrupted, new ones fail at once with an OutageError naming it, and
// statements waiting for a pool slot give up; resumed, it is up again within
// a probe. Killed, it is marked down at once (a statement's failure asks for
// a probe); restarted, it is back within openProbeGap of answering. Every
// transition is logged once and counted.
func TestBreakerHungAndDown(t *testing.T) {
	m := testsvc.StartMariaDB(t)
	core, logs := observer.New(zap.InfoLevel)
	mgr := newTestManager(t, m, Options{StatementTimeout: 5 * time.Second, HealthInterval: 200 * time.Millisecond,
		HealthTimeout: 300 * time.Millisecond, MaxOpen: 2, WaitTimeout: 5 * time.Second, Log: zap.New(core)})
	ctx := context.Background()
	c, err := mgr.Acquire(ctx, "ds0", false)
	if err != nil {
		t.Fatal(err)
	}
	scalar(t, c, "SELECT 1")
	c.Release()

	// Hung: one statement running, one holding the other slot, one waiting.
	held, err := mgr.Acquire(ctx, "ds0", false)
	if err != nil {
		t.Fatal(err)
	}
	running, err := mgr.Acquire(ctx, "ds0", false)
	if err != nil {
		t.Fatal(err)
	}
	m.Pause()
	paused := time.Now()
	type outcome struct {
		err error
		at  time.Duration
	}
	runErr := make(chan outcome, 1)
	go func() {
		_, err := running.Exec("SELECT 1")
		runErr <- outcome{err, time.Since(paused)}
	}()
	waitErr := make(chan outcome, 1)
	go func() {
		c, err := mgr.Acquire(ctx, "ds0", false)
		if err == nil {
			c.Release()
		}
		waitErr <- outcome{err, time.Since(paused)}
	}()
	marked := waitState(t, mgr, StateHung, 3*time.Second)
	t.Logf("paused: marked hung after %s", marked.Round(time.Millisecond))
	// interval + timeout is 500 ms; a loaded 2-core CI machine was seen at
	// 813 ms. The bound proves the checker, not the read timeout (30 s),
	// found the hang.
	if marked > 1500*time.Millisecond {
		t.Errorf("marked hung %s after the pause, want within interval + timeout (500ms) plus slack", marked)
	}
	for name, ch := range map[string]chan outcome{"running statement": runErr, "waiting Acquire": waitErr} {
		select {
		case o := <-ch:
			t.Logf("%s: %v after %s", name, o.err, o.at.Round(time.Millisecond))
			if o.err == nil {
				t.Errorf("%s succeeded on a paused server", name)
			}
		case <-time.After(time.Second):
			t.Errorf("%s still blocked 1s after the datasource was marked hung", name)
		}
	}
	running.Release()
	held.Release()
	start := time.Now()
	_, err = mgr.Acquire(ctx, "ds0", false)
	var oe *OutageError
	if !errors.As(err, &oe) || oe.State != StateHung || time.Since(start) > 50*time.Millisecond {
		t.Errorf("Acquire while hung: %v after %s, want an OutageError at once", err, time.Since(start))
	} else if msg := err.Error(); !strings.HasPrefix(msg, "datasource ds0 is unavailable (hung since ") {
		t.Errorf("outage message: %s", msg)
	}
	m.Resume()
	back := waitState(t, mgr, StateUp, 3*time.Second)
	t.Logf("resumed: up after %s", back.Round(time.Millisecond))
	if back > 500*time.Millisecond {
		t.Errorf("up %s after the resume", back)
	}
	c, err = mgr.Acquire(ctx, "ds0", false)
	if err != nil {
		t.Fatalf("after the resume: %v", err)
	}
	scalar(t, c, "SELECT 1")
	c.Release()

	// Down: a statement on a pooled connection fails and asks for a probe.
	m.Kill()
	c, err = mgr.Acquire(ctx, "ds0", false)
	if err == nil {
		_, err = c.Exec("SELECT 1")
		c.Release()
	}
	if err == nil {
		t.Fatal("a statement on a killed server succeeded")
	}
	marked = waitState(t, mgr, StateDown, 2*time.Second)
	t.Logf("killed: marked down %s after the first failure", marked.Round(time.Millisecond))
	if marked > 300*time.Millisecond {
		t.Errorf("marked down %s after a statement failed", marked)
	}
	m.Start()
	back = waitState(t, mgr, StateUp, 2*time.Second)
	t.Logf("restarted: up %s after the server answered", back.Round(time.Millisecond))
	if back > 300*time.Millisecond {
		t.Errorf("up %s after the restart", back)
	}
	// No connection from before the outage is handed out again.
	for i := 0; i < 3; i++ {
		c, err := mgr.Acquire(ctx, "ds0", false)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Exec("SELECT 1"); err != nil {
			t.Errorf("statement %d after the restart: %v", i, err)
		}
		c.Release()
	}

	// Transition lines only: a probe that timed out while the statements
	// before the pause were still being answered logs a warning of its own
	// (seen on a loaded CI machine) and rightly changes nothing.
	var lines []string
	for _, e := range logs.All() {
		if e.Message != "datasource back up" && !strings.HasPrefix(e.Message, "datasource unavailable") {
			continue
		}
		lines = append(lines, e.Message+" "+e.ContextMap()["datasource"].(string)+" "+stateField(e.ContextMap()))
	}
	want := []string{"datasource unavailable; its statements fail at once until a probe answers ds0 hung",
		"datasource back up ds0 up", "datasource unavailable; its statements fail at once until a probe answers ds0 down",
		"datasource back up ds0 up"}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("transition log lines:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	for _, e := range logs.FilterMessage("datasource back up").All() {
		if d, ok := e.ContextMap()["out_for"].(time.Duration); !ok || d <= 0 {
			t.Errorf("back-up line without out_for: %v", e.ContextMap())
		}
	}
	for to, n := range map[string]float64{"hung": 1, "down": 1, "up": 2} {
		var v dto.Metric
		if err := mgr.transitions.WithLabelValues("ds0", to).Write(&v); err != nil {
			t.Fatal(err)
		}
		if got := v.GetCounter().GetValue(); got != n {
			t.Errorf("transitions to %s: %v, want %v", to, got, n)
		}
	}
}

func stateField(m map[string]any) string {
	if s, ok := m["state"].(string); ok {
		return s
	}
	return "up"
}
