package migrate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/convoy-im/convoy/router"
)

// A snapshot's position is the binlog point of its read view: the GTID
// position the server reports just before it (nothing else writes), rows
// committed after it are invisible to the copy, and a later snapshot stands
// further on. The copier refuses a snapshot of another server.
func testSnapshot(t *testing.T, e *env) {
	ctx := testCtx(t)
	e.database(t, "snap")
	e.both(t, "CREATE TABLE snap.t (id BIGINT UNSIGNED PRIMARY KEY, v INT)")
	e.src.Exec(t, "INSERT INTO snap.t SELECT seq, seq FROM snap.seq_1_to_100")
	var before string
	if err := e.sdb.QueryRow("SELECT @@gtid_binlog_pos").Scan(&before); err != nil {
		t.Fatal(err)
	}
	snap, err := OpenSnapshot(ctx, e.sdb)
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	if snap.Position.GTID != before || before == "" || snap.Position.File == "" || snap.Position.Pos == 0 {
		t.Fatalf("snapshot at %s, server's gtid_binlog_pos was %q", snap.Position, before)
	}
	e.src.Exec(t, "INSERT INTO snap.t SELECT seq, seq FROM snap.seq_101_to_150", "UPDATE snap.t SET v = -1 WHERE id = 7")

	src, dst := e.sides("snap", "t")
	c, err := NewCopier(ctx, src, dst, nil, WithRate(0))
	if err != nil {
		t.Fatal(err)
	}
	// The target server's snapshot is the wrong one.
	wrong, err := OpenSnapshot(ctx, e.ddb)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Run(ctx, wrong, Checkpoint{}, nil); err == nil || !strings.Contains(err.Error(), "server") {
		t.Errorf("Run with the target's snapshot: %v", err)
	}
	wrong.Close()

	ck, err := c.Run(ctx, snap, Checkpoint{}, nil)
	if err != nil || !ck.Done || ck.Rows != 100 {
		t.Fatalf("Run = %+v, %v; want 100 rows, done", ck, err)
	}
	if n := count(t, e.ddb, "SELECT COUNT(*) FROM snap.t WHERE v = -1 OR id > 100"); n != 0 {
		t.Errorf("%d rows committed after the snapshot reached the target", n)
	}
	later, err := OpenSnapshot(ctx, e.sdb)
	if err != nil {
		t.Fatal(err)
	}
	defer later.Close()
	if later.Position.File != snap.Position.File || later.Position.Pos <= snap.Position.Pos || later.Position.GTID == snap.Position.GTID {
		t.Errorf("later snapshot at %s, first at %s", later.Position, snap.Position)
	}
	if _, err := json.Marshal(snap.Position); err != nil {
		t.Error(err)
	}
}

// typesTable has every kind of value the IM tables hold and a few more,
// with a composite BIGINT UNSIGNED key that reaches 2^64-1.
const typesTable = `CREATE TABLE types.t (
  conv_id BIGINT UNSIGNED NOT NULL,
  seq     BIGINT UNSIGNED NOT NULL,
  s_big   BIGINT NULL,
  u_big   BIGINT UNSIGNED NULL,
  body    VARBINARY(4096) NULL,
  txt     VARCHAR(100) NULL,
  created DATETIME(3) NOT NULL,
  ts      TIMESTAMP(6) NULL,
  amount  DECIMAL(30,10) NULL,
  f       FLOAT NULL,
  d       DOUBLE NULL,
  e       ENUM('a','b','c') NULL,
  j       JSON NULL,
  PRIMARY KEY (conv_id, seq)
) DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci`

var typesCols = []string{"conv_id", "seq", "s_big", "u_big", "body", "txt", "created", "ts", "amount", "f", "d", "e", "j"}

