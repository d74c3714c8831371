package archive

import (
	"cmp"
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/convoy-im/convoy/cold"
	"github.com/convoy-im/convoy/coord"
	"github.com/convoy-im/convoy/internal/testsvc"
	"github.com/convoy-im/convoy/rewrite"
	"github.com/convoy-im/convoy/routecfg"
	"github.com/convoy-im/convoy/router"
	"github.com/convoy-im/convoy/schema"
)

// services are the real servers a test package shares: one MariaDB, one
// etcd, one S3-compatible server process. Each test works in a database,
// an etcd cluster name and a store prefix of its own.
type services struct {
	db   *testsvc.MariaDB
	etcd *testsvc.Etcd
	s3   *testsvc.S3
	cli  *clientv3.Client
}

// startServices starts the servers for the subtests of one test.
func startServices(t testing.TB) *services {
	t.Helper()
	s := &services{db: testsvc.StartMariaDB(t), etcd: testsvc.StartEtcd(t), s3: testsvc.StartS3(t)}
	cli, err := clientv3.New(clientv3.Config{Endpoints: s.etcd.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	s.cli = cli
	return s
}

// fixture is one test's world: a database holding a shared physical
// table pair (shards 0..511, so the archiver must filter by shard),
// routes in etcd, a store, a clock.
type fixture struct {
	t        testing.TB
	svc      *services
	dbName   string
	cluster  string
	store    cold.Store
	storeURL string
	mu       sync.Mutex
	now      time.Time
	shard    int
	convs    []uint64 // of shard
	others   []uint64 // of other shards in the same table
	conn     *client.Conn
}

// Test data: each conversation gets a message every 8 hours from
// 2025-12-01 00:30 for perConv messages; the clock starts at 2026-06-30
// 12:00, so days before 2026-01-01 (seqs 1..93) are older than 180 days.
const (
	perConv     = 150
	archivedMax = 93
)

var (
	dataStart = time.Date(2025, 12, 1, 0, 30, 0, 0, time.UTC)
	clock0    = time.Date(2026, 6, 30, 12, 0, 0, 0, time.UTC)
)

func newFixture(t testing.TB, s *services, storeKind string) *fixture {
	t.Helper()
	f := newEmptyFixture(t, s, storeKind)
	f.fill(append(append([]uint64{}, f.convs...), f.others...))
	return f
}

// newEmptyFixture is newFixture without the rows.
func newEmptyFixture(t testing.TB, s *services, storeKind string) *fixture {
	t.Helper()
	name := strings.ToLower(regexp.MustCompile(`[^A-Za-z0-9]+`).ReplaceAllString(t.Name(), "_"))
	if len(name) > 40 {
		name = name[:40]
	}
	f := &fixture{t: t, svc: s, dbName: "a_" + name, cluster: "c_" + name, now: clock0, shard: int(router.ShardOf(42))}
	f.svc.db.Exec(t, "DROP DATABASE IF EXISTS "+f.dbName, "CREATE DATABASE "+f.dbName,
		imTable(t, "conv_msg", f.dbName, "conv_msg_0000"), imTable(t, "msg_content", f.dbName, "msg_content_0000"))
	doc, err := router.SharedLayout([]router.Datasource{{Name: "ds0", Addr: s.db.Addr(), User: "root"}}, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	doc.Shards[0].Database, doc.Shards[1].Database = f.dbName, f.dbName
	ctx := context.Background()
	if err := routecfg.NewStore(s.cli, f.cluster).Init(ctx, doc); err != nil {
		t.Fatal(err)
	}
	switch storeKind {
	case "file":
		f.storeURL = "file://" + t.TempDir()
	case "s3":
		f.storeURL = s.s3.URL("cold-" + strings.ReplaceAll(name, "_", "-"))
	default:
		t.Fatalf("store %q", storeKind)
	}
	if f.store, err = cold.OpenStore(ctx, f.storeURL); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.store.Close() })
	f.convs = keysOfShard(router.Shard(f.shard), 4, 1000)
	for k := uint64(1000); len(f.others) < 3; k++ {
		if sh := router.ShardOf(k); sh < 512 && int(sh) != f.shard {
			f.others = append(f.others, k)
		}
	}
	if f.conn, err = client.Connect(s.db.Addr(), "root", "", f.dbName); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.conn.Close() })
	return f
}

func (f *fixture) fill(convs []uint64) { f.fillN(convs, perConv, 8*time.Hour) }

