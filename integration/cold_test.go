package integration

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"
	sqldriver "github.com/go-sql-driver/mysql"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/convoy-im/convoy/archive"
	"github.com/convoy-im/convoy/cold"
	"github.com/convoy-im/convoy/internal/testsvc"
	"github.com/convoy-im/convoy/router"
)

// coldFixture is a deployment with the cold tier: the stack, an S3 server
// process, a Convoy with cold.enabled that reads the archive (its own
// archiver off), and the archiver run from the test with a clock of its
// own, so days become old on demand.
type coldFixture struct {
	t      testing.TB
	s      *stack
	s3     *testsvc.S3
	p      *convoyProc
	cli    *clientv3.Client
	store  cold.Store
	budget time.Duration
	mu     sync.Mutex
	now    time.Time
	arch   *archive.Archiver
	// archCfg is arch's configuration (archiver makes others from it).
	archCfg archive.Config
	// oldStep is the time between two old messages of a conversation
	// (default 6 h: 200 of them span 50 days).
	oldStep time.Duration
}

// The history: each conversation has oldN messages from 2025-01-01, one
// every 6 hours, then recentN from 2025-07-01. The archiver's clock starts
// at 2025-09-30, so with cold.after at 180 days every day before
// 2025-04-03 is old; keep_newest 60 keeps seqs oldN+recentN-59.. warm.
const (
	oldN      = 200
	recentN   = 30
	keepWarm  = 60
	coldBound = oldN + recentN - keepWarm // highest archived seq
)

var (
	oldStart    = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	recentStart = time.Date(2025, 7, 1, 0, 0, 0, 0, time.UTC)
	coldClock   = time.Date(2025, 9, 30, 12, 0, 0, 0, time.UTC)
)

func newColdFixture(t testing.TB, budget time.Duration, extraYAML ...string) *coldFixture {
	t.Helper()
	return newColdFixtureStore(t, "s3", budget, extraYAML...)
}

// newColdFixtureStore is newColdFixture with the archive in store: "s3"
// (the S3 server process) or "file" (a directory both processes share).
func newColdFixtureStore(t testing.TB, store string, budget time.Duration, extraYAML ...string) *coldFixture {
	t.Helper()
	f := &coldFixture{t: t, s: newStack(t), s3: testsvc.StartS3(t), budget: budget, now: coldClock}
	url := f.s3.URL("convoy-cold")
	if store == "file" {
		url = "file://" + t.TempDir()
	}
	ctx := context.Background()
	var err error
	if f.store, err = cold.OpenStore(ctx, url); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.store.Close() })
	if f.cli, err = clientv3.New(clientv3.Config{Endpoints: f.s.etcd.Endpoints(), DialTimeout: 3 * time.Second, Logger: zap.NewNop()}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.cli.Close() })
	yaml := append([]string{fmt.Sprintf("cold: {enabled: true, run_jobs: false, store: '%s', budget: %s}", url, budget)}, extraYAML...)
	f.p = startConvoy(t, f.s.etcd.Endpoints(), yaml...)
	f.archCfg = archive.Config{Client: f.cli, Cluster: testCluster, ID: "test-archiver", Store: f.store, Prefix: "history",
		Connect: func(ctx context.Context, ds router.Datasource) (*client.Conn, error) {
			return client.ConnectWithContext(ctx, ds.Addr, ds.User, "", "", 5*time.Second, func(c *client.Conn) error {
				return c.SetCollation("utf8mb4_general_ci")
			})
		},
		// (Compaction off: the tests here count files and read day by day.)
		Now: f.clock, Rate: -1, KeepNewest: keepWarm, DeleteAfter: time.Hour, PartRows: 80, ChunkRows: 50, ScanRows: 500, CompactBelow: -1,
		RunnerTTL: 10 * time.Second, StoreTimeout: 5 * time.Second, Log: zap.NewNop()}
	f.arch = f.archiver(nil)
	return f
}

// archiver is an archiver of the fixture's configuration as edit changes it.
func (f *coldFixture) archiver(edit func(*archive.Config)) *archive.Archiver {
	f.t.Helper()
	cfg := f.archCfg
	if edit != nil {
		edit(&cfg)
	}
	a, err := archive.New(cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	return a
}

// storedRows reads every history file in the store (checked against its
// catalog object's SHA-256) and calls fn with each row.
func (f *coldFixture) storedRows(fn func(file string, r cold.Row)) {
	f.t.Helper()
	ctx := context.Background()
	var keys []string
	if err := f.store.List(ctx, "history/", func(k string) error {
		if strings.HasSuffix(k, ".parquet") && strings.Contains(k, "/part-") {
			keys = append(keys, k)
		}
		return nil
	}); err != nil {
		f.t.Fatal(err)
	}
	for _, k := range keys {
		mk := strings.TrimSuffix(k, ".parquet") + ".json"
		size, err := f.store.Size(ctx, mk)
		if err != nil {
			f.t.Fatal(err)
		}
		b, err := f.store.ReadRange(ctx, mk, 0, size)
		if err != nil {
			f.t.Fatal(err)
		}
		var m struct {
			Info cold.FileInfo `json:"info"`
		}
		if err := json.Unmarshal(b, &m); err != nil {
			f.t.Fatal(err)
		}
		if err := cold.ScanFile(ctx, f.store, m.Info, func(_ cold.Tables, r cold.Row) error {
			fn(k, r)
			return nil
		}); err != nil {
			f.t.Fatal(err)
		}
	}
}

func (f *coldFixture) clock() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *coldFixture) advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	f.mu.Unlock()
}

// load gives each conversation its history through Convoy (seqs allocated
// by it, from 1), with bodies: binary, empty (” for every 23rd message),
// none for every 17th.
func (f *coldFixture) load(convs []uint64, n func(conv uint64) (old, recent int)) {
	f.loadRef(convs, n, nil)
}

// loadRef is load, also writing the rows into ref (plain tables, the
// seqs Convoy allocates: 1, 2, ... in order for a new conversation).
func (f *coldFixture) loadRef(convs []uint64, n func(conv uint64) (old, recent int), ref *sql.DB) {
	f.t.Helper()
	db := f.p.open(f.t, "convoy", "convoy", "im")
	for _, c := range convs {
		old, recent := n(c)
		var msgs, refMsgs, bodies []string
		for i := 0; i < old+recent; i++ {
			step := f.oldStep
			if step == 0 {
				step = 6 * time.Hour
			}
			at := oldStart.Add(time.Duration(i) * step)
			if i >= old {
				at = recentStart.Add(time.Duration(i-old) * time.Hour)
			}
			at = at.Add(time.Duration(i%1000) * time.Millisecond)
			msgID := c*100_000 + uint64(i) + 1
			ts := at.Format("2006-01-02 15:04:05.000")
			msgs = append(msgs, fmt.Sprintf("(%d, %d, %d, %d, '%s')", c, msgID, 7000+i%5, 1+i%3, ts))
			refMsgs = append(refMsgs, fmt.Sprintf("(%d, %d, %d, %d, %d, '%s')", c, i+1, msgID, 7000+i%5, 1+i%3, ts))
			switch {
			case (i+1)%17 == 0:
			case (i+1)%23 == 0:
				bodies = append(bodies, fmt.Sprintf("(%d, %d, %d, %d, '', '%s')", msgID, c, 7000+i%5, 1+i%3, ts))
			default:
				bodies = append(bodies, fmt.Sprintf("(%d, %d, %d, %d, X'%x', '%s')", msgID, c, 7000+i%5, 1+i%3, fmt.Sprintf("msg %d/%d \x00\xff 你好", c, i+1), ts))
			}
		}
		for len(msgs) > 0 {
			k := min(len(msgs), 100)
			mustExec(f.t, db, "INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES "+strings.Join(msgs[:k], ","))
			msgs = msgs[k:]
		}
		mustExec(f.t, db, "INSERT INTO msg_content VALUES "+strings.Join(bodies, ","))
		if ref != nil {
			mustExec(f.t, ref, "INSERT INTO conv_msg (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES "+strings.Join(refMsgs, ","))
		}
	}
}