// typesRow is the i-th generated row.
func typesRow(conv, seq uint64, i int) []any {
	pick := func(m int, vals ...any) any { return vals[i%m%len(vals)] }
	return []any{conv, seq,
		pick(4, nil, int64(math.MinInt64), int64(-i), int64(math.MaxInt64)),
		pick(5, nil, uint64(math.MaxUint64), uint64(i), uint64(math.MaxInt64)+1, uint64(0)),
		pick(6, nil, []byte{}, []byte{0xff, 0xfe, 0x00, byte(i), 0x80}, []byte("plain"), []byte{0xc3, 0x28}, []byte{0}),
		pick(7, nil, "", "😀 emoji 会话 "+fmt.Sprint(i), fmt.Sprintf("row %d ", i), "a", "A", "trailing  "),
		pick(3, fmt.Sprintf("2024-02-29 23:59:59.%03d", i%1000), "0000-00-00 00:00:00.000", "1970-01-01 00:00:00.001"),
		pick(3, nil, "2021-03-28 01:30:00.123456", "2038-01-19 03:14:07.999999"),
		pick(4, nil, "-12345678901234567890.0123456789", fmt.Sprintf("%d.5", i), "0.0000000001"),
		pick(4, nil, float32(1.0000001), float32(3.4028234e38), float32(i)/3),
		pick(5, nil, 0.1+0.2, math.MaxFloat64, 5e-324, float64(i)/7),
		pick(4, nil, "a", "b", "c"),
		pick(3, nil, `{"k": "v", "n": [1, 2.5]}`, `"😀"`),
	}
}

// A shard's rows of a table with every value kind are copied exactly:
// NULL and empty values, BIGINT (UNSIGNED) extremes in key and value,
// non-UTF-8 bytes, DATETIME(3) and zero dates, emoji, FLOAT bits. Rows of
// another shard in the same table stay behind. Then the checksum finds the
// copy equal, and finds and repairs one-column changes of every kind.
func testCopyTypes(t *testing.T, e *env) {
	ctx := testCtx(t)
	e.database(t, "types")
	e.both(t, typesTable)
	const shard = 282 // router.ShardOf(2^64-1)
	convs := append(keysOfShard(shard, 30, 1), math.MaxUint64)
	var rows [][]any
	i := 0
	for _, conv := range convs {
		for seq := uint64(1); seq <= 100; seq++ {
			rows = append(rows, typesRow(conv, seq, i))
			i++
		}
	}
	rows = append(rows, typesRow(math.MaxUint64, math.MaxUint64, i))
	var others [][]any
	for j, conv := range keysOfShard(shard+1, 10, 1) {
		for seq := uint64(1); seq <= 50; seq++ {
			others = append(others, typesRow(conv, seq, j))
		}
	}
	insert(t, e.sdb, "types.t", typesCols, rows)
	insert(t, e.sdb, "types.t", typesCols, others)

	f := &ShardFilter{Column: "conv_id", Shard: shard}
	src, dst := e.sides("types", "t")
	c, err := NewCopier(ctx, src, dst, f, WithRate(0), WithChunkRows(250))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ck := copyAll(t, ctx, e, c)
	t.Logf("unthrottled copy of %d rows (13 columns): %v", len(rows), time.Since(start))
	if ck.Rows != int64(len(rows)) {
		t.Errorf("copied %d rows, want %d", ck.Rows, len(rows))
	}
	if p := c.Progress(); p.Rows != int64(len(rows)) || p.Estimate != int64(len(rows)) || !p.Done || p.ETA != 0 {
		t.Errorf("progress %+v", p)
	}
	sameDump(t, "shard rows", dump(t, e.sdb, "types.t", f), dump(t, e.ddb, "types.t", nil))
	if n := count(t, e.sdb, "SELECT COUNT(*) FROM types.t"); n != int64(len(rows)+len(others)) {
		t.Errorf("source has %d rows", n)
	}

	checkMutations(t, ctx, e, f, rows)
}

