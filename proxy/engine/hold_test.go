package engine

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/convoy-im/convoy/proxy/shardgate"
	"github.com/convoy-im/convoy/proxy/sqlerr"
	"github.com/convoy-im/convoy/router"
)

// swapRoutes serves a snapshot a test can replace (a route flip).
type swapRoutes struct {
	p atomic.Pointer[router.Snapshot]
}

func (r *swapRoutes) Current() *router.Snapshot { return r.p.Load() }

// conv 42 lives on shard 0136 (im_1 on ds0 in defaultSnapshot); conv 1 on
// shard 0951 (im_7 on ds1).
const heldShard = 136

// movedSnapshot is defaultSnapshot with shard 0136 moved to ds2.im_9, as a
// migration switch leaves it.
func movedSnapshot(t *testing.T) *router.Snapshot { return movedTo(t, "ds2", "im_9") }

// movedTo is defaultSnapshot with shard 0136 moved to ds.database.
func movedTo(t *testing.T, ds, database string) *router.Snapshot {
	t.Helper()
	doc := defaultSnapshot().Document()
	doc.Version++
	doc.Datasources = append(doc.Datasources, router.Datasource{Name: "ds2", Addr: "127.0.0.1:3"})
	var shards []router.ShardRange
	for _, r := range doc.Shards {
		if r.From <= heldShard && heldShard <= r.To {
			shards = append(shards, router.ShardRange{From: r.From, To: heldShard - 1, Datasource: r.Datasource, Database: r.Database},
				router.ShardRange{From: heldShard, To: heldShard, Datasource: ds, Database: database},
				router.ShardRange{From: heldShard + 1, To: r.To, Datasource: r.Datasource, Database: r.Database})
			continue
		}
		shards = append(shards, r)
	}
	doc.Shards = shards
	s, err := router.NewSnapshot(doc)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newHoldEngine(opt Options) (*Engine, *recorder, *swapRoutes) {
	return newHoldEngineMetrics(opt, nil)
}

func newHoldEngineMetrics(opt Options, m *Metrics) (*Engine, *recorder, *swapRoutes) {
	rec := &recorder{cols: 6}
	routes := &swapRoutes{}
	routes.p.Store(defaultSnapshot())
	return New(rec, routes, m, nil, opt), rec, routes
}

// waitQueued waits until n writes wait behind h.
func waitQueued(t *testing.T, h *shardgate.ShardHold, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if h.Queued() == n {
			return
		}
	}
	t.Fatalf("%d writes never queued", n)
}

func hold(t *testing.T, e *Engine, shard int) *shardgate.ShardHold {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	h, err := e.Hold(ctx, shard)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// goQuery runs q on s in the background.
func goQuery(s *Session, q string) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := s.Query(q)
		done <- err
	}()
	return done
}

// goHold holds heldShard in the background, without a deadline.
func goHold(t *testing.T, e *Engine) <-chan *shardgate.ShardHold {
	held := make(chan *shardgate.ShardHold, 1)
	go func() {
		h, err := e.Hold(context.Background(), heldShard)
		if err != nil {
			t.Error(err)
		}
		held <- h
	}()
	return held
}

type outcome struct {
	name string
	err  error
}