// archiveAll runs the archiver on the conversations' shards: archive, then
// (an hour later on its clock) the warm delete.
func (f *coldFixture) archiveAll(convs []uint64) {
	f.t.Helper()
	for _, step := range []time.Duration{0, 2 * time.Hour} {
		f.advance(step)
		done := map[router.Shard]bool{}
		for _, c := range convs {
			sh := router.ShardOf(c)
			if done[sh] {
				continue
			}
			done[sh] = true
			if err := f.arch.RunShard(context.Background(), int(sh)); err != nil {
				f.t.Fatalf("archive shard %s: %v", sh, err)
			}
		}
	}
}

// conn is a go-mysql client connection to the cold Convoy: it keeps the
// column definitions and row packets exactly as they arrive, and the
// warning count of the final EOF.
func (f *coldFixture) conn() *client.Conn {
	f.t.Helper()
	c, err := client.Connect(f.p.addr, "convoy", "convoy", "im", func(c *client.Conn) error {
		c.SetTLSConfig(nil)
		return c.SetCollation("utf8mb4_general_ci")
	})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { c.Close() })
	return c
}

// wire is a result as a client received it: each column definition's
// packet and each row's packet.
type wire struct {
	fields   [][]byte
	rows     [][]byte
	warnings uint16
}

func wireOf(r *mysql.Result) wire {
	var w wire
	w.warnings = r.Warnings
	if r.Resultset == nil {
		return w
	}
	for _, fl := range r.Fields {
		// Every attribute of the column definition packet (go-mysql's Data
		// aliases a buffer it reuses).
		w.fields = append(w.fields, fmt.Appendf(nil, "%q %q %q %q %q charset=%d len=%d type=%d flags=%#x decimals=%d",
			fl.Schema, fl.Table, fl.OrgTable, fl.Name, fl.OrgName, fl.Charset, fl.ColumnLength, fl.Type, fl.Flag, fl.Decimal))
	}
	for _, row := range r.RowDatas {
		w.rows = append(w.rows, bytes.Clone(row))
	}
	return w
}

// coldQuery is one history read in both protocols: sql with literals for
// COM_QUERY, psql with placeholders and args for a prepared statement.
type coldQuery struct {
	name      string
	sql, psql string
	args      []any
	first     bool // a first-screen read
}

// coldRun executes q as text (prepared=false) or prepared and returns what the
// client received.
func coldRun(t *testing.T, c *client.Conn, q coldQuery, prepared bool) (wire, error) {
	t.Helper()
	if !prepared {
		r, err := c.Execute(q.sql)
		if err != nil {
			return wire{}, err
		}
		defer r.Close()
		return wireOf(r), nil
	}
	st, err := c.Prepare(q.psql)
	if err != nil {
		return wire{}, err
	}
	defer st.Close()
	r, err := st.Execute(q.args...)
	if err != nil {
		return wire{}, err
	}
	defer r.Close()
	return wireOf(r), nil
}

// coldQueries are the reads of conv the tests compare: every history shape
// across the warm/cold boundary and inside each side, with the seed's
// column list and *, and body fetches by msg_id.
func coldQueries(conv uint64, maxSeq uint64) []coldQuery {
	var out []coldQuery
	// add takes the statement with %d where its values go: printed for the
	// text protocol, placeholders for the prepared one.
	add := func(name, tmpl string, args ...uint64) {
		vals := make([]any, len(args))
		for i, a := range args {
			vals[i] = a
		}
		out = append(out, coldQuery{name: name, sql: fmt.Sprintf(tmpl, vals...), psql: strings.ReplaceAll(tmpl, "%d", "?"), args: vals})
	}
	for _, cols := range []string{"seq, msg_id, sender_uid, msg_type, created_at", "*"} {
		for _, cur := range []uint64{maxSeq + 1, 1 << 62, coldBound + 15, coldBound + 2, coldBound + 1, coldBound, 150, 101, 100, 99, 2, 1} {
			for _, n := range []uint64{1, 20, 50} {
				add(fmt.Sprintf("before(%d,%d)", cur, n), "SELECT "+cols+" FROM conv_msg WHERE conv_id = %d AND seq < %d ORDER BY seq DESC LIMIT %d", conv, cur, n)
				out[len(out)-1].first = cur > maxSeq && n <= keepWarm
			}
		}
		for _, cur := range []uint64{0, 1, 50, 98, 99, 100, coldBound - 5, coldBound, coldBound + 1, maxSeq} {
			for _, n := range []uint64{1, 20, 50} {
				add(fmt.Sprintf("after(%d,%d)", cur, n), "SELECT "+cols+" FROM conv_msg WHERE conv_id = %d AND seq > %d ORDER BY seq ASC LIMIT %d", conv, cur, n)
			}
		}
		for _, seq := range []uint64{1, 17, 100, coldBound, coldBound + 1, maxSeq, 99999} {
			add(fmt.Sprintf("anchor(%d)", seq), "SELECT "+cols+" FROM conv_msg WHERE conv_id = %d AND msg_id = %d", conv, conv*100_000+seq)
		}
	}
	for _, cols := range []string{"msg_id, content", "*"} {
		for _, seqs := range [][]uint64{{5}, {17}, {coldBound - 3, coldBound - 2, coldBound - 1, coldBound, coldBound + 1, coldBound + 2}, {1, 2, 3, 46, 99, 100, 101, 99999}, {maxSeq}} {
			args := []uint64{conv}
			var marks []string
			for _, s := range seqs {
				args = append(args, conv*100_000+s)
				marks = append(marks, "%d")
			}
			in := "msg_id IN (" + strings.Join(marks, ", ") + ")"
			if len(seqs) == 1 {
				in = "msg_id = %d"
			}
			add(fmt.Sprintf("bodies%v", seqs), "SELECT "+cols+" FROM msg_content WHERE conv_id = %d AND "+in, args...)
		}
	}
	return out
}

// coldCapture runs every query in both protocols.
func coldCapture(t *testing.T, c *client.Conn, qs []coldQuery) map[string]wire {
	t.Helper()
	out := map[string]wire{}
	for _, q := range qs {
		for _, prepared := range []bool{false, true} {
			w, err := coldRun(t, c, q, prepared)
			if err != nil {
				t.Fatalf("%s (prepared %v): %v", q.sql, prepared, err)
			}
			out[fmt.Sprintf("%s/%v", q.sql, prepared)] = w
		}
	}
	return out
}

// diffWire compares what a client received with what it received before.
func diffWire(got, want wire) string {
	if len(got.fields) != len(want.fields) {
		return fmt.Sprintf("%d columns, want %d", len(got.fields), len(want.fields))
	}
	for i := range got.fields {
		if !bytes.Equal(got.fields[i], want.fields[i]) {
			return fmt.Sprintf("column %d definition\n got %q\nwant %q", i, got.fields[i], want.fields[i])
		}
	}
	if len(got.rows) != len(want.rows) {
		return fmt.Sprintf("%d rows, want %d", len(got.rows), len(want.rows))
	}
	for i := range got.rows {
		if !bytes.Equal(got.rows[i], want.rows[i]) {
			return fmt.Sprintf("row %d\n got %q\nwant %q", i, got.rows[i], want.rows[i])
		}
	}
	if got.warnings != 0 {
		return fmt.Sprintf("%d warnings", got.warnings)
	}
	return ""
}

func (f *coldFixture) metric(series string) float64 {
	v := metricValue(f.t, scrape(f.t, f.p.metrics), series)
	return max(v, 0)
}

