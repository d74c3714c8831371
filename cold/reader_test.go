package cold_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/convoy-im/convoy/cold"
	"github.com/convoy-im/convoy/internal/testsvc"
)

// openStores returns a file:// store and an s3:// store on a separate
// S3-compatible server process.
func openStores(t *testing.T) map[string]cold.Store {
	t.Helper()
	ctx := context.Background()
	s3 := testsvc.StartS3(t)
	out := map[string]cold.Store{}
	for name, url := range map[string]string{"file": "file://" + t.TempDir() + "/cold", "s3": s3.URL("convoy-cold")} {
		s, err := cold.OpenStore(ctx, url)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		t.Cleanup(func() { s.Close() })
		out[name] = s
	}
	return out
}

// TestPagesMatchMariaDB archives real MariaDB rows and checks every read
// shape against the same query on MariaDB: same column definitions, same
// text-protocol bytes for conv_msg, same msg_content row for each message.
// Two layouts: small row groups put conversation A across row groups and
// two files; one row group per file with tiny pages makes the reader prune
// by the seq page index inside a conversation.
func TestPagesMatchMariaDB(t *testing.T) {
	f := startFixture(t)
	stores := openStores(t)
	for _, layout := range []cold.WriterOptions{{RowsPerGroup: 64, PageBytes: 1024}, {RowsPerGroup: 4096, PageBytes: 256}} {
		for name, store := range stores {
			t.Run(fmt.Sprintf("%s/%d-%d", name, layout.RowsPerGroup, layout.PageBytes), func(t *testing.T) {
				ctx := context.Background()
				prefix := fmt.Sprintf("%d-%d", layout.RowsPerGroup, layout.PageBytes)
				cat, _ := f.archive(t, ctx, &prefixStore{Store: store, prefix: prefix}, layout)
				store := &prefixStore{Store: store, prefix: prefix}
				r := cold.NewReader(store, cat, cold.ReaderOptions{})
				type q struct {
					conv, cursor uint64
					limit        int
				}
				var befores, afters []q
				for _, conv := range []uint64{convA, convB, convC, convMax, 424242} {
					for _, cur := range []uint64{0, 1, 2, 3, 63, 64, 65, 128, 149, 150, 151, 152, 200, 299, 300, 301, 1 << 62} {
						for _, limit := range []int{1, 20, 50, 400} {
							befores = append(befores, q{conv, cur, limit})
							afters = append(afters, q{conv, cur, limit})
						}
					}
				}
				for _, c := range befores {
					sql := fmt.Sprintf("SELECT * FROM conv_msg WHERE conv_id=%d AND seq < %d ORDER BY seq DESC LIMIT %d", c.conv, c.cursor, c.limit)
					p, err := r.Before(ctx, c.conv, c.cursor, c.limit)
					f.check(t, sql, p, err)
				}
				for _, c := range afters {
					sql := fmt.Sprintf("SELECT * FROM conv_msg WHERE conv_id=%d AND seq > %d ORDER BY seq ASC LIMIT %d", c.conv, c.cursor, c.limit)
					p, err := r.After(ctx, c.conv, c.cursor, c.limit)
					f.check(t, sql, p, err)
				}
				all := textQuery(t, f.conn, "SELECT conv_id, msg_id FROM conv_msg")
				for _, row := range all.rows {
					var conv, msgID uint64
					fmt.Sscan(string(row[0]), &conv)
					fmt.Sscan(string(row[1]), &msgID)
					for _, m := range []uint64{msgID, msgID + 1_000_000} { // present, absent
						sql := fmt.Sprintf("SELECT * FROM conv_msg WHERE conv_id=%d AND msg_id=%d", conv, m)
						p, err := r.ByMsgID(ctx, conv, m)
						f.check(t, sql, p, err)
					}
				}
				// Batches by msg_id (bodies) and by seq (writes checking what
				// is archived), present and absent keys mixed, across files.
				for _, keys := range [][]uint64{{1, 2, 3}, {150, 151}, {1, 77, 149, 150, 151, 299, 300, 301, 5000}, {300}} {
					var ids, seqs []string
					var idKeys []uint64
					for _, k := range keys {
						seqs = append(seqs, fmt.Sprint(k))
						ids = append(ids, fmt.Sprint(5_000_000+k))
						idKeys = append(idKeys, 5_000_000+k)
					}
					p, err := r.ByKeys(ctx, convA, nil, idKeys)
					f.check(t, fmt.Sprintf("SELECT * FROM conv_msg WHERE conv_id=%d AND msg_id IN (%s) ORDER BY seq", convA, strings.Join(ids, ",")), p, err)
					p, err = r.ByKeys(ctx, convA, keys, nil)
					f.check(t, fmt.Sprintf("SELECT * FROM conv_msg WHERE conv_id=%d AND seq IN (%s) ORDER BY seq", convA, strings.Join(seqs, ",")), p, err)
					p, err = r.ByKeys(ctx, convA, keys[:1], idKeys[1:])
					f.check(t, fmt.Sprintf("SELECT * FROM conv_msg WHERE conv_id=%d AND (seq = %d OR msg_id IN (%s)) ORDER BY seq", convA, keys[0], strings.Join(append([]string{"0"}, ids[1:]...), ",")), p, err)
				}
			})
		}
	}
}

