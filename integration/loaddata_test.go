package integration

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	sqldriver "github.com/go-sql-driver/mysql"

	"github.com/convoy-im/convoy/internal/testsvc"
	"github.com/convoy-im/convoy/router"
)

// loadFile is a conv_msg file in CSV with a header line: rows of many
// conversations (both datasources, many shards), and the lines MariaDB
// warns about: a duplicate key, a value that is not a number, \N in a NOT
// NULL column, a short line, a long one, quoted fields, and a type word
// the SET clause maps.
func loadFile(rows int) string {
	rng := rand.New(rand.NewPCG(1, 2))
	var sb strings.Builder
	sb.WriteString("conv_id,seq,msg_id,sender_uid,type,created_at\n")
	seq := map[int]int{}
	for i := range rows {
		conv := 1 + rng.IntN(300)
		seq[conv]++
		kind := "text"
		if i%7 == 0 {
			kind = "image"
		}
		fmt.Fprintf(&sb, "%d,%d,%d,%d,%s,2026-03-%02d %02d:%02d:%02d.%03d\n", conv, seq[conv], conv*100000+seq[conv], 1+rng.IntN(50), kind, 1+i%28, i%24, i%60, (i*7)%60, i%1000)
	}
	sb.WriteString("1,1,99999901,7,text,2026-03-01 00:00:00.000\n")                   // duplicate key (1, 1): skipped
	sb.WriteString("\"2\",\"900\",\"200900\",\"abc\",text,\"2026-03-02 00:00:00\"\n") // not a number: 0 with 1366
	sb.WriteString("3,900,300900,\\N,image,2026-03-03 00:00:00\n")                    // \N in NOT NULL: 1263
	sb.WriteString("4,900\n")                                                         // short: 1261 per missing column
	sb.WriteString("5,900,500900,9,text,2026-03-05 00:00:00,extra\n")                 // long: 1262
	return sb.String()
}

const loadColumns = ` FIELDS TERMINATED BY ',' OPTIONALLY ENCLOSED BY '"' IGNORE 1 LINES (conv_id, seq, msg_id, sender_uid, @type, created_at) SET msg_type = IF(@type = 'image', 2, 1)`