// TestColdReads is the cold tier's differential proof through a real
// Convoy: every history read (scroll up, catch up, jump, body fetch by
// msg_id, text and prepared, the seed's columns and *) is captured before
// the archiver runs, then read again once the archived rows are gone from
// MySQL, with one archived row edited before the warm delete (it stays
// warm, its archived copy is skipped): the same column definitions and
// row packets, byte for byte, and no warning. First screens never read
// the archive (the first_screen series stays 0) while deep pages do.
// Then the store is stopped and slowed: pages come back within the
// budget as MySQL's certain part with warning 1931 naming where to
// continue, never an error.
func TestColdReads(t *testing.T) {
	f := newColdFixture(t, 400*time.Millisecond)
	convs := []uint64{1001, 2002, 424242}
	f.load(convs, func(uint64) (int, int) { return oldN, recentN })
	small := uint64(777) // only old messages, fewer than keep_newest: nothing archived
	f.load([]uint64{small}, func(uint64) (int, int) { return 15, 0 })
	c := f.conn()
	maxSeq := uint64(oldN + recentN)
	var qs []coldQuery
	for _, conv := range convs {
		qs = append(qs, coldQueries(conv, maxSeq)...)
	}
	qs = append(qs, coldQueries(small, 15)...)

	// Archive (files written, verified, catalogued), then edit an archived
	// message while its warm row is still there, then capture: that is
	// MySQL's answer just before the warm delete.
	f.advance(0)
	for _, conv := range append(convs, small) {
		if err := f.arch.RunShard(context.Background(), int(router.ShardOf(conv))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Execute(fmt.Sprintf("UPDATE conv_msg SET msg_type = 9 WHERE conv_id = %d AND seq = 100", convs[0])); err != nil {
		t.Fatal(err)
	}
	before := coldCapture(t, c, qs)
	checksBefore := f.metric(`convoy_cold_checks_total{decision="cold"}`)
	if checksBefore != 0 {
		t.Fatalf("the archive was read before any warm row was deleted")
	}
	f.advance(2 * time.Hour)
	f.archiveAll(append(convs, small))
	for _, conv := range convs {
		r, err := c.Execute(fmt.Sprintf("SELECT COUNT(*) FROM conv_msg WHERE conv_id = %d", conv))
		if err != nil {
			t.Fatal(err)
		}
		n, _ := r.GetUint(0, 0)
		want := uint64(keepWarm)
		if conv == convs[0] {
			want++ // the edited row
		}
		if n != want {
			t.Fatalf("conversation %d: %d warm rows, want %d (the archived ones deleted)", conv, n, want)
		}
	}

	after := coldCapture(t, c, qs)
	bad := 0
	for _, q := range qs {
		for _, prepared := range []bool{false, true} {
			k := fmt.Sprintf("%s/%v", q.sql, prepared)
			if d := diffWire(after[k], before[k]); d != "" {
				if bad++; bad <= 10 {
					t.Errorf("%s (prepared %v): %s", q.sql, prepared, d)
				}
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d reads differ from MySQL's answers before archiving", bad, 2*len(qs))
	}
	// The same inside a transaction (an ORM's, or a client with
	// autocommit off such as PyMySQL's default): the lookups then run on
	// the transaction's connection.
	for n, begin := range []string{"BEGIN", "SET autocommit = 0"} {
		conv := convs[n] // a transaction stays on one shard
		if _, err := c.Execute(begin); err != nil {
			t.Fatal(err)
		}
		for i, q := range qs {
			if i%5 != 0 || q.args[0] != any(conv) {
				continue
			}
			for _, prepared := range []bool{false, true} {
				k := fmt.Sprintf("%s/%v", q.sql, prepared)
				w, err := coldRun(t, c, q, prepared)
				if err != nil {
					t.Fatalf("%s in a transaction: %v", q.sql, err)
				}
				if d := diffWire(w, before[k]); d != "" {
					t.Fatalf("%s (prepared %v) after %s: %s", q.sql, prepared, begin, d)
				}
			}
		}
		if _, err := c.Execute("COMMIT"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Execute("SET autocommit = 1"); err != nil {
		t.Fatal(err)
	}
	body := scrape(t, f.p.metrics)
	if v := metricValue(t, body, `convoy_cold_reads_total{first_screen="false",result="complete",shape="before"}`); v <= 0 {
		t.Fatalf("deep scroll-up pages did not read the archive (%v)", v)
	}
	for _, shape := range []string{"before", "after", "anchor", "bodies"} {
		for _, result := range []string{"complete", "partial", "unavailable"} {
			if v := metricValue(t, body, fmt.Sprintf(`convoy_cold_reads_total{first_screen="true",result="%s",shape="%s"}`, result, shape)); v > 0 {
				t.Fatalf("a first screen read the archive: %s %s %v", shape, result, v)
			}
		}
	}
	// The first screens themselves (cursor max_seq+1 and a sentinel) leave
	// the archive alone: the reads counter does not move.
	coldBefore := f.metric(`convoy_cold_checks_total{decision="cold"}`)
	for _, q := range qs {
		if q.first {
			if _, err := coldRun(t, c, q, false); err != nil {
				t.Fatal(err)
			}
		}
	}
	if v := f.metric(`convoy_cold_checks_total{decision="cold"}`); v != coldBefore {
		t.Fatalf("first screens read the archive: %v -> %v", coldBefore, v)
	}
	t.Logf("checks: page %v, ranges %v, cold %v", f.metric(`convoy_cold_checks_total{decision="page"}`),
		f.metric(`convoy_cold_checks_total{decision="ranges"}`), coldBefore)

	conv := convs[1]
	deep := coldQuery{sql: fmt.Sprintf("SELECT * FROM conv_msg WHERE conv_id = %d AND seq < %d ORDER BY seq DESC LIMIT 50", conv, coldBound+15),
		psql: "SELECT * FROM conv_msg WHERE conv_id = ? AND seq < ? ORDER BY seq DESC LIMIT 50", args: []any{conv, coldBound + 15}}
	full, ok := before[deep.sql+"/false"]
	if !ok || len(full.rows) != 50 {
		t.Fatalf("the boundary page was not captured (%d rows)", len(full.rows))
	}
	// The store hangs (SIGSTOP): the warm part (seqs above every archived
	// one) and the warning, within the budget.
	f.s3.Pause(t)
	partial := func(what string) {
		t.Helper()
		start := time.Now()
		w, err := coldRun(t, c, deep, false)
		el := time.Since(start)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if el > f.budget+500*time.Millisecond {
			t.Fatalf("%s: the page took %s with a %s budget", what, el, f.budget)
		}
		if w.warnings != 1 || len(w.rows) >= len(full.rows) {
			t.Fatalf("%s: %d rows, %d warnings; want fewer than %d rows and one warning", what, len(w.rows), w.warnings, len(full.rows))
		}
		for i := range w.rows {
			if !bytes.Equal(w.rows[i], full.rows[i]) {
				t.Fatalf("%s: row %d is not the page's row %d", what, i, i)
			}
		}
		r, err := c.Execute("SHOW WARNINGS")
		if err != nil {
			t.Fatal(err)
		}
		level, _ := r.GetString(0, 0)
		code, _ := r.GetUint(0, 1)
		msg, _ := r.GetString(0, 2)
		wantNext := fmt.Sprintf("continue with seq < %d", coldBound+1)
		if len(w.rows) == 0 {
			wantNext = fmt.Sprintf("continue with seq < %d", coldBound+15)
		}
		if level != "Warning" || code != 1931 || !strings.Contains(msg, wantNext) {
			t.Fatalf("%s: SHOW WARNINGS %q %d %q, want 1931 and %q", what, level, code, msg, wantNext)
		}
		t.Logf("%s: %d of %d rows in %s: %s", what, len(w.rows), len(full.rows), el.Round(time.Millisecond), msg)
		if r, err := c.Execute("SELECT 1"); err != nil || r.Warnings != 0 {
			t.Fatalf("the next statement still carries the warning: %v %v", err, r.Warnings)
		}
	}
	partial("store stopped")
	f.s3.Resume(t)
	// Slow store: every read answered after twice the budget.
	f.s3.SetLatency(t, 2*f.budget)
	partial("store slow")
	// A session that asked for an error (set on connect, as go-sql-driver
	// does with a DSN parameter) gets 1969 naming where to continue, for
	// the text and the binary protocol, instead of a short page that looks
	// like the conversation's start to a client that ignores warnings.
	strict, err := sql.Open("mysql", f.p.dsn("convoy", "convoy", "im")+"&convoy_cold_partial=%27error%27")
	if err != nil {
		t.Fatal(err)
	}
	defer strict.Close()
	strict.SetMaxOpenConns(1)
	var choice string
	if err := strict.QueryRow("SELECT @@convoy_cold_partial").Scan(&choice); err != nil || choice != "error" {
		t.Fatalf("SELECT @@convoy_cold_partial on the strict session: %q, %v; want error", choice, err)
	}
	for _, prepared := range []bool{false, true} {
		var rows *sql.Rows
		if prepared {
			rows, err = strict.Query(deep.psql, deep.args...)
		} else {
			rows, err = strict.Query(deep.sql)
		}
		if err == nil {
			n := 0
			for rows.Next() {
				n++
			}
			err = rows.Err()
			rows.Close()
			if err == nil {
				t.Fatalf("convoy_cold_partial = 'error' (prepared %v): a partial page of %d rows and no error", prepared, n)
			}
		}
		if errno(err) != 1969 || !strings.Contains(err.Error(), "continue with seq <") {
			t.Fatalf("convoy_cold_partial = 'error' (prepared %v): %v, want 1969 naming where to continue", prepared, err)
		}
	}
	// SET back to the default (the engine's, a warning), and a bad value.
	mustExec(t, strict, "SET SESSION convoy_cold_partial = DEFAULT")
	if err := strict.QueryRow("SELECT @@session.convoy_cold_partial").Scan(&choice); err != nil || choice != "warning" {
		t.Fatalf("SELECT @@session.convoy_cold_partial after DEFAULT: %q, %v; want warning", choice, err)
	}
	if n, err := readRows(strict, deep.sql); err != nil || n >= len(full.rows) {
		t.Fatalf("after SET convoy_cold_partial = DEFAULT: %d rows, %v; want the partial page", n, err)
	}
	if _, err := strict.Exec("SET convoy_cold_partial = 'maybe'"); errno(err) != 1231 {
		t.Fatalf("SET convoy_cold_partial = 'maybe': %v, want 1231", err)
	}
	f.s3.SetLatency(t, 0)
	if w, err := coldRun(t, c, deep, true); err != nil || diffWire(w, before[deep.sql+"/true"]) != "" {
		t.Fatalf("after the store recovered: %v %s", err, diffWire(w, before[deep.sql+"/true"]))
	}
	if v := f.metric(`convoy_cold_reads_total{first_screen="false",result="partial",shape="before"}`) + f.metric(`convoy_cold_reads_total{first_screen="false",result="unavailable",shape="before"}`); v < 2 {
		t.Fatalf("partial reads counted %v, want 2", v)
	}
	if !strings.Contains(f.p.logTail(), "cold tier: the archive did not answer") && f.metric(`convoy_cold_reads_total{first_screen="false",result="unavailable",shape="before"}`) > 0 {
		t.Fatalf("an unavailable archive left no log line")
	}
}

// TestColdWrites: writes that name archived messages. A DELETE by key
// hides them for good (tombstones, committed with the statement: a
// rolled-back one hides nothing, a Convoy restart changes nothing); an
// UPDATE of an archived message is refused with 1036 and changes nothing;
// a DELETE that is not by key of a conversation with archived rows is
// refused with 1235; a recall of a young message never reads the archive.
func TestColdWrites(t *testing.T) {
	f := newColdFixture(t, 800*time.Millisecond)
	a, b := uint64(1001), uint64(2002)
	f.load([]uint64{a, b}, func(uint64) (int, int) { return oldN, recentN })
	f.archiveAll([]uint64{a, b})
	db := f.p.open(t, "convoy", "convoy", "im")
	seqs := func(conv, before uint64, n int) []uint64 {
		t.Helper()
		rows, err := db.Query("SELECT seq FROM conv_msg WHERE conv_id = ? AND seq < ? ORDER BY seq DESC LIMIT ?", conv, before, n)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []uint64
		for rows.Next() {
			var s uint64
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			out = append(out, s)
		}
		return out
	}
	count := func(q string, args ...any) int {
		t.Helper()
		rows, err := db.Query(q, args...)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		n := 0
		for rows.Next() {
			n++
		}
		return n
	}
	jump := func(conv, seq uint64) int {
		return count("SELECT seq, msg_id, created_at FROM conv_msg WHERE conv_id = ? AND msg_id = ?", conv, conv*100_000+seq)
	}
	bodies := func(conv uint64, seqList ...uint64) int {
		var ids []string
		for _, s := range seqList {
			ids = append(ids, fmt.Sprint(conv*100_000+s))
		}
		return count(fmt.Sprintf("SELECT msg_id, content FROM msg_content WHERE conv_id = %d AND msg_id IN (%s)", conv, strings.Join(ids, ",")))
	}
	affected := func(q string, args ...any) int64 {
		t.Helper()
		r := mustExec(t, db, q, args...)
		n, _ := r.RowsAffected()
		return n
	}
	eq := func(what string, got, want []uint64) {
		t.Helper()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: seqs %v, want %v", what, got, want)
		}
	}
	if jump(a, 50) != 1 || bodies(a, 70) != 1 {
		t.Fatal("the archived messages are not there to begin with")
	}
	// By seq (text), by msg_id mixing archived, warm and absent (prepared).
	if n := affected(fmt.Sprintf("DELETE FROM conv_msg WHERE conv_id = %d AND seq = 50", a)); n != 1 {
		t.Fatalf("delete of an archived message affected %d rows", n)
	}
	if n := affected("DELETE FROM conv_msg WHERE conv_id = ? AND msg_id IN (?, ?, ?)", a, a*100_000+60, a*100_000+220, a*100_000+99999); n != 2 {
		t.Fatalf("delete of an archived, a warm and an absent message affected %d rows, want 2", n)
	}
	if n := affected("DELETE FROM msg_content WHERE conv_id = ? AND msg_id = ?", a, a*100_000+70); n != 1 {
		t.Fatalf("delete of an archived body affected %d rows", n)
	}
	if n := affected(fmt.Sprintf("DELETE FROM conv_msg WHERE conv_id = %d AND seq = 50", a)); n != 0 {
		t.Fatalf("deleting a deleted archived message again affected %d rows", n)
	}
	check := func(when string) {
		t.Helper()
		eq(when+": around 50", seqs(a, 53, 5), []uint64{52, 51, 49, 48, 47})
		eq(when+": around 60", seqs(a, 62, 3), []uint64{61, 59, 58})
		eq(when+": around 220", seqs(a, 222, 3), []uint64{221, 219, 218})
		if jump(a, 50) != 0 || jump(a, 60) != 0 || jump(a, 51) != 1 {
			t.Fatalf("%s: a deleted archived message is still found by msg_id", when)
		}
		if bodies(a, 70, 71, 72) != 2 || len(seqs(a, 71, 1)) != 1 || seqs(a, 71, 1)[0] != 70 {
			t.Fatalf("%s: the deleted body shows, or its message does not", when)
		}
		eq(when+": the other conversation", seqs(b, 53, 3), []uint64{52, 51, 50})
	}
	check("after the deletes")
	f.p.kill()
	f.p.start(t)
	check("after a Convoy restart")

	// A rolled-back delete hides nothing; a committed one in a transaction does.
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec("DELETE FROM conv_msg WHERE conv_id = ? AND seq = ?", a, 90); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	eq("rolled back", seqs(a, 91, 2), []uint64{90, 89})
	tx, _ = db.Begin()
	if _, err := tx.Exec("DELETE FROM conv_msg WHERE conv_id = ? AND seq = ?", a, 91); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	eq("committed in a transaction", seqs(a, 93, 2), []uint64{92, 90})

	// UPDATE of archived rows: refused, nothing changed.
	for _, q := range []string{
		fmt.Sprintf("UPDATE conv_msg SET msg_type = 7 WHERE conv_id = %d AND seq = 80", a),
		fmt.Sprintf("UPDATE conv_msg SET msg_type = 7 WHERE conv_id = %d AND seq IN (80, 225)", a),
		fmt.Sprintf("UPDATE msg_content SET content = 'recalled' WHERE conv_id = %d AND msg_id = %d", a, a*100_000+80),
	} {
		_, err := db.Exec(q)
		var me *sqldriver.MySQLError
		if !errors.As(err, &me) || me.Number != 1036 || string(me.SQLState[:]) != "HY000" || !strings.Contains(me.Message, "seq 80") {
			t.Fatalf("%s: %v, want 1036 (HY000) naming seq 80", q, err)
		}
	}
	var mt, mt225 int
	if err := db.QueryRow("SELECT msg_type FROM conv_msg WHERE conv_id = ? AND msg_id = ?", a, a*100_000+80).Scan(&mt); err != nil || mt != 1+79%3 {
		t.Fatalf("the refused update changed the archived message: msg_type %d (%v)", mt, err)
	}
	if err := db.QueryRow("SELECT msg_type FROM conv_msg WHERE conv_id = ? AND msg_id = ?", a, a*100_000+225).Scan(&mt225); err != nil || mt225 != 1+224%3 {
		t.Fatalf("a refused update changed its warm row: msg_type %d (%v)", mt225, err)
	}
	// A recall of a young message: warm, and the archive is not read.
	coldReads := f.metric(`convoy_cold_checks_total{decision="cold"}`)
	warm := f.metric(`convoy_cold_writes_total{result="warm"}`)
	if n := affected("UPDATE msg_content SET content = 'recalled' WHERE conv_id = ? AND msg_id = ?", a, a*100_000+225); n != 1 {
		t.Fatalf("recall of a young message affected %d rows", n)
	}
	if n := affected("DELETE FROM conv_msg WHERE conv_id = ? AND seq = ?", a, 226); n != 1 {
		t.Fatalf("delete of a young message affected %d rows", n)
	}
	if f.metric(`convoy_cold_checks_total{decision="cold"}`) != coldReads || f.metric(`convoy_cold_writes_total{result="warm"}`) != warm+2 {
		t.Fatal("a young message's recall or delete read the archive")
	}
	// Not by key nor by range: refused where archived rows could match
	// (TestColdErase has the ranges), allowed where none can.
	_, err = db.Exec("DELETE FROM conv_msg WHERE conv_id = ? AND seq < 10 AND msg_type = 2", a)
	var me *sqldriver.MySQLError
	if !errors.As(err, &me) || me.Number != 1235 || !strings.Contains(me.Message, "archived") {
		t.Fatalf("a delete by a column the archive cannot filter: %v, want 1235", err)
	}
	eq("after the refused range delete", seqs(a, 10, 20), []uint64{9, 8, 7, 6, 5, 4, 3, 2, 1})
	small := uint64(5005)
	f.load([]uint64{small}, func(uint64) (int, int) { return 0, 5 })
	if n := affected("DELETE FROM conv_msg WHERE conv_id = ? AND seq < 3", small); n != 2 {
		t.Fatalf("a range delete of a conversation without archived rows affected %d", n)
	}
}

// TestColdErase: DELETEs of a conversation's rows that reach archived
// ones (clear chat, a range of history, a member's messages) delete them
// all, warm and archived, in the statement's transaction: the affected
// rows count both, pages and lookups by msg_id never show them again
// (also after a Convoy restart), a rolled-back one erases nothing, the
// other conversations of the shard keep theirs, and bodies go only with
// a DELETE of msg_content, as on MariaDB.
func TestColdErase(t *testing.T) {
	f := newColdFixture(t, 800*time.Millisecond)
	rng, clear, member, txn, other := uint64(1001), uint64(2002), uint64(3003), uint64(4004), uint64(42)
	convs := []uint64{rng, clear, member, txn, other}
	f.load(convs, func(uint64) (int, int) { return oldN, recentN })
	f.archiveAll(convs)
	db := f.p.open(t, "convoy", "convoy", "im")
	query := func(q string, args ...any) [][2]uint64 {
		t.Helper()
		rows, err := db.Query(q, args...)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		defer rows.Close()
		var out [][2]uint64
		for rows.Next() {
			var a, b uint64
			if err := rows.Scan(&a, &b); err != nil {
				t.Fatal(err)
			}
			out = append(out, [2]uint64{a, b})
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	// page: every row of conv below seq 1000 (seq, sender), newest first,
	// read in pages of 25 through the archive.
	page := func(conv uint64) [][2]uint64 {
		t.Helper()
		var out [][2]uint64
		for cur := uint64(1000); ; {
			p := query("SELECT seq, sender_uid FROM conv_msg WHERE conv_id = ? AND seq < ? ORDER BY seq DESC LIMIT 25", conv, cur)
			out = append(out, p...)
			if len(p) < 25 {
				return out
			}
			cur = p[len(p)-1][0]
		}
	}
	// model: the loaded rows of a conversation that keep passes.
	model := func(keep func(seq, sender uint64) bool) [][2]uint64 {
		var out [][2]uint64
		for s := uint64(oldN + recentN); s >= 1; s-- {
			if sender := 7000 + (s-1)%5; keep(s, sender) {
				out = append(out, [2]uint64{s, sender})
			}
		}
		return out
	}
	all := func(uint64, uint64) bool { return true }
	jump := func(conv, seq uint64) int {
		return len(query("SELECT seq, msg_id FROM conv_msg WHERE conv_id = ? AND msg_id = ?", conv, conv*100_000+seq))
	}
	body := func(conv, seq uint64) int {
		return len(query("SELECT msg_id, conv_id FROM msg_content WHERE conv_id = ? AND msg_id IN (?)", conv, conv*100_000+seq))
	}
	affected := func(q string, args ...any) int64 {
		t.Helper()
		r := mustExec(t, db, q, args...)
		n, _ := r.RowsAffected()
		return n
	}
	hasBody := func(s uint64) bool { return s%17 != 0 }
	if got, want := page(clear), model(all); fmt.Sprint(got) != fmt.Sprint(want) || jump(clear, 5) != 1 {
		t.Fatalf("the history is not there to begin with: %d rows, want %d", len(got), len(want))
	}
	erased := f.metric(`convoy_cold_writes_total{result="erased"}`)

	// A range across the warm/cold boundary (text protocol).
	if n := affected(fmt.Sprintf("DELETE FROM conv_msg WHERE conv_id = %d AND seq BETWEEN 100 AND %d", rng, coldBound+10)); n != coldBound+10-100+1 {
		t.Fatalf("a range delete affected %d rows, want %d", n, coldBound+10-100+1)
	}
	// Clear chat (prepared): every row; bodies stay until their DELETE.
	if n := affected("DELETE FROM conv_msg WHERE conv_id = ?", clear); n != oldN+recentN {
		t.Fatalf("clear chat affected %d rows, want %d", n, oldN+recentN)
	}
	if body(clear, 5) != 1 {
		t.Fatal("clearing conv_msg took an archived body with it")
	}
	bodies := 0
	for s := uint64(1); s <= oldN+recentN; s++ {
		if hasBody(s) {
			bodies++
		}
	}
	if n := affected("DELETE FROM msg_content WHERE conv_id = ?", clear); n != int64(bodies) {
		t.Fatalf("clearing msg_content affected %d rows, want %d", n, bodies)
	}
	if n := affected("DELETE FROM conv_msg WHERE conv_id = ?", clear); n != 0 {
		t.Fatalf("clearing a cleared conversation again affected %d rows", n)
	}
	// A member's messages: archived ones named one by one.
	if n := affected("DELETE FROM conv_msg WHERE conv_id = ? AND sender_uid = ?", member, 7002); n != (oldN+recentN)/5 {
		t.Fatalf("deleting a member's messages affected %d rows, want %d", n, (oldN+recentN)/5)
	}
	// A transaction: a rolled-back clear erases nothing, a committed one
	// does; a failing DELETE after it takes back nothing of it.
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec("DELETE FROM conv_msg WHERE conv_id = ?", txn); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	tx, _ = db.Begin()
	if r, err := tx.Exec("DELETE FROM conv_msg WHERE conv_id = ? AND seq < ?", txn, 11); err != nil {
		t.Fatal(err)
	} else if n, _ := r.RowsAffected(); n != 10 {
		t.Fatalf("a range delete in a transaction affected %d rows, want 10", n)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if n := f.metric(`convoy_cold_writes_total{result="erased"}`) - erased; n != 7 {
		t.Fatalf("%v erased writes counted, want 7", n)
	}
	check := func(when string) {
		t.Helper()
		for _, c := range []struct {
			conv uint64
			keep func(seq, sender uint64) bool
		}{
			{rng, func(s, _ uint64) bool { return s < 100 || s > coldBound+10 }},
			{clear, func(uint64, uint64) bool { return false }},
			{member, func(_, sender uint64) bool { return sender != 7002 }},
			{txn, func(s, _ uint64) bool { return s >= 11 }},
			{other, all},
		} {
			if got, want := page(c.conv), model(c.keep); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("%s: conversation %d: %d rows\n%v\nwant %d\n%v", when, c.conv, len(got), got, len(want), want)
			}
		}
		if jump(rng, 150) != 0 || jump(rng, 99) != 1 || jump(clear, 5) != 0 || jump(member, 3) != 0 || jump(member, 4) != 1 || jump(txn, 10) != 0 {
			t.Fatalf("%s: a lookup by msg_id disagrees with the erasures", when)
		}
		if body(clear, 5) != 0 || body(rng, 150) != 1 || body(member, 3) != 1 {
			t.Fatalf("%s: bodies: cleared %d (want 0), of erased conv_msg rows %d, %d (want 1)", when, body(clear, 5), body(rng, 150), body(member, 3))
		}
	}
	check("after the deletes")
	f.p.kill()
	f.p.start(t)
	check("after a Convoy restart")

	// Physically: the archiver rewrites the files without the deleted
	// rows once the deletes are erase_after old (1 ms here), readers see
	// the same, and the superseded files leave the store 10 minutes later.
	stored := func(when string) {
		t.Helper()
		rows := map[uint64]map[uint64]bool{} // conv -> seq -> has a body
		f.storedRows(func(_ string, r cold.Row) {
			if rows[r.ConvID] == nil {
				rows[r.ConvID] = map[uint64]bool{}
			}
			rows[r.ConvID][r.Seq] = r.Content != nil
		})
		for s := uint64(1); s <= coldBound; s++ {
			_, inRng := rows[rng][s]
			body, inMember := rows[member][s]
			switch {
			case len(rows[clear]) > 0:
				t.Fatalf("%s: %d rows of the cleared conversation are still stored", when, len(rows[clear]))
			case s >= 100 && inRng != hasBody(s):
				// conv_msg rows deleted, bodies not: a row goes with its body.
				t.Fatalf("%s: seq %d of the range-deleted conversation stored: %v, want %v", when, s, inRng, hasBody(s))
			case 7000+(s-1)%5 == 7002 && inMember != hasBody(s):
				t.Fatalf("%s: seq %d of the member's messages stored: %v (body %v)", when, s, inMember, body)
			}
			if _, ok := rows[txn][s]; (s < 11 && !hasBody(s)) == ok {
				t.Fatalf("%s: seq %d of the conversation range-deleted in a transaction stored: %v", when, s, ok)
			}
			if _, ok := rows[other][s]; !ok {
				t.Fatalf("%s: seq %d of a conversation nobody deleted from is not stored", when, s)
			}
			if _, ok := rows[rng][s]; s < 100 && !ok {
				t.Fatalf("%s: seq %d of the range-deleted conversation, below the range, is not stored", when, s)
			}
		}
	}
	eraser := f.archiver(func(c *archive.Config) { c.EraseAfter = time.Millisecond })
	time.Sleep(5 * time.Millisecond)
	f.advance(time.Hour)
	for _, c := range convs {
		if err := eraser.RunShard(context.Background(), int(router.ShardOf(c))); err != nil {
			t.Fatal(err)
		}
	}
	check("after the rewrite") // (the superseded files are still stored)
	f.advance(11 * time.Minute)
	for _, c := range convs {
		if err := eraser.RunShard(context.Background(), int(router.ShardOf(c))); err != nil {
			t.Fatal(err)
		}
	}
	stored("after the superseded files went")
	check("after the superseded files went")

	// WHERE shapes the archive cannot decide stay refused, nothing changed.
	for _, q := range []string{
		"DELETE FROM conv_msg WHERE conv_id = ? AND msg_type = 2",
		"DELETE FROM conv_msg WHERE conv_id = ? AND seq < 50 ORDER BY seq LIMIT 5",
		"DELETE FROM conv_msg WHERE conv_id = ? AND sender_uid <> 7001",
	} {
		_, err := db.Exec(q, other)
		var me *sqldriver.MySQLError
		if !errors.As(err, &me) || me.Number != 1235 {
			t.Fatalf("%s: %v, want 1235", q, err)
		}
	}
	if got, want := page(other), model(all); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatal("a refused DELETE changed the conversation")
	}
}

// TestColdHotSoak is the hot tier's exactness with the archiver running on
// the same conversations: writers append and edit recent messages through
// Convoy (hot tier on, write-through and fills racing), the archiver moves
// their old days out day by day and deletes the warm rows behind them,
// readers compare every page Convoy returns (text and prepared, first
// screens, scrolling across the moving warm/cold boundary, deep history,
// catch-up, jumps) with a reference MariaDB that holds every row; Redis is
// restarted once. 0 mismatches.
func TestColdHotSoak(t *testing.T) {
	r := testsvc.StartRedis(t)
	f := newColdFixture(t, 2*time.Second, hotTierYAML(r))
	ref := f.s.ref.Open(t, "im")
	convs := []uint64{1001, 2002, 3003, 4004, 5005, 42}
	f.loadRef(convs, func(uint64) (int, int) { return oldN, recentN }, ref)
	// The archiver starts with nothing old and makes about two days old
	// per round: the boundary moves through every conversation during the
	// soak.
	f.now = oldStart.Add(180*24*time.Hour + 24*time.Hour)
	pools := [2]*sql.DB{openDSN(t, f.p.dsn("app", "app secret", "im")+"&interpolateParams=true"), openDSN(t, f.p.dsn("app", "app secret", "im"))}
	locks := make([]sync.RWMutex, len(convs))
	maxSeq := make([]atomic.Uint64, len(convs))
	for i := range convs {
		maxSeq[i].Store(oldN + recentN)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The soak runs 15 s and then until the archiver has moved more than
	// one conversation's old rows out (a loaded machine archives slower),
	// at most 90 s: the checks at the end need both tiers exercised.
	deadline, hardDeadline := time.Now().Add(15*time.Second), time.Now().Add(90*time.Second)
	var stop atomic.Bool
	running := func() bool { return ctx.Err() == nil && !stop.Load() }
	// rows: the rows of the conversations still warm (through Convoy's
	// pool, on the datasources) and all rows (the reference).
	rows := func() (warm, total int, err error) {
		for _, c := range convs {
			var n int
			if err := pools[1].QueryRow("SELECT COUNT(*) FROM conv_msg WHERE conv_id = ?", c).Scan(&n); err != nil {
				return 0, 0, err
			}
			warm += n
		}
		err = ref.QueryRow("SELECT COUNT(*) FROM conv_msg").Scan(&total)
		return warm, total, err
	}
	var wg sync.WaitGroup
	var compared, mismatches, writes, readErrs, rounds atomic.Int64
	var msgID atomic.Uint64
	msgID.Store(1 << 40)
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 3))
			for running() {
				i := rng.IntN(len(convs))
				c := convs[i]
				locks[i].Lock()
				if rng.IntN(4) == 0 { // edit a recent (warm) message
					seq := oldN + 1 + rng.Uint64N(recentN)
					mt := 10 + rng.IntN(100)
					if _, err := pools[1].ExecContext(ctx, "UPDATE conv_msg SET msg_type = ? WHERE conv_id = ? AND seq = ?", mt, c, seq); err == nil {
						mustExec(t, ref, "UPDATE conv_msg SET msg_type = ? WHERE conv_id = ? AND seq = ?", mt, c, seq)
						writes.Add(1)
					}
				} else {
					id := msgID.Add(1)
					at := time.Now().UTC().Format("2006-01-02 15:04:05.000")
					res, err := pools[rng.IntN(2)].ExecContext(ctx, "INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (?, ?, ?, 1, ?)", c, id, w, at)
					if err == nil {
						seq, _ := res.LastInsertId()
						mustExec(t, ref, "INSERT INTO conv_msg (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES (?, ?, ?, ?, 1, ?)", c, seq, id, w, at)
						maxSeq[i].Store(uint64(seq))
						writes.Add(1)
					}
				}
				locks[i].Unlock()
				time.Sleep(time.Duration(rng.IntN(5)) * time.Millisecond)
			}
		}(w)
	}
	wg.Add(1)
	go func() { // the archiver, on the same conversations
		defer wg.Done()
		defer stop.Store(true) // the soak ends with the archiver
		for ctx.Err() == nil {
			if now := time.Now(); now.After(hardDeadline) {
				return
			} else if now.After(deadline) {
				warm, total, err := rows()
				if err != nil {
					t.Errorf("counting rows: %v", err)
					return
				}
				if warm < total-oldN {
					return
				}
			}
			f.advance(2 * 24 * time.Hour)
			for _, c := range convs {
				if err := f.arch.RunShard(ctx, int(router.ShardOf(c))); err != nil && ctx.Err() == nil {
					t.Errorf("archiver: %v", err)
					return
				}
			}
			rounds.Add(1)
		}
	}()
	for rd := 0; rd < 4; rd++ {
		wg.Add(1)
		go func(rd int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(rd), 17))
			for running() {
				i := rng.IntN(len(convs))
				c := convs[i]
				top := maxSeq[i].Load()
				q := "SELECT seq, msg_id, sender_uid, msg_type, created_at FROM conv_msg WHERE conv_id = ? AND seq < ? ORDER BY seq DESC LIMIT ?"
				var args []any
				switch k := rng.IntN(10); {
				case k < 4: // first screen
					args = []any{c, top + 1, 20}
				case k < 6: // scroll up near the top
					args = []any{c, top - rng.Uint64N(80), 1 + rng.IntN(40)}
				case k < 8: // anywhere, across the boundary too
					args = []any{c, 1 + rng.Uint64N(top+1), 1 + rng.IntN(50)}
				case k < 9: // catch up
					q = "SELECT seq, msg_id, sender_uid, msg_type, created_at FROM conv_msg WHERE conv_id = ? AND seq > ? ORDER BY seq ASC LIMIT ?"
					args = []any{c, rng.Uint64N(top + 1), 1 + rng.IntN(50)}
				default: // jump
					q = "SELECT seq, msg_id, sender_uid, msg_type, created_at FROM conv_msg WHERE conv_id = ? AND msg_id = ?"
					args = []any{c, c*100_000 + 1 + rng.Uint64N(oldN+recentN)}
				}
				locks[i].RLock()
				want, err1 := readPage(ctx, ref, q, args...)
				got, err2 := readPage(ctx, pools[rng.IntN(2)], q, args...)
				locks[i].RUnlock()
				if err1 != nil || err2 != nil {
					readErrs.Add(1)
					if ctx.Err() == nil && readErrs.Load() < 3 {
						t.Logf("read error: %v / %v", err1, err2)
					}
					continue
				}
				compared.Add(1)
				if !reflect.DeepEqual(got, want) {
					if mismatches.Add(1) <= 5 {
						t.Errorf("conv %d %s %v:\nconvoy %v\nref    %v", c, q[len(q)-40:], args, got, want)
					}
				}
			}
		}(rd)
	}
	time.Sleep(7 * time.Second)
	r.Kill()
	time.Sleep(300 * time.Millisecond)
	r.Start()
	wg.Wait()
	body := scrape(t, f.p.metrics)
	hot := metricValue(t, body, `convoy_statements_total{class="hot"}`)
	coldReads := metricValue(t, body, `convoy_cold_checks_total{decision="cold"}`)
	warm, total, err := rows()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("compared %d pages, %d mismatches, %d writes, %d archiver rounds, %d read errors; %.0f hot-served, %.0f read the archive; %d of %d rows still warm",
		compared.Load(), mismatches.Load(), writes.Load(), rounds.Load(), readErrs.Load(), hot, coldReads, warm, total)
	if mismatches.Load() != 0 {
		t.Fatalf("%d pages differed from the reference", mismatches.Load())
	}
	if compared.Load() < 1000 || hot < 100 || coldReads < 50 || warm >= total-oldN {
		t.Fatalf("the soak did not exercise both tiers: %d pages, %.0f hot, %.0f cold, %d of %d warm", compared.Load(), hot, coldReads, warm, total)
	}
}

// BenchmarkColdPages measures history reads through Convoy (prepared, one
// client) whose pages the archive answers, with the archive in file:// and
// in the S3 server process: p50 / p99 per shape, beside a warm first
// screen. 20 conversations of 1000 old and 60 recent messages; every
// catalog and file footer is warm after the first pass, as in a proxy
// that has served the conversations before.
//
// go test ./integration -run '^$' -bench ColdPages -benchtime 300x
func BenchmarkColdPages(b *testing.B) {
	for _, store := range []string{"file", "s3"} {
		b.Run(store, func(b *testing.B) {
			f := newColdFixtureStore(b, store, 800*time.Millisecond)
			var convs []uint64
			for c := uint64(1); len(convs) < 20; c++ {
				convs = append(convs, 10_000+c*7919)
			}
			const old, recent = 1000, keepWarm
			f.load(convs, func(uint64) (int, int) { return old, recent })
			f.archiveAll(convs)
			db := f.p.open(b, "convoy", "convoy", "im")
			rng := rand.New(rand.NewPCG(1, 2))
			shapes := []struct {
				name string
				q    string
				args func(c uint64) []any
			}{
				{"warm first screen", "SELECT seq, msg_id, sender_uid, msg_type, created_at FROM conv_msg WHERE conv_id = ? AND seq < ? ORDER BY seq DESC LIMIT 20",
					func(c uint64) []any { return []any{c, old + recent + 1} }},
				{"boundary page (10 warm, 10 archived)", "SELECT seq, msg_id, sender_uid, msg_type, created_at FROM conv_msg WHERE conv_id = ? AND seq < ? ORDER BY seq DESC LIMIT 20",
					func(c uint64) []any { return []any{c, old + 11} }},
				{"archived page", "SELECT seq, msg_id, sender_uid, msg_type, created_at FROM conv_msg WHERE conv_id = ? AND seq < ? ORDER BY seq DESC LIMIT 20",
					func(c uint64) []any { return []any{c, 21 + rng.Uint64N(old-20)} }},
				{"catch-up from the archive", "SELECT seq, msg_id, sender_uid, msg_type, created_at FROM conv_msg WHERE conv_id = ? AND seq > ? ORDER BY seq LIMIT 50",
					func(c uint64) []any { return []any{c, rng.Uint64N(old - 50)} }},
				{"jump to an archived message", "SELECT seq, msg_id, created_at FROM conv_msg WHERE conv_id = ? AND msg_id = ?",
					func(c uint64) []any { return []any{c, c*100_000 + 1 + rng.Uint64N(old)} }},
				{"20 archived bodies by msg_id", "SELECT msg_id, content FROM msg_content WHERE conv_id = ? AND msg_id IN (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
					func(c uint64) []any {
						from := 1 + rng.Uint64N(old-20)
						args := []any{c}
						for i := range uint64(20) {
							args = append(args, c*100_000+from+i)
						}
						return args
					}},
			}
			for _, sh := range shapes {
				for _, c := range convs { // a first pass loads catalogs and footers
					if _, err := readRows(db, sh.q, sh.args(c)...); err != nil {
						b.Fatal(err)
					}
				}
				b.Run(sh.name, func(b *testing.B) {
					lat := make([]time.Duration, 0, b.N)
					rows := 0
					for i := 0; i < b.N; i++ {
						c := convs[rng.IntN(len(convs))]
						t0 := time.Now()
						n, err := readRows(db, sh.q, sh.args(c)...)
						if err != nil {
							b.Fatal(err)
						}
						lat = append(lat, time.Since(t0))
						rows += n
					}
					slices.Sort(lat)
					b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
					b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
					b.ReportMetric(float64(rows)/float64(b.N), "rows/read")
				})
			}
			if v := f.metric(`convoy_cold_reads_total{first_screen="false",result="partial",shape="before"}`); v > 0 {
				b.Fatalf("%v pages were cut by the budget", v)
			}
		})
	}
}

// readRows runs a query (on a pool or one connection) and counts its rows.
func readRows(db interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}, q string, args ...any) (int, error) {
	rows, err := db.QueryContext(context.Background(), q, args...)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		n++
	}
	return n, rows.Err()
}

