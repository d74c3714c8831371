package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/convoy-im/convoy/router"
)

// TestArchivedMessagesStaySearchable (docs/design.md §9-10): with the cold tier and
// search on together, archiving a conversation's old messages (the
// archiver deletes their warm rows) leaves them searchable: the indexer
// tells the archiver's deletes from users'. A user's delete of an
// archived message (a tombstone, its warm row being gone) removes it from
// search; so does a user's delete of a message still warm, and a DELETE
// of a range of archived ones (one erasure row). An index built
// afterwards (a second proxy with its own) indexes the archived messages
// too, without the deleted ones.
func TestArchivedMessagesStaySearchable(t *testing.T) {
	// One archived message a day: a page of them spans 40 daily files. The
	// budget is not what this test is about: a loaded machine must not
	// make its pages partial.
	f := newColdFixture(t, 10*time.Second,
		fmt.Sprintf("search:\n  enabled: true\n  engine: bleve\n  dir: %s\n  runner_ttl: 2s", t.TempDir()))
	db := f.p.open(t, "convoy", "convoy", "im")
	const conv, uid = uint64(4242), uint64(77)
	mustExec(t, db, "INSERT INTO im_conv_member (uid, conv_id, updated_at) VALUES (?, ?, NOW(3))", uid, conv)
	// 40 old messages (archived: older than 180 days on the archiver's
	// clock), then 70 recent ones (the newest 60 stay warm anyway). Each
	// has a word of its own.
	word := func(seq int) string { return fmt.Sprintf("quokka%03d", seq) }
	send := func(seq int, at time.Time) {
		t.Helper()
		id := conv*100_000 + uint64(seq)
		ts := at.Format("2006-01-02 15:04:05.000")
		mustExec(t, db, "INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (?, ?, ?, 1, ?)", conv, id, uid, ts)
		mustExec(t, db, "INSERT INTO msg_content (msg_id, conv_id, sender_uid, msg_type, content, created_at) VALUES (?, ?, ?, 1, ?, ?)",
			id, conv, uid, []byte("note "+word(seq)), ts)
	}
	for seq := 1; seq <= 110; seq++ {
		at := oldStart.Add(time.Duration(seq) * 24 * time.Hour)
		if seq > 40 {
			at = recentStart.Add(time.Duration(seq) * time.Hour)
		}
		send(seq, at)
	}
	found := func(seq int) bool {
		return len(runSearch(t, db, uid, word(seq), conv, 10)) == 1
	}
	// marker sends a new message and waits until search finds it: the
	// indexer, which follows the binlog in order, has then applied every
	// transaction before it.
	marker := 110
	sync := func(what string) {
		t.Helper()
		marker++
		send(marker, recentStart.Add(time.Duration(marker)*time.Hour))
		waitFor(t, "the indexer to reach "+what, 30*time.Second, func() bool { return found(marker) })
	}
	sync("the loaded messages")
	for _, seq := range []int{1, 20, 40, 41, 110} {
		if !found(seq) {
			t.Fatalf("message %d is not searchable before archiving", seq)
		}
	}

	// Catalogued, then one message's body is edited before the warm
	// delete: the archiver keeps it warm and tombstones the file's stale
	// copy in its delete's transaction, which the indexer must not take
	// for a user's delete (the edited message would leave search).
	archive := func(step time.Duration) {
		t.Helper()
		f.advance(step)
		if err := f.arch.RunShard(context.Background(), int(router.ShardOf(conv))); err != nil {
			t.Fatal(err)
		}
	}
	archive(0)
	mustExec(t, db, "UPDATE msg_content SET content = ? WHERE conv_id = ? AND msg_id = ?", []byte("note "+word(30)+" edited"), conv, conv*100_000+30)
	archive(2 * time.Hour)
	if n, err := readRows(db, "SELECT seq, msg_id FROM conv_msg WHERE conv_id = ? AND seq < 41 ORDER BY seq DESC LIMIT 50", conv); err != nil || n != 40 {
		t.Fatalf("%d of the 40 archived messages are on their history page through Convoy (%v)", n, err)
	}
	ph := snapshotOf(t, f.s).Physical("conv_msg", router.ShardOf(conv))
	var dsi int
	if _, err := fmt.Sscanf(ph.Datasource, "ds%d", &dsi); err != nil {
		t.Fatalf("datasource %q", ph.Datasource)
	}
	if n := count(t, f.s.ds[dsi].Open(t, ""), fmt.Sprintf("SELECT COUNT(*) FROM %s.%s WHERE conv_id = %d AND seq <= 40", ph.Database, ph.Table, conv)); n != 1 {
		t.Fatalf("the archiver left %d warm rows of the archived messages, want the edited one", n)
	}
	sync("the archiver's deletes")
	for _, seq := range []int{1, 20, 30, 40} {
		if !found(seq) {
			t.Errorf("archived message %d is no longer searchable", seq)
		}
	}

	// Users delete: an archived message (a tombstone) and a warm one.
	mustExec(t, db, "DELETE FROM conv_msg WHERE conv_id = ? AND seq = ?", conv, 20)
	mustExec(t, db, "DELETE FROM conv_msg WHERE conv_id = ? AND seq = ?", conv, 100)
	sync("the users' deletes")
	if found(20) {
		t.Error("archived message 20, deleted by its user, is still found by search")
	}
	if found(100) {
		t.Error("warm message 100, deleted by its user, is still found by search")
	}
	for _, seq := range []int{1, 40, 99} {
		if !found(seq) {
			t.Errorf("message %d, not deleted, is no longer searchable", seq)
		}
	}
	// A range of archived messages deleted (one erasure row, no row
	// delete in the binlog for them): they leave search too.
	mustExec(t, db, "DELETE FROM conv_msg WHERE conv_id = ? AND seq BETWEEN ? AND ?", conv, 5, 10)
	sync("the range delete")
	for seq := 4; seq <= 11; seq++ {
		if want := seq < 5 || seq > 10; found(seq) != want {
			t.Errorf("after the range delete of 5..10, message %d found: %v", seq, !want)
		}
	}

	if t.Failed() {
		return
	}

	// A new index: its backfill reads MySQL and the archive.
	p2 := startConvoy(t, f.s.etcd.Endpoints(),
		fmt.Sprintf("cold: {enabled: true, run_jobs: false, store: '%s', budget: 10s}", f.s3.URL("convoy-cold")),
		fmt.Sprintf("search:\n  enabled: true\n  engine: bleve\n  dir: %s\n  runner_ttl: 2s", t.TempDir()))
	db2 := p2.open(t, "convoy", "convoy", "im")
	found2 := func(seq int) bool { return len(runSearch(t, db2, uid, word(seq), conv, 10)) == 1 }
	waitFor(t, "the new index to be built", 30*time.Second, func() bool { return found2(marker) })
	for _, seq := range []int{1, 19, 21, 30, 40, 41, 99} {
		if !found2(seq) {
			t.Errorf("message %d is not in the new index", seq)
		}
	}
	for _, seq := range []int{5, 7, 10, 20, 100} {
		if found2(seq) {
			t.Errorf("message %d, deleted by its user, is in the new index", seq)
		}
	}
}