// TestHoldQueuesUntilReleaseUnderNewRoutes: a held shard's writes (an
// UPDATE, a seq-allocating INSERT, a transaction's first write) wait and
// send nothing; its reads and another shard's writes run; after the route
// flip and Release, the queued writes are routed under the new routes.
func TestHoldQueuesUntilReleaseUnderNewRoutes(t *testing.T) {
	e, rec, routes := newHoldEngine(Options{})
	h := hold(t, e, heldShard)
	done := make(chan outcome, 3)
	run := func(name string, stmts ...string) {
		s := e.NewSession("im")
		go func() {
			for _, q := range stmts {
				if _, err := s.Query(q); err != nil {
					done <- outcome{name, err}
					return
				}
			}
			done <- outcome{name, nil}
		}()
	}
	run("update", "UPDATE conv_msg SET msg_type = 2 WHERE conv_id = 42 AND seq = 1")
	waitQueued(t, h, 1)
	run("insert", "INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (42, 7, 1, 1, NOW())")
	waitQueued(t, h, 2)
	txn := e.NewSession("im")
	if _, err := txn.Query("BEGIN"); err != nil {
		t.Fatal(err)
	}
	go func() {
		_, err := txn.Query("DELETE FROM conv_msg WHERE conv_id = 42 AND seq = 3")
		done <- outcome{"txn", err}
	}()
	waitQueued(t, h, 3)

	other := e.NewSession("im")
	if _, err := other.Query("SELECT seq, msg_id FROM conv_msg WHERE conv_id = 42 ORDER BY seq"); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Query("UPDATE conv_msg SET msg_type = 2 WHERE conv_id = 1 AND seq = 1"); err != nil {
		t.Fatal(err)
	}
	for _, l := range rec.take() {
		if strings.Contains(l, "UPDATE") && strings.Contains(l, "0136") {
			t.Fatalf("a held write reached a backend: %s", l)
		}
	}

	routes.p.Store(movedSnapshot(t))
	h.Release()
	for i := 0; i < 3; i++ {
		if o := <-done; o.err != nil {
			t.Fatalf("%s: %v", o.name, o.err)
		}
	}
	if _, err := txn.Query("COMMIT"); err != nil {
		t.Fatal(err)
	}
	writes := 0
	for _, l := range rec.take() {
		if !strings.Contains(l, "0136") {
			continue
		}
		if !strings.HasPrefix(l, "ds2#") || !strings.Contains(l, "`im_9`.") && strings.Contains(l, "`im_") {
			t.Fatalf("a queued write was routed under the old routes: %s", l)
		}
		writes++
	}
	if writes < 3 {
		t.Fatalf("queued writes not sent after release: %d statements", writes)
	}
}

// TestHoldMaxWaitAndQueue: a write waits at most HoldMaxWait, then gets a
// lock wait timeout naming the shard; past HoldMaxQueue a write is refused
// at once. Nothing reaches a backend either way.
func TestHoldMaxWaitAndQueue(t *testing.T) {
	reg := prometheus.NewRegistry()
	e, rec, _ := newHoldEngineMetrics(Options{HoldMaxWait: 100 * time.Millisecond, HoldMaxQueue: 1}, NewMetrics(reg))
	h := hold(t, e, heldShard)
	defer h.Release()
	done := goQuery(e.NewSession("im"), "UPDATE conv_msg SET msg_type = 2 WHERE conv_id = 42 AND seq = 1")
	waitQueued(t, h, 1)
	_, err := e.NewSession("im").Query("DELETE FROM conv_msg WHERE conv_id = 42 AND seq = 1")
	expectCode(t, err, sqlerr.ShardHeld)
	if !strings.Contains(err.Error(), "hold_max_queue") || !strings.Contains(err.Error(), "0136") {
		t.Fatalf("queue-full error does not say why: %v", err)
	}
	err = <-done
	expectCode(t, err, sqlerr.ShardHeld)
	if !strings.Contains(err.Error(), "migration switch") || !strings.Contains(err.Error(), "0136") {
		t.Fatalf("timeout error does not name the shard and the migration: %v", err)
	}
	if got := rec.take(); len(got) != 0 {
		t.Fatalf("refused writes reached a backend: %q", got)
	}
	waitQueued(t, h, 0) // the timed-out write left the queue
	body := scrapeText(t, reg)
	for _, line := range []string{
		`convoy_migration_hold_refused_total{reason="queue_full"} 1`,
		`convoy_migration_hold_refused_total{reason="timeout"} 1`,
		`convoy_migration_hold_refused_total{reason="unavailable"} 0`,
		"convoy_migration_hold_queued_writes 0",
		"convoy_migration_hold_wait_seconds_count 1",
	} {
		if countPrefix(body, line) != 1 {
			t.Errorf("scrape lacks %s", line)
		}
	}
}