// BenchmarkColdArchiveWriteP99 measures what an archive run costs the live
// writes of its shard: 8 clients insert messages through Convoy into
// conversations of one shard for 10 s alone, then for 10 s while the
// archiver (at the default cold.rate, 2000 rows/s) archives and deletes
// that shard's 10,000 old rows; QPS, p50 and p99 of the inserts in each
// phase.
//
// go test ./integration -run '^$' -bench ColdArchiveWriteP99 -benchtime 1x
func BenchmarkColdArchiveWriteP99(b *testing.B) {
	f := newColdFixtureStore(b, "file", 800*time.Millisecond)
	target := router.ShardOf(1001)
	var old, live []uint64
	for c := uint64(1001); len(old)+len(live) < 28; c++ {
		if router.ShardOf(c) != target {
			continue
		}
		if len(old) < 20 {
			old = append(old, c)
		} else {
			live = append(live, c)
		}
	}
	f.oldStep = 30 * time.Minute // ten days: the archiver's pass per day stays short
	f.load(old, func(uint64) (int, int) { return 500, 0 })
	arch, err := archive.New(archive.Config{Client: f.cli, Cluster: testCluster, ID: "bench-archiver", Store: f.store, Prefix: "history",
		Connect: func(ctx context.Context, ds router.Datasource) (*client.Conn, error) {
			return client.ConnectWithContext(ctx, ds.Addr, ds.User, "", "", 5*time.Second, func(c *client.Conn) error {
				return c.SetCollation("utf8mb4_general_ci")
			})
		},
		Rate: archive.DefaultRate, KeepNewest: -1, DeleteAfter: time.Nanosecond, Log: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	db := openDSN(b, f.p.dsn("convoy", "convoy", "im"))
	db.SetMaxOpenConns(8)
	var msgID atomic.Uint64
	msgID.Store(1 << 41)
	phase := func(name string, d time.Duration) {
		reportLatencies(b, name+"-", d, parallelLatencies(b, 8, d, func(i int) error {
			_, err := db.Exec("INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (?, ?, ?, 1, NOW(3))",
				live[i%len(live)], msgID.Add(1), i/1_000_000)
			return err
		}))
	}
	phase("alone", 10*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- arch.RunShard(ctx, int(target)) }()
	phase("archiving", 10*time.Second)
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		b.Fatalf("archiver: %v", err)
	}
	var warm int
	if err := db.QueryRow(fmt.Sprintf("SELECT COUNT(*) FROM conv_msg WHERE conv_id IN (%s)", joinSeqs(old))).Scan(&warm); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(10_000-warm), "old-rows-deleted")
}

