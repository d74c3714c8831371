package integration

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	gormmysql "gorm.io/driver/mysql"
	"gorm.io/gorm"

	"github.com/convoy-im/convoy/internal/testsvc"
	"github.com/convoy-im/convoy/router"
)

// outboxModel is what the outbox drill committed: per member, the msg_ids
// their inbox must hold exactly once; and the msg_ids of rolled-back
// transactions, which must appear nowhere.
type outboxModel struct {
	inbox      map[uint64]map[uint64]bool // uid -> msg_id
	rolledBack map[uint64]bool
	seq        map[uint64]uint64 // conv -> last seq handed out
}

func newOutboxModel() *outboxModel {
	return &outboxModel{inbox: map[uint64]map[uint64]bool{}, rolledBack: map[uint64]bool{}, seq: map[uint64]uint64{}}
}

// sendOutbox runs the seed's send path in one outbox transaction on c:
// the message in its conversation's shard (seq allocated there), its body,
// and one im_inbox row per member, each in the member's uid shard. commit
// false rolls it back. It returns the message's seq.
func sendOutbox(ctx context.Context, c *sql.Conn, conv, msgID, sender uint64, members []uint64, commit bool) (uint64, error) {
	tx, err := c.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	fail := func(err error) (uint64, error) {
		_ = tx.Rollback()
		return 0, err
	}
	r, err := tx.ExecContext(ctx, "INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (?, ?, ?, 1, NOW(3))", conv, msgID, sender)
	if err != nil {
		return fail(fmt.Errorf("conv_msg: %w", err))
	}
	seq, _ := r.LastInsertId()
	if _, err := tx.ExecContext(ctx, "INSERT INTO msg_content (msg_id, conv_id, sender_uid, msg_type, content, created_at) VALUES (?, ?, ?, 1, ?, NOW(3))",
		msgID, conv, sender, []byte(fmt.Sprintf("body of %d", msgID))); err != nil {
		return fail(fmt.Errorf("msg_content: %w", err))
	}
	var q strings.Builder
	q.WriteString("INSERT INTO im_inbox (uid, conv_id, seq, msg_id, send_time) VALUES ")
	var args []any
	for i, m := range members {
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteString("(?, ?, ?, ?, NOW(3))")
		args = append(args, m, conv, seq, msgID)
	}
	r, err = tx.ExecContext(ctx, q.String(), args...)
	if err != nil {
		return fail(fmt.Errorf("im_inbox: %w", err))
	}
	if n, _ := r.RowsAffected(); n != int64(len(members)) {
		return fail(fmt.Errorf("im_inbox: RowsAffected %d for %d members", n, len(members)))
	}
	if !commit {
		return uint64(seq), tx.Rollback()
	}
	return uint64(seq), tx.Commit()
}

// send sends one message and records it in the model.
func (m *outboxModel) send(t *testing.T, ctx context.Context, c *sql.Conn, conv, msgID uint64, members []uint64, commit bool) {
	t.Helper()
	seq, err := sendOutbox(ctx, c, conv, msgID, 1, members, commit)
	if err != nil {
		t.Fatalf("send %d (commit %v): %v", msgID, commit, err)
	}
	if !commit {
		m.rolledBack[msgID] = true
		return
	}
	if seq != m.seq[conv]+1 {
		t.Fatalf("send %d: seq %d after %d", msgID, seq, m.seq[conv])
	}
	m.seq[conv] = seq
	for _, u := range members {
		if m.inbox[u] == nil {
			m.inbox[u] = map[uint64]bool{}
		}
		m.inbox[u][msgID] = true
	}
}

// check compares every member's inbox with the model: "" when equal.
func (m *outboxModel) check(db *sql.DB) string {
	uids := make([]uint64, 0, len(m.inbox))
	for u := range m.inbox {
		uids = append(uids, u)
	}
	sort.Slice(uids, func(i, j int) bool { return uids[i] < uids[j] })
	for _, u := range uids {
		rows, err := db.Query("SELECT msg_id FROM im_inbox WHERE uid = ?", u)
		if err != nil {
			return err.Error()
		}
		got := map[uint64]int{}
		for rows.Next() {
			var id uint64
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return err.Error()
			}
			got[id]++
		}
		rows.Close()
		for id := range m.inbox[u] {
			if got[id] != 1 {
				return fmt.Sprintf("uid %d: msg %d is there %d times, want once", u, id, got[id])
			}
		}
		for id, n := range got {
			if m.rolledBack[id] {
				return fmt.Sprintf("uid %d: msg %d of a rolled-back transaction is there (%d)", u, id, n)
			}
			if !m.inbox[u][id] {
				return fmt.Sprintf("uid %d: msg %d is there %d times and the model has none", u, id, n)
			}
		}
	}
	return ""
}