// TestHoldFail: Fail answers the queued writes and refuses new ones with
// the follower's error until Release; then writes run again.
func TestHoldFail(t *testing.T) {
	e, rec, _ := newHoldEngine(Options{})
	h := hold(t, e, heldShard)
	done := goQuery(e.NewSession("im"), "UPDATE conv_msg SET msg_type = 2 WHERE conv_id = 42 AND seq = 1")
	waitQueued(t, h, 1)
	h.Fail(sqlerr.Errorf(sqlerr.Internal, "shard writes unavailable: a migration switch is unresolved: shard 136: deadline"))
	expectCode(t, <-done, sqlerr.ShardUnavailable)
	s := e.NewSession("im")
	_, err := s.Query("UPDATE conv_msg SET msg_type = 2 WHERE conv_id = 42 AND seq = 1")
	expectCode(t, err, sqlerr.ShardUnavailable)
	if !strings.Contains(err.Error(), "migration switch is unresolved") {
		t.Fatalf("error lost the follower's reason: %v", err)
	}
	if got := rec.take(); len(got) != 0 {
		t.Fatalf("failed writes reached a backend: %q", got)
	}
	h.Release()
	if _, err := s.Query("UPDATE conv_msg SET msg_type = 2 WHERE conv_id = 42 AND seq = 1"); err != nil {
		t.Fatal(err)
	}
}

// TestHoldWaitsForRunningWrites: Hold returns only after a write already
// sent has answered; if it does not answer before Hold's context ends,
// Hold holds nothing and says so.
func TestHoldWaitsForRunningWrites(t *testing.T) {
	e, rec, _ := newHoldEngine(Options{})
	block := make(chan struct{})
	var once sync.Once
	entered := make(chan struct{})
	rec.hook = func(sql string) {
		if strings.Contains(sql, "UPDATE") {
			once.Do(func() { close(entered) })
			<-block
		}
	}
	go func() {
		_, _ = e.NewSession("im").Query("UPDATE conv_msg SET msg_type = 2 WHERE conv_id = 42 AND seq = 1")
	}()
	<-entered

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	_, err := e.Hold(ctx, heldShard)
	cancel()
	if err == nil || !strings.Contains(err.Error(), "nothing held") {
		t.Fatalf("Hold with a write still running at its deadline: %v, want an error", err)
	}
	if e.gate.Held(heldShard) {
		t.Fatal("a failed Hold left the shard held")
	}

	held := goHold(t, e)
	select {
	case <-held:
		t.Fatal("Hold returned while a write was running")
	case <-time.After(50 * time.Millisecond):
	}
	close(block)
	(<-held).Release()
}