// prefixStore puts keys under a prefix, so several layouts of the same
// rows can share a store.
type prefixStore struct {
	cold.Store
	prefix string
}

func (s *prefixStore) PutIfAbsent(ctx context.Context, key string, data []byte) error {
	return s.Store.PutIfAbsent(ctx, s.prefix+"/"+key, data)
}

func (s *prefixStore) ReadRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	return s.Store.ReadRange(ctx, s.prefix+"/"+key, off, n)
}

func (s *prefixStore) Size(ctx context.Context, key string) (int64, error) {
	return s.Store.Size(ctx, s.prefix+"/"+key)
}

// check compares a cold page with MariaDB's answer to sql.
func (f *fixture) check(t *testing.T, sql string, p cold.Page, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: cold: %v", sql, err)
	}
	want := textQuery(t, f.conn, sql)
	if p.More {
		t.Fatalf("%s: More set without a deadline", sql)
	}
	if len(p.Rows) != len(want.rows) {
		t.Fatalf("%s: cold returned %d rows, MariaDB %d", sql, len(p.Rows), len(want.rows))
	}
	if len(want.rows) == 0 {
		return
	}
	if fmt.Sprint(p.Tables.Msg) != fmt.Sprint(want.cols) {
		t.Fatalf("%s: column definitions differ:\ncold    %v\nmariadb %v", sql, p.Tables.Msg, want.cols)
	}
	for i, w := range want.rows {
		got := p.Rows[i]
		if !equalValues(got.Msg, w) {
			t.Fatalf("%s: row %d:\ncold    %q\nmariadb %q", sql, i, got.Msg, w)
		}
		body := textQuery(t, f.conn, "SELECT * FROM msg_content WHERE msg_id="+string(w[2]))
		var wantBody [][]byte
		if len(body.rows) == 1 {
			wantBody = body.rows[0]
			if fmt.Sprint(p.Tables.Content) != fmt.Sprint(body.cols) {
				t.Fatalf("msg_content column definitions differ:\ncold    %v\nmariadb %v", p.Tables.Content, body.cols)
			}
		}
		if (got.Content == nil) != (wantBody == nil) || !equalValues(got.Content, wantBody) {
			t.Fatalf("%s: row %d body:\ncold    %q\nmariadb %q", sql, i, got.Content, wantBody)
		}
	}
}

