package engine

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/convoy-im/convoy/proxy/sqlerr"
	"github.com/convoy-im/convoy/router"
)

// keyOn returns a key from `from` upwards whose shard differs from every
// shard in not.
func keyOn(from uint64, not ...uint64) uint64 {
	for k := from; ; k++ {
		ok := true
		for _, n := range not {
			ok = ok && router.ShardOf(k) != router.ShardOf(n)
		}
		if ok {
			return k
		}
	}
}

// outboxLines returns the statements of log that write the outbox, with
// their datasource and connection.
func outboxLines(log []string) []string {
	var out []string
	for _, l := range log {
		if strings.Contains(l, "_convoy_outbox") && !strings.Contains(l, "CREATE ") && !strings.Contains(l, "ALTER TABLE") {
			out = append(out, l)
		}
	}
	return out
}

// An outbox transaction runs its home rows and records the others; COMMIT
// writes the entries on the transaction's own connection before COMMIT; a
// savepoint rolled back to drops what was recorded after it; ROLLBACK
// writes nothing.
func TestOutboxRecordsOtherShards(t *testing.T) {
	s, rec := newTestSession()
	mustQuery := func(q string) {
		t.Helper()
		if _, err := s.Query(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	home := uint64(42)
	other := keyOn(1000, home)
	dropped := keyOn(other+1, home, other)

	// Without the outbox the second shard is refused, naming the way out.
	mustQuery("BEGIN")
	mustQuery("INSERT INTO im_inbox (uid, conv_id, seq, msg_id, send_time) VALUES (42, 1, 1, 1, NOW())")
	_, err := s.Query("INSERT INTO im_inbox (uid, conv_id, seq, msg_id, send_time) VALUES (1000, 1, 1, 1, NOW())")
	if router.ShardOf(1000) != router.ShardOf(42) {
		expectCode(t, err, sqlerr.CrossShardTxn)
		if !strings.Contains(err.Error(), "convoy_txn") {
			t.Fatalf("the refusal does not name convoy_txn: %v", err)
		}
	}
	mustQuery("ROLLBACK")
	rec.take()

	mustQuery("SET convoy_txn = 'outbox'")
	// The session answers @@convoy_txn (the server does not know it).
	mustQuery("SELECT @@convoy_txn")
	if got := rec.take(); len(got) != 1 || !strings.Contains(got[0], "'outbox'") {
		t.Fatalf("SELECT @@convoy_txn sent %q", got)
	}
	mustQuery("BEGIN")
	_, err = s.Query("SET convoy_txn = 'single'")
	if err == nil || !strings.Contains(err.Error(), "in progress") {
		t.Fatalf("SET convoy_txn inside a transaction: %v", err)
	}
	r, err := s.Query("INSERT INTO im_inbox (uid, conv_id, seq, msg_id, send_time) VALUES (42, 7, 1, 70, NOW()), (" + itoa(other) + ", 7, 1, 70, 'x\\'y')")
	if err != nil {
		t.Fatal(err)
	}
	if r.AffectedRows != 2 {
		t.Fatalf("affected rows %d, want 2 (one run, one recorded)", r.AffectedRows)
	}
	// One row, text: the plan cache's shared plan, the client's literals.
	mustQuery("INSERT INTO im_inbox (uid, conv_id, seq, msg_id, send_time) VALUES (" + itoa(other) + ", 7, 9, 79, '2026-01-02 03:04:05')")
	mustQuery("SAVEPOINT a")
	mustQuery("INSERT INTO im_inbox (uid, conv_id, seq, msg_id, send_time) VALUES (" + itoa(dropped) + ", 7, 1, 70, NOW())")
	mustQuery("ROLLBACK TO SAVEPOINT a")
	// What cannot be recorded: its rows are not known before delivery.
	_, err = s.Query("UPDATE im_inbox SET msg_id = 1 WHERE uid = " + itoa(other))
	expectCode(t, err, sqlerr.CrossShardTxn)
	if !strings.Contains(err.Error(), "outbox mode") {
		t.Fatalf("UPDATE of another shard: %v", err)
	}
	_, err = s.Query("INSERT INTO im_inbox (uid, conv_id, seq, msg_id, send_time) VALUES (" + itoa(other) + ", 7, 2, 71, NOW()) RETURNING uid")
	expectCode(t, err, sqlerr.CrossShardTxn)
	// A seq allocation belongs to its conversation's transaction.
	_, err = s.Query("INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (" + itoa(other) + ", 1, 1, 1, NOW())")
	expectCode(t, err, sqlerr.CrossShardTxn)
	if !strings.Contains(err.Error(), "seq allocation") {
		t.Fatalf("seq allocation for another shard: %v", err)
	}
	mustQuery("COMMIT")
	log := rec.take()
	homeDS := defaultSnapshot().Target(router.ShardOf(home)).Datasource
	var conn string
	for _, l := range log {
		if strings.HasSuffix(l, "text: BEGIN") {
			conn = strings.SplitN(l, " ", 2)[0]
		}
	}
	if !strings.HasPrefix(conn, homeDS+"#") {
		t.Fatalf("the transaction ran on %s, want the home's %s: %q", conn, homeDS, log)
	}
	ob := outboxLines(log)
	if len(ob) != 2 {
		t.Fatalf("outbox statements %q, want the seq and one insert", ob)
	}
	if !strings.Contains(ob[1], "VALUES ("+itoa(other)+",7,9,79,\\'2026-01-02 03:04:05\\')") {
		t.Fatalf("the one-row entry is not in %q", ob[1])
	}
	for _, l := range ob {
		if !strings.HasPrefix(l, conn+" ") {
			t.Fatalf("outbox statement off the transaction's connection %s: %q", conn, l)
		}
	}
	if !strings.Contains(ob[0], "_convoy_outbox_seq") || !strings.Contains(ob[0], "VALUES ("+itoa(uint64(router.ShardOf(home)))+", LAST_INSERT_ID(2))") {
		t.Fatalf("seq statement %q", ob[0])
	}
	entry := ob[1]
	// (The statement as the outbox statement quotes it.)
	want := "INSERT INTO `im_inbox` (`uid`,`conv_id`,`seq`,`msg_id`,`send_time`) VALUES (" + itoa(other) + ",7,1,70,\\'x\\'\\'y\\')"
	if !strings.Contains(entry, want) || strings.Contains(entry, itoa(dropped)+",") {
		t.Fatalf("entry %q\nwant the statement %q and not the rolled-back one", entry, want)
	}
	if last := log[len(log)-1]; last != conn+" text: COMMIT" {
		t.Fatalf("last statement %q, want the COMMIT", last)
	}

	// ROLLBACK: nothing reaches the outbox.
	mustQuery("BEGIN")
	mustQuery("INSERT INTO im_inbox (uid, conv_id, seq, msg_id, send_time) VALUES (42, 8, 1, 80, NOW()), (" + itoa(other) + ", 8, 1, 80, NOW())")
	mustQuery("ROLLBACK")
	if ob := outboxLines(rec.take()); len(ob) != 0 {
		t.Fatalf("a rolled-back transaction wrote the outbox: %q", ob)
	}
}

// A prepared INSERT's bound values are printed into the entry: bytes that
// are not UTF-8 as a binary literal, floats in e-notation (a DOUBLE that
// reads back as the same value).
func TestOutboxPreparedValues(t *testing.T) {
	s, rec := newTestSession()
	if _, err := s.Query("SET convoy_txn = 'outbox'"); err != nil {
		t.Fatal(err)
	}
	p, err := s.Prepare("INSERT INTO msg_content (msg_id, conv_id, sender_uid, msg_type, content, created_at) VALUES (?, ?, ?, ?, ?, NOW())")
	if err != nil {
		t.Fatal(err)
	}
	other := keyOn(1000, 42)
	if _, err := s.Query("BEGIN"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Query("UPDATE im_conv_seq SET max_seq = max_seq WHERE conv_id = 42"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Execute(p, []any{int64(5), other, uint64(9), 0.1, []byte{0xff, 0x00, '\''}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Query("COMMIT"); err != nil {
		t.Fatal(err)
	}
	ob := outboxLines(rec.take())
	if len(ob) != 2 {
		t.Fatalf("outbox statements %q", ob)
	}
	want := "VALUES (5," + itoa(other) + ",9,1e-01,_binary X\\'FF0027\\',NOW())"
	if !strings.Contains(ob[1], want) {
		t.Fatalf("entry %q\nwant the values %s", ob[1], want)
	}
}

func itoa(k uint64) string { return strconv.FormatUint(k, 10) }

// The markers of every shard database of the datasource are purged by age,
// and only that datasource's.
func TestOutboxPurgeMarkers(t *testing.T) {
	s, rec := newTestSession()
	n, err := s.e.PurgeOutboxMarkers(context.Background(), "ds1", 7*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	log := rec.take()
	var dbs []string
	for _, d := range defaultSnapshot().Databases() {
		if d[0] == "ds1" {
			dbs = append(dbs, d[1])
		}
	}
	if len(log) != len(dbs) || n != int64(len(dbs)) {
		t.Fatalf("%d statements, %d deleted; want one per database of ds1 (%v): %q", len(log), n, dbs, log)
	}
	for i, l := range log {
		want := "ds1#" + strconv.Itoa(i+1) + " text: DELETE FROM `" + dbs[i] + "`.`_convoy_outbox_applied` WHERE applied_at < NOW(3) - INTERVAL 604800 SECOND LIMIT 5000"
		if l != want {
			t.Fatalf("statement %q, want %q", l, want)
		}
	}
}

// An account's default (users[].txn) is what DEFAULT goes back to.
func TestOutboxAccountDefault(t *testing.T) {
	s, rec := newTestSession()
	s.SetOutboxDefault(true)
	for _, c := range []struct{ set, want string }{{"", "'outbox'"}, {"SET convoy_txn = 'single'", "'single'"}, {"SET convoy_txn = DEFAULT", "'outbox'"}} {
		if c.set != "" {
			if _, err := s.Query(c.set); err != nil {
				t.Fatal(err)
			}
		}
		rec.take()
		if _, err := s.Query("SELECT @@convoy_txn"); err != nil {
			t.Fatal(err)
		}
		if got := rec.take(); len(got) != 1 || !strings.Contains(got[0], c.want) {
			t.Fatalf("after %q: %q, want %s", c.set, got, c.want)
		}
	}
}

// A transaction pinned to the unsharded tables records every sharded row:
// its home is the default datasource (home -1).
func TestOutboxHomeUnsharded(t *testing.T) {
	s, rec := newTestSession()
	for _, q := range []string{"SET convoy_txn = 'outbox'", "BEGIN", "INSERT INTO app_settings (k, v) VALUES ('a', 'b')",
		"INSERT INTO im_inbox (uid, conv_id, seq, msg_id, send_time) VALUES (42, 7, 1, 70, NOW())", "COMMIT"} {
		if _, err := s.Query(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	log := rec.take()
	ob := outboxLines(log)
	if len(ob) != 2 || !strings.HasPrefix(ob[0], "ds0#") || !strings.Contains(ob[0], "VALUES (-1, LAST_INSERT_ID(1))") ||
		!strings.Contains(ob[1], "INSERT INTO `im_inbox`") {
		t.Fatalf("outbox statements %q", ob)
	}
	for _, l := range log {
		if strings.Contains(l, "im_inbox_") {
			t.Fatalf("a sharded row ran in the unsharded transaction: %q", l)
		}
	}
}

// An entry keeps the database its statement was sent in, not the one the
// session has at COMMIT.
func TestOutboxEntryKeepsDatabase(t *testing.T) {
	s, rec := newTestSession()
	for _, q := range []string{"SET convoy_txn = 'outbox'", "BEGIN",
		"INSERT INTO im_inbox (uid, conv_id, seq, msg_id, send_time) VALUES (42, 7, 1, 70, NOW()), (" + itoa(keyOn(1000, 42)) + ", 7, 1, 70, NOW())",
		"USE other", "COMMIT"} {
		if _, err := s.Query(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	ob := outboxLines(rec.take())
	if len(ob) != 2 || !strings.Contains(ob[1], ",'im','{") {
		t.Fatalf("outbox statements %q: want the entry filed under database im", ob)
	}
}