// A copy cancelled after a few chunks resumes from its JSON checkpoint in a
// new process (new copier, new snapshots: one per chunk here, the snapshot
// rotation of WithSnapshotMaxAge) and ends equal to a full copy: every row
// once, the count exact. The table is im_inbox (three-column key) shared
// by four shards.
func testResume(t *testing.T, e *env) {
	ctx := testCtx(t)
	e.database(t, "resume")
	e.src.Exec(t, imTable(t, "im_inbox", "resume", "im_inbox_0000"))
	e.dst.Exec(t, imTable(t, "im_inbox", "resume", "im_inbox_0000"))
	const shard = 441
	var rows [][]any
	for sh := router.Shard(shard); sh < shard+4; sh++ {
		for _, uid := range keysOfShard(sh, 30, 1000) {
			for conv := uint64(1); conv <= 10; conv++ {
				for seq := uint64(1); seq <= 10; seq++ {
					rows = append(rows, []any{uid, conv * 7, seq, uid*1000 + conv*10 + seq, "2024-01-01 00:00:00.123"})
				}
			}
		}
	}
	insert(t, e.sdb, "resume.im_inbox_0000", []string{"uid", "conv_id", "seq", "msg_id", "send_time"}, rows)
	f, err := FilterFor("im_inbox", shard)
	if err != nil {
		t.Fatal(err)
	}
	src, dst := e.sides("resume", "im_inbox_0000")
	c, err := NewCopier(ctx, src, dst, f, WithRate(0), WithChunkRows(100))
	if err != nil {
		t.Fatal(err)
	}
	snap, err := OpenSnapshot(ctx, e.sdb)
	if err != nil {
		t.Fatal(err)
	}
	first := snap.Position // the job persists this before Run writes
	runCtx, cancel := context.WithCancel(ctx)
	var saved []byte
	chunks := 0
	ck, err := c.Run(runCtx, snap, Checkpoint{}, func(ck Checkpoint) error {
		chunks++
		saved, _ = json.Marshal(ck)
		if chunks == 5 {
			cancel()
		}
		return nil
	})
	cancel()
	snap.Close()
	if !errors.Is(err, context.Canceled) || ck.Rows != 500 || ck.Done {
		t.Fatalf("cancelled Run = %+v, %v; want 500 rows, context.Canceled", ck, err)
	}
	if n := count(t, e.ddb, "SELECT COUNT(*) FROM resume.im_inbox_0000"); n != 500 {
		t.Fatalf("target has %d rows after 5 chunks", n)
	}

	var resumed Checkpoint
	if err := json.Unmarshal(saved, &resumed); err != nil {
		t.Fatal(err)
	}
	c2, err := NewCopier(ctx, src, dst, f, WithRate(0), WithChunkRows(100), WithSnapshotMaxAge(time.Nanosecond))
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	for ck = resumed; !ck.Done; runs++ {
		snap, err := OpenSnapshot(ctx, e.sdb)
		if err != nil {
			t.Fatal(err)
		}
		if snap.Position.Pos < first.Pos {
			t.Fatalf("a later snapshot at %s is before the first at %s", snap.Position, first)
		}
		ck, err = c2.Run(ctx, snap, ck, nil)
		snap.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	if runs < 25 {
		t.Errorf("%d runs; WithSnapshotMaxAge(1ns) should end each after one chunk", runs)
	}
	if ck.Rows != 3000 {
		t.Errorf("checkpoint counts %d rows, want 3000", ck.Rows)
	}
	sameDump(t, "resumed copy", dump(t, e.sdb, "resume.im_inbox_0000", f), dump(t, e.ddb, "resume.im_inbox_0000", nil))
}

// The target's connection dies between two chunks (the server killed it,
// as it does when it goes down): Run fails with an error that names the
// target table, the checkpoint of the chunks written, and a new Run from it
// completes the copy.
func testTargetLost(t *testing.T, e *env) {
	ctx := testCtx(t)
	e.database(t, "lost")
	e.both(t, "CREATE TABLE lost.t (id BIGINT UNSIGNED PRIMARY KEY, v INT)")
	e.src.Exec(t, "INSERT INTO lost.t SELECT seq, seq FROM lost.seq_1_to_500")
	src, dst := e.sides("lost", "t")
	c, err := NewCopier(ctx, src, dst, nil, WithRate(0), WithChunkRows(100))
	if err != nil {
		t.Fatal(err)
	}
	snap, err := OpenSnapshot(ctx, e.sdb)
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	ck, err := c.Run(ctx, snap, Checkpoint{}, func(ck Checkpoint) error {
		if ck.Rows == 100 {
			// Every other session on the target ends, the copier's too.
			conn, err := e.ddb.Conn(ctx)
			if err != nil {
				return err
			}
			defer conn.Close()
			var ids []string
			rows, err := conn.QueryContext(ctx, "SELECT ID FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() AND USER = 'root'")
			if err != nil {
				return err
			}
			for rows.Next() {
				var id string
				if err := rows.Scan(&id); err != nil {
					return err
				}
				ids = append(ids, id)
			}
			rows.Close()
			for _, id := range ids {
				// 1094: gone meanwhile.
				if _, err := conn.ExecContext(ctx, "KILL "+id); err != nil && mysqlErrno(err) != 1094 {
					return err
				}
			}
		}
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "`lost`.`t`") || ck.Rows != 100 || ck.Done {
		t.Fatalf("Run with the target's session killed = %+v, %v; want 100 rows and an error naming `lost`.`t`", ck, err)
	}
	if ck, err = c.Run(ctx, snap, ck, nil); err != nil || !ck.Done || ck.Rows != 500 {
		t.Fatalf("Run resumed = %+v, %v; want 500 rows, done", ck, err)
	}
	sameDump(t, "resumed copy", dump(t, e.sdb, "lost.t", nil), dump(t, e.ddb, "lost.t", nil))
}

// The rate is a bound: n rows at r rows/s take at least n/r (the limiter
// starts empty), and the copier's own rows/s never exceed it. SetRate
// applies to a running copy at once.
func testRate(t *testing.T, e *env) {
	ctx := testCtx(t)
	e.database(t, "rate")
	e.both(t, "CREATE TABLE rate.t (id BIGINT UNSIGNED PRIMARY KEY, v VARBINARY(100))")
	e.src.Exec(t, "INSERT INTO rate.t SELECT seq, REPEAT('x', 100) FROM rate.seq_1_to_3000")
	src, dst := e.sides("rate", "t")

	c, err := NewCopier(ctx, src, dst, nil) // DefaultRate
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	copyAll(t, ctx, e, c)
	el := time.Since(start)
	want := time.Duration(3000.0 / DefaultRate * float64(time.Second))
	if el < want*95/100 {
		t.Errorf("3000 rows at %d rows/s copied in %v, want >= %v", DefaultRate, el, want)
	}
	if el > 3*want+2*time.Second {
		t.Errorf("3000 rows at %d rows/s took %v", DefaultRate, el)
	}
	if p := c.Progress(); p.RowsPerSec > DefaultRate*1.05 || p.RowsPerSec <= 0 {
		t.Errorf("progress shows %.0f rows/s at a limit of %d", p.RowsPerSec, DefaultRate)
	}
	t.Logf("3000 rows at %d rows/s: %v", DefaultRate, el)

	e.dst.Exec(t, "TRUNCATE rate.t")
	slow, err := NewCopier(ctx, src, dst, nil, WithRate(500)) // 6 s
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(300 * time.Millisecond)
		slow.SetRate(0)
	}()
	start = time.Now()
	copyAll(t, ctx, e, slow)
	if el := time.Since(start); el > 4*time.Second {
		t.Errorf("SetRate(0) after 300 ms; the copy still took %v", el)
	}
}

// A composite key of VARBINARY (bytes that are not UTF-8) and a signed INT
// pages, checkpoints through JSON ({"hex": ...}) and resumes.
func testBinaryKey(t *testing.T, e *env) {
	ctx := testCtx(t)
	e.database(t, "bin")
	e.both(t, "CREATE TABLE bin.t (k VARBINARY(16) NOT NULL, n INT NOT NULL, v VARCHAR(10), PRIMARY KEY (k, n))")
	var rows [][]any
	for i := 0; i < 60; i++ {
		for n := -2; n <= 2; n++ {
			rows = append(rows, []any{[]byte{byte(i * 37), 0xff, byte(i)}, n, fmt.Sprint(i, n)})
		}
	}
	rows = append(rows, []any{[]byte{}, math.MinInt32, "min"})
	insert(t, e.sdb, "bin.t", []string{"k", "n", "v"}, rows)
	src, dst := e.sides("bin", "t")
	c, err := NewCopier(ctx, src, dst, nil, WithRate(0), WithChunkRows(7))
	if err != nil {
		t.Fatal(err)
	}
	snap, err := OpenSnapshot(ctx, e.sdb)
	if err != nil {
		t.Fatal(err)
	}
	var saved []byte
	ck, err := c.Run(ctx, snap, Checkpoint{}, func(ck Checkpoint) error {
		saved, _ = json.Marshal(ck)
		if ck.Rows >= 70 {
			return errors.New("stop here")
		}
		return nil
	})
	snap.Close()
	if err == nil || ck.Rows != 70 {
		t.Fatalf("Run = %+v, %v", ck, err)
	}
	if !strings.Contains(string(saved), `"hex"`) {
		t.Errorf("checkpoint %s has no hex key part", saved)
	}
	var resumed Checkpoint
	if err := json.Unmarshal(saved, &resumed); err != nil {
		t.Fatal(err)
	}
	snap, err = OpenSnapshot(ctx, e.sdb)
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	if ck, err = c.Run(ctx, snap, resumed, nil); err != nil || !ck.Done || ck.Rows != int64(len(rows)) {
		t.Fatalf("resumed Run = %+v, %v", ck, err)
	}
	sameDump(t, "binary keys", dump(t, e.sdb, "bin.t", nil), dump(t, e.ddb, "bin.t", nil))

	cs, err := NewChecksummer(ctx, src, dst, nil, WithSegmentRows(10), fast)
	if err != nil {
		t.Fatal(err)
	}
	if st := checksum(t, ctx, cs); !st.Equal() || st.Segments != 31 {
		t.Errorf("checksum %+v", st)
	}
	e.dst.Exec(t, "UPDATE bin.t SET v = 'changed' WHERE n = 1 AND k = X'25ff01'")
	sample, err := cs.Sample(ctx, 1000) // ORDER BY RAND() path: every row
	if err != nil {
		t.Fatal(err)
	}
	if sample.Compared != len(rows) || len(sample.Diffs) != 1 || fmt.Sprint(sample.Diffs[0].Columns) != "[v]" ||
		sample.Diffs[0].Key.String() != "(0x25ff01,1)" {
		t.Errorf("sample: compared %d, diffs %+v", sample.Compared, sample.Diffs)
	}
}

// Tables that cannot be copied exactly are refused before anything runs.
func testRefusals(t *testing.T, e *env) {
	ctx := testCtx(t)
	e.database(t, "refuse")
	e.src.Exec(t, "CREATE TABLE refuse.a (id BIGINT UNSIGNED PRIMARY KEY, v INT, s VARCHAR(5))",
		"CREATE TABLE refuse.nopk (id INT)",
		"CREATE TABLE refuse.fk (f FLOAT PRIMARY KEY)",
		"CREATE TABLE refuse.gen (id INT PRIMARY KEY, v INT, w INT AS (v * 2) VIRTUAL)")
	e.dst.Exec(t, "CREATE TABLE refuse.a (id BIGINT UNSIGNED PRIMARY KEY, v BIGINT, s VARCHAR(5))",
		"CREATE TABLE refuse.b (id BIGINT UNSIGNED PRIMARY KEY, v INT, s VARCHAR(5) COLLATE utf8mb4_bin)",
		"CREATE TABLE refuse.c (id BIGINT UNSIGNED, v INT, s VARCHAR(5), PRIMARY KEY (id, v))",
		"CREATE TABLE refuse.nopk (id INT)",
		"CREATE TABLE refuse.fk (f FLOAT PRIMARY KEY)",
		"CREATE TABLE refuse.gen (id INT PRIMARY KEY, v INT, w INT AS (v * 2) VIRTUAL)")
	s := func(table string) Side { return Side{DB: e.sdb, Database: "refuse", Table: table} }
	d := func(table string) Side { return Side{DB: e.ddb, Database: "refuse", Table: table} }
	for _, c := range []struct {
		src, dst Side
		filter   *ShardFilter
		want     error
	}{
		{s("a"), d("a"), nil, ErrSchemaMismatch},
		{s("a"), d("b"), nil, ErrSchemaMismatch},
		{s("a"), d("c"), nil, ErrSchemaMismatch},
		{s("a"), d("missing"), nil, ErrNoTable},
		{s("nopk"), d("nopk"), nil, ErrUnsupportedKey},
		{s("fk"), d("fk"), nil, ErrUnsupportedKey},
		{s("gen"), d("gen"), &ShardFilter{Column: "uid"}, ErrSchemaMismatch},
	} {
		if _, err := NewCopier(ctx, c.src, c.dst, c.filter); !errors.Is(err, c.want) {
			t.Errorf("NewCopier(%s, %s) = %v, want %v", c.src, c.dst, err, c.want)
		}
		if _, err := NewChecksummer(ctx, c.src, c.dst, c.filter); !errors.Is(err, c.want) {
			t.Errorf("NewChecksummer(%s, %s) = %v, want %v", c.src, c.dst, err, c.want)
		}
	}
	// A generated column is neither copied nor compared; the rest copies.
	e.src.Exec(t, "INSERT INTO refuse.gen (id, v) VALUES (1, 5), (2, NULL)")
	src, dst := e.sides("refuse", "gen")
	c, err := NewCopier(ctx, src, dst, nil, WithRate(0))
	if err != nil {
		t.Fatal(err)
	}
	copyAll(t, ctx, e, c)
	sameDump(t, "generated column", dump(t, e.sdb, "refuse.gen", nil), dump(t, e.ddb, "refuse.gen", nil))
	// The shard key must be an integer: CRC32 of other types is not ShardOf.
	if _, err := NewCopier(ctx, Side{DB: e.sdb, Database: "refuse", Table: "a"}, Side{DB: e.sdb, Database: "refuse", Table: "a"}, &ShardFilter{Column: "s"}); err == nil {
		t.Error("a VARCHAR shard key column was accepted")
	}
	if _, err := FilterFor("users", 1); err == nil {
		t.Error("FilterFor accepted an unsharded table")
	}
}