// TestLoadDataLocal (docs/sql-reference.md): LOAD DATA LOCAL INFILE into a
// sharded table reads the client's file through the protocol, cuts it as
// MariaDB does and writes each row to its shard: the rows, the affected
// count, the OK's counts and the warnings equal a MariaDB loading the same
// file into one table (go-sql-driver and the mariadb CLI, libmariadb).
func TestLoadDataLocal(t *testing.T) {
	s := newStack(t)
	ctx := context.Background()
	data := loadFile(3000)
	sqldriver.RegisterReaderHandler("convmsg", func() io.Reader { return strings.NewReader(data) })
	t.Cleanup(func() { sqldriver.DeregisterReaderHandler("convmsg") })

	type outcome struct {
		affected int64
		warnings []string
	}
	load := func(db *sql.DB, q string) outcome {
		t.Helper()
		conn, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := conn.ExecContext(ctx, "SET SESSION max_error_count = 1000"); err != nil {
			t.Fatal(err)
		}
		r, err := conn.ExecContext(ctx, q)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		var o outcome
		o.affected, _ = r.RowsAffected()
		rs, err := conn.QueryContext(ctx, "SHOW WARNINGS")
		if err != nil {
			t.Fatal(err)
		}
		defer rs.Close()
		for rs.Next() {
			var level, msg string
			var code int
			if err := rs.Scan(&level, &code, &msg); err != nil {
				t.Fatal(err)
			}
			o.warnings = append(o.warnings, fmt.Sprintf("%s %d %s", level, code, msg))
		}
		return o
	}
	q := "LOAD DATA LOCAL INFILE 'Reader::convmsg' INTO TABLE conv_msg" + loadColumns
	convoy := s.convoy.open(t, "convoy", "convoy", "im")
	ref := s.ref.Open(t, "im")
	got, want := load(convoy, q), load(ref, q)
	if got.affected != want.affected || got.affected < 3000 {
		t.Errorf("affected rows: Convoy %d, MariaDB %d", got.affected, want.affected)
	}
	// In file order, with the file's row numbers; a duplicate's 1062 has
	// no row, so only the multiset is compared for it.
	if !slices.Equal(withoutDup(got.warnings), withoutDup(want.warnings)) || !sameSet(got.warnings, want.warnings) {
		t.Errorf("warnings:\nConvoy  %q\nMariaDB %q", got.warnings, want.warnings)
	}
	table := func(db *sql.DB) string {
		t.Helper()
		var sb strings.Builder
		rs, err := db.QueryContext(ctx, "SELECT conv_id, seq, msg_id, sender_uid, msg_type, created_at FROM conv_msg ORDER BY conv_id, seq")
		if err != nil {
			t.Fatal(err)
		}
		defer rs.Close()
		for rs.Next() {
			var a, b, c, d, e, f string
			if err := rs.Scan(&a, &b, &c, &d, &e, &f); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintln(&sb, a, b, c, d, e, f)
		}
		return sb.String()
	}
	if g, w := table(convoy), table(ref); g != w {
		t.Fatalf("the loaded rows differ from MariaDB's:\n%s", firstDiff(g, w))
	}
	// Each row is on its shard: read by key, through the shard's route.
	var n int
	if err := convoy.QueryRowContext(ctx, "SELECT COUNT(*) FROM conv_msg WHERE conv_id = 5").Scan(&n); err != nil || n < 2 {
		t.Fatalf("conversation 5 by its key: %d rows, %v", n, err)
	}

	// The mariadb CLI (libmariadb): the same OK line and counts.
	path := filepath.Join(t.TempDir(), "inbox.tsv")
	inbox := "7\t1\t1\t100\t2026-03-01 00:00:00\n8\t1\t1\t101\t2026-03-01 00:00:01\n7\t1\t1\t102\t2026-03-01 00:00:02\n9\t2\n"
	if err := os.WriteFile(path, []byte(inbox), 0o600); err != nil {
		t.Fatal(err)
	}
	script := "LOAD DATA LOCAL INFILE '" + path + "' INTO TABLE im_inbox;\nSELECT uid, conv_id, seq, msg_id FROM im_inbox ORDER BY uid;\n" +
		"LOAD DATA LOCAL INFILE '" + path + "' REPLACE INTO TABLE im_inbox (uid, conv_id, seq, @m, send_time) SET msg_id = COALESCE(@m, 0) + 1000;\nSELECT uid, msg_id FROM im_inbox ORDER BY uid;\n"
	cli := func(addr, user, pass string) string {
		out := runCLI(t, addr, user, pass, "SET sql_mode = '';\n"+script, "-vvv", "--local-infile=1")
		return regexp.MustCompile(` \([0-9.]+ sec\)`).ReplaceAllString(out, "")
	}
	if g, w := cli(s.convoy.addr, "convoy", "convoy"), cli(s.ref.Addr(), "root", ""); g != w {
		t.Errorf("mariadb CLI through Convoy:\n%s\nagainst MariaDB:\n%s", g, w)
	}
}