// TestColdFallbackWarns (docs/design.md §9-10): a read of a conversation with archived
// rows that the cold tier cannot continue (a COUNT, BETWEEN, a page
// without its seq column, LIMIT over 2^20) answers from MySQL and says so
// (warning 1931), instead of silently leaving the archived rows out; a
// conversation without archived rows costs no warning; the inclusive
// page forms (seq <= ?, seq >= ?) are continued into the archive.
func TestColdFallbackWarns(t *testing.T) {
	f := newColdFixture(t, 10*time.Second) // (not a test of the budget: no partial page)
	a, fresh := uint64(1001), uint64(2002)
	f.load([]uint64{a}, func(uint64) (int, int) { return oldN, recentN })
	f.archiveAll([]uint64{a})
	f.load([]uint64{fresh}, func(uint64) (int, int) { return 0, 10 }) // after the archive run: nothing archived
	c := f.conn()
	for _, q := range []string{
		fmt.Sprintf("SELECT COUNT(*) FROM conv_msg WHERE conv_id = %d", a),
		fmt.Sprintf("SELECT seq FROM conv_msg WHERE conv_id = %d AND seq BETWEEN 10 AND 40", a),
		fmt.Sprintf("SELECT msg_id FROM conv_msg WHERE conv_id = %d AND seq < 40 ORDER BY seq DESC LIMIT 10", a),
		fmt.Sprintf("SELECT seq FROM conv_msg WHERE conv_id = %d AND seq < 40 ORDER BY seq DESC LIMIT 2000000", a),
	} {
		r, err := c.Execute(q)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		if r.Warnings != 1 {
			t.Errorf("%s: %d warnings, want 1 (archived rows not included)", q, r.Warnings)
			continue
		}
		w, err := c.Execute("SHOW WARNINGS")
		if err != nil {
			t.Fatal(err)
		}
		code, _ := w.GetUint(0, 1)
		msg, _ := w.GetString(0, 2)
		if code != 1931 || !strings.Contains(msg, "is not included") {
			t.Errorf("%s: warning %d %q", q, code, msg)
		}
	}
	for _, q := range []string{
		fmt.Sprintf("SELECT COUNT(*) FROM conv_msg WHERE conv_id = %d", fresh),
		fmt.Sprintf("SELECT seq FROM conv_msg WHERE conv_id = %d AND seq < 400 ORDER BY seq DESC LIMIT 10", a),
	} {
		if r, err := c.Execute(q); err != nil || r.Warnings != 0 {
			t.Errorf("%s: %v, %d warnings; want none", q, err, r.Warnings)
		}
	}
	for q, want := range map[string][]string{
		fmt.Sprintf("SELECT seq FROM conv_msg WHERE conv_id = %d AND seq <= 40 ORDER BY seq DESC LIMIT 3", a): {"40", "39", "38"},
		fmt.Sprintf("SELECT seq FROM conv_msg WHERE conv_id = %d AND seq >= 5 ORDER BY seq LIMIT 3", a):       {"5", "6", "7"},
		fmt.Sprintf("SELECT seq FROM conv_msg WHERE conv_id = %d AND seq >= 0 ORDER BY seq LIMIT 2", a):       {"1", "2"},
	} {
		r, err := c.Execute(q)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		var got []string
		for i := range r.RowDatas {
			v, _ := r.GetString(i, 0)
			got = append(got, v)
		}
		if !slices.Equal(got, want) || r.Warnings != 0 {
			t.Errorf("%s: seqs %v, %d warnings; want %v from the archive", q, got, r.Warnings, want)
		}
	}
}