// TestHoldOpenTransactions: a transaction that wrote the shard is never
// queued and may commit while Hold waits; one still open when Hold's
// context ends is rolled back and its client told on the next statement.
func TestHoldOpenTransactions(t *testing.T) {
	e, rec, _ := newHoldEngine(Options{})
	a := e.NewSession("im")
	for _, q := range []string{"BEGIN", "UPDATE conv_msg SET msg_type = 2 WHERE conv_id = 42 AND seq = 1"} {
		if _, err := a.Query(q); err != nil {
			t.Fatal(err)
		}
	}
	held := goHold(t, e)
	for !e.gate.Held(heldShard) {
		time.Sleep(time.Millisecond)
	}
	// Inside the open transaction: not queued.
	if _, err := a.Query("INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (42, 7, 1, 1, NOW())"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held:
		t.Fatal("Hold returned with a transaction open on the shard")
	case <-time.After(30 * time.Millisecond):
	}
	if _, err := a.Query("COMMIT"); err != nil {
		t.Fatal(err)
	}
	h := <-held
	h.Release()
	rec.take()

	// Open at the deadline: failed.
	if _, err := a.Query("BEGIN"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Query("DELETE FROM conv_msg WHERE conv_id = 42 AND seq = 1"); err != nil {
		t.Fatal(err)
	}
	rec.take()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	h, err := e.Hold(ctx, heldShard)
	cancel()
	if err != nil {
		t.Fatalf("Hold with only an idle transaction open: %v", err)
	}
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(time.Millisecond) {
		if l := rec.take(); len(l) > 0 {
			if len(l) != 1 || !strings.HasSuffix(l[0], "text: ROLLBACK") {
				t.Fatalf("the failed transaction: %q, want its ROLLBACK", l)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the failed transaction was not rolled back")
		}
	}
	_, err = a.Query("SELECT seq FROM conv_msg WHERE conv_id = 42")
	expectCode(t, err, sqlerr.TxnRolledBack)
	if !strings.Contains(err.Error(), "0136") || !strings.Contains(err.Error(), "migration switch") {
		t.Fatalf("the failed transaction's error does not say why: %v", err)
	}
	_, err = a.Query("COMMIT")
	expectCode(t, err, sqlerr.TxnAborted)
	if got := rec.take(); len(got) != 0 {
		t.Fatalf("a failed transaction reached a backend: %q", got)
	}
	if _, err := a.Query("ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	h.Release()
	if n := e.gate.Active(heldShard); n != 0 {
		t.Fatalf("shard still counts %d writes", n)
	}
}

// TestHoldTransactionFirstWriteQueues: a transaction that has not written
// the held shard yet queues its first write there (it holds nothing of the
// shard), then goes on after Release.
func TestHoldTransactionFirstWriteQueues(t *testing.T) {
	e, _, _ := newHoldEngine(Options{})
	h := hold(t, e, heldShard)
	s := e.NewSession("im")
	if _, err := s.Query("BEGIN"); err != nil {
		t.Fatal(err)
	}
	// A read pins the transaction without counting it.
	if _, err := s.Query("SELECT seq FROM conv_msg WHERE conv_id = 42"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := s.Query("UPDATE conv_msg SET msg_type = 2 WHERE conv_id = 42 AND seq = 1")
		done <- err
	}()
	waitQueued(t, h, 1)
	h.Release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := e.gate.Active(heldShard); n != 1 {
		t.Fatalf("the open transaction counts %d on its shard, want 1", n)
	}
	if _, err := s.Query("COMMIT"); err != nil {
		t.Fatal(err)
	}
	if n := e.gate.Active(heldShard); n != 0 {
		t.Fatalf("shard still counts %d writes after COMMIT", n)
	}
}

// TestTransactionPinnedAcrossSwitch: a transaction that only read its
// shard (a plain read, which the hold does not wait for) when a switch
// moved the shard is rolled back by its next statement, a write or a
// read, with the deadlock error drivers retry; nothing of it reaches the
// old side after the move, nor the new one. The same when the shard moved
// to another database of the same datasource, or to a datasource with the
// same database name (a migration's default).
func TestTransactionPinnedAcrossSwitch(t *testing.T) {
	for _, c := range []struct{ name, ds, db, next string }{
		{"other datasource, same database", "ds2", "im_1", "INSERT INTO conv_msg (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES (42, 9, 7, 1, 1, NOW())"},
		{"same datasource, other database", "ds0", "im_9", "UPDATE conv_msg SET msg_type = 2 WHERE conv_id = 42 AND seq = 1"},
		{"a read after the move", "ds2", "im_9", "SELECT seq FROM conv_msg WHERE conv_id = 42"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, rec, routes := newHoldEngine(Options{})
			if got := defaultSnapshot().Target(heldShard); got.Datasource != "ds0" || got.Database != "im_1" {
				t.Fatalf("[BUG] shard %d is on %+v in defaultSnapshot", heldShard, got)
			}
			s := e.NewSession("im")
			for _, q := range []string{"BEGIN", "SELECT seq FROM conv_msg WHERE conv_id = 42"} {
				if _, err := s.Query(q); err != nil {
					t.Fatal(err)
				}
			}
			rec.take()
			// The switch: the hold does not wait for a transaction that
			// only read, and the routes flip.
			h := hold(t, e, heldShard)
			routes.p.Store(movedTo(t, c.ds, c.db))
			h.Release()

			_, err := s.Query(c.next)
			expectCode(t, err, sqlerr.TxnRolledBack)
			if msg := err.Error(); !strings.Contains(msg, "0136") || !strings.Contains(msg, "ds0.im_1") || !strings.Contains(msg, c.ds+"."+c.db) {
				t.Fatalf("the error does not say what moved where: %v", err)
			}
			if got := rec.take(); len(got) != 1 || !strings.HasPrefix(got[0], "ds0#") || !strings.HasSuffix(got[0], "text: ROLLBACK") {
				t.Fatalf("after the move the transaction sent %q, want only its ROLLBACK on the old side", got)
			}
			_, err = s.Query("COMMIT")
			expectCode(t, err, sqlerr.TxnAborted)
			if _, err := s.Query("ROLLBACK"); err != nil {
				t.Fatal(err)
			}
			// The session goes on: its next transaction opens on the new side.
			for _, q := range []string{"BEGIN", "UPDATE conv_msg SET msg_type = 3 WHERE conv_id = 42 AND seq = 1", "COMMIT"} {
				if _, err := s.Query(q); err != nil {
					t.Fatal(err)
				}
			}
			for _, l := range rec.take() {
				if strings.Contains(l, "UPDATE") && (!strings.HasPrefix(l, c.ds+"#") || !strings.Contains(l, "`"+c.db+"`.")) {
					t.Fatalf("the next transaction's write went to the old side: %s", l)
				}
			}
			if n := e.gate.Active(heldShard); n != 0 {
				t.Fatalf("shard still counts %d writes", n)
			}
		})
	}
}

// TestHoldLockingRead: a transaction's locking read counts on the shard
// like its first write: queued while the shard is held, then counted until
// the transaction ends, so a hold waits for it (and fails it at its
// deadline) rather than letting its next write queue while it holds row
// locks an admitted write may be waiting for (a deadlock of the switch).
func TestHoldLockingRead(t *testing.T) {
	e, _, _ := newHoldEngine(Options{})
	h := hold(t, e, heldShard)
	s := e.NewSession("im")
	if _, err := s.Query("BEGIN"); err != nil {
		t.Fatal(err)
	}
	done := goQuery(s, "SELECT seq FROM conv_msg WHERE conv_id = 42 FOR UPDATE")
	waitQueued(t, h, 1)
	h.Release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := e.gate.Active(heldShard); n != 1 {
		t.Fatalf("the transaction that read FOR UPDATE counts %d on its shard, want 1", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	h2, err := e.Hold(ctx, heldShard)
	cancel()
	if err != nil {
		t.Fatalf("Hold with an idle transaction that read FOR UPDATE: %v", err)
	}
	_, err = s.Query("INSERT INTO conv_msg (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES (42, 9, 7, 1, 1, NOW())")
	expectCode(t, err, sqlerr.TxnRolledBack)
	h2.Release()
	if _, err := s.Query("ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	if n := e.gate.Active(heldShard); n != 0 {
		t.Fatalf("shard still counts %d", n)
	}
}

// TestTransactionPinnedDuringSwitch: the routes flip while a transaction's
// first statement (a read, never held) is on its way: it was routed to the
// old side and opens the transaction there, and the transaction's next
// statement, routed under the new routes, must not run on that connection
// (it would write the old side).
func TestTransactionPinnedDuringSwitch(t *testing.T) {
	e, rec, routes := newHoldEngine(Options{})
	var once sync.Once
	rec.hook = func(sql string) {
		if sql == "BEGIN" {
			once.Do(func() { routes.p.Store(movedTo(t, "ds2", "im_1")) })
		}
	}
	s := e.NewSession("im")
	for _, q := range []string{"BEGIN", "SELECT seq FROM conv_msg WHERE conv_id = 42 FOR UPDATE"} {
		if _, err := s.Query(q); err != nil {
			t.Fatal(err)
		}
	}
	rec.hook = nil
	if got := rec.take(); len(got) < 2 || !strings.HasPrefix(got[len(got)-1], "ds0#") {
		t.Fatalf("the read: %q, want it on the old side (routed before the flip)", got)
	}
	_, err := s.Query("INSERT INTO conv_msg (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES (42, 9, 7, 1, 1, NOW())")
	expectCode(t, err, sqlerr.TxnRolledBack)
	for _, l := range rec.take() {
		if strings.Contains(l, "INSERT") {
			t.Fatalf("the write ran after the flip: %s", l)
		}
	}
}

// TestHoldScatterWrites: a write over several shards waits for a held one
// it touches, without counting on the others meanwhile; DDL waits for any
// held shard.
func TestHoldScatterWrites(t *testing.T) {
	e, _, _ := newHoldEngine(Options{HoldMaxWait: 5 * time.Second})
	h := hold(t, e, heldShard)
	update := goQuery(e.NewSession("im"), "UPDATE conv_msg SET msg_type = 2 WHERE conv_id IN (1, 42)")
	waitQueued(t, h, 1)
	if n := e.gate.Active(router.ShardOf(1)); n != 0 {
		t.Fatalf("a queued multi-shard write counts on shard 0951: %d", n)
	}
	ddl := goQuery(e.NewSession("im"), "ALTER TABLE conv_msg ADD COLUMN x INT")
	waitQueued(t, h, 2)
	h.Release()
	for _, done := range []<-chan error{update, ddl} {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// TestHoldTargetedDirectives: shard=N and all writes (RunTargeted) wait
// like any write and are routed after the release; a targeted read runs.
func TestHoldTargetedDirectives(t *testing.T) {
	e, rec, routes := newHoldEngine(Options{})
	h := hold(t, e, heldShard)
	admin := func(shard int, q string) <-chan error {
		s := e.NewSession("im")
		s.SetPrivileges(Privileges{Read: true, Write: true, DDL: true, Admin: true})
		done := make(chan error, 1)
		go func() {
			_, err := s.RunTargeted(shard, "", q)
			done <- err
		}()
		return done
	}
	one := admin(136, " UPDATE conv_msg SET msg_type = 3")
	waitQueued(t, h, 1)
	all := admin(-1, " DELETE FROM im_inbox WHERE send_time < '2026-01-01'")
	waitQueued(t, h, 2)
	if err := <-admin(136, " SELECT COUNT(*) FROM conv_msg"); err != nil {
		t.Fatal(err)
	}
	for _, l := range rec.take() {
		if !strings.Contains(l, "SELECT") {
			t.Fatalf("a held targeted write reached a backend: %s", l)
		}
	}
	routes.p.Store(movedSnapshot(t))
	h.Release()
	for _, done := range []<-chan error{one, all} {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	found := false
	for _, l := range rec.take() {
		if strings.Contains(l, "UPDATE") {
			found = true
			if !strings.HasPrefix(l, "ds2#") {
				t.Fatalf("the targeted write was routed under the old routes: %s", l)
			}
		}
	}
	if !found {
		t.Fatal("the targeted write never ran")
	}
}

// TestHoldBusyTransactionAtDeadline: a transaction whose statement is still
// running when Hold's context ends is failed, and since that statement (a
// COMMIT, say) may still land, Hold holds nothing; the statement's return
// rolls the transaction back and its next statement is told why.
func TestHoldBusyTransactionAtDeadline(t *testing.T) {
	e, rec, _ := newHoldEngine(Options{})
	s := e.NewSession("im")
	for _, q := range []string{"BEGIN", "UPDATE conv_msg SET msg_type = 2 WHERE conv_id = 42 AND seq = 1"} {
		if _, err := s.Query(q); err != nil {
			t.Fatal(err)
		}
	}
	block, entered := make(chan struct{}), make(chan struct{})
	rec.hook = func(sql string) {
		if strings.Contains(sql, "`seq`=2") {
			close(entered)
			<-block
		}
	}
	done := goQuery(s, "UPDATE conv_msg SET msg_type = 2 WHERE conv_id = 42 AND seq = 2")
	<-entered
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	_, err := e.Hold(ctx, heldShard)
	cancel()
	if err == nil || !strings.Contains(err.Error(), "1 open transactions failed") {
		t.Fatalf("Hold with a transaction's statement running at its deadline: %v, want an error", err)
	}
	rec.take()
	close(block)
	if err := <-done; err != nil {
		t.Fatalf("the statement running when the transaction was failed: %v", err)
	}
	// The fake logs a statement once the hook lets it go.
	if got := rec.take(); len(got) != 2 || !strings.Contains(got[0], "`seq`=2") || !strings.HasSuffix(got[1], "text: ROLLBACK") {
		t.Fatalf("after the failed transaction's statement: %q, want it, then its ROLLBACK", got)
	}
	_, err = s.Query("COMMIT")
	expectCode(t, err, sqlerr.TxnAborted)
	if n := e.gate.Active(heldShard); n != 0 {
		t.Fatalf("shard still counts %d writes", n)
	}
	if h := hold(t, e, heldShard); h != nil {
		h.Release()
	}
}

// TestWriteFence: while a write fence is up, every sharded write is
// refused at once (not queued) with its error, whatever shard, and reads
// are served; Fence waits for a write already running, fails a
// transaction that wrote and is still open when its context ends, and
// stays up until every fence is lifted.
func TestWriteFence(t *testing.T) {
	e, rec, _ := newHoldEngine(Options{})
	open := e.NewSession("im")
	for _, q := range []string{"BEGIN", "UPDATE conv_msg SET msg_type = 2 WHERE conv_id = 42 AND seq = 1"} {
		if _, err := open.Query(q); err != nil {
			t.Fatal(err)
		}
	}
	block, entered := make(chan struct{}), make(chan struct{})
	rec.hook = func(sql string) {
		if strings.Contains(sql, "`seq`=7") {
			close(entered)
			<-block
		}
	}
	running := goQuery(e.NewSession("im"), "UPDATE conv_msg SET msg_type = 2 WHERE conv_id = 1 AND seq = 7")
	<-entered
	fenced := make(chan int, 1)
	var f1 *shardgate.WriteFence
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		var n int
		f1, n = e.Fence(ctx, errors.New("shard writes unavailable: this proxy's registration may have expired"))
		fenced <- n
	}()
	// Up at once for new writes, whatever shard, while Fence waits.
	for deadline := time.Now().Add(5 * time.Second); !e.gate.Fenced(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the fence never went up")
		}
	}
	s := e.NewSession("im")
	for _, q := range []string{
		"INSERT INTO conv_msg (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES (5, 1, 1, 1, 1, NOW())",
		"DELETE FROM im_inbox WHERE uid = 9",
		"UPDATE conv_msg SET msg_type = 2 WHERE conv_id IN (1, 42)",
	} {
		_, err := s.Query(q)
		expectCode(t, err, sqlerr.ShardUnavailable)
		if !strings.Contains(err.Error(), "registration may have expired") {
			t.Fatalf("%s: %v, want the fence's reason", q, err)
		}
	}
	if _, err := s.Query("SELECT seq FROM conv_msg WHERE conv_id = 42"); err != nil {
		t.Fatalf("a read under the fence: %v", err)
	}
	select {
	case <-fenced:
		t.Fatal("Fence returned while a write was running")
	case <-time.After(20 * time.Millisecond):
	}
	close(block)
	if err := <-running; err != nil {
		t.Fatalf("the write running when the fence went up: %v", err)
	}
	// The open transaction is failed when Fence's context ends.
	if n := <-fenced; n != 0 {
		t.Fatalf("Fence: %d writes still running, want 0", n)
	}
	_, err := open.Query("UPDATE conv_msg SET msg_type = 3 WHERE conv_id = 42 AND seq = 1")
	expectCode(t, err, sqlerr.TxnRolledBack)
	if _, err := open.Query("ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	// Two fences: lifting one leaves the other up.
	f2, _ := e.Fence(context.Background(), errors.New("second fence"))
	f1.Lift()
	_, err = s.Query("DELETE FROM im_inbox WHERE uid = 9")
	expectCode(t, err, sqlerr.ShardUnavailable)
	if !strings.Contains(err.Error(), "second fence") {
		t.Fatalf("after lifting one of two fences: %v", err)
	}
	f2.Lift()
	f2.Lift()
	rec.take()
	if _, err := s.Query("DELETE FROM im_inbox WHERE uid = 9"); err != nil {
		t.Fatalf("a write once every fence is lifted: %v", err)
	}
	if got := rec.take(); len(got) != 1 {
		t.Fatalf("the write after the fences: %q", got)
	}
}

// TestFenceSetUpRetried: a statement MariaDB compiled just before a
// migration put its fence triggers on the table fails once with 1146
// naming the fence table (MDEV-26048, backend.IsFenceSetUp); the message
// send's own batch rolls back and is sent again, so the client never sees
// it. Another 1146 is the client's.
func TestFenceSetUpRetried(t *testing.T) {
	e, rec, _ := newHoldEngine(Options{})
	s := e.NewSession("im")
	rec.failOn, rec.failN = "INSERT INTO `im_1`.`conv_msg_0136`", 1
	rec.failErr = &mysql.MyError{Code: mysql.ER_NO_SUCH_TABLE, State: "42S02", Message: "Table 'im_1._convoy_shard_fence' doesn't exist"}
	r, err := s.Query("INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (42, 7, 1, 1, NOW())")
	if err != nil || r == nil {
		t.Fatalf("a message sent while the fence was set up: %v", err)
	}
	var sent, rolled int
	for _, l := range rec.take() {
		if strings.Contains(l, "INSERT INTO `im_1`.`conv_msg_0136`") {
			sent++
		}
		if strings.HasSuffix(l, "ROLLBACK") {
			rolled++
		}
	}
	if sent != 2 || rolled != 1 {
		t.Fatalf("the batch was sent %d times with %d ROLLBACKs, want 2 and 1", sent, rolled)
	}
	rec.failOn, rec.failN = "INSERT INTO `im_1`.`conv_msg_0136`", 1
	rec.failErr = &mysql.MyError{Code: mysql.ER_NO_SUCH_TABLE, State: "42S02", Message: "Table 'im_1.conv_msg_0136' doesn't exist"}
	if _, err := s.Query("INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (42, 8, 1, 1, NOW())"); err == nil {
		t.Fatal("another missing table was retried away")
	}
}

// TestHoldKilledWait: KILL QUERY of a session whose write waits behind a
// migration hold ends the wait at once with 1317 (sqlerr.QueryInterrupted),
// the write never sent; a KILL between statements stops none.
func TestHoldKilledWait(t *testing.T) {
	e, rec, _ := newHoldEngine(Options{HoldMaxWait: 30 * time.Second})
	victim, killer := e.NewSession("im"), e.NewSession("im")
	victim.SetClient("app", "h", 71)
	killer.SetClient("app", "h", 72)
	defer victim.Close()
	defer killer.Close()
	// A KILL while the victim is idle does not stop its next statement.
	if _, err := killer.Query("KILL QUERY 71"); err != nil {
		t.Fatal(err)
	}
	h := hold(t, e, heldShard)
	done := goQuery(victim, "UPDATE conv_msg SET msg_type = 3 WHERE conv_id = 42 AND seq = 1")
	waitQueued(t, h, 1)
	start := time.Now()
	if _, err := killer.Query("KILL QUERY 71"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		expectCode(t, err, sqlerr.QueryInterrupted)
	case <-time.After(5 * time.Second):
		t.Fatal("the held write did not end on KILL QUERY")
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("the killed wait ended after %v", took)
	}
	waitQueued(t, h, 0)
	h.Release()
	for _, l := range rec.take() {
		if strings.Contains(l, "UPDATE") {
			t.Errorf("the killed write was sent: %s", l)
		}
	}
	// The session goes on.
	if _, err := victim.Query("UPDATE conv_msg SET msg_type = 4 WHERE conv_id = 42 AND seq = 1"); err != nil {
		t.Fatal(err)
	}
}