func joinSeqs(xs []uint64) string {
	var s []string
	for _, x := range xs {
		s = append(s, fmt.Sprint(x))
	}
	return strings.Join(s, ",")
}

// TestArchiveRebuildCommand (docs/design.md §9-10): a cold read needs nothing of the
// catalog but the read bounds in the shard's database, so losing the
// shard's catalog manifests loses no page; `convoy archive rebuild` names
// the bucket's files again, and the archiver goes on with them without
// writing any file twice.
func TestArchiveRebuildCommand(t *testing.T) {
	f := newColdFixture(t, 5*time.Second)
	const conv = uint64(1001)
	f.load([]uint64{conv}, func(uint64) (int, int) { return oldN, recentN })
	f.archiveAll([]uint64{conv})
	db := f.p.open(t, "convoy", "convoy", "im")
	page := func(when string) {
		t.Helper()
		n, err := readRows(db, "SELECT seq, msg_id FROM conv_msg WHERE conv_id = ? AND seq <= ? ORDER BY seq DESC LIMIT 500", conv, coldBound)
		if err != nil || n != coldBound {
			t.Fatalf("%s: %d of the %d archived messages on their page (%v)", when, n, coldBound, err)
		}
	}
	page("archived")
	ctx := context.Background()
	sh := router.ShardOf(conv)
	objects := func(sub string) []string {
		t.Helper()
		var out []string
		if err := f.store.List(ctx, fmt.Sprintf("history/%04d/%s", sh, sub), func(k string) error {
			out = append(out, k)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	manifests := objects("catalog/")
	if len(manifests) == 0 {
		t.Fatal("no catalog manifest in the store")
	}
	for _, k := range manifests {
		if err := f.store.Delete(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	page("the catalog manifests deleted")
	parquet := func() int {
		n := 0
		for _, k := range objects("") {
			if strings.HasSuffix(k, ".parquet") {
				n++
			}
		}
		return n
	}
	files := parquet()
	out, err := exec.Command(convoyBin, "archive", "--config", f.p.cfgPath, "rebuild", fmt.Sprint(int(sh))).CombinedOutput()
	if want := fmt.Sprintf("1 shards: %d files catalogued, %d of them named again", files, files); err != nil || !strings.Contains(string(out), want) {
		t.Fatalf("convoy archive rebuild: %v\n%s\nwant %q", err, out, want)
	}
	f.advance(2 * time.Hour)
	if err := f.arch.RunShard(ctx, int(sh)); err != nil {
		t.Fatalf("an archiver run after the rebuild: %v", err)
	}
	if n := parquet(); n != files || len(objects("catalog/")) == 0 {
		t.Fatalf("%d files after the rebuild and a run, want %d; manifests %v", n, files, objects("catalog/"))
	}
	page("rebuilt")
}

// TestColdReadKilled (docs/sql-reference.md): KILL QUERY ends a history read waiting
// for a slow archive at once with MariaDB's 1317, not at the end of
// cold.budget, and the connection goes on.
func TestColdReadKilled(t *testing.T) {
	f := newColdFixture(t, 20*time.Second)
	const conv = uint64(1001)
	f.load([]uint64{conv}, func(uint64) (int, int) { return oldN, recentN })
	f.archiveAll([]uint64{conv})
	f.s3.SetLatency(t, 5*time.Second)
	defer f.s3.SetLatency(t, 0)
	db := f.p.open(t, "convoy", "convoy", "im")
	ctx := context.Background()
	a, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	var id int64
	if err := a.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := readRows(a, "SELECT seq, msg_id FROM conv_msg WHERE conv_id = 1001 AND seq < 50 ORDER BY seq DESC LIMIT 20")
		done <- err
	}()
	time.Sleep(500 * time.Millisecond)
	mustExec(t, db, fmt.Sprintf("KILL QUERY %d", id))
	select {
	case err := <-done:
		if errno(err) != 1317 {
			t.Fatalf("the killed cold read: %v, want 1317", err)
		}
	case <-time.After(4 * time.Second):
		t.Fatalf("the killed cold read still runs %s after it started (the store answers after 5 s)", time.Since(start).Round(time.Millisecond))
	}
	var one int
	if err := a.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("the connection after its KILL QUERY: %v", err)
	}
}
