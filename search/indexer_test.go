package search

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/convoy-im/convoy/binlog"
	"github.com/convoy-im/convoy/internal/testsvc"
	"github.com/convoy-im/convoy/router"
)

// feedFixture is one datasource with one physical conv_msg / msg_content
// pair holding every shard, as the shared layouts of the integration tests.
type feedFixture struct {
	m     *testsvc.MariaDB
	db    *sql.DB
	snap  *router.Snapshot
	g     *corpusGen
	conv  []uint64
	next  uint64
	seqs  map[uint64]uint64
	clock time.Time
}

func newFeedFixture(t *testing.T) *feedFixture {
	m := testsvc.StartMariaDB(t)
	m.Exec(t, "CREATE DATABASE im_0",
		"CREATE TABLE im_0.msg_content_0000 (msg_id BIGINT UNSIGNED NOT NULL, conv_id BIGINT UNSIGNED NOT NULL, sender_uid BIGINT UNSIGNED NOT NULL, "+
			"msg_type TINYINT UNSIGNED NOT NULL, content VARBINARY(4096) NOT NULL, created_at DATETIME(3) NOT NULL, PRIMARY KEY (msg_id), KEY idx_conv (conv_id, created_at))",
		"CREATE TABLE im_0.conv_msg_0000 (conv_id BIGINT UNSIGNED NOT NULL, seq BIGINT UNSIGNED NOT NULL, msg_id BIGINT UNSIGNED NOT NULL, sender_uid BIGINT UNSIGNED NOT NULL, "+
			"msg_type TINYINT UNSIGNED NOT NULL, created_at DATETIME(3) NOT NULL, PRIMARY KEY (conv_id, seq), UNIQUE KEY uk_msg (msg_id))")
	doc, err := router.SharedLayout([]router.Datasource{{Name: "ds0", Addr: m.Addr(), User: "root"}}, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := router.NewSnapshot(doc)
	if err != nil {
		t.Fatal(err)
	}
	f := &feedFixture{m: m, db: m.Open(t, ""), snap: snap, g: newCorpusGen(7), seqs: map[uint64]uint64{},
		clock: time.Date(2026, 11, 20, 8, 0, 0, 0, time.UTC), next: 1 << 50}
	for i := range 12 {
		f.conv = append(f.conv, 500+uint64(i))
	}
	return f
}

func (f *feedFixture) indexer(t *testing.T, eng Engine) *Indexer {
	ix, err := NewIndexer(IndexerConfig{Source: "ds0", DB: f.db, Engine: eng, Routes: func() *router.Snapshot { return f.snap },
		Binlog: binlog.Config{Addr: f.m.Addr(), User: "root", ServerID: 77}, Flush: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return ix
}

// send writes one message the ways applications do: both rows in one
// transaction, the body first, or the index row first, in separate
// transactions; some bodies are not text.
func (f *feedFixture) send(t testing.TB, r *rand.Rand) {
	conv := f.conv[r.IntN(len(f.conv))]
	f.seqs[conv]++
	f.next += 1 + uint64(r.IntN(5))
	f.clock = f.clock.Add(time.Duration(r.IntN(3000)) * time.Millisecond)
	id, seq, at := f.next, f.seqs[conv], f.clock.Format("2006-01-02 15:04:05.000")
	mt, body := 1, []byte(f.g.text())
	switch r.IntN(12) {
	case 0:
		mt = 2 // an image: not indexed
	case 1:
		body = []byte{0xff, 0x00, 0x9c, 0x41} // an encrypted payload: no text
	}
	content := fmt.Sprintf("INSERT INTO im_0.msg_content_0000 VALUES (%d, %d, 9, %d, ?, '%s')", id, conv, mt, at)
	index := fmt.Sprintf("INSERT INTO im_0.conv_msg_0000 VALUES (%d, %d, %d, 9, %d, '%s')", conv, seq, id, mt, at)
	var stmts []string
	switch r.IntN(3) {
	case 0:
		stmts = []string{"BEGIN", index, content, "COMMIT"}
	case 1:
		stmts = []string{content, index}
	default:
		stmts = []string{index, content}
	}
	conn, err := f.db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, s := range stmts {
		var args []any
		if s == content {
			args = []any{body}
		}
		if _, err := conn.ExecContext(context.Background(), s, args...); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

// change edits, recalls (msg_type to a type not indexed) or deletes a
// random message.
func (f *feedFixture) change(t testing.TB, r *rand.Rand) {
	// The message changed is r's choice (not the server's RAND()), so a
	// run's corpus, and the queries drawn from it, are the same each time.
	var n int
	if err := f.db.QueryRow("SELECT COUNT(*) FROM im_0.conv_msg_0000").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		return
	}
	var id, conv uint64
	if err := f.db.QueryRow("SELECT msg_id, conv_id FROM im_0.conv_msg_0000 ORDER BY msg_id LIMIT 1 OFFSET ?", r.IntN(n)).Scan(&id, &conv); err != nil {
		t.Fatal(err)
	}
	var stmts []string
	switch r.IntN(4) {
	case 0, 1:
		stmts = []string{fmt.Sprintf("UPDATE im_0.msg_content_0000 SET content = '%s' WHERE msg_id = %d", f.g.text(), id)}
	case 2: // recall
		stmts = []string{fmt.Sprintf("UPDATE im_0.conv_msg_0000 SET msg_type = 99 WHERE msg_id = %d", id),
			fmt.Sprintf("UPDATE im_0.msg_content_0000 SET msg_type = 99 WHERE msg_id = %d", id)}
	default:
		stmts = []string{fmt.Sprintf("DELETE FROM im_0.conv_msg_0000 WHERE msg_id = %d", id),
			fmt.Sprintf("DELETE FROM im_0.msg_content_0000 WHERE msg_id = %d", id)}
	}
	for _, s := range stmts {
		if _, err := f.db.Exec(s); err != nil {
			t.Fatal(err)
		}
	}
}

// stored is every searchable message in MySQL now, as documents: the
// oracle's corpus.
func (f *feedFixture) stored(t testing.TB) *corpus {
	rows, err := f.db.Query("SELECT c.msg_id, c.conv_id, m.seq, c.sender_uid, c.msg_type, c.content, c.created_at " +
		"FROM im_0.msg_content_0000 c JOIN im_0.conv_msg_0000 m ON m.msg_id = c.msg_id ORDER BY c.msg_id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	c := &corpus{byConv: map[uint64][]int{}, convs: f.conv}
	for rows.Next() {
		var d Doc
		var body []byte
		var at string
		if err := rows.Scan(&d.MsgID, &d.ConvID, &d.Seq, &d.SenderUID, &d.MsgType, &body, &at); err != nil {
			t.Fatal(err)
		}
		text, ok := Extraction{}.Text(d.MsgType, body)
		if !ok {
			continue
		}
		ts, _ := time.Parse("2006-01-02 15:04:05.000", at)
		d.Text, d.CreatedMs = text, ts.UnixMilli()
		c.byConv[d.ConvID] = append(c.byConv[d.ConvID], len(c.docs))
		c.docs = append(c.docs, d)
		c.an = append(c.an, Analyse(text))
	}
	return c
}

// caughtUp waits until the engine's checkpoint has reached the server's
// binlog position.
func (f *feedFixture) caughtUp(t testing.TB, eng Engine) {
	t.Helper()
	ctx := context.Background()
	want, err := binlog.CurrentPosition(ctx, f.db)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		cp, err := eng.Checkpoint(ctx, "ds0")
		if err != nil {
			t.Fatal(err)
		}
		pos, current := positionOf(cp)
		if ok, _ := binlog.Position(pos).Reached(want); ok && current {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the feed did not reach %s (checkpoint %q)", want, cp)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// everyQuery compares the engine with the oracle over MySQL's rows for
// queries made of the stored messages' pieces.
func (f *feedFixture) everyQuery(t *testing.T, eng Engine, n int) {
	t.Helper()
	c := f.stored(t)
	if len(c.docs) == 0 {
		t.Fatal("nothing stored")
	}
	checkExactness(t, eng, c, n, uint64(len(c.docs)))
}

// TestIndexerFeed runs the binlog feed of a real MariaDB into each engine:
// messages written in every order, edits, recalls and deletes, a backfill
// of rows stored before the feed existed, and restarts (between writes and
// in the middle of them) resuming from the checkpoint without a gap, a
// duplicate or a resurrected message.
func TestIndexerFeed(t *testing.T) {
	for _, name := range []string{"bleve", "sphinx"} {
		t.Run(name, func(t *testing.T) {
			var eng Engine
			var err error
			if name == "bleve" {
				eng, err = OpenBleve(t.TempDir())
			} else {
				eng, err = OpenSphinx(SphinxConfig{Partitions: testsvc.StartSphinx(t, 2).Addrs()})
			}
			if err != nil {
				t.Fatal(err)
			}
			defer eng.Close()
			f := newFeedFixture(t)
			r := rand.New(rand.NewPCG(11, 12))
			for range 150 { // stored before the index exists: the backfill's
				f.send(t, r)
			}
			start := func() (stop func()) {
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- f.indexer(t, eng).Run(ctx) }()
				return func() {
					cancel()
					if err := <-done; err != nil && ctx.Err() == nil {
						t.Errorf("indexer: %v", err)
					}
				}
			}
			stop := start()
			for i := range 300 {
				f.send(t, r)
				if i%5 == 0 {
					f.change(t, r)
				}
			}
			f.caughtUp(t, eng)
			f.everyQuery(t, eng, 150)

			// Stopped, then restarted: what was written meanwhile arrives.
			stop()
			for range 60 {
				f.send(t, r)
				f.change(t, r)
			}
			stop = start()
			f.caughtUp(t, eng)
			f.everyQuery(t, eng, 100)

			// Restarts in the middle of a stream of writes.
			for range 4 {
				for range 40 {
					f.send(t, r)
					f.change(t, r)
				}
				stop()
				stop = start()
			}
			f.caughtUp(t, eng)
			stop()
			f.everyQuery(t, eng, 100)
		})
	}
}

// An index whose checkpoint was written under another analysis version
// (version 1 stored the bare position) is indexed again from a snapshot:
// its documents are analysed as queries are now. Here the index holds
// nothing, as if its terms no longer matched, and a checkpoint at the
// server's current position: without the rebuild the feed would resume
// there and the stored messages would never be found.
func TestIndexerRebuildsOldAnalysis(t *testing.T) {
	eng, err := OpenBleve(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	f := newFeedFixture(t)
	r := rand.New(rand.NewPCG(21, 22))
	for range 60 {
		f.send(t, r)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	now, err := binlog.CurrentPosition(ctx, f.db)
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Apply(ctx, "ds0", Batch{}, string(now)); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- f.indexer(t, eng).Run(ctx) }()
	f.caughtUp(t, eng)
	if cp, _ := eng.Checkpoint(ctx, "ds0"); !strings.HasPrefix(cp, fmt.Sprintf("a%d:", AnalysisVersion)) {
		t.Fatalf("checkpoint after the rebuild %q", cp)
	}
	f.everyQuery(t, eng, 60)
	cancel()
	if err := <-done; err != nil && ctx.Err() == nil {
		t.Fatal(err)
	}
}