// fillN gives each conversation n messages, one every step.
func (f *fixture) fillN(convs []uint64, n uint64, step time.Duration) {
	var sb strings.Builder
	for _, c := range convs {
		for seq := uint64(1); seq <= n; seq++ {
			at := dataStart.Add(time.Duration(seq-1) * step).Add(time.Duration(seq%1000) * time.Millisecond).Format("2006-01-02 15:04:05.000")
			msgID := c*1000 + seq
			fmt.Fprintf(&sb, "INSERT INTO %s.conv_msg_0000 VALUES (%d,%d,%d,%d,%d,'%s');\n", f.dbName, c, seq, msgID, 7000+seq%5, 1+seq%3, at)
			body := fmt.Sprintf("X'%x'", fmt.Sprintf("msg %d/%d \x00\xff 你好", c, seq))
			switch {
			case seq%17 == 0:
				continue // a message without a body row
			case seq%23 == 0:
				body = "''"
			}
			fmt.Fprintf(&sb, "INSERT INTO %s.msg_content_0000 VALUES (%d,%d,%d,%d,%s,'%s');\n", f.dbName, msgID, c, 7000+seq%5, 1+seq%3, body, at)
		}
	}
	f.svc.db.Exec(f.t, sb.String())
}

func (f *fixture) clock() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fixture) advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	f.mu.Unlock()
}