// equalValues compares byte for byte, NULL (nil) differing from ”.
func equalValues(a, b [][]byte) bool {
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

// TestPutIfAbsent: rewriting a part with the same rows is a no-op (the
// writer is deterministic), with other bytes it is refused and the object
// is left alone; on both stores.
func TestPutIfAbsent(t *testing.T) {
	f := startFixture(t)
	day, _ := time.Parse("2006-01-02", "2026-01-01")
	rows := f.byDay["2026-01-01"]
	a, info := writeFile(t, f.tables, day, rows, cold.WriterOptions{})
	again, _ := writeFile(t, f.tables, day, rows, cold.WriterOptions{})
	if !bytes.Equal(a, again) {
		t.Fatal("writing the same rows twice gave different files")
	}
	other, _ := writeFile(t, f.tables, day, rows[1:], cold.WriterOptions{})
	ctx := context.Background()
	for name, s := range openStores(t) {
		t.Run(name, func(t *testing.T) {
			key := cold.ObjectKey("p", 7, day, 3)
			if key != "p/0007/20260101/part-0003.parquet" {
				t.Fatalf("key %q", key)
			}
			if err := s.PutIfAbsent(ctx, key, a); err != nil {
				t.Fatal(err)
			}
			if err := s.PutIfAbsent(ctx, key, again); err != nil {
				t.Fatalf("rerun with the same bytes: %v", err)
			}
			if err := s.PutIfAbsent(ctx, key, other); !errors.Is(err, cold.ErrConflict) {
				t.Fatalf("different bytes: got %v, want ErrConflict", err)
			}
			if err := cold.Verify(ctx, s, key, info); err != nil {
				t.Fatalf("object changed by the refused put: %v", err)
			}
			got, err := s.ReadRange(ctx, key, 10, 100)
			if err != nil || !bytes.Equal(got, a[10:110]) {
				t.Fatalf("range read: %v", err)
			}
			if _, err := s.Size(ctx, "p/missing"); !errors.Is(err, cold.ErrNotFound) {
				t.Fatalf("missing key: %v", err)
			}
			// Verify catches a file that does not hold what was written.
			bad := info
			bad.Digest.CRCSum++
			if err := cold.Verify(ctx, s, key, bad); !errors.Is(err, cold.ErrVerify) {
				t.Fatalf("verify against a wrong digest: %v", err)
			}
		})
	}
}

// slowStore delays every read of keys holding slow by delay (honouring the
// context, as a real client does), like an object store's tail latency.
type slowStore struct {
	cold.Store
	slow  string
	delay time.Duration
}

func (s *slowStore) wait(ctx context.Context, key string) error {
	if !strings.Contains(key, s.slow) {
		return nil
	}
	select {
	case <-time.After(s.delay):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *slowStore) ReadRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	if err := s.wait(ctx, key); err != nil {
		return nil, err
	}
	return s.Store.ReadRange(ctx, key, off, n)
}

func (s *slowStore) Size(ctx context.Context, key string) (int64, error) {
	if err := s.wait(ctx, key); err != nil {
		return 0, err
	}
	return s.Store.Size(ctx, key)
}

// TestDeadlinePartial: with the older day's file slower than the budget, a
// scroll-up page across both files returns the newer file's rows (exactly
// MariaDB's first rows of the page) and More, not an error; a catch-up
// starting in the slow file returns nothing and More; a jump whose anchor
// is in the slow file returns More; reads that need only the fast file
// are complete.
func TestDeadlinePartial(t *testing.T) {
	f := startFixture(t)
	ctx := context.Background()
	base, err := cold.OpenStore(ctx, "file://"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cat, _ := f.archive(t, ctx, base, cold.WriterOptions{RowsPerGroup: 64, PageBytes: 1024})
	slow := &slowStore{Store: base, slow: "/20260101/", delay: 5 * time.Second}
	r := cold.NewReader(slow, cat, cold.ReaderOptions{})
	budget := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(ctx, 300*time.Millisecond)
	}

	c, cancel := budget()
	start := time.Now()
	p, err := r.Before(c, convA, nA+1, 200)
	cancel()
	if err != nil {
		t.Fatalf("Before: %v", err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("Before took %s with a 300ms budget", el)
	}
	if !p.More || len(p.Rows) != nA/2 || p.Frontier != nA/2 {
		t.Fatalf("Before: More=%v rows=%d frontier=%d, want More and the %d rows of the fast file, final above %d", p.More, len(p.Rows), p.Frontier, nA/2, nA/2)
	}
	want := textQuery(t, f.conn, fmt.Sprintf("SELECT * FROM conv_msg WHERE conv_id=%d AND seq < %d ORDER BY seq DESC LIMIT %d", convA, nA+1, nA/2))
	for i := range want.rows {
		if !equalValues(p.Rows[i].Msg, want.rows[i]) {
			t.Fatalf("partial row %d: cold %q, mariadb %q", i, p.Rows[i].Msg, want.rows[i])
		}
	}

	c, cancel = budget()
	p, err = r.After(c, convA, 0, 20)
	cancel()
	if err != nil || !p.More || len(p.Rows) != 0 || p.Frontier != 1 {
		t.Fatalf("After from the slow file: err=%v More=%v rows=%d frontier=%d, want More, no rows, nothing final from seq 1", err, p.More, len(p.Rows), p.Frontier)
	}

	c, cancel = budget()
	p, err = r.ByMsgID(c, convA, 5_000_001)
	cancel()
	if err != nil || !p.More || len(p.Rows) != 0 {
		t.Fatalf("ByMsgID in the slow file: err=%v More=%v rows=%d", err, p.More, len(p.Rows))
	}

	// Only the fast (newer) file is needed: complete, no More.
	c, cancel = budget()
	p, err = r.Before(c, convA, nA+1, 20)
	cancel()
	if err != nil || p.More || len(p.Rows) != 20 || p.Rows[0].Seq != nA || p.Rows[19].Seq != nA-19 {
		t.Fatalf("Before within the fast file: err=%v More=%v rows=%d", err, p.More, len(p.Rows))
	}

	// A storage error that is not the budget is an error, not a partial page.
	bad := cold.NewMemCatalog()
	bad.Add(cold.FileInfo{Key: "archive/0441/20260103/part-0000.parquet", Convs: []cold.ConvRange{{ConvID: convA, MinSeq: 1, MaxSeq: 9}}})
	if _, err := cold.NewReader(base, bad, cold.ReaderOptions{}).Before(ctx, convA, 5, 20); !errors.Is(err, cold.ErrNotFound) {
		t.Fatalf("missing file: got %v, want ErrNotFound", err)
	}
}

// TestVerifyCorrupt: a stored object whose bytes were damaged (one byte of
// a data page flipped, or the object cut short) fails Verify with
// ErrVerify, never a panic.
func TestVerifyCorrupt(t *testing.T) {
	f := startFixture(t)
	day, _ := time.Parse("2006-01-02", "2026-01-01")
	data, info := writeFile(t, f.tables, day, f.byDay["2026-01-01"], cold.WriterOptions{RowsPerGroup: 64, PageBytes: 1024})
	ctx := context.Background()
	s, err := cold.OpenStore(ctx, "file://"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for i, bad := range [][]byte{flip(data, len(data)/3), flip(data, len(data)/2), data[:len(data)-100], data[:len(data)/2]} {
		key := fmt.Sprintf("bad-%d.parquet", i)
		if err := s.PutIfAbsent(ctx, key, bad); err != nil {
			t.Fatal(err)
		}
		if err := cold.Verify(ctx, s, key, info); !errors.Is(err, cold.ErrVerify) {
			t.Errorf("corruption %d: Verify returned %v, want ErrVerify", i, err)
		}
		// Never catalogued, but a reader handed one must not panic: an
		// error, or (the damage hit bytes a page read does not use) the
		// right rows.
		cat := cold.NewMemCatalog()
		bad := info
		bad.Key = key
		cat.Add(bad)
		p, err := cold.NewReader(s, cat, cold.ReaderOptions{}).Before(ctx, convA, nA+1, 400)
		t.Logf("corruption %d: reader: %d rows, %v", i, len(p.Rows), err)
		if err == nil {
			f.check(t, fmt.Sprintf("SELECT * FROM conv_msg WHERE conv_id=%d AND seq <= %d ORDER BY seq DESC", convA, nA/2), p, err)
		}
	}
}

func flip(b []byte, i int) []byte {
	c := bytes.Clone(b)
	c[i] ^= 0x5a
	return c
}

// skipCatalog adds a Skip list and Gaps to every file of one conversation.
type skipCatalog struct {
	*cold.MemCatalog
	conv uint64
	skip []uint64
	gaps [][2]uint64
}

func (c skipCatalog) Files(ctx context.Context, conv uint64) ([]cold.FileRange, error) {
	fs, err := c.MemCatalog.Files(ctx, conv)
	for i := range fs {
		if conv == c.conv {
			fs[i].Skip, fs[i].Gaps = c.skip, c.gaps
		}
	}
	return fs, err
}

// TestSkip: seqs a catalog says to skip (warm rows edited or deleted after
// archiving) are absent from every page, which then equals MariaDB's with
// those rows deleted; small pages make narrow's page pruning count them.
func TestSkip(t *testing.T) {
	f := startFixture(t)
	ctx := context.Background()
	store, err := cold.OpenStore(ctx, "file://"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	cat, _ := f.archive(t, ctx, store, cold.WriterOptions{RowsPerGroup: 4096, PageBytes: 256})
	skip := []uint64{1, 2, 99, 100, 101, 149, 150, 151, 152, 153, 154, 155, 156, 157, 158, 159, 160, 300}
	var list []string
	for _, s := range skip {
		list = append(list, fmt.Sprint(s))
	}
	f.db.Exec(t, fmt.Sprintf("DELETE FROM coldtest.conv_msg WHERE conv_id=%d AND seq IN (%s)", convA, strings.Join(list, ",")))
	r := cold.NewReader(store, skipCatalog{MemCatalog: cat, conv: convA, skip: skip}, cold.ReaderOptions{})
	// The same skips given by the caller (the engine's tombstones), half in
	// the catalog and half passed, or all passed: the same pages.
	half := cold.NewReader(store, skipCatalog{MemCatalog: cat, conv: convA, skip: skip[:len(skip)/2]}, cold.ReaderOptions{})
	plain := cold.NewReader(store, cat, cold.ReaderOptions{})
	for _, cur := range []uint64{0, 1, 3, 100, 102, 150, 161, 200, 301} {
		for _, limit := range []int{1, 5, 20, 400} {
			before := fmt.Sprintf("SELECT * FROM conv_msg WHERE conv_id=%d AND seq < %d ORDER BY seq DESC LIMIT %d", convA, cur, limit)
			after := fmt.Sprintf("SELECT * FROM conv_msg WHERE conv_id=%d AND seq > %d ORDER BY seq ASC LIMIT %d", convA, cur, limit)
			p, err := r.Before(ctx, convA, cur, limit)
			f.check(t, before, p, err)
			p, err = r.After(ctx, convA, cur, limit)
			f.check(t, after, p, err)
			p, err = half.Before(ctx, convA, cur, limit, skip[len(skip)/2:]...)
			f.check(t, before, p, err)
			p, err = plain.After(ctx, convA, cur, limit, skip...)
			f.check(t, after, p, err)
		}
	}
	p, err := plain.ByKeys(ctx, convA, []uint64{1, 2, 3, 99, 102}, []uint64{5_000_150, 5_000_151}, skip...)
	f.check(t, fmt.Sprintf("SELECT * FROM conv_msg WHERE conv_id=%d AND seq IN (1,2,3,99,102,150,151) ORDER BY seq", convA), p, err)
	all := textQuery(t, f.conn, fmt.Sprintf("SELECT conv_id, msg_id FROM conv_msg WHERE conv_id=%d", convA))
	if len(all.rows) != nA-len(skip) {
		t.Fatalf("%d rows left, want %d", len(all.rows), nA-len(skip))
	}
}

// TestGaps: seq ranges erased from a conversation ("clear chat" of
// archived rows) are absent from every page, which then equals MariaDB's
// with those rows deleted, whether a cursor starts inside, above or below
// a gap; small pages make narrow's page pruning meet them.
func TestGaps(t *testing.T) {
	f := startFixture(t)
	ctx := context.Background()
	store, err := cold.OpenStore(ctx, "file://"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	cat, _ := f.archive(t, ctx, store, cold.WriterOptions{RowsPerGroup: 4096, PageBytes: 256})
	gaps := [][2]uint64{{0, 3}, {50, 120}, {122, 130}, {200, 200}}
	for _, g := range gaps {
		f.db.Exec(t, fmt.Sprintf("DELETE FROM coldtest.conv_msg WHERE conv_id=%d AND seq BETWEEN %d AND %d", convA, g[0], g[1]))
	}
	r := cold.NewReader(store, skipCatalog{MemCatalog: cat, conv: convA, gaps: gaps}, cold.ReaderOptions{})
	for _, cur := range []uint64{0, 1, 4, 5, 51, 100, 121, 122, 125, 131, 140, 200, 201, 301} {
		for _, limit := range []int{1, 5, 20, 400} {
			p, err := r.Before(ctx, convA, cur, limit)
			f.check(t, fmt.Sprintf("SELECT * FROM conv_msg WHERE conv_id=%d AND seq < %d ORDER BY seq DESC LIMIT %d", convA, cur, limit), p, err)
			p, err = r.After(ctx, convA, cur, limit)
			f.check(t, fmt.Sprintf("SELECT * FROM conv_msg WHERE conv_id=%d AND seq > %d ORDER BY seq ASC LIMIT %d", convA, cur, limit), p, err)
		}
	}
	p, err := r.ByKeys(ctx, convA, []uint64{2, 4, 60, 121, 126, 200}, []uint64{5_000_150, 5_000_110}, 150)
	f.check(t, fmt.Sprintf("SELECT * FROM conv_msg WHERE conv_id=%d AND seq IN (4,121) ORDER BY seq", convA), p, err)
	// Keys: the rows left in a seq range, with sender and body, as MariaDB
	// has them (a range starting and ending inside gaps).
	keys, err := r.Keys(ctx, convA, 60, 300)
	if err != nil {
		t.Fatal(err)
	}
	want := textQuery(t, f.conn, fmt.Sprintf("SELECT m.seq, m.msg_id, m.sender_uid, c.msg_id IS NOT NULL FROM coldtest.conv_msg m LEFT JOIN coldtest.msg_content c ON c.msg_id = m.msg_id WHERE m.conv_id=%d AND m.seq BETWEEN 60 AND 300 ORDER BY m.seq", convA))
	var got [][][]byte
	for _, k := range keys {
		body := "0"
		if k.Body {
			body = "1"
		}
		got = append(got, [][]byte{[]byte(fmt.Sprint(k.Seq)), []byte(fmt.Sprint(k.MsgID)), []byte(fmt.Sprint(k.Sender)), []byte(body)})
	}
	if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", want.rows) || len(got) < 100 {
		t.Fatalf("Keys: %d rows, MariaDB %d:\n%q\n%q", len(got), len(want.rows), got, want.rows)
	}
	// Another conversation of the same files keeps every row.
	p, err = r.Before(ctx, convB, 1<<40, 400)
	f.check(t, fmt.Sprintf("SELECT * FROM conv_msg WHERE conv_id=%d ORDER BY seq DESC LIMIT 400", convB), p, err)
}