// TestLoadDataLocalEdges: what LOAD DATA LOCAL refuses and how it behaves
// in a transaction.
func TestLoadDataLocalEdges(t *testing.T) {
	s := newStack(t)
	ctx := context.Background()
	p := startConvoyUsers(t, s.etcd.Endpoints(), `  - {name: convoy, password: convoy, admin: true}
  - {name: reader, password: r, privileges: [read]}`)
	// A conversation whose batch is sent after conversation 11's (Convoy
	// sends a batch per physical table, in the order of their first
	// rows' shards): the load then fails after writing 11's row, which it
	// must undo.
	snap, err := router.NewSnapshot(testLayout(s.ds[0], s.ds[1]))
	if err != nil {
		t.Fatal(err)
	}
	other := uint64(12)
	for router.ShardOf(other) <= router.ShardOf(11) || snap.Target(router.ShardOf(other)) == snap.Target(router.ShardOf(11)) {
		other++
	}
	files := map[string]string{
		"one":    "10\t1\t1001\t1\t1\t2026-03-01 00:00:00\n10\t2\t1002\t1\t1\t2026-03-01 00:00:01\n",
		"two":    fmt.Sprintf("11\t1\t1101\t1\t1\t2026-03-01 00:00:00\n%d\t1\t1201\t1\t1\t2026-03-01 00:00:00\n", other),
		"badkey": "x7\t1\t1\t1\t1\t2026-03-01 00:00:00\n",
	}
	for name, data := range files {
		sqldriver.RegisterReaderHandler(name, func() io.Reader { return strings.NewReader(data) })
		t.Cleanup(func() { sqldriver.DeregisterReaderHandler(name) })
	}
	admin := openDSN(t, p.dsn("convoy", "convoy", "im"))
	mustExec(t, admin, "CREATE TABLE plain (id INT PRIMARY KEY, v VARCHAR(10))")
	sqldriver.RegisterReaderHandler("plain", func() io.Reader { return strings.NewReader("1\ta\n") })
	t.Cleanup(func() { sqldriver.DeregisterReaderHandler("plain") })
	reader := openDSN(t, p.dsn("reader", "r", "im"))
	for _, c := range []struct {
		db    *sql.DB
		q     string
		errno uint16
	}{
		{admin, "LOAD DATA LOCAL INFILE 'Reader::one' INTO TABLE conv_msg (conv_id, seq, nope)", 1054},
		{admin, "LOAD DATA LOCAL INFILE 'Reader::one' INTO TABLE conv_msg (seq, msg_id)", 1235},           // no shard key from the file
		{admin, "LOAD DATA LOCAL INFILE 'Reader::one' INTO TABLE conv_msg (conv_id, seq, seq)", 1110},     // a column twice
		{admin, "LOAD DATA LOCAL INFILE 'Reader::badkey' INTO TABLE conv_msg", 1525},                      // not a key: Convoy cannot route it (as an INSERT)
		{admin, "LOAD DATA LOCAL INFILE 'Reader::plain' INTO TABLE plain", 1148},                          // unsharded: off unless local_infile: all
		{admin, "LOAD DATA LOCAL INFILE 'Reader::one' INTO TABLE conv_msg FIELDS ENCLOSED BY 'ab'", 1083}, // MariaDB's
		{reader, "LOAD DATA LOCAL INFILE 'Reader::one' INTO TABLE conv_msg", 1142},
	} {
		if _, err := c.db.ExecContext(ctx, c.q); errno(err) != c.errno {
			t.Errorf("%s: %v, want %d", c.q, err, c.errno)
		}
	}
	// As MariaDB: not in the prepared statement protocol.
	if _, err := admin.PrepareContext(ctx, "LOAD DATA LOCAL INFILE 'Reader::one' INTO TABLE conv_msg"); errno(err) != 1295 {
		t.Errorf("prepared LOAD DATA: %v, want 1295", err)
	}
	count := func(q string) int {
		t.Helper()
		var n int
		if err := admin.QueryRowContext(ctx, q).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count("SELECT COUNT(*) FROM conv_msg"); n != 0 {
		t.Fatalf("refused loads wrote %d rows", n)
	}
	// The session still works after each (the file was read whole).
	if n := count("SELECT 1"); n != 1 {
		t.Fatal("session broken")
	}

	// In a transaction: one shard's rows commit or roll back with it.
	tx, err := admin.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, tx, "INSERT INTO conv_msg VALUES (10, 9, 1009, 1, 1, '2026-03-01')")
	if r := mustExec(t, tx, "LOAD DATA LOCAL INFILE 'Reader::one' INTO TABLE conv_msg"); affected(r) != 2 {
		t.Fatalf("load in a transaction: %d rows", affected(r))
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if n := count("SELECT COUNT(*) FROM conv_msg WHERE conv_id = 10"); n != 0 {
		t.Fatalf("rolled back: %d rows left", n)
	}
	// Rows of a second shard fail the load, which leaves nothing of its
	// own; the transaction keeps its row.
	tx, err = admin.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, tx, "INSERT INTO conv_msg VALUES (11, 9, 1109, 1, 1, '2026-03-01')")
	if _, err := tx.ExecContext(ctx, "LOAD DATA LOCAL INFILE 'Reader::two' INTO TABLE conv_msg"); errno(err) != 1235 {
		t.Fatalf("a load over two shards in a transaction: %v, want 1235", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if n := count(fmt.Sprintf("SELECT COUNT(*) FROM conv_msg WHERE conv_id IN (11, %d)", other)); n != 1 {
		t.Fatalf("after the failed load and COMMIT: %d rows, want the transaction's 1", n)
	}

	// local_infile: all loads unsharded tables too, through INSERTs.
	p.restartWith(t, "engine:\n  local_infile: all\n")
	admin = openDSN(t, p.dsn("convoy", "convoy", "im"))
	if r := mustExec(t, admin, "LOAD DATA LOCAL INFILE 'Reader::plain' INTO TABLE plain"); affected(r) != 1 {
		t.Fatalf("unsharded load: %d rows", affected(r))
	}
	if n := count("SELECT COUNT(*) FROM plain WHERE v = 'a'"); n != 1 {
		t.Fatalf("unsharded load: %d rows", n)
	}
	// The file is read in its character set (the database's: utf8mb4),
	// whatever the connection's.
	sqldriver.RegisterReaderHandler("accent", func() io.Reader { return strings.NewReader("2\t\xc3\xa9t\xc3\xa9\n") })
	t.Cleanup(func() { sqldriver.DeregisterReaderHandler("accent") })
	conn, err := admin.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	mustExec(t, conn, "SET NAMES latin1")
	mustExec(t, conn, "LOAD DATA LOCAL INFILE 'Reader::accent' INTO TABLE plain")
	var hex string
	if err := admin.QueryRowContext(ctx, "SELECT HEX(v) FROM plain WHERE id = 2").Scan(&hex); err != nil || hex != "C3A974C3A9" {
		t.Fatalf("a utf8mb4 file loaded over a latin1 connection: HEX %s, %v; want C3A974C3A9 (été)", hex, err)
	}
}

func affected(r sql.Result) int64 {
	n, _ := r.RowsAffected()
	return n
}

func withoutDup(ws []string) []string {
	return slices.DeleteFunc(slices.Clone(ws), func(w string) bool { return strings.Contains(w, " 1062 ") })
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range min(len(g), len(w)) {
		if g[i] != w[i] {
			return fmt.Sprintf("line %d: Convoy %q, MariaDB %q", i+1, g[i], w[i])
		}
	}
	return fmt.Sprintf("Convoy %d lines, MariaDB %d", len(g), len(w))
}

// slowFile sends lines of conv_msg rows a few at a time, pausing between.
type slowFile struct {
	next, total int
	buf         []byte
}

func (f *slowFile) Read(p []byte) (int, error) {
	if len(f.buf) == 0 {
		if f.next >= f.total {
			return 0, io.EOF
		}
		time.Sleep(5 * time.Millisecond)
		for range 10 {
			f.next++
			f.buf = fmt.Appendf(f.buf, "%d\t%d\t%d\t1\t1\t2026-03-01 00:00:00\n", 20+f.next%5, f.next, 7_000_000+f.next)
		}
	}
	n := copy(p, f.buf)
	f.buf = f.buf[n:]
	return n, nil
}

// TestLoadDataLocalHotTierAndKill: a load into conversations whose pages
// the hot tier holds leaves those pages exact (rows with their seqs, and
// rows Convoy gives seqs), and KILL QUERY stops a load that is still
// receiving its file: 1317, the rows of the batches sent before stay, the
// session goes on.
func TestLoadDataLocalHotTierAndKill(t *testing.T) {
	s := newStack(t)
	r := testsvc.StartRedis(t)
	p := startConvoy(t, s.etcd.Endpoints(), hotTierYAML(r))
	ctx := context.Background()
	db := p.open(t, "convoy", "convoy", "im")
	const conv = 9100
	for i := range 5 {
		mustExec(t, db, "INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (?, ?, 5, 1, '2026-03-01 00:00:00')", conv, 910000+i)
	}
	seqs := func() []int {
		t.Helper()
		rs, err := db.QueryContext(ctx, firstScreen, conv, 1000)
		if err != nil {
			t.Fatal(err)
		}
		defer rs.Close()
		var out []int
		for rs.Next() {
			var v int
			var msg, sender, typ, at string
			if err := rs.Scan(&v, &msg, &sender, &typ, &at); err != nil {
				t.Fatal(err)
			}
			out = append(out, v)
		}
		return out
	}
	hot := func() float64 { return metricValue(t, scrape(t, p.metrics), `convoy_statements_total{class="hot"}`) }
	// The page fills the hot tier (in the background), then is served
	// from it.
	waitFor(t, "the page served from the hot tier", 5*time.Second, func() bool {
		before := hot()
		got := seqs()
		return len(got) == 5 && hot() > before
	})
	// Each page after a load must be exact, wherever it is served from.
	// Rows with their seqs, then rows without: Convoy allocates them.
	sqldriver.RegisterReaderHandler("withseq", func() io.Reader {
		return strings.NewReader(fmt.Sprintf("%d\t6\t910006\t5\t1\t2026-03-01 00:00:01\n%d\t7\t910007\t5\t1\t2026-03-01 00:00:02\n", conv, conv))
	})
	sqldriver.RegisterReaderHandler("noseq", func() io.Reader {
		return strings.NewReader(fmt.Sprintf("%d\t910008\t5\t2026-03-01 00:00:03\n%d\t910009\t5\t2026-03-01 00:00:04\n", conv, conv))
	})
	t.Cleanup(func() { sqldriver.DeregisterReaderHandler("withseq"); sqldriver.DeregisterReaderHandler("noseq") })
	mustExec(t, db, "LOAD DATA LOCAL INFILE 'Reader::withseq' INTO TABLE conv_msg")
	if got := seqs(); !slices.Equal(got, []int{7, 6, 5, 4, 3, 2, 1}) {
		t.Fatalf("after loading seqs 6 and 7 the page reads %v", got)
	}
	mustExec(t, db, "LOAD DATA LOCAL INFILE 'Reader::noseq' INTO TABLE conv_msg (conv_id, msg_id, sender_uid, created_at) SET msg_type = 3")
	if got := seqs(); !slices.Equal(got, []int{9, 8, 7, 6, 5, 4, 3, 2, 1}) {
		var all string
		_ = db.QueryRowContext(ctx, "SELECT GROUP_CONCAT(seq, ':', msg_id, ':', msg_type) FROM conv_msg WHERE conv_id = ? AND msg_id > 0", conv).Scan(&all)
		t.Fatalf("after loading two rows without seq the page reads %v (rows %s)", got, all)
	}
	// And the page the hot tier serves once it holds it again is exact.
	waitFor(t, "the page served from the hot tier after the loads", 5*time.Second, func() bool {
		before := hot()
		got := seqs()
		if !slices.Equal(got, []int{9, 8, 7, 6, 5, 4, 3, 2, 1}) {
			t.Fatalf("after the loads the page reads %v", got)
		}
		return hot() > before
	})
	var types int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM conv_msg WHERE conv_id = ? AND msg_type = 3 AND seq IN (8, 9)", conv).Scan(&types); err != nil || types != 2 {
		t.Fatalf("loaded rows with allocated seqs: %d, %v", types, err)
	}

	// KILL QUERY while the file is still arriving.
	const total = 3000
	sqldriver.RegisterReaderHandler("slow", func() io.Reader { return &slowFile{total: total} })
	t.Cleanup(func() { sqldriver.DeregisterReaderHandler("slow") })
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var id int64
	if err := conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := conn.ExecContext(ctx, "LOAD DATA LOCAL INFILE 'Reader::slow' INTO TABLE conv_msg")
		done <- err
	}()
	time.Sleep(300 * time.Millisecond)
	mustExec(t, db, fmt.Sprintf("KILL QUERY %d", id))
	select {
	case err := <-done:
		if errno(err) != 1317 {
			t.Fatalf("killed load: %v, want 1317", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the killed load did not end")
	}
	var n int
	if err := conn.QueryRowContext(ctx, "SELECT COUNT(*) FROM conv_msg WHERE msg_id >= 7000000").Scan(&n); err != nil {
		t.Fatalf("the session after the kill: %v", err)
	}
	if n >= total {
		t.Fatalf("the killed load wrote all %d rows", n)
	}
}