// archiver returns an archiver of the fixture with small parts and
// chunks (several per day) and no rate limit.
func (f *fixture) archiver(edit ...func(*Config)) *Archiver {
	f.t.Helper()
	cfg := Config{Client: f.svc.cli, Cluster: f.cluster, ID: "test-1", Store: f.store, Prefix: "hist",
		Connect: func(ctx context.Context, ds router.Datasource) (*client.Conn, error) {
			return client.ConnectWithContext(ctx, ds.Addr, ds.User, "", "", 5*time.Second, func(c *client.Conn) error {
				return c.SetCollation("utf8mb4_general_ci")
			})
		},
		Rate: -1, Now: f.clock, Log: zaptest.NewLogger(f.t), PartRows: 7, ChunkRows: 4, ScanRows: 50, RunnerTTL: 10 * time.Second, StoreTimeout: 5 * time.Second,
		KeepNewest: -1} // the fixture's conversations are small: archive by age alone unless a test says otherwise
	for _, e := range edit {
		e(&cfg)
	}
	a, err := New(cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	return a
}

// query runs sql on the fixture's database (text protocol).
func (f *fixture) query(sql string) ([]cold.Column, [][][]byte) {
	f.t.Helper()
	r, err := f.conn.Execute(sql)
	if err != nil {
		f.t.Fatalf("%s: %v", sql, err)
	}
	defer r.Close()
	cols := make([]cold.Column, len(r.Fields))
	for i, fl := range r.Fields {
		cols[i] = cold.ColumnFromField(fl)
	}
	rows, err := cold.TextRows(r.Resultset)
	if err != nil {
		f.t.Fatal(err)
	}
	return cols, rows
}

func (f *fixture) count(where string) int {
	f.t.Helper()
	_, rows := f.query("SELECT COUNT(*) FROM conv_msg_0000 WHERE " + where)
	var n int
	fmt.Sscan(string(rows[0][0]), &n)
	return n
}

func (f *fixture) records() []Record {
	f.t.Helper()
	recs, err := shardRecords(context.Background(), f.svc.cli, f.cluster, f.store, f.shard)
	if err != nil {
		f.t.Fatal(err)
	}
	return recs
}

// archivedKeys reads every catalogued file back (verifying it) and
// returns how many times each key occurs across them.
func (f *fixture) archivedKeys() map[key]int {
	f.t.Helper()
	out := map[key]int{}
	for _, r := range f.records() {
		m, err := readMeta(context.Background(), f.store, r.Meta)
		if err != nil {
			f.t.Fatal(err)
		}
		if err := cold.Verify(context.Background(), f.store, r.Key, m.Info); err != nil {
			f.t.Fatalf("catalogued file %s: %v", r.Key, err)
		}
		err = cold.ScanFile(context.Background(), f.store, m.Info, func(_ cold.Tables, row cold.Row) error {
			out[keyOf(row)]++
			return nil
		})
		if err != nil {
			f.t.Fatal(err)
		}
	}
	return out
}

// wantArchived is the set of keys older than the cutoff of clock0.
func (f *fixture) wantArchived() map[key]int {
	out := map[key]int{}
	for _, c := range f.convs {
		for seq := uint64(1); seq <= archivedMax; seq++ {
			out[key{Conv: c, Seq: seq}] = 1
		}
	}
	return out
}

// imTable is the CREATE TABLE of a logical table as db.physical.
func imTable(t testing.TB, logical, db, physical string) string {
	t.Helper()
	stmt, err := schema.Table(logical, db, physical)
	if err != nil {
		t.Fatal(err)
	}
	return stmt
}

// keysOfShard returns n keys from `from` upwards whose shard is sh.
func keysOfShard(sh router.Shard, n int, from uint64) []uint64 { return router.KeysOf(sh, n, from) }

// mysqlCatalog is the catalog a cold read sees, built as the engine builds
// it (proxy/engine/cold.go): the shard database's read bounds of the
// conversation (FilesTable), read after MySQL's rows, then its conv_msg
// tombstones as rows to skip, with the former layout's files from legacy
// (nil: none).
type mysqlCatalog struct {
	f      *fixture
	legacy *Catalog
}

func (f *fixture) readCatalog(legacy *Catalog) cold.Catalog { return mysqlCatalog{f, legacy} }

func (m mysqlCatalog) Files(ctx context.Context, conv uint64) ([]cold.FileRange, error) {
	_, rows := m.f.query(fmt.Sprintf("SELECT file, min_seq, max_seq, min_msg_id, max_msg_id, n_rows FROM %s WHERE conv_id = %d", FilesTable, conv))
	_, tomb := m.f.query(fmt.Sprintf("SELECT seq FROM %s WHERE conv_id = %d AND tbl = 'conv_msg' ORDER BY seq", TombstoneTable, conv))
	var skip []uint64
	for _, r := range tomb {
		var s uint64
		fmt.Sscan(string(r[0]), &s)
		skip = append(skip, s)
	}
	var out []cold.FileRange
	for _, r := range rows {
		fr := cold.FileRange{Key: string(r[0])}
		fmt.Sscan(string(r[1]), &fr.MinSeq)
		fmt.Sscan(string(r[2]), &fr.MaxSeq)
		fmt.Sscan(string(r[3]), &fr.MinMsgID)
		fmt.Sscan(string(r[4]), &fr.MaxMsgID)
		fmt.Sscan(string(r[5]), &fr.Rows)
		out = append(out, fr)
	}
	if m.legacy != nil {
		if err := m.legacy.Fresh(ctx, conv); err != nil {
			return nil, err
		}
		old, err := m.legacy.Files(ctx, conv)
		if err != nil {
			return nil, err
		}
		out = MergeRanges(out, old)
	}
	_, erased := m.f.query(fmt.Sprintf("SELECT min_seq, max_seq FROM %s WHERE conv_id = %d AND tbl = 'conv_msg' ORDER BY min_seq", ErasureTable, conv))
	for i := range out {
		for _, s := range skip {
			if s >= out[i].MinSeq && s <= out[i].MaxSeq {
				out[i].Skip = append(out[i].Skip, s)
			}
		}
		for _, r := range erased {
			var g [2]uint64
			fmt.Sscan(string(r[0]), &g[0])
			fmt.Sscan(string(r[1]), &g[1])
			out[i].Gaps = append(out[i].Gaps, g)
		}
	}
	slices.SortFunc(out, func(a, b cold.FileRange) int { return cmp.Compare(a.MinSeq, b.MinSeq) })
	return out, nil
}

// makeLegacy rewrites the shard's records in the former layout: in etcd,
// no manifest, the deleted history files' read bounds and skips in their
// records (nothing in FilesTable), as an archiver of the version before
// wrote them.
func (f *fixture) makeLegacy() {
	f.t.Helper()
	ctx := context.Background()
	var ops []clientv3.Op
	deleted := 0
	for _, r := range f.records() {
		if r.Kind == kindHistory && r.State == StateDeleted {
			r.Bounds = ""
			f.query(fmt.Sprintf("DELETE FROM %s WHERE file = %s", FilesTable, rewrite.QuoteString(r.Key)))
			deleted++
		}
		ops = append(ops, r.put(f.cluster))
	}
	if deleted == 0 {
		f.t.Fatal("no deleted history record to rewrite")
	}
	jobs := coord.NewArchiveJobStore(f.svc.cli, f.cluster)
	job, err := jobs.Get(ctx, f.shard)
	if err != nil {
		f.t.Fatal(err)
	}
	st, err := decodeState(job)
	if err != nil {
		f.t.Fatal(err)
	}
	st.Catalog, st.CatalogVersion = "", 0
	job.Progress = encodeState(st)
	if _, err := f.svc.cli.Txn(ctx).Then(ops...).Commit(); err != nil {
		f.t.Fatal(err)
	}
	if _, err := jobs.Update(ctx, job); err != nil {
		f.t.Fatal(err)
	}
}

// tombstones lists the shard database's tombstones (tbl, conv_id, seq).
func (f *fixture) tombstones() []string {
	f.t.Helper()
	_, rows := f.query("SELECT tbl, conv_id, seq FROM " + TombstoneTable + " ORDER BY tbl, conv_id, seq")
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = fmt.Sprintf("%s/%s/%s", r[0], r[1], r[2])
	}
	return out
}