// waitDelivered waits until the model holds and no entry is pending.
func (m *outboxModel) waitDelivered(t *testing.T, db *sql.DB, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		diff := m.check(db)
		pending := outboxCounts(t, db)
		if diff == "" && pending[0] == 0 {
			if pending[1] != 0 {
				t.Fatalf("delivered, but with %d dead letters: %v", pending[1], queryRows(t, db, "/*+ convoy SHOW OUTBOX DEAD */"))
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s; SHOW OUTBOX: pending %d, dead %d", d, diff, pending[0], pending[1])
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// outboxCounts sums SHOW OUTBOX: pending and dead entries.
func outboxCounts(t testing.TB, db *sql.DB) [2]int {
	t.Helper()
	var out [2]int
	for _, r := range queryRows(t, db, "/*+ convoy SHOW OUTBOX */") {
		if r[5] != "" {
			out[0]++ // unknown: the datasource does not answer
			continue
		}
		var p, d int
		fmt.Sscan(r[1], &p)
		fmt.Sscan(r[2], &d)
		out[0] += p
		out[1] += d
	}
	return out
}

// membersOn returns n uids from `from` upwards, spread over many shards
// (and so both datasources).
func membersOn(n int, from uint64) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = from + uint64(i)*7919
	}
	return out
}

// TestOutboxSendPath is the seed's send path in outbox transactions
// (docs/design.md §12): a message, its body and 50 inbox rows over both
// datasources in one transaction, committed or rolled back, delivered
// exactly once (counted against a model) through a worker crash between
// applying an entry and removing it, a target datasource's outage, and
// dead letters resolved by a DBA.
func TestOutboxSendPath(t *testing.T) {
	s := newStack(t)
	ctx := context.Background()
	admin := s.convoy.open(t, "convoy", "convoy", "im")
	m := newOutboxModel()
	members := membersOn(50, 500001)

	open := func(dsn string) *sql.Conn {
		db := openDSN(t, dsn)
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := c.ExecContext(ctx, "SET convoy_txn = 'outbox'"); err != nil {
			t.Fatal(err)
		}
		return c
	}
	prepared := open(s.convoy.dsn("app", "app secret", "im"))
	text := open(s.convoy.dsn("app", "app secret", "im") + "&interpolateParams=true")

	var mode string
	if err := prepared.QueryRowContext(ctx, "SELECT @@convoy_txn").Scan(&mode); err != nil || mode != "outbox" {
		t.Fatalf("@@convoy_txn = %q, %v", mode, err)
	}

	// Phase 1: committed and rolled-back sends, prepared and text.
	convA, convB := uint64(81001), uint64(81002)
	msg := uint64(9_000_000)
	for i := 0; i < 6; i++ {
		c := prepared
		if i%2 == 1 {
			c = text
		}
		msg++
		m.send(t, ctx, c, convA, msg, members, i != 2)
		msg++
		m.send(t, ctx, c, convB, msg, members[:10], i != 4)
	}
	m.waitDelivered(t, admin, 30*time.Second)
	if n := queryRows(t, admin, "SELECT COUNT(*) FROM conv_msg WHERE conv_id IN (?, ?)", convA, convB); n[0][0] != "10" {
		t.Fatalf("conv_msg rows: %v, want 10 (two rolled back)", n)
	}

	// What outbox mode refuses inside a transaction: writes it cannot
	// record (their rows are not known before delivery).
	tx, err := prepared.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO im_conv_seq (conv_id, max_seq) VALUES (?, 0) ON DUPLICATE KEY UPDATE member_cnt = member_cnt", convA); err != nil {
		t.Fatal(err)
	}
	var me *mysql.MySQLError
	if _, err := tx.ExecContext(ctx, "UPDATE im_inbox SET msg_id = 1 WHERE uid = ?", members[1]); !errors.As(err, &me) || me.Number != 1235 || !strings.Contains(me.Message, "outbox") {
		t.Fatalf("UPDATE of another shard in an outbox transaction: %v, want 1235 naming the outbox", err)
	}
	// A read of another shard sees it as committed.
	var n int
	if err := tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM im_inbox WHERE uid = ?", members[1]).Scan(&n); err != nil || n != len(m.inbox[members[1]]) {
		t.Fatalf("read of another shard: %d rows, %v; want %d", n, err, len(m.inbox[members[1]]))
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if _, err := prepared.ExecContext(ctx, "SET convoy_txn = 'nonsense'"); !errors.As(err, &me) || me.Number != 1231 {
		t.Fatalf("SET convoy_txn = 'nonsense': %v, want 1231", err)
	}

	// Phase 2: entries committed while no process delivers, then a worker
	// that crashes right after applying an entry (before removing it from
	// the outbox), then another worker.
	s.convoy.restartWith(t, "outbox:\n  run_workers: false")
	prepared = open(s.convoy.dsn("app", "app secret", "im"))
	for i := 0; i < 4; i++ {
		msg++
		m.send(t, ctx, prepared, convA, msg, members, true)
	}
	// Convoy killed between the COMMITs and any delivery: the entries
	// are committed on the home datasource, not in the process.
	s.convoy.kill()
	s.convoy.start(t)
	prepared = open(s.convoy.dsn("app", "app secret", "im"))
	admin = s.convoy.open(t, "convoy", "convoy", "im")
	if c := outboxCounts(t, admin); c[0] == 0 {
		t.Fatal("entries were delivered with no worker running")
	}
	w1 := startWorkerProc(t, s, "env:CONVOY_FAILPOINTS=outbox/after-apply=exit")
	select {
	case <-w1.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("the worker did not reach its failpoint\n%s", w1.logTail())
	}
	if c := outboxCounts(t, admin); c[0] == 0 {
		t.Fatal("the crashed worker left nothing pending")
	}
	// (A small batch: in phase 3 the entries waiting for a datasource
	// that is down must not hide the others.)
	w2 := startWorkerProc(t, s, "outbox:\n  runner_ttl: 2s\n  poll: 50ms\n  max_tries: 2\n  batch: 20")
	m.waitDelivered(t, admin, 40*time.Second)

	// Phase 3: a target datasource killed (SIGKILL) while entries for it
	// are committed: they wait and arrive once it is back.
	snap := snapshotOf(t, s)
	conv0 := keysOn(t, s, "ds0", 1)[0]
	var onDS1 []uint64
	for _, u := range members {
		if snap.Target(router.ShardOf(u)).Datasource == "ds1" {
			onDS1 = append(onDS1, u)
		}
	}
	if len(onDS1) < 5 || len(onDS1) == len(members) {
		t.Fatalf("members on ds1: %d of %d", len(onDS1), len(members))
	}
	s.ds[1].Kill()
	var outage []any
	for i := 0; i < 3; i++ {
		msg++
		outage = append(outage, msg)
		// The conversation (the home) is on ds0; the members on ds1
		// wait for it.
		m.send(t, ctx, prepared, conv0, msg, members, true)
	}
	// Meanwhile the members on ds0 get theirs.
	deadline := time.Now().Add(30 * time.Second)
	for !func() bool {
		for _, u := range members {
			if snap.Target(router.ShardOf(u)).Datasource != "ds0" {
				continue
			}
			var n int
			if err := admin.QueryRow("SELECT COUNT(*) FROM im_inbox WHERE uid = ? AND msg_id IN (?, ?, ?)", append([]any{u}, outage...)...).Scan(&n); err != nil || n != 3 {
				return false
			}
		}
		return true
	}() {
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(w2.logPath)
			var lines []string
			for _, l := range strings.Split(string(b), "\n") {
				if strings.Contains(l, `"outbox`) {
					lines = append(lines, l)
				}
			}
			rows := queryRows(t, s.ds[0].Open(t, ""), "SELECT home, seq, target, state, tries, attempts, next_at <= NOW(6) FROM _convoy._convoy_outbox ORDER BY home, seq")
			t.Fatalf("the rows for ds0 did not arrive during ds1's outage; the worker's outbox log:\n%s\noutbox: %v", strings.Join(lines[max(0, len(lines)-5):], "\n"), rows)
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.ds[1].Start()
	m.waitDelivered(t, admin, 60*time.Second)

	// Phase 4: an entry that can never apply (its inbox row is already
	// there) becomes a dead letter after max_tries; a DBA removes the
	// conflict and retries it, or discards another.
	victim := members[3]
	msg++
	nextSeq := m.seq[convA] + 1
	if _, err := admin.Exec("INSERT INTO im_inbox (uid, conv_id, seq, msg_id, send_time) VALUES (?, ?, ?, 1, NOW(3))", victim, convA, nextSeq); err != nil {
		t.Fatal(err)
	}
	m.send(t, ctx, prepared, convA, msg, members, true)
	var dead [][]string
	waitFor(t, "a dead letter", 30*time.Second, func() bool {
		dead = queryRows(t, admin, "/*+ convoy SHOW OUTBOX DEAD */")
		return len(dead) == 1
	})
	if dead[0][3] != "2" || !strings.Contains(dead[0][4], "Duplicate entry") {
		t.Fatalf("dead letter %v: want 2 tries and the duplicate key error", dead[0])
	}
	if _, err := admin.Exec("DELETE FROM im_inbox WHERE uid = ? AND conv_id = ? AND seq = ? AND msg_id = 1", victim, convA, nextSeq); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec("/*+ convoy OUTBOX RETRY '" + dead[0][0] + "' */"); err != nil {
		t.Fatal(err)
	}
	m.waitDelivered(t, admin, 30*time.Second)
	if _, err := admin.Exec("/*+ convoy OUTBOX RETRY '" + dead[0][0] + "' */"); !errors.As(err, &me) || !strings.Contains(me.Message, "not a dead letter") {
		t.Fatalf("RETRY of a delivered entry: %v", err)
	}

	msg++
	nextSeq = m.seq[convA] + 1
	if _, err := admin.Exec("INSERT INTO im_inbox (uid, conv_id, seq, msg_id, send_time) VALUES (?, ?, ?, 1, NOW(3))", victim, convA, nextSeq); err != nil {
		t.Fatal(err)
	}
	m.send(t, ctx, prepared, convA, msg, members, true)
	waitFor(t, "a dead letter", 30*time.Second, func() bool {
		dead = queryRows(t, admin, "/*+ convoy SHOW OUTBOX DEAD */")
		return len(dead) == 1
	})
	if _, err := admin.Exec("/*+ convoy OUTBOX DISCARD '" + dead[0][0] + "' */"); err != nil {
		t.Fatal(err)
	}
	// The discarded entry's rows never arrive: the members of its shard
	// lose this message (the conflicting row stays), the others have it.
	victimShard := router.ShardOf(victim)
	for _, u := range members {
		if router.ShardOf(u) == victimShard {
			delete(m.inbox[u], msg)
		}
	}
	m.inbox[victim][1] = true // the conflicting row, written directly
	m.waitDelivered(t, admin, 30*time.Second)
	if c := outboxCounts(t, admin); c != [2]int{} {
		t.Fatalf("SHOW OUTBOX after the drill: pending %d, dead %d", c[0], c[1])
	}
}

// startWorkerProc starts a second Convoy process on s's etcd and
// backends whose outbox workers compete for the datasources' elections.
func startWorkerProc(t *testing.T, s *stack, extraYAML ...string) *convoyProc {
	t.Helper()
	extra := []string{}
	hasOutbox := false
	for _, y := range extraYAML {
		hasOutbox = hasOutbox || strings.HasPrefix(y, "outbox:")
	}
	if !hasOutbox {
		extra = append(extra, "outbox:\n  runner_ttl: 2s\n  poll: 50ms")
	}
	return startConvoy(t, s.etcd.Endpoints(), append(extra, extraYAML...)...)
}

// TestOutboxORMs: the units of work ORMs put in one transaction succeed in
// outbox mode: SQLAlchemy's Session.add_all over three conversations and
// GORM's CreateInBatches in its default transaction; after delivery every
// row is on its shard, and a unit of work rolled back before COMMIT leaves
// nothing anywhere.
func TestOutboxORMs(t *testing.T) {
	s := newStack(t)
	admin := s.convoy.open(t, "convoy", "convoy", "im")
	countConvs := func(from, to uint64) int {
		var n int
		if err := admin.QueryRow("SELECT COUNT(*) FROM conv_msg WHERE conv_id BETWEEN ? AND ?", from, to).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	settled := func(what string) {
		t.Helper()
		waitFor(t, what, 30*time.Second, func() bool { return outboxCounts(t, admin) == [2]int{} })
	}

	// SQLAlchemy (Debian python3-sqlalchemy over python3-pymysql).
	h, p := hostPort(t, s.convoy.addr)
	out := runClient(t, exec.Command("/usr/bin/python3", "testdata/clients/sqlalchemy_outbox.py", h, p, "convoy", "convoy", "700000"), "python3-sqlalchemy python3-pymysql")
	want := `{"step": "add_all over three conversations, commit", "result": "ok"}
{"step": "add_all over three conversations, flush, rollback", "result": "ok"}`
	if out != want {
		t.Fatalf("sqlalchemy_outbox.py:\n%s\nwant:\n%s", out, want)
	}
	waitFor(t, "SQLAlchemy's three conversations delivered", 30*time.Second, func() bool { return countConvs(700001, 700003) == 3 })
	settled("the outbox empty after SQLAlchemy")
	if n := countConvs(700011, 700013); n != 0 {
		t.Fatalf("rows of the rolled-back unit of work: %d", n)
	}

	// GORM: CreateInBatches in its default transaction, then a
	// transaction that fails after its batch.
	const params = "?collation=utf8mb4_general_ci&parseTime=true&loc=UTC&timeout=5s&readTimeout=30s&convoy_txn=%27outbox%27"
	db, err := gorm.Open(gormmysql.Open(fmt.Sprintf("convoy:convoy@tcp(%s)/im%s", s.convoy.addr, params)), &gorm.Config{Logger: &gormSQLRecorder{}})
	if err != nil {
		t.Fatal(err)
	}
	var ms []gormConvMsg
	for c := uint64(710001); c <= 710010; c++ {
		ms = append(ms, gormConvMsg{ConvID: c, Seq: 1, MsgID: c, SenderUID: 7, MsgType: 1, CreatedAt: gormNow})
	}
	if err := db.CreateInBatches(&ms, 4).Error; err != nil {
		t.Fatalf("CreateInBatches over 10 conversations in outbox mode: %v", err)
	}
	errBoom := errors.New("boom")
	err = db.Transaction(func(tx *gorm.DB) error {
		var more []gormConvMsg
		for c := uint64(710011); c <= 710020; c++ {
			more = append(more, gormConvMsg{ConvID: c, Seq: 1, MsgID: c, SenderUID: 7, MsgType: 1, CreatedAt: gormNow})
		}
		if err := tx.CreateInBatches(&more, 4).Error; err != nil {
			return err
		}
		return errBoom
	})
	if !errors.Is(err, errBoom) {
		t.Fatalf("the failing transaction: %v", err)
	}
	waitFor(t, "GORM's ten conversations delivered", 30*time.Second, func() bool { return countConvs(710001, 710010) == 10 })
	settled("the outbox empty after GORM")
	if n := countConvs(710011, 710020); n != 0 {
		t.Fatalf("rows of the rolled-back GORM transaction: %d", n)
	}
}

// TestOutboxAcrossMigration: entries follow their shard. One entry is
// applied on the shard's old side by a worker that crashes before removing
// it, another is still pending; the shard then moves to the other
// datasource (MIGRATE ... AUTO); the next worker finds the first one's
// marker on the new side (the migration moved it, a companion table) and
// delivers the second one there: each row once, on the side that owns it.
func TestOutboxAcrossMigration(t *testing.T) {
	s := newStack(t)
	s.convoy.restartWith(t, "outbox:\n  run_workers: false")
	ctx := context.Background()
	admin := s.convoy.open(t, "convoy", "convoy", "im")
	snap := snapshotOf(t, s)
	var target router.Shard
	for sh := router.Shard(9); ; sh++ {
		if snap.Target(sh).Datasource == "ds0" {
			target = sh
			break
		}
	}
	members := router.KeysOf(target, 5, 1)
	conv := keysOn(t, s, "ds1", 1)[0] // the home, on the other datasource
	c := outboxConn(t, s)
	m := newOutboxModel()
	m.send(t, ctx, c, conv, 8_100_001, members, true)
	w1 := startWorkerProc(t, s, "env:CONVOY_FAILPOINTS=outbox/after-apply=exit")
	select {
	case <-w1.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("the worker did not reach its failpoint\n%s", w1.logTail())
	}
	m.send(t, ctx, c, conv, 8_100_002, members, true)
	if got := outboxCounts(t, admin); got[0] != 2 {
		t.Fatalf("pending entries %d, want 2 (one applied, not removed; one not applied)", got[0])
	}

	mustExec(t, admin, fmt.Sprintf("/*+ convoy MIGRATE SHARD %d TO ds1 DATABASE im_mig AUTO */", target))
	waitFor(t, "the switch", 2*time.Minute, func() bool {
		ms := showMigrations(t, admin)
		return len(ms) == 1 && ms[0]["step"] == "switched"
	})
	startWorkerProc(t, s)
	m.waitDelivered(t, admin, 40*time.Second)
	// On the new side, both messages once per member.
	var n int
	if err := s.ds[1].Open(t, "").QueryRow("SELECT COUNT(*) FROM im_mig."+snap.Physical("im_inbox", target).Table+" WHERE conv_id = ?", conv).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 2*len(members) {
		t.Fatalf("the new side holds %d inbox rows of the conversation, want %d", n, 2*len(members))
	}
}

// TestOutboxHotTier: a conversation's history rows written by delivery
// (a transaction homed elsewhere recorded them) reach a first-screen page
// the hot tier already serves: the delivering session invalidates it, as a
// client's transactional write does.
func TestOutboxHotTier(t *testing.T) {
	s := newStack(t)
	r := testsvc.StartRedis(t)
	s.convoy.restartWith(t, hotTierYAML(r))
	ctx := context.Background()
	admin := s.convoy.open(t, "convoy", "convoy", "im")
	conv, home := keysOn(t, s, "ds1", 1)[0], keysOn(t, s, "ds0", 1)[0]
	for i := 1; i <= 3; i++ {
		mustExec(t, admin, "INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (?, ?, 1, 1, NOW(3))", conv, 8_200_000+i)
	}
	page := func() []string {
		var seqs []string
		for _, r := range queryRows(t, admin, firstScreen, conv, int64(1)<<62) {
			seqs = append(seqs, r[0])
		}
		return seqs
	}
	hits := func() float64 {
		return metricValue(t, scrape(t, s.convoy.metrics), `convoy_histcache_hits_total{op="before"}`)
	}
	// Filled once the writes' markers expire (marker_ttl 1 s), then
	// served from the tier.
	waitFor(t, "the first screen served from the hot tier", 15*time.Second, func() bool {
		before := hits()
		return strings.Join(page(), ",") == "3,2,1" && hits() > before
	})
	db := openDSN(t, s.convoy.dsn("app", "app secret", "im")+"&convoy_txn=%27outbox%27")
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, tx, "INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (?, 8200100, 1, 1, NOW(3))", home)
	mustExec(t, tx, "INSERT INTO conv_msg (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES (?, 4, 8200004, 1, 1, NOW(3))", conv)
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the delivered row on the first screen", 20*time.Second, func() bool { return strings.Join(page(), ",") == "4,3,2,1" })
}

// TestOutboxWorkerPausedPastLease: the process delivering a datasource's
// entries is stopped (SIGSTOP) past its lease while sends go on, another
// takes over, and the first one resumes in the middle of its pass: every
// inbox row arrives exactly once (the markers), counted against a model.
func TestOutboxWorkerPausedPastLease(t *testing.T) {
	s := newStack(t)
	s.convoy.restartWith(t, "outbox:\n  run_workers: false")
	ctx := context.Background()
	admin := s.convoy.open(t, "convoy", "convoy", "im")
	workers := []*convoyProc{startWorkerProc(t, s), startWorkerProc(t, s)}
	c := outboxConn(t, s)
	m := newOutboxModel()
	members := membersOn(30, 600001)
	conv := keysOn(t, s, "ds0", 1)[0]
	msg := uint64(8_300_000)
	send := func(n int) {
		for i := 0; i < n; i++ {
			msg++
			m.send(t, ctx, c, conv, msg, members, true)
		}
	}
	send(20)
	// The worker of the conversation's datasource (ds0), by process id.
	var paused *convoyProc
	waitFor(t, "an elected worker for ds0", 20*time.Second, func() bool {
		for _, r := range queryRows(t, admin, "/*+ convoy SHOW OUTBOX */") {
			for _, w := range workers {
				if r[0] == "ds0" && strings.HasSuffix(r[4], fmt.Sprintf("-%d", w.cmd.Process.Pid)) {
					paused = w
				}
			}
		}
		return paused != nil
	})
	paused.pause(t)
	send(20)                    // committed while the worker is stopped
	time.Sleep(3 * time.Second) // past its 2 s lease: the other takes over
	send(20)
	paused.resume()
	send(20)
	m.waitDelivered(t, admin, 60*time.Second)
}

// outboxConn is one connection of the app account through s's Convoy in
// outbox mode (the driver sets convoy_txn on connect).
func outboxConn(t *testing.T, s *stack) *sql.Conn {
	t.Helper()
	c, err := openDSN(t, s.convoy.dsn("app", "app secret", "im")+"&convoy_txn=%27outbox%27").Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
