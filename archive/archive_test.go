package archive

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/convoy-im/convoy/cold"
	"github.com/convoy-im/convoy/coord"
	"github.com/convoy-im/convoy/rewrite"
	"github.com/convoy-im/convoy/router"
)

// page is a history query's answer as MySQL gave it before archiving.
type page struct {
	sql    string
	conv   uint64
	cursor uint64
	limit  int
	desc   bool
	cols   []cold.Column
	rows   [][][]byte
	bodies map[string][][]byte // msg_id -> msg_content row
	bcols  []cold.Column
}

// capture runs both history shapes over the archived range of every
// conversation of the shard and keeps the answers that lie wholly in it
// (the cold tier must answer those alone once the warm rows are gone).
func (f *fixture) capture() []page {
	var out []page
	for _, c := range f.convs {
		for _, q := range []struct {
			cursor uint64
			limit  int
			desc   bool
		}{{94, 20, true}, {94, 200, true}, {50, 1, true}, {50, 30, true}, {2, 5, true}, {1, 5, true},
			{0, 20, false}, {0, 93, false}, {40, 50, false}, {92, 1, false}, {70, 23, false}} {
			sql := fmt.Sprintf("SELECT * FROM conv_msg_0000 WHERE conv_id=%d AND seq > %d ORDER BY seq ASC LIMIT %d", c, q.cursor, q.limit)
			if q.desc {
				sql = fmt.Sprintf("SELECT * FROM conv_msg_0000 WHERE conv_id=%d AND seq < %d ORDER BY seq DESC LIMIT %d", c, q.cursor, q.limit)
			}
			p := page{sql: sql, conv: c, cursor: q.cursor, limit: q.limit, desc: q.desc, bodies: map[string][][]byte{}}
			p.cols, p.rows = f.query(sql)
			for _, r := range p.rows {
				var bodies [][][]byte
				p.bcols, bodies = f.query("SELECT * FROM msg_content_0000 WHERE msg_id=" + string(r[2]))
				if len(bodies) == 1 {
					p.bodies[string(r[2])] = bodies[0]
				}
			}
			out = append(out, p)
		}
	}
	return out
}

// checkPages reads every captured page from the cold tier alone and
// compares it with MySQL's answer: same column definitions and values,
// same bodies.
func (f *fixture) checkPages(pages []page, r *cold.Reader) {
	f.t.Helper()
	ctx := context.Background()
	for _, p := range pages {
		var got cold.Page
		var err error
		if p.desc {
			got, err = r.Before(ctx, p.conv, p.cursor, p.limit)
		} else {
			got, err = r.After(ctx, p.conv, p.cursor, p.limit)
		}
		if err != nil {
			f.t.Fatalf("%s: cold: %v", p.sql, err)
		}
		if got.More || len(got.Rows) != len(p.rows) {
			f.t.Fatalf("%s: cold gave %d rows (more %v), MySQL gave %d", p.sql, len(got.Rows), got.More, len(p.rows))
		}
		if len(p.rows) > 0 && fmt.Sprint(got.Tables.Msg) != fmt.Sprint(p.cols) {
			f.t.Fatalf("%s: column definitions\ncold  %v\nmysql %v", p.sql, got.Tables.Msg, p.cols)
		}
		for i, w := range p.rows {
			g := got.Rows[i]
			if !sameValues(g.Msg, w) {
				f.t.Fatalf("%s: row %d\ncold  %q\nmysql %q", p.sql, i, g.Msg, w)
			}
			body := p.bodies[string(w[2])]
			if (g.Content == nil) != (body == nil) || !sameValues(g.Content, body) {
				f.t.Fatalf("%s: row %d body\ncold  %q\nmysql %q", p.sql, i, g.Content, body)
			}
			if body != nil && fmt.Sprint(got.Tables.Content) != fmt.Sprint(p.bcols) {
				f.t.Fatalf("%s: msg_content definitions\ncold  %v\nmysql %v", p.sql, got.Tables.Content, p.bcols)
			}
		}
	}
}

func sameValues(a, b [][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if (a[i] == nil) != (b[i] == nil) || !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

func (f *fixture) run(a *Archiver) {
	f.t.Helper()
	if err := a.RunShard(context.Background(), f.shard); err != nil {
		f.t.Fatalf("run: %v", err)
	}
}

// TestArchiver runs against one MariaDB, one etcd and one S3-compatible
// server process, each subtest in a database, cluster and bucket of its
// own.
func TestArchiver(t *testing.T) {
	s := startServices(t)
	for _, store := range []string{"file", "s3"} {
		t.Run("Archive/"+store, func(t *testing.T) { testArchive(t, s, store) })
	}
	for _, step := range []string{HookWritten, HookVerified, HookCatalogued, HookChunkNoted, HookDeleted} {
		t.Run("Crash/"+step, func(t *testing.T) { testCrash(t, s, step) })
	}
	t.Run("ChangedAfterArchive", func(t *testing.T) { testChanged(t, s) })
	t.Run("StoreUnavailable", func(t *testing.T) { testStoreUnavailable(t, s) })
	t.Run("MigrationAndPause", func(t *testing.T) { testMigrationAndPause(t, s) })
	t.Run("Manager", func(t *testing.T) { testManager(t, s) })
	t.Run("KeepNewest", func(t *testing.T) { testKeepNewest(t, s) })
	t.Run("CatalogCurrent", func(t *testing.T) { testCatalogCurrent(t, s) })
	t.Run("CatalogLoadRace", func(t *testing.T) { testCatalogLoadRace(t, s) })
	t.Run("StaleDeleter", func(t *testing.T) { testStaleDeleter(t, s) })
	t.Run("DeleteEtcdWrites", func(t *testing.T) { testDeleteEtcdWrites(t, s) })
	t.Run("RebuildCatalog", func(t *testing.T) { testRebuildCatalog(t, s) })
	t.Run("LateRows", func(t *testing.T) { testLateRows(t, s) })
	t.Run("LegacyResume", func(t *testing.T) { testLegacyResume(t, s) })
	t.Run("Sweep", func(t *testing.T) { testSweep(t, s) })
	t.Run("Erase", func(t *testing.T) { testErase(t, s) })
	t.Run("EraseLegacy", func(t *testing.T) { testEraseLegacy(t, s) })
	t.Run("Retention", func(t *testing.T) { testRetention(t, s) })
	t.Run("Compact", func(t *testing.T) { testCompact(t, s) })
	t.Run("LocalStore", func(t *testing.T) { testLocalStore(t, s) })
	t.Run("InboxTTL", func(t *testing.T) { testInboxTTL(t, s) })
	t.Run("ScanPasses", func(t *testing.T) { testScanPasses(t, s) })
}

// testScanPasses: a shard with a month of history behind the warm window
// is archived in one pass over its table's keys, not one per day, and
// with a small ScanKeys in passes of as many whole days as fit (the
// fixture's shard has 12 rows a day: 30 keys hold the first day, streamed,
// and two gathered days, so its 28 days with rows take 10 passes); either
// way every row is archived once, in the same files as a day-by-day
// archiver writes. The last three days before the cutoff hold no rows:
// they count as archived, so the next run reads no keys.
func testScanPasses(t *testing.T, s *services) {
	for _, c := range []struct {
		scanKeys, passes int
	}{{0, 1}, {30, 10}} {
		t.Run(fmt.Sprint("keys=", c.scanKeys), func(t *testing.T) {
			f := newFixture(t, s, "file")
			f.svc.db.Exec(t, "DELETE FROM "+f.dbName+".conv_msg_0000 WHERE created_at >= '2025-12-29' AND created_at < '2026-01-01'")
			const lastSeq = 84 // 2025-12-28 16:30
			want := map[key]int{}
			for _, c := range f.convs {
				for seq := uint64(1); seq <= lastSeq; seq++ {
					want[key{Conv: c, Seq: seq}] = 1
				}
			}
			total := f.count("TRUE")
			m, err := NewMetrics(nil)
			if err != nil {
				t.Fatal(err)
			}
			a := f.archiver(func(cfg *Config) { cfg.Metrics, cfg.ScanKeys = m, c.scanKeys })
			f.run(a)
			if got := f.archivedKeys(); !maps.Equal(got, want) {
				t.Fatalf("archived keys: %d distinct, want %d (each once)", len(got), len(want))
			}
			recs := f.records()
			if len(recs) != 28*2 {
				t.Fatalf("%d files, want 56 (two parts a day)", len(recs))
			}
			for _, r := range recs {
				if !strings.HasPrefix(r.Day, "202512") || r.Part > 1 {
					t.Fatalf("file %s of day %s part %d", r.Key, r.Day, r.Part)
				}
			}
			scanned := int(testutil.ToFloat64(m.scans.WithLabelValues("conv_msg")))
			if scanned != c.passes*total {
				t.Fatalf("the day scans read %d keys: %.1f passes over the %d rows, want %d", scanned, float64(scanned)/float64(total), total, c.passes)
			}
			if st := f.status(); st["archived_through"] != "2025-12-31" {
				t.Fatalf("archived through %q, want 2025-12-31 (the empty days before the cutoff too)", st["archived_through"])
			}
			// The next hourly run has no day to archive: no scan.
			f.advance(time.Hour)
			f.run(a)
			if again := int(testutil.ToFloat64(m.scans.WithLabelValues("conv_msg"))); again != scanned {
				t.Fatalf("a run with nothing new to archive scanned %d keys", again-scanned)
			}
		})
	}
}

// testInboxTTL is seed 001's inbox cleanup (docs/design.md §9): exactly the
// im_inbox rows that are read (seq <= the member's last_read_seq) and older
// than inbox_after (30 days) go into verified inbox files and are deleted
// delete_after later; unread rows, rows of members with no member row, young
// rows and other shards' rows stay, and so does a row changed after it was
// archived. Inbox files are not history: no cold read sees them.
func testInboxTTL(t *testing.T, s *services) {
	f := newEmptyFixture(t, s, "s3")
	f.svc.db.Exec(t, imTable(t, "im_inbox", f.dbName, "im_inbox_0000"), imTable(t, "im_conv_member", f.dbName, "im_conv_member_0000"))
	uids := keysOfShard(router.Shard(f.shard), 3, 5000)
	var others []uint64
	for k := uint64(5000); len(others) < 2; k++ {
		if sh := router.ShardOf(k); sh < 512 && int(sh) != f.shard {
			others = append(others, k)
		}
	}
	var sb strings.Builder
	want := map[key]int{}
	for _, u := range append(append([]uint64{}, uids...), others...) {
		mine := router.ShardOf(u) == router.Shard(f.shard)
		// conv 900 read up to 40, conv 901 not read, conv 902 without a member row.
		fmt.Fprintf(&sb, "INSERT INTO %s.im_conv_member_0000 VALUES (%d, 900, 40, 0, '2026-06-01 00:00:00.000'), (%d, 901, 0, 0, '2026-06-01 00:00:00.000');\n", f.dbName, u, u)
		for _, conv := range []uint64{900, 901, 902} {
			for seq := uint64(1); seq <= 50; seq++ {
				at := dataStart.Add(time.Duration(seq) * 12 * time.Hour) // December 2025: older than 30 days
				if seq > 45 {
					at = clock0.Add(-10 * 24 * time.Hour) // young, and read for conv 900 only up to 40 anyway
				}
				if conv == 900 && seq == 40 {
					at = clock0.Add(-24 * time.Hour) // read but young
				}
				fmt.Fprintf(&sb, "INSERT INTO %s.im_inbox_0000 VALUES (%d, %d, %d, %d, '%s');\n", f.dbName, u, conv, seq, u*1000+seq, at.Format("2006-01-02 15:04:05.000"))
				if mine && conv == 900 && seq < 40 {
					want[key{UID: u, Conv: conv, Seq: seq}] = 1
				}
			}
		}
	}
	f.svc.db.Exec(t, sb.String())
	inboxCount := func(where string) int {
		_, rows := f.query("SELECT COUNT(*) FROM im_inbox_0000 WHERE " + where)
		var n int
		fmt.Sscan(string(rows[0][0]), &n)
		return n
	}
	total := inboxCount("TRUE")
	a := f.archiver(func(c *Config) { c.DeleteAfter = time.Hour })
	f.run(a)
	if got := f.archivedKeys(); !maps.Equal(got, want) {
		t.Fatalf("archived %d inbox rows, want %d (each once): exactly the read, old rows of the shard", len(got), len(want))
	}
	for _, r := range f.records() {
		if r.Kind != kindInbox || !strings.Contains(r.Key, "/inbox-") {
			t.Fatalf("record %s of kind %s", r.Key, r.Kind)
		}
	}
	if n := inboxCount("TRUE"); n != total {
		t.Fatalf("inbox rows deleted before delete_after: %d of %d left", n, total)
	}
	// An archived row changed before the delete stays, with its change.
	f.svc.db.Exec(t, fmt.Sprintf("UPDATE %s.im_inbox_0000 SET msg_id = 1 WHERE uid = %d AND conv_id = 900 AND seq = 5", f.dbName, uids[0]))
	f.advance(2 * time.Hour)
	f.run(a)
	if n := inboxCount("TRUE"); n != total-len(want)+1 {
		t.Fatalf("after delete_after: %d inbox rows left, want %d", n, total-len(want)+1)
	}
	for _, u := range uids {
		if n := inboxCount(fmt.Sprintf("uid = %d AND conv_id = 900 AND seq < 40", u)); n != map[bool]int{true: 1, false: 0}[u == uids[0]] {
			t.Fatalf("uid %d: %d read old rows left", u, n)
		}
		if n := inboxCount(fmt.Sprintf("uid = %d AND (conv_id <> 900 OR seq >= 40)", u)); n != 150-39 {
			t.Fatalf("uid %d: %d unread or young rows left, want %d", u, n, 150-39)
		}
	}
	for _, u := range others {
		if n := inboxCount(fmt.Sprintf("uid = %d", u)); n != 150 {
			t.Fatalf("uid %d of another shard: %d rows left", u, n)
		}
	}
	st := f.status()
	if st["inbox_rows_archived"] != fmt.Sprint(len(want)) || st["inbox_rows_deleted"] != fmt.Sprint(len(want)-1) || st["rows_archived"] != "0" || st["inbox_archived_through"] == "" {
		t.Fatalf("status %v", st)
	}
	cat := NewCatalog(s.cli, f.cluster, f.store)
	if files, err := cat.Files(context.Background(), 900); err != nil || len(files) != 0 {
		t.Fatalf("history reads see inbox files: %v %v", files, err)
	}
}

// testKeepNewest: with keep_newest 100 the newest 100 rows of each
// conversation stay warm however old their day: of the days older than
// 180 days (seqs 1..93) only seqs 1..50 are archived and deleted.
func testKeepNewest(t *testing.T, s *services) {
	f := newFixture(t, s, "file")
	a := f.archiver(func(c *Config) { c.KeepNewest = 100; c.DeleteAfter = time.Hour })
	f.run(a)
	f.advance(2 * time.Hour)
	f.run(a)
	want := map[key]int{}
	for _, c := range f.convs {
		for seq := uint64(1); seq <= perConv-100; seq++ {
			want[key{Conv: c, Seq: seq}] = 1
		}
	}
	if got := f.archivedKeys(); !maps.Equal(got, want) {
		t.Fatalf("archived %d keys, want %d (seqs 1..%d of each conversation)", len(got), len(want), perConv-100)
	}
	for _, c := range f.convs {
		if n := f.count(fmt.Sprintf("conv_id = %d", c)); n != 100 {
			t.Fatalf("conversation %d: %d warm rows, want its newest 100", c, n)
		}
	}
}

// testCatalogCurrent: the catalog's shard markers say which shards have
// archived files (written with the first catalogued file, long before any
// warm row is deleted); the ranges table in the shard's database grows in
// the delete's transaction; and Fresh brings a loaded shard up to date
// with etcd without any watch (the reads' defence against a lagging one).
func testCatalogCurrent(t *testing.T, s *services) {
	f := newFixture(t, s, "file")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watched := NewCatalog(s.cli, f.cluster, f.store)
	if !watched.Archived(f.shard) {
		t.Fatal("a catalog that has not listed the markers yet must count every shard as archived")
	}
	go watched.Watch(ctx)
	waitFor(t, "the markers listed", func() bool { return !watched.Archived(f.shard) })
	unwatched := NewCatalog(s.cli, f.cluster, f.store)
	if files, err := unwatched.Files(ctx, f.convs[0]); err != nil || len(files) != 0 {
		t.Fatalf("before archiving: %v %v", files, err)
	}
	a := f.archiver(func(c *Config) { c.DeleteAfter = time.Hour })
	f.run(a)
	waitFor(t, "the shard marked archived", func() bool { return watched.Archived(f.shard) })
	if other := int(router.ShardOf(f.others[0])); watched.Archived(other) {
		t.Fatalf("shard %d was never archived but counts as archived", other)
	}
	_, rows := f.query("SELECT COUNT(*) FROM " + ConvTable)
	if string(rows[0][0]) != "0" {
		t.Fatalf("%s has %s rows before any delete", ConvTable, rows[0][0])
	}
	f.advance(2 * time.Hour)
	f.run(a)
	for _, c := range f.convs {
		_, rows := f.query(fmt.Sprintf("SELECT min_seq, max_seq FROM %s WHERE conv_id = %d", ConvTable, c))
		if len(rows) != 1 || string(rows[0][0]) != "1" || string(rows[0][1]) != fmt.Sprint(archivedMax) {
			t.Fatalf("conversation %d: archived range %q, want 1..%d", c, rows, archivedMax)
		}
	}
	if _, rows := f.query(fmt.Sprintf("SELECT COUNT(*) FROM %s WHERE conv_id IN (%d, %d)", ConvTable, f.others[0], f.others[1])); string(rows[0][0]) != "0" {
		t.Fatalf("conversations of other shards have archived ranges")
	}
	// The read bounds came with the deletes: each conversation's archived
	// seqs, file by file, and nothing of the files is in etcd's catalog.
	for _, c := range f.convs {
		_, rows := f.query(fmt.Sprintf("SELECT SUM(max_seq - min_seq + 1), SUM(n_rows), MIN(min_seq), MAX(max_seq) FROM %s WHERE conv_id = %d", FilesTable, c))
		if want := fmt.Sprint(archivedMax); string(rows[0][0]) != want || string(rows[0][1]) != want || string(rows[0][2]) != "1" || string(rows[0][3]) != want {
			t.Fatalf("conversation %d: read bounds %q, want 1..%d in files covering %d rows", c, rows, archivedMax, archivedMax)
		}
	}
	if files, _ := NewCatalog(s.cli, f.cluster, f.store).Files(ctx, f.convs[0]); len(files) != 0 {
		t.Fatalf("etcd's catalog answers for files whose bounds are in MySQL: %v", files)
	}
	// Records of the former layout (bounds in etcd) are still read from
	// etcd. The unwatched catalog still answers from what it loaded...
	f.makeLegacy()
	if files, _ := unwatched.Files(ctx, f.convs[0]); len(files) != 0 {
		t.Fatalf("an unwatched catalog reloaded by itself: %v", files)
	}
	// ...until Fresh compares it with etcd.
	if err := unwatched.Fresh(ctx, f.convs[0]); err != nil {
		t.Fatal(err)
	}
	if files, _ := unwatched.Files(ctx, f.convs[0]); len(files) == 0 {
		t.Fatal("Fresh did not bring the deleted files in")
	}
}

// testArchive: every row older than 180 days lands in exactly one
// verified, catalogued file; the warm rows stay until delete_after has
// passed since cataloguing, then exactly those are deleted (other shards'
// rows in the same table, and newer rows, stay); the catalog answers per
// conversation and the cold pages equal MySQL's before archiving.
func testArchive(t *testing.T, s *services, store string) {
	f := newFixture(t, s, store)
	pages := f.capture()
	total := f.count("TRUE")
	a := f.archiver()
	f.run(a)
	if got, want := f.archivedKeys(), f.wantArchived(); !maps.Equal(got, want) {
		t.Fatalf("archived keys: %d distinct, want %d (each once)", len(got), len(want))
	}
	recs := f.records()
	if len(recs) != 31*2 { // 31 days, 12 rows a day, parts of 7
		t.Errorf("%d files, want 62", len(recs))
	}
	for _, r := range recs {
		if r.State != StateCatalogued {
			t.Fatalf("%s: state %s", r.Key, r.State)
		}
	}
	if n := f.count("TRUE"); n != total {
		t.Fatalf("warm rows deleted before delete_after: %d of %d left", n, total)
	}
	// A rerun finds nothing new: no file written twice.
	f.run(a)
	if n := len(f.records()); n != len(recs) {
		t.Fatalf("rerun: %d files, was %d", n, len(recs))
	}
	// Six days later: still nothing deleted. Past seven: deleted.
	f.advance(6 * 24 * time.Hour)
	f.run(a)
	if n := f.count("TRUE"); n != total {
		t.Fatalf("after 6 days: %d of %d warm rows left", n, total)
	}
	f.advance(25 * time.Hour)
	// The clock also moved the cutoff by seven days: 2026-01-01..07 are
	// archived too (catalogued, not deleted yet).
	f.run(a)
	archivedNow := len(f.wantArchived()) + 7*3*len(f.convs)
	if n := f.count("TRUE"); n != total-len(f.wantArchived()) {
		t.Fatalf("after 7 days: %d warm rows left, want %d", n, total-len(f.wantArchived()))
	}
	for _, c := range f.others {
		if n := f.count(fmt.Sprintf("conv_id=%d", c)); n != perConv {
			t.Fatalf("conversation %d of another shard: %d rows left, want %d", c, n, perConv)
		}
	}
	if got := f.archivedKeys(); len(got) != archivedNow {
		t.Fatalf("%d rows archived, want %d", len(got), archivedNow)
	}
	cat := f.readCatalog(nil)
	for _, c := range f.convs {
		files, err := cat.Files(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		// 31 deleted days (the newest day is catalogued, not readable).
		var rows uint64
		for _, fr := range files {
			if fr.MinSeq > fr.MaxSeq || fr.MaxSeq > archivedMax {
				t.Fatalf("conversation %d: range %+v", c, fr)
			}
			rows += fr.MaxSeq - fr.MinSeq + 1
		}
		if len(files) == 0 || rows != archivedMax {
			t.Fatalf("conversation %d: %d files covering %d seqs, want %d", c, len(files), rows, archivedMax)
		}
	}
	if files, _ := cat.Files(context.Background(), f.others[0]); len(files) != 0 {
		t.Fatalf("a conversation of another shard has files %v", files)
	}
	f.checkPages(pages, cold.NewReader(f.store, cat, cold.ReaderOptions{}))
	st := f.status()
	if st["archived_through"] != "2026-01-07" || st["rows_archived"] != fmt.Sprint(archivedNow) ||
		st["rows_deleted"] != fmt.Sprint(len(f.wantArchived())) || st["last_error"] != "" || st["oldest_warm"] == "" {
		t.Fatalf("status %v", st)
	}
}

// testCrash stops the run at a step boundary (the third time it is
// reached: mid-shard), then lets a second archiver take over: in the end
// every archived row is in exactly one catalogued file and exactly the
// archived rows are gone from MySQL.
func testCrash(t *testing.T, s *services, step string) {
	f := newFixture(t, s, "file")
	total := f.count("TRUE")
	seen := 0
	crashed := errors.New("crash")
	a := f.archiver(func(c *Config) {
		c.Hook = func(at string, _ int) error {
			if at == step {
				if seen++; seen == 3 {
					return crashed
				}
			}
			return nil
		}
	})
	b := f.archiver(func(c *Config) { c.ID = "test-2" })
	// Deletes become due two hours after cataloguing, within the same day
	// (the cutoff does not move).
	a.cfg.DeleteAfter, b.cfg.DeleteAfter = time.Hour, time.Hour
	deleting := step == HookChunkNoted || step == HookDeleted
	if deleting {
		a.cfg.DeleteAfter = 7 * 24 * time.Hour
		f.run(a) // archive only
		a.cfg.DeleteAfter = time.Hour
		f.advance(2 * time.Hour)
	}
	if err := a.RunShard(context.Background(), f.shard); !errors.Is(err, crashed) {
		t.Fatalf("run with a crash at %s: %v", step, err)
	}
	f.run(b) // takes over: resumes the archive (deleting nothing yet) or the delete
	if !deleting {
		f.advance(2 * time.Hour)
		f.run(b)
	}
	if got, want := f.archivedKeys(), f.wantArchived(); !maps.Equal(got, want) {
		dup := 0
		for _, n := range got {
			if n > 1 {
				dup++
			}
		}
		t.Fatalf("archived keys after a crash at %s: %d distinct (%d more than once), want %d once each", step, len(got), dup, len(want))
	}
	for _, r := range f.records() {
		if r.State != StateDeleted || r.Kept+r.Gone != 0 {
			t.Fatalf("%s: state %s, kept %d gone %d", r.Key, r.State, r.Kept, r.Gone)
		}
	}
	if tomb := f.tombstones(); len(tomb) != 0 {
		t.Fatalf("rows kept out of cold reads after a crash at %s: %v", step, tomb)
	}
	if n := f.count("TRUE"); n != total-len(f.wantArchived()) {
		t.Fatalf("warm rows left %d, want %d", n, total-len(f.wantArchived()))
	}
	if n := f.count(fmt.Sprintf("seq > %d", archivedMax)); n != (perConv-archivedMax)*len(f.convs)+(perConv-archivedMax)*len(f.others) {
		t.Fatalf("newer rows touched: %d left", n)
	}
	_, left := f.query("SELECT COUNT(*) FROM " + progressTable)
	if string(left[0][0]) != "0" {
		t.Fatalf("%s progress rows left behind", left[0][0])
	}
}

// testChanged: rows edited (msg_type, body) or deleted after archiving but
// before the warm delete. The edited rows stay in MySQL with their edit,
// the deleted one stays deleted, and all three are skipped by cold reads:
// the cold pages plus the rows MySQL still holds are MySQL's state just
// before the delete.
func testChanged(t *testing.T, s *services) {
	f := newFixture(t, s, "file")
	a := f.archiver()
	f.run(a)
	c := f.convs[1]
	f.svc.db.Exec(t,
		fmt.Sprintf("UPDATE %s.conv_msg_0000 SET msg_type = 9 WHERE conv_id = %d AND seq = 10", f.dbName, c),
		fmt.Sprintf("UPDATE %s.msg_content_0000 SET content = 'recalled' WHERE msg_id = %d", f.dbName, c*1000+11),
		fmt.Sprintf("DELETE FROM %s.conv_msg_0000 WHERE conv_id = %d AND seq = 12", f.dbName, c),
		fmt.Sprintf("DELETE FROM %s.msg_content_0000 WHERE msg_id = %d", f.dbName, c*1000+12))
	pages := f.capture() // MySQL's state now, with the changes
	a.cfg.DeleteAfter = time.Hour
	f.advance(2 * time.Hour)
	f.run(a)
	if n := f.count(fmt.Sprintf("conv_id = %d AND seq <= %d", c, archivedMax)); n != 2 {
		t.Fatalf("conversation %d: %d archived-range rows left in MySQL, want the 2 edited ones", c, n)
	}
	_, row := f.query(fmt.Sprintf("SELECT msg_type FROM conv_msg_0000 WHERE conv_id = %d AND seq = 10", c))
	if len(row) != 1 || string(row[0][0]) != "9" {
		t.Fatalf("edited row: %q", row)
	}
	kept, gone := 0, 0
	for _, r := range f.records() {
		if len(r.Skips) != 0 || r.Bounds != BoundsMySQL {
			t.Fatalf("%s: skips in etcd %v, bounds %q", r.Key, r.Skips, r.Bounds)
		}
		kept += int(r.Kept)
		gone += int(r.Gone)
	}
	if kept != 2 || gone != 1 {
		t.Fatalf("kept %d gone %d, want 2 and 1", kept, gone)
	}
	// The three rows are tombstoned in the delete's transaction (both
	// tables: each had a body when archived).
	want := []string{}
	for _, tbl := range []string{"conv_msg", "msg_content"} {
		for seq := 10; seq <= 12; seq++ {
			want = append(want, fmt.Sprintf("%s/%d/%d", tbl, c, seq))
		}
	}
	if got := f.tombstones(); !slices.Equal(got, want) {
		t.Fatalf("tombstones %v, want %v", got, want)
	}
	// Cold pages skip the three rows; merged with what MySQL still holds
	// (the edited rows) they are MySQL's pages from before the delete.
	r := cold.NewReader(f.store, f.readCatalog(nil), cold.ReaderOptions{})
	for _, p := range pages {
		if p.conv != c {
			continue
		}
		var got cold.Page
		var err error
		if p.desc {
			got, err = r.Before(context.Background(), c, p.cursor, p.limit+2)
		} else {
			got, err = r.After(context.Background(), c, p.cursor, p.limit+2)
		}
		if err != nil {
			t.Fatal(err)
		}
		var merged [][][]byte
		for _, row := range got.Rows {
			if row.Seq == 10 || row.Seq == 11 || row.Seq == 12 {
				t.Fatalf("%s: cold served skipped seq %d", p.sql, row.Seq)
			}
			merged = append(merged, row.Msg)
		}
		_, warm := f.query(p.sql)
		merged = append(merged, warm...)
		sortRows(merged, p.desc)
		if len(merged) > p.limit {
			merged = merged[:p.limit]
		}
		if len(merged) != len(p.rows) {
			t.Fatalf("%s: cold+warm %d rows, MySQL had %d", p.sql, len(merged), len(p.rows))
		}
		for i := range merged {
			if !sameValues(merged[i], p.rows[i]) {
				t.Fatalf("%s: row %d: %q, MySQL had %q", p.sql, i, merged[i], p.rows[i])
			}
		}
	}
	_, rows, _ := NewAdmin(s.cli, f.cluster).Status(context.Background())
	if rows[0][8] != "2" || rows[0][9] != "1" {
		t.Fatalf("SHOW ARCHIVE edited_kept %s deleted_by_users %s", rows[0][8], rows[0][9])
	}
}

// status is the shard's SHOW ARCHIVE row by column name.
func (f *fixture) status() map[string]string {
	f.t.Helper()
	cols, rows, err := NewAdmin(f.svc.cli, f.cluster).Status(context.Background())
	if err != nil || len(rows) != 1 {
		f.t.Fatalf("status: %v %v", rows, err)
	}
	st := map[string]string{}
	for i, c := range cols {
		st[c] = rows[0][i]
	}
	return st
}

func sortRows(rows [][][]byte, desc bool) {
	seq := func(r [][]byte) uint64 {
		var v uint64
		fmt.Sscan(string(r[1]), &v)
		return v
	}
	for i := 1; i < len(rows); i++ {
		for j := i; j > 0 && (seq(rows[j]) < seq(rows[j-1])) != desc; j-- {
			rows[j], rows[j-1] = rows[j-1], rows[j]
		}
	}
}

// testStoreUnavailable: the S3 server hangs (SIGSTOP) mid-run: the run
// stops with the store's error in SHOW ARCHIVE; once it answers again the
// next run completes and nothing is lost or written twice.
func testStoreUnavailable(t *testing.T, s *services) {
	f := newFixture(t, s, "s3")
	stopped := false
	a := f.archiver(func(c *Config) {
		c.StoreTimeout = time.Second
		c.Hook = func(at string, _ int) error {
			if at == HookCatalogued && !stopped {
				stopped = true
				s.s3.Pause(t)
			}
			return nil
		}
	})
	err := a.RunShard(context.Background(), f.shard)
	s.s3.Resume(t)
	if err == nil {
		t.Fatal("run succeeded with the store hung")
	}
	cols, rows, serr := NewAdmin(s.cli, f.cluster).Status(context.Background())
	if serr != nil || len(rows) != 1 || !strings.Contains(rows[0][len(cols)-1], "store") {
		t.Fatalf("SHOW ARCHIVE after the outage: %v %v (run error %v)", rows, serr, err)
	}
	f.run(a)
	if got, want := f.archivedKeys(), f.wantArchived(); !maps.Equal(got, want) {
		var missing []key
		for k := range want {
			if got[k] != 1 {
				missing = append(missing, k)
			}
		}
		t.Fatalf("after the outage: %d keys archived, want %d once each; wrong: %v; run error was %v", len(got), len(want), missing, err)
	}
	_, rows, _ = NewAdmin(s.cli, f.cluster).Status(context.Background())
	if rows[0][len(cols)-1] != "" {
		t.Fatalf("last_error after recovery: %q", rows[0][len(cols)-1])
	}
}

// testMigrationAndPause: a shard with an unfinished migration job is not
// touched (and says why); ARCHIVE PAUSE stops every run, RESUME lets it
// go on; ARCHIVE SHARD n NOW is recorded and cleared by the run.
func testMigrationAndPause(t *testing.T, s *services) {
	f := newFixture(t, s, "file")
	ctx := context.Background()
	a := f.archiver()
	mj, err := coord.NewJobStore(s.cli, f.cluster).Create(ctx, coord.Job{ID: "mig-1", Shard: f.shard, Step: "backfill"})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.RunShard(ctx, f.shard); !errors.Is(err, ErrMigrating) {
		t.Fatalf("run during a migration: %v", err)
	}
	if len(f.records()) != 0 {
		t.Fatal("files written during a migration")
	}
	admin := NewAdmin(s.cli, f.cluster)
	_, rows, _ := admin.Status(ctx)
	if !strings.Contains(rows[0][len(rows[0])-1], "migrating") {
		t.Fatalf("status during a migration: %v", rows)
	}
	if err := coord.NewJobStore(s.cli, f.cluster).Delete(ctx, mj); err != nil {
		t.Fatal(err)
	}
	if err := admin.Command(ctx, -1, "PAUSE"); err != nil {
		t.Fatal(err)
	}
	if err := a.RunShard(ctx, f.shard); !errors.Is(err, ErrPaused) {
		t.Fatalf("run while paused: %v", err)
	}
	if _, rows, _ = admin.Status(ctx); rows[0][1] != "paused" {
		t.Fatalf("status while paused: %v", rows)
	}
	if err := admin.Command(ctx, f.shard, "NOW"); err != nil {
		t.Fatal(err)
	}
	if err := admin.Command(ctx, -1, "RESUME"); err != nil {
		t.Fatal(err)
	}
	if _, rows, _ = admin.Status(ctx); rows[0][1] != "idle (now requested)" {
		t.Fatalf("status after NOW: %v", rows)
	}
	f.run(a)
	if got := f.archivedKeys(); len(got) != len(f.wantArchived()) {
		t.Fatalf("after RESUME: %d keys archived", len(got))
	}
	if _, rows, _ = admin.Status(ctx); rows[0][1] != "idle" || rows[0][len(rows[0])-1] != "" {
		t.Fatalf("status after the run: %v", rows)
	}
	for _, bad := range []struct {
		shard int
		verb  string
	}{{1024, "NOW"}, {-1, "NOW"}, {3, "FASTER"}} {
		var in *InputError
		if err := admin.Command(ctx, bad.shard, bad.verb); !errors.As(err, &in) {
			t.Errorf("Command(%d, %s): %v, want an InputError", bad.shard, bad.verb, err)
		}
	}
}

// testManager: a manager runs a shard that has never run at once, and
// again within a sweep of ARCHIVE SHARD n NOW (its interval, an hour, has
// not passed).
func testManager(t *testing.T, s *services) {
	f := newFixture(t, s, "file")
	m := newManager(f.archiver(), time.Hour, time.Minute, []int{f.shard})
	defer m.Close()
	admin := NewAdmin(s.cli, f.cluster)
	lastRun := func() string {
		_, rows, err := admin.Status(context.Background())
		if err != nil || len(rows) == 0 {
			return ""
		}
		return rows[0][slices.Index(StatusColumns, "last_run")]
	}
	waitFor(t, "the first run", func() bool { return len(f.archivedKeys()) == len(f.wantArchived()) })
	first := lastRun()
	f.advance(time.Minute)
	if err := admin.Command(context.Background(), f.shard, "NOW"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the run asked for by NOW", func() bool { return lastRun() != first })
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !ok(); {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not happen within 30s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// gatedStore holds every read of the store while its gate is closed, and
// counts the reads waiting.
type gatedStore struct {
	cold.Store
	mu      sync.Mutex
	gate    chan struct{} // nil: open
	waiting atomic.Int32
}

func (g *gatedStore) close() { g.mu.Lock(); g.gate = make(chan struct{}); g.mu.Unlock() }
func (g *gatedStore) open() {
	g.mu.Lock()
	if g.gate != nil {
		close(g.gate)
		g.gate = nil
	}
	g.mu.Unlock()
}

func (g *gatedStore) wait(ctx context.Context) error {
	g.mu.Lock()
	gate := g.gate
	g.mu.Unlock()
	if gate == nil {
		return nil
	}
	g.waiting.Add(1)
	defer g.waiting.Add(-1)
	select {
	case <-gate:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *gatedStore) Size(ctx context.Context, key string) (int64, error) {
	if err := g.wait(ctx); err != nil {
		return 0, err
	}
	return g.Store.Size(ctx, key)
}

func (g *gatedStore) ReadRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	if err := g.wait(ctx); err != nil {
		return nil, err
	}
	return g.Store.ReadRange(ctx, key, off, n)
}

// testCatalogLoadRace (docs/design.md §9-10): while one reader loads a shard's newer
// records of the former layout (its catalog objects slow to read), a second reader of the shard
// waits for that load instead of answering from the older table, which
// lacks the files whose warm rows are already deleted: it would return a
// short page as complete.
func testCatalogLoadRace(t *testing.T, s *services) {
	f := newFixture(t, s, "file")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	gated := &gatedStore{Store: f.store}
	cat := NewCatalog(s.cli, f.cluster, gated)
	if files, err := cat.Files(ctx, f.convs[0]); err != nil || len(files) != 0 {
		t.Fatalf("before archiving: %v %v", files, err)
	}
	a := f.archiver(func(c *Config) { c.DeleteAfter = time.Hour })
	f.run(a)
	f.advance(2 * time.Hour)
	f.run(a) // the warm rows are deleted: only the files hold them now
	f.makeLegacy()
	gated.close()
	if err := cat.Fresh(ctx, f.convs[0]); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		files []cold.FileRange
		err   error
	}
	first, second := make(chan answer, 1), make(chan answer, 1)
	go func() { files, err := cat.Files(ctx, f.convs[0]); first <- answer{files, err} }()
	waitFor(t, "the first reader's load to wait on the store", func() bool { return gated.waiting.Load() > 0 })
	go func() { files, err := cat.Files(ctx, f.convs[1]); second <- answer{files, err} }()
	select {
	case a := <-second:
		t.Fatalf("the second reader answered while the first one's load was under way: %d files, %v", len(a.files), a.err)
	case <-time.After(300 * time.Millisecond):
	}
	gated.open()
	for i, ch := range []chan answer{first, second} {
		a := <-ch
		if a.err != nil || len(a.files) == 0 {
			t.Fatalf("reader %d: %d files, %v; want the archived files", i+1, len(a.files), a.err)
		}
	}
}

// testStaleDeleter (docs/design.md §9-10): archiver A has compared a delete chunk
// and holds its rows' locks when its lease runs out (its etcd client
// gone: a partition, a long pause); its MySQL statements are not fenced
// by the election, so it still deletes the rows and commits. Archiver B,
// elected meanwhile, reaches the same chunk: it must not record A's
// deleted rows as deleted by users (skipped by every cold read, so hidden
// for good) but find the chunk committed and go on after it.
func testStaleDeleter(t *testing.T, s *services) {
	f := newFixture(t, s, "file")
	total := f.count("TRUE")
	cliA, err := clientv3.New(clientv3.Config{Endpoints: s.etcd.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cliA.Close()
	paused, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	a := f.archiver(func(c *Config) {
		c.Client, c.RunnerTTL = cliA, 2*time.Second
		c.Hook = func(at string, _ int) error {
			if at == HookChunkNoted {
				once.Do(func() { close(paused); <-release })
			}
			return nil
		}
	})
	a.cfg.DeleteAfter = 7 * 24 * time.Hour
	f.run(a) // archive only
	a.cfg.DeleteAfter = time.Hour
	f.advance(2 * time.Hour)
	aDone := make(chan error, 1)
	go func() { aDone <- a.RunShard(context.Background(), f.shard) }()
	<-paused
	cliA.Close() // A's lease is no longer renewed: it expires in 2 s

	b := f.archiver(func(c *Config) { c.ID = "test-2"; c.DeleteAfter = time.Hour })
	bDone := make(chan error, 1)
	go func() {
		for {
			err := b.RunShard(context.Background(), f.shard)
			if !errors.Is(err, ErrNotElected) {
				bDone <- err
				return
			}
		}
	}()
	// B is elected and waits for a lock A holds.
	waitFor(t, "the second archiver to wait for the first one's locks", func() bool {
		select {
		case err := <-bDone:
			t.Fatalf("the second archiver's run ended before the first one committed: %v", err)
		default:
		}
		// (A statement of B's blocked for a while: InnoDB's lock-wait
		// views do not show every wait, such as INSERT IGNORE's on a
		// duplicate key.)
		_, rows := f.query("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE command = 'Query' AND time_ms > 300 AND id <> CONNECTION_ID() " +
			"AND (info LIKE '%" + progressTable + "%' OR info LIKE '%FOR UPDATE%')")
		return string(rows[0][0]) != "0"
	})
	close(release) // A deletes its chunk's rows and commits, stale
	if err := <-aDone; err == nil {
		t.Error("the stale archiver's run ended without an error")
	}
	if err := <-bDone; err != nil && !errors.Is(err, errChunkMoved) {
		t.Fatalf("the second archiver: %v", err)
	}
	f.run(b) // resumes after the chunk A committed
	for _, r := range f.records() {
		if r.State != StateDeleted || r.Gone != 0 {
			t.Fatalf("%s: state %s, %d gone (rows the stale archiver deleted taken for users' deletes)", r.Key, r.State, r.Gone)
		}
	}
	if tomb := f.tombstones(); len(tomb) != 0 {
		t.Fatalf("rows the stale archiver deleted kept out of cold reads: %v", tomb)
	}
	if got, want := f.archivedKeys(), f.wantArchived(); !maps.Equal(got, want) {
		t.Fatalf("archived %d keys, want %d", len(got), len(want))
	}
	if n := f.count("TRUE"); n != total-len(f.wantArchived()) {
		t.Fatalf("warm rows left %d, want %d", n, total-len(f.wantArchived()))
	}
}

// testLocalStore (docs/design.md §9-10): with a store only this host sees, the
// archiver refuses to run while another Convoy process is registered (it
// could not read the files, and after the warm delete this host would
// hold the only copy), says why in the job's last error, and runs once it
// is the only one.
func testLocalStore(t *testing.T, s *services) {
	f := newFixture(t, s, "file")
	ctx := context.Background()
	var regs []*coord.Registration
	for _, id := range []string{"p1", "p2"} {
		r, err := coord.Register(ctx, s.cli, f.cluster, coord.ProxyInfo{ID: id, Listen: "127.0.0.1:1"})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		regs = append(regs, r)
	}
	a := f.archiver(func(c *Config) { c.LocalStore = true })
	if err := a.RunShard(ctx, f.shard); !errors.Is(err, ErrLocalStore) {
		t.Fatalf("a run with a local store and two processes registered: %v", err)
	}
	if recs := f.records(); len(recs) != 0 {
		t.Fatalf("the refused run catalogued %d files", len(recs))
	}
	if st := f.status(); !strings.Contains(st["last_error"], "cold.store_shared") {
		t.Fatalf("SHOW ARCHIVE's last error does not say what to do: %v", st)
	}
	regs[1].Close()
	f.run(a)
	if len(f.records()) == 0 {
		t.Fatal("the run with one process registered archived nothing")
	}
}

// testDeleteEtcdWrites (docs/design.md §9-10): the warm delete writes etcd twice per
// file (deleting, deleted), whatever its number of chunks: the chunks'
// read bounds and skipped rows go to MySQL in their own transactions, and
// each write is the job record's pointer to the store's next catalog
// manifest, never a key per file. Before, every chunk rewrote the file's
// record in etcd with its skip lists so far, the job record and the
// shard's marker.
func testDeleteEtcdWrites(t *testing.T, s *services) {
	f := newFixture(t, s, "file")
	a := f.archiver(func(c *Config) { c.DeleteAfter = time.Hour; c.ChunkRows = 2 })
	f.run(a)
	files := len(f.records())
	rev := func() int64 {
		resp, err := s.cli.Get(context.Background(), "revision")
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}
	before := rev()
	f.advance(2 * time.Hour)
	f.run(a)
	writes := rev() - before
	chunks := 0
	for _, r := range f.records() {
		if r.State != StateDeleted || r.Bounds != BoundsMySQL || r.Bound != nil || len(r.Skips) != 0 {
			t.Fatalf("%s: state %s, bounds %q, bound %v, skips %v", r.Key, r.State, r.Bounds, r.Bound, r.Skips)
		}
		chunks += r.Chunks
	}
	// (The run's own job saves: its start, steps and end, a handful.)
	if limit := int64(2*files + 10); writes > limit || chunks < 3*files {
		t.Fatalf("the delete of %d files in %d chunks wrote etcd %d times, want at most %d", files, chunks, writes, limit)
	}
	// The file records are in the store's manifest, the last two versions
	// of it kept; etcd holds none of them.
	resp, err := s.cli.Get(context.Background(), FilesPrefix(f.cluster), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Fatalf("%d file records in etcd (%v), want none", resp.Count, err)
	}
	var versions []string
	if err := f.store.List(context.Background(), fmt.Sprintf("hist/%04d/catalog/", f.shard), func(k string) error {
		versions = append(versions, k)
		return nil
	}); err != nil || len(versions) != 2 {
		t.Fatalf("manifest versions in the store: %v (%v), want the last two", versions, err)
	}
	pages := 0
	r := cold.NewReader(f.store, f.readCatalog(nil), cold.ReaderOptions{})
	for _, c := range f.convs {
		p, err := r.Before(context.Background(), c, archivedMax+1, int(archivedMax))
		if err != nil || len(p.Rows) != archivedMax {
			t.Fatalf("conversation %d: %d archived rows read back, %v; want %d", c, len(p.Rows), err, archivedMax)
		}
		pages++
	}
	t.Logf("%d files in %d chunks: %d etcd writes; %d conversations read back whole", files, chunks, writes, pages)
}

// testRebuildCatalog (docs/design.md §9-10): the catalog is lost (every manifest
// version deleted from the bucket and the job record from etcd) while a
// warm delete is half done; RebuildCatalog names the bucket's files again
// and the next runs finish the delete from the shard database's read
// bounds: every archived row readable from the files exactly once, none
// taken for deleted by a user, no day archived twice. A stray copy of a
// file (an orphan nothing lists) is refused until removed.
func testRebuildCatalog(t *testing.T, s *services) {
	f := newFixture(t, s, "file")
	ctx := context.Background()
	total := f.count("TRUE")
	pages := f.capture()
	seen := 0
	crashed := errors.New("crash")
	a := f.archiver(func(c *Config) {
		c.ChunkRows = 3
		c.Hook = func(at string, _ int) error {
			if at == HookDeleted {
				if seen++; seen == 42 { // (mid-file: part 0 of a day is chunks of 3, 3 and 1 rows, part 1 of 3 and 2)
					return crashed
				}
			}
			return nil
		}
	})
	a.cfg.DeleteAfter = 7 * 24 * time.Hour
	f.run(a) // archive only
	files := len(f.records())
	a.cfg.DeleteAfter = time.Hour
	f.advance(2 * time.Hour)
	if err := a.RunShard(ctx, f.shard); !errors.Is(err, crashed) {
		t.Fatalf("run with a crash: %v", err)
	}
	// The catalog is lost.
	var manifests []string
	if err := f.store.List(ctx, fmt.Sprintf("hist/%04d/catalog/", f.shard), func(k string) error {
		manifests = append(manifests, k)
		return nil
	}); err != nil || len(manifests) == 0 {
		t.Fatalf("manifests %v, %v", manifests, err)
	}
	for _, k := range manifests {
		if err := f.store.Delete(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	jobs := coord.NewArchiveJobStore(s.cli, f.cluster)
	job, err := jobs.Get(ctx, f.shard)
	if err != nil {
		t.Fatal(err)
	}
	if err := jobs.Delete(ctx, job); err != nil {
		t.Fatal(err)
	}
	if n := len(f.records()); n != 0 {
		t.Fatalf("%d records after the catalog was lost", n)
	}
	// A stray copy of a file under another part number: refused.
	var first string
	if err := f.store.List(ctx, fmt.Sprintf("hist/%04d/", f.shard), func(k string) error {
		if first == "" && strings.HasSuffix(k, ".parquet") {
			first = k
		}
		return nil
	}); err != nil || first == "" {
		t.Fatalf("no file in the bucket: %v", err)
	}
	stray := strings.Replace(first, "part-0000", "part-0099", 1)
	m, err := readMeta(ctx, f.store, metaKey(first))
	if err != nil {
		t.Fatal(err)
	}
	data, err := f.store.ReadRange(ctx, first, 0, m.Info.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	m.Info.Key = stray
	if err := errors.Join(f.store.PutIfAbsent(ctx, stray, data), f.store.PutIfAbsent(ctx, metaKey(stray), encodeMeta(m.Kind, m.Info))); err != nil {
		t.Fatal(err)
	}
	if _, err := a.RebuildCatalog(ctx, f.shard); !errors.Is(err, ErrCatalogOverlap) {
		t.Fatalf("rebuild with a stray copy of %s: %v, want ErrCatalogOverlap", first, err)
	}
	if err := errors.Join(f.store.Delete(ctx, stray), f.store.Delete(ctx, metaKey(stray))); err != nil {
		t.Fatal(err)
	}
	rep, err := a.RebuildCatalog(ctx, f.shard)
	if err != nil || len(rep.Added) != files || rep.Files != files || rep.Version == 0 {
		t.Fatalf("rebuild: %+v, %v; want %d files added", rep, err, files)
	}
	if again, err := a.RebuildCatalog(ctx, f.shard); err != nil || len(again.Added) != 0 || again.Version != 0 {
		t.Fatalf("a second rebuild: %+v, %v; want nothing to do", again, err)
	}
	// The deletes resume once due again, from the read bounds.
	a.cfg.Hook = func(string, int) error { return nil }
	f.run(a)
	f.advance(2 * time.Hour)
	f.run(a)
	if got, want := f.archivedKeys(), f.wantArchived(); !maps.Equal(got, want) {
		t.Fatalf("archived keys after the rebuild: %d distinct, want %d once each", len(got), len(want))
	}
	if n := f.count("TRUE"); n != total-len(f.wantArchived()) {
		t.Fatalf("warm rows left %d, want %d", n, total-len(f.wantArchived()))
	}
	if tomb := f.tombstones(); len(tomb) != 0 {
		t.Fatalf("rows taken for deleted by users after the rebuild: %v", tomb)
	}
	for _, r := range f.records() {
		if r.State != StateDeleted {
			t.Fatalf("%s: state %s", r.Key, r.State)
		}
	}
	f.checkPages(pages, cold.NewReader(f.store, f.readCatalog(nil), cold.ReaderOptions{}))
}

// testLateRows (docs/design.md §9-10): rows a day's archive kept among their
// conversation's newest are archived once the conversation has outgrown
// them, although the checkpoint has passed their day; a row a file not
// yet deleted holds is not archived again, nor is the warm row of a
// file's stale copy (edited before its delete), whose tombstone would
// hide a second copy.
func testLateRows(t *testing.T, s *services) {
	f := newFixture(t, s, "file")
	ctx := context.Background()
	a := f.archiver(func(c *Config) { c.KeepNewest = 100; c.DeleteAfter = 7 * 24 * time.Hour })
	f.run(a) // seqs 1..50 catalogued; 51..93 are old but among the newest 100
	c0 := f.convs[0]
	// An edit of an archived row before its delete: kept warm, tombstoned.
	f.svc.db.Exec(t, fmt.Sprintf("UPDATE %s.conv_msg_0000 SET msg_type = 9 WHERE conv_id = %d AND seq = 10", f.dbName, c0))
	// 40 new messages a conversation: the newest 100 are now 91..190.
	var sb strings.Builder
	for _, c := range f.convs {
		for seq := uint64(perConv + 1); seq <= perConv+40; seq++ {
			fmt.Fprintf(&sb, "INSERT INTO %s.conv_msg_0000 VALUES (%d,%d,%d,7001,1,'%s');\n", f.dbName, c, seq, c*1000+seq, clock0.Format("2006-01-02 15:04:05.000"))
		}
	}
	f.svc.db.Exec(t, sb.String())
	// A day later (one more day to archive, so the table is scanned): the
	// files of the first run are not deleted yet, their rows still warm.
	f.advance(24 * time.Hour)
	f.run(a)
	want := map[key]int{}
	for _, c := range f.convs {
		for seq := uint64(1); seq <= 90; seq++ {
			want[key{Conv: c, Seq: seq}] = 1
		}
	}
	if got := f.archivedKeys(); !maps.Equal(got, want) {
		extra, twice := 0, 0
		for k, n := range got {
			if want[k] == 0 {
				extra++
			}
			if n > 1 {
				twice++
			}
		}
		t.Fatalf("archived %d keys (%d unexpected, %d in two files), want seqs 1..90 of each conversation once", len(got), extra, twice)
	}
	// The delete: seq 10 of c0 is kept (edited, tombstoned), and a later
	// run must not archive it again.
	a.cfg.DeleteAfter = time.Hour
	f.advance(2 * time.Hour)
	f.run(a)
	f.advance(24 * time.Hour)
	f.run(a)
	f.advance(2 * time.Hour)
	f.run(a)
	if tomb := f.tombstones(); !slices.Equal(tomb, []string{fmt.Sprintf("conv_msg/%d/10", c0), fmt.Sprintf("msg_content/%d/10", c0)}) {
		t.Fatalf("tombstones %v, want the edited row's", tomb)
	}
	got := f.archivedKeys()
	for k, n := range got {
		if n > 1 {
			t.Fatalf("%v archived %d times", k, n)
		}
	}
	if !maps.Equal(got, want) {
		t.Fatalf("after the deletes: %d keys archived, want %d", len(got), len(want))
	}
	for _, c := range f.convs {
		n := f.count(fmt.Sprintf("conv_id = %d", c))
		if want := 100 + map[bool]int{true: 1}[c == c0]; n != want {
			t.Fatalf("conversation %d: %d warm rows, want %d (its newest 100, and the edited row)", c, n, want)
		}
	}
	// Every archived row reads back from the files under their bounds.
	r := cold.NewReader(f.store, f.readCatalog(nil), cold.ReaderOptions{})
	for _, c := range f.convs {
		p, err := r.After(ctx, c, 0, 200)
		if err != nil {
			t.Fatal(err)
		}
		seqs := map[uint64]bool{}
		for _, row := range p.Rows {
			seqs[row.Seq] = true
		}
		for seq := uint64(1); seq <= 90; seq++ {
			if !seqs[seq] && !(c == c0 && seq == 10) {
				t.Fatalf("conversation %d: archived seq %d does not read back", c, seq)
			}
		}
	}
}

// testLegacyResume (docs/design.md §9-10, a rolling upgrade): an archiver of the
// former layout (read bounds in etcd) deleted some files and part of
// another; the new one finishes that file with bounds in MySQL. Every
// archived row reads back exactly once through the two merged (the
// file's etcd bound up to where the former stopped, MySQL's after).
func testLegacyResume(t *testing.T, s *services) {
	f := newFixture(t, s, "file")
	ctx := context.Background()
	pages := f.capture()
	seen := 0
	crashed := errors.New("crash")
	a := f.archiver(func(c *Config) {
		c.ChunkRows = 2
		c.Hook = func(at string, _ int) error {
			if at == HookDeleted {
				if seen++; seen == 6 { // the first day: part 0 (4 chunks), part 1 (2 of its 3)
					return crashed
				}
			}
			return nil
		}
	})
	a.cfg.DeleteAfter = 7 * 24 * time.Hour
	f.run(a)
	a.cfg.DeleteAfter = time.Hour
	f.advance(2 * time.Hour)
	if err := a.RunShard(ctx, f.shard); !errors.Is(err, crashed) {
		t.Fatalf("run with a crash: %v", err)
	}
	// What the former layout would have left: the deleted file's and the
	// half-deleted file's bounds in their etcd records, none in MySQL.
	f.makeLegacy()
	var half Record
	for _, r := range f.records() {
		if r.State == StateDeleting {
			half = r
		}
	}
	if half.Key == "" {
		t.Fatal("no file half deleted")
	}
	var rows []cold.Row
	if err := cold.ScanFile(ctx, f.store, cold.FileInfo{Key: half.Key, SHA256: half.SHA256}, func(_ cold.Tables, r cold.Row) error {
		rows = append(rows, r)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	bound := keyOf(rows[3]) // two chunks of two rows deleted
	half.Bounds, half.Bound, half.Done = "", &bound, 2
	f.query(fmt.Sprintf("DELETE FROM %s WHERE file = %s", FilesTable, rewrite.QuoteString(half.Key)))
	if _, err := s.cli.Put(ctx, recordKey(f.cluster, half.Kind, half.Shard, half.Day, half.Part), string(mustJSON(t, half))); err != nil {
		t.Fatal(err)
	}
	a.cfg.Hook = func(string, int) error { return nil }
	f.run(a)
	if got, want := f.archivedKeys(), f.wantArchived(); !maps.Equal(got, want) {
		t.Fatalf("archived %d keys, want %d once each", len(got), len(want))
	}
	if tomb := f.tombstones(); len(tomb) != 0 {
		t.Fatalf("rows taken for deleted by users: %v", tomb)
	}
	legacy := NewCatalog(s.cli, f.cluster, f.store)
	f.checkPages(pages, cold.NewReader(f.store, f.readCatalog(legacy), cold.ReaderOptions{}))
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// testSweep (docs/design.md §9-10): the daily sweep deletes a crashed attempt's part
// (its rows changed before it was catalogued: an orphan the job record
// lists) and manifest versions older than the one before the current,
// keeps every file the catalog names, and keeps (and counts in SHOW
// ARCHIVE) a file with a catalog object the catalog does not name.
func testSweep(t *testing.T, s *services) {
	f := newFixture(t, s, "file")
	ctx := context.Background()
	crashed := errors.New("crash")
	var orphanKey string
	a := f.archiver(func(c *Config) {
		c.DeleteAfter = 30 * 24 * time.Hour
		c.Hook = func(at string, _ int) error {
			if at == HookWritten && orphanKey == "" {
				orphanKey = "x"
				return crashed
			}
			return nil
		}
	})
	if err := a.RunShard(ctx, f.shard); !errors.Is(err, crashed) {
		t.Fatalf("run with a crash after the first part's write: %v", err)
	}
	// The part's rows change before the rerun: its object cannot be reused.
	c0 := f.convs[0]
	f.svc.db.Exec(t, fmt.Sprintf("UPDATE %s.conv_msg_0000 SET msg_type = 9 WHERE conv_id = %d AND seq = 1", f.dbName, c0))
	objects := func(sub string) map[string]bool {
		t.Helper()
		out := map[string]bool{}
		if err := f.store.List(ctx, fmt.Sprintf("hist/%04d/%s", f.shard, sub), func(k string) error {
			out[k] = true
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	before := objects("")
	f.run(a) // catalogues the next part number, sweeps the orphan
	st := f.status()
	var orphans []string
	for k := range before {
		if !strings.Contains(k, "/catalog/") && !objects("")[k] {
			orphans = append(orphans, k)
		}
	}
	if len(orphans) != 1 || !strings.HasSuffix(orphans[0], ".parquet") || st["unnamed_files"] != "0" {
		t.Fatalf("swept %v (want the orphan part: it crashed before its catalog object), unnamed %q", orphans, st["unnamed_files"])
	}
	if got, want := f.archivedKeys(), f.wantArchived(); !maps.Equal(got, want) {
		t.Fatalf("archived %d keys after the sweep, want %d once each", len(got), len(want))
	}
	// A stray copy of a file nobody names, and an old manifest version.
	recs := f.records()
	m, err := readMeta(ctx, f.store, recs[0].Meta)
	if err != nil {
		t.Fatal(err)
	}
	data, err := f.store.ReadRange(ctx, recs[0].Key, 0, m.Info.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	stray := strings.Replace(recs[0].Key, ".parquet", "-copy.parquet", 1)
	m.Info.Key = stray
	old := fmt.Sprintf("hist/%04d/catalog/%08d.json", f.shard, 1)
	if err := errors.Join(f.store.PutIfAbsent(ctx, stray, data), f.store.PutIfAbsent(ctx, metaKey(stray), encodeMeta(m.Kind, m.Info)),
		f.store.PutIfAbsent(ctx, old, []byte(`{"shard":0,"version":1,"files":[]}`))); err != nil {
		t.Fatal(err)
	}
	f.advance(25 * time.Hour)
	f.run(a)
	left := objects("")
	switch {
	case left[old]:
		t.Fatal("an old manifest version was not swept")
	case !left[stray] || f.status()["unnamed_files"] != "1":
		t.Fatalf("the unnamed file: kept %v, counted %q; want kept and 1", left[stray], f.status()["unnamed_files"])
	}
	for _, r := range f.records() {
		if !left[r.Key] || !left[r.Meta] {
			t.Fatalf("a catalogued file's objects were swept: %s", r.Key)
		}
	}
	if n := len(objects("catalog/")); n != 2 {
		t.Fatalf("%d manifest versions kept, want the current and the one before", n)
	}
	// Three days on, the unnamed file goes with its catalog object; one
	// the read bounds name (a lost catalog's deleted file) stays.
	inBounds := strings.Replace(recs[0].Key, ".parquet", "-bounds.parquet", 1)
	if err := f.store.PutIfAbsent(ctx, inBounds, data); err != nil {
		t.Fatal(err)
	}
	f.svc.db.Exec(t, fmt.Sprintf("INSERT INTO %s.%s VALUES (%d, '%s', 1, 1, 1, 1, 1, NOW(3))", f.dbName, FilesTable, f.convs[0], inBounds))
	f.advance(25 * time.Hour)
	f.run(a)
	if left := objects(""); !left[stray] || !left[inBounds] {
		t.Fatal("an unnamed file was deleted before orphanAfter")
	}
	f.advance(3 * 25 * time.Hour)
	f.run(a)
	left = objects("")
	if left[stray] || left[metaKey(stray)] || !left[inBounds] || f.status()["unnamed_files"] != "1" {
		t.Fatalf("after orphanAfter: stray kept %v (its catalog object %v), the file the read bounds name kept %v, unnamed %q; want false, false, true, 1",
			left[stray], left[metaKey(stray)], left[inBounds], f.status()["unnamed_files"])
	}
}

// testErase: archived rows deleted through Convoy (tombstones, erased
// ranges) leave their files once the deletes are EraseAfter old: the
// files are rewritten without them and everything else byte for byte,
// reads answer the same before and after, the superseded files go from
// the store supersededGrace later, deletes not yet due and other shards'
// stay, and a crash between the rewrite's record and its read-bound swap
// is undone by the next run.
func testErase(t *testing.T, s *services) {
	f := newFixture(t, s, "file")
	ctx := context.Background()
	crashed := errors.New("crash")
	crash := false
	a := f.archiver(func(c *Config) {
		c.DeleteAfter, c.EraseAfter = time.Hour, time.Hour
		c.Hook = func(at string, _ int) error {
			if at == HookRewritten && crash {
				crash = false
				return crashed
			}
			return nil
		}
	})
	f.run(a)
	f.advance(2 * time.Hour)
	f.run(a) // the warm rows are deleted
	scan := f.currentRows
	before := scan()
	c0, c1, c2 := f.convs[0], f.convs[1], f.convs[2]
	tomb := func(conv, seq uint64, tbl string, age string) {
		f.svc.db.Exec(t, fmt.Sprintf("INSERT INTO %s.%s (conv_id, tbl, seq, msg_id, deleted_at) VALUES (%d, '%s', %d, %d, UTC_TIMESTAMP(3) - INTERVAL %s)",
			f.dbName, TombstoneTable, conv, tbl, seq, conv*1000+seq, age))
	}
	erase := func(conv, lo, hi uint64, tbl string, age string) {
		f.svc.db.Exec(t, fmt.Sprintf("INSERT INTO %s.%s (conv_id, tbl, min_seq, max_seq, requested_at) VALUES (%d, '%s', %d, %d, UTC_TIMESTAMP(3) - INTERVAL %s)",
			f.dbName, ErasureTable, conv, tbl, lo, hi, age))
	}
	// Due (two hours old): a whole message; a body alone (seq 5 has one);
	// a conv_msg row whose body stays (kept whole); a range of both tables.
	tomb(c0, 3, "conv_msg", "2 HOUR")
	tomb(c0, 3, "msg_content", "2 HOUR")
	tomb(c0, 5, "msg_content", "2 HOUR")
	tomb(c0, 6, "conv_msg", "2 HOUR")
	erase(c1, 10, 30, "conv_msg", "2 HOUR")
	erase(c1, 10, 30, "msg_content", "2 HOUR")
	// Not due (just now), and another shard's conversation in the same
	// table: left alone.
	tomb(c2, 7, "conv_msg", "0 SECOND")
	tomb(c2, 7, "msg_content", "0 SECOND")
	erase(f.others[0], 1, 40, "conv_msg", "2 HOUR")
	erase(f.others[0], 1, 40, "msg_content", "2 HOUR")
	cat := f.readCatalog(nil)
	pages := f.readPages(cat)

	// want is before without the rows the due deletes erase.
	want := map[key]cold.Row{}
	for k, r := range before {
		switch {
		case k.Conv == c0 && k.Seq == 3, k.Conv == c1 && k.Seq >= 10 && k.Seq <= 30 && k.Seq <= archivedMax:
			continue
		case k.Conv == c0 && k.Seq == 5:
			r.Content = nil
		}
		want[k] = r
	}
	if len(want) >= len(before) {
		t.Fatal("the fixture erases nothing")
	}
	check := func(when string) {
		t.Helper()
		got := scan()
		if len(got) != len(want) {
			t.Fatalf("%s: %d rows in the files, want %d", when, len(got), len(want))
		}
		for k, w := range want {
			g, ok := got[k]
			if !ok || !sameValues(g.Msg, w.Msg) || (g.Content == nil) != (w.Content == nil) || !sameValues(g.Content, w.Content) {
				t.Fatalf("%s: row %v in the files differs: %q / %q, want %q / %q", when, k, g.Msg, g.Content, w.Msg, w.Content)
			}
		}
		if again := f.readPages(cat); !slices.Equal(again, pages) {
			t.Fatalf("%s: reads through the read bounds changed", when)
		}
	}
	// A crash once the rewrite is recorded, before its read bounds move:
	// nothing changed for readers; the next run undoes and redoes it.
	crash = true
	f.advance(time.Hour)
	if err := a.RunShard(ctx, f.shard); !errors.Is(err, crashed) {
		t.Fatalf("run with a crash after a rewrite: %v", err)
	}
	if again := f.readPages(cat); !slices.Equal(again, pages) {
		t.Fatal("a crashed rewrite changed what readers read")
	}
	f.advance(time.Hour)
	f.run(a)
	check("after the rewrite")
	var superseded []Record
	for _, r := range f.records() {
		if r.State == StateSuperseded {
			superseded = append(superseded, r)
		}
	}
	if len(superseded) == 0 {
		t.Fatal("no file was superseded")
	}
	_, pending := f.query(fmt.Sprintf("SELECT conv_id, seq FROM %s WHERE erased_at IS NULL UNION ALL SELECT conv_id, min_seq FROM %s WHERE erased_at IS NULL ORDER BY 1, 2", TombstoneTable, ErasureTable))
	if len(pending) != 4 {
		t.Fatalf("pending after the rewrite: %q, want the two deletes not yet due and the other shard's two", pending)
	}
	st := f.status()
	if st["pending_erasures"] != "2" || st["oldest_pending_erasure"] == "" || st["rows_erased"] == "0" {
		t.Fatalf("SHOW ARCHIVE: pending %s, oldest %q, erased %s", st["pending_erasures"], st["oldest_pending_erasure"], st["rows_erased"])
	}
	// The superseded files stay for readers that took the old bounds,
	// then go with their records.
	for _, r := range superseded {
		if _, err := f.store.Size(ctx, r.Key); err != nil {
			t.Fatalf("superseded %s deleted at once: %v", r.Key, err)
		}
	}
	f.advance(supersededGrace + time.Minute)
	f.run(a)
	for _, r := range superseded {
		if _, err := f.store.Size(ctx, r.Key); !errors.Is(err, cold.ErrNotFound) {
			t.Fatalf("superseded %s still in the store: %v", r.Key, err)
		}
		if slices.ContainsFunc(f.records(), func(x Record) bool { return x.Key == r.Key }) {
			t.Fatalf("superseded %s still recorded", r.Key)
		}
	}
	check("after the superseded files went")
	// A second run with nothing due rewrites nothing.
	n := len(f.records())
	f.advance(time.Hour)
	f.run(a)
	if len(f.records()) != n {
		t.Fatal("a run with nothing due rewrote files")
	}
}

// readPages reads a few pages of every conversation of the shard through
// cat (the read bounds) and returns their conv_msg rows as text (bodies
// deleted alone are the body fetches' tombstones to hide).
func (f *fixture) readPages(cat cold.Catalog) []string {
	f.t.Helper()
	r := cold.NewReader(f.store, cat, cold.ReaderOptions{})
	msgs := func(rows []cold.Row) string {
		var b strings.Builder
		for _, row := range rows {
			fmt.Fprintf(&b, "%d %q;", row.Seq, row.Msg)
		}
		return b.String()
	}
	var out []string
	for _, c := range f.convs {
		for _, cur := range []uint64{2, 8, 12, 35, 94} {
			p, err := r.Before(context.Background(), c, cur, 20)
			if err != nil {
				f.t.Fatal(err)
			}
			out = append(out, fmt.Sprintf("%d<%d %s", c, cur, msgs(p.Rows)))
			p, err = r.After(context.Background(), c, cur, 20)
			if err != nil {
				f.t.Fatal(err)
			}
			out = append(out, fmt.Sprintf("%d>%d %s", c, cur, msgs(p.Rows)))
		}
	}
	return out
}

// testRetention: files of days older than Retention are deleted with
// their rows once their warm rows are gone: reads and lookups no longer
// find those rows (an erased range per conversation, or tombstones where
// another file reaches into the file's seqs), later days are untouched,
// and the objects leave the store with the superseded ones.
func testRetention(t *testing.T, s *services) {
	f := newFixture(t, s, "file")
	ctx := context.Background()
	if _, err := New(Config{Client: f.svc.cli, Store: f.store, Connect: f.archiver().cfg.Connect, ID: "x", Retention: 100 * 24 * time.Hour}); err == nil {
		t.Fatal("a retention shorter than cold.after was accepted")
	}
	a := f.archiver(func(c *Config) { c.DeleteAfter, c.Retention = time.Hour, 190*24*time.Hour })
	// One conversation has another file's bounds reaching into the first
	// day's seqs (as a late part of the day would): tombstones for it.
	c0 := f.convs[0]
	f.run(a)
	f.svc.db.Exec(t, fmt.Sprintf("INSERT INTO %s.%s VALUES (%d, 'hist/elsewhere.parquet', 2, 2, %d, %d, 1, NOW(3))", f.dbName, FilesTable, c0, c0*1000+2, c0*1000+2))
	f.advance(2 * time.Hour)
	f.run(a) // the warm delete, then the retention
	f.svc.db.Exec(t, fmt.Sprintf("DELETE FROM %s.%s WHERE file = 'hist/elsewhere.parquet'", f.dbName, FilesTable))
	const expiredMax = 63 // the days before 2025-12-22: 21 days of three messages
	r := cold.NewReader(f.store, f.readCatalog(nil), cold.ReaderOptions{})
	for _, c := range f.convs {
		p, err := r.After(ctx, c, 0, 200)
		if err != nil {
			t.Fatal(err)
		}
		var got []uint64
		for _, row := range p.Rows {
			got = append(got, row.Seq)
		}
		var want []uint64
		for seq := uint64(expiredMax + 1); seq <= archivedMax; seq++ {
			want = append(want, seq)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("conversation %d after the retention: seqs %v, want %v", c, got, want)
		}
		if p, err := r.ByKeys(ctx, c, []uint64{1, expiredMax}, []uint64{c*1000 + 5}); err != nil || len(p.Rows) != 0 {
			t.Fatalf("conversation %d: expired rows found by key: %d (%v)", c, len(p.Rows), err)
		}
	}
	_, tombs := f.query(fmt.Sprintf("SELECT COUNT(*) FROM %s WHERE conv_id = %d AND seq <= %d AND erased_at IS NOT NULL", TombstoneTable, c0, expiredMax))
	_, ranges := f.query(fmt.Sprintf("SELECT COUNT(*) FROM %s WHERE erased_at IS NOT NULL", ErasureTable))
	if string(tombs[0][0]) == "0" || string(ranges[0][0]) == "0" {
		t.Fatalf("tombstones of the conversation another file reaches into: %s; erased ranges: %s", tombs[0][0], ranges[0][0])
	}
	var expired []Record
	for _, rec := range f.records() {
		if rec.Day < "20251222" {
			if rec.State != StateSuperseded {
				t.Fatalf("%s of day %s past its retention is %s", rec.Key, rec.Day, rec.State)
			}
			expired = append(expired, rec)
		} else if rec.State != StateDeleted {
			t.Fatalf("%s of day %s is %s", rec.Key, rec.Day, rec.State)
		}
	}
	if st := f.status(); st["rows_expired"] == "0" || st["pending_erasures"] != "0" {
		t.Fatalf("SHOW ARCHIVE: rows_expired %s, pending_erasures %s", st["rows_expired"], st["pending_erasures"])
	}
	f.advance(supersededGrace + time.Minute)
	f.run(a)
	for _, rec := range expired {
		if _, err := f.store.Size(ctx, rec.Key); !errors.Is(err, cold.ErrNotFound) {
			t.Fatalf("expired %s still in the store: %v", rec.Key, err)
		}
	}
}

// currentRows reads every history file the catalog names and does not
// supersede, each key at most once.
func (f *fixture) currentRows() map[key]cold.Row {
	f.t.Helper()
	out := map[key]cold.Row{}
	for _, r := range f.records() {
		if r.Kind != kindHistory || r.State == StateSuperseded {
			continue
		}
		if err := cold.ScanFile(context.Background(), f.store, cold.FileInfo{Key: r.Key, SHA256: r.SHA256}, func(_ cold.Tables, row cold.Row) error {
			if _, dup := out[keyOf(row)]; dup {
				f.t.Fatalf("%v is in two files", keyOf(row))
			}
			out[keyOf(row)] = row
			return nil
		}); err != nil {
			f.t.Fatal(err)
		}
	}
	return out
}

// testCompact: a shard's small daily files are merged into files of up to
// PartRows rows spanning at most compactSpan, every row kept once and
// byte for byte, reads unchanged, the old files superseded (then gone);
// a second run merges nothing more.
func testCompact(t *testing.T, s *services) {
	f := newFixture(t, s, "file")
	a := f.archiver(func(c *Config) { c.DeleteAfter, c.CompactBelow = time.Hour, -1 })
	f.run(a)
	f.advance(2 * time.Hour)
	f.run(a)
	before := f.currentRows()
	cat := f.readCatalog(nil)
	pages := f.readPages(cat)
	live := func() []Record {
		return slices.DeleteFunc(f.records(), func(r Record) bool { return r.Kind != kindHistory || r.State == StateSuperseded })
	}
	files := len(live())
	c := f.archiver(func(c *Config) { c.DeleteAfter, c.PartRows, c.CompactBelow = time.Hour, 100, 50 })
	f.advance(time.Hour)
	f.run(c)
	after := f.currentRows()
	if len(after) != len(before) {
		t.Fatalf("%d rows after compaction, %d before", len(after), len(before))
	}
	for k, w := range before {
		g := after[k]
		if !sameValues(g.Msg, w.Msg) || (g.Content == nil) != (w.Content == nil) || !sameValues(g.Content, w.Content) {
			t.Fatalf("row %v changed in compaction", k)
		}
	}
	if again := f.readPages(cat); !slices.Equal(again, pages) {
		t.Fatal("reads changed with compaction")
	}
	now := live()
	if len(now)*4 > files {
		t.Fatalf("%d files after compaction, %d before: want a quarter or fewer", len(now), files)
	}
	for _, r := range now {
		first, _ := time.Parse(dayLayout, cmp.Or(r.FirstDay, r.Day))
		last, _ := time.Parse(dayLayout, r.Day)
		if r.Rows > 100 || last.Sub(first) > compactSpan {
			t.Fatalf("%s: %d rows, days %s..%s", r.Key, r.Rows, r.FirstDay, r.Day)
		}
	}
	if st := f.status(); st["files_compacted"] == "0" {
		t.Fatalf("SHOW ARCHIVE files_compacted %s", st["files_compacted"])
	}
	f.advance(time.Hour)
	f.run(c)
	if again := live(); !slices.EqualFunc(again, now, func(a, b Record) bool { return a.Key == b.Key }) {
		for _, r := range now {
			t.Logf("%s %s..%s %d rows", r.Key, r.FirstDay, r.Day, r.Rows)
		}
		t.Fatal("a second run compacted again")
	}
}

// testEraseLegacy: a file of the former catalog layout (read bounds in
// etcd) is not rewritten, and only the deletes of rows it holds stay
// pending: the shard's other files are still rewritten.
func testEraseLegacy(t *testing.T, s *services) {
	f := newFixture(t, s, "file")
	a := f.archiver(func(c *Config) { c.DeleteAfter, c.EraseAfter, c.CompactBelow = time.Hour, time.Hour, -1 })
	f.run(a)
	f.advance(2 * time.Hour)
	f.run(a)
	f.makeLegacy() // every file so far: days up to 2025-12-31
	f.advance(10 * 24 * time.Hour)
	f.run(a) // ten more days, in the current layout
	f.advance(2 * time.Hour)
	f.run(a)
	c0, c1 := f.convs[0], f.convs[1]
	for _, k := range []key{{Conv: c0, Seq: 3}, {Conv: c1, Seq: 100}} {
		if _, ok := f.currentRows()[k]; !ok {
			t.Fatalf("%v is not archived to begin with", k)
		}
		for _, tbl := range []string{"conv_msg", "msg_content"} {
			f.svc.db.Exec(t, fmt.Sprintf("INSERT INTO %s.%s (conv_id, tbl, seq, msg_id, deleted_at) VALUES (%d, '%s', %d, %d, UTC_TIMESTAMP(3) - INTERVAL 2 HOUR)",
				f.dbName, TombstoneTable, k.Conv, tbl, k.Seq, k.Conv*1000+k.Seq))
		}
	}
	f.advance(time.Hour)
	f.run(a)
	rows := f.currentRows()
	if _, ok := rows[key{Conv: c1, Seq: 100}]; ok {
		t.Fatal("the current layout's file was not rewritten without the deleted row")
	}
	if _, ok := rows[key{Conv: c0, Seq: 3}]; !ok {
		t.Fatal("a file of the former layout was rewritten")
	}
	_, pending := f.query(fmt.Sprintf("SELECT conv_id, seq FROM %s WHERE erased_at IS NULL ORDER BY conv_id, seq", TombstoneTable))
	if len(pending) != 2 || string(pending[0][0]) != fmt.Sprint(c0) {
		t.Fatalf("pending after the run: %q, want the former layout's row in both tables", pending)
	}
}
