package migrate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/convoy-im/convoy/binlog"
	"github.com/convoy-im/convoy/router"
)

// checkMutations runs on testCopyTypes' exact copy: the checksum finds it
// equal, then each single-column change of one target row, of every value
// kind, is found in exactly the segment holding that row and repaired.
func checkMutations(t *testing.T, ctx context.Context, e *env, f *ShardFilter, rows [][]any) {
	src, dst := e.sides("types", "t")
	cs, err := NewChecksummer(ctx, src, dst, f, fast)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	st := checksum(t, ctx, cs)
	t.Logf("checksum of %d rows (13 columns) per side: %v", len(rows), time.Since(start))
	if !st.Equal() || st.SourceRows != int64(len(rows)) || st.TargetRows != st.SourceRows || st.Segments != 4 {
		t.Fatalf("checksum of an exact copy: %+v", st)
	}
	sample, err := cs.Sample(ctx, 50)
	if err != nil || sample.Compared < 25 || len(sample.Diffs) != 0 {
		t.Fatalf("sample of an exact copy: %+v, %v", sample, err)
	}

	is := func(col int, v any) func([]any) bool {
		return func(r []any) bool {
			if b, ok := v.([]byte); ok {
				rb, ok := r[col].([]byte)
				return ok && bytes.Equal(rb, b)
			}
			return r[col] == v
		}
	}
	for _, m := range []struct {
		name, set string
		match     func([]any) bool
		args      []any
	}{
		{"empty string to NULL", "txt = NULL", is(5, ""), nil},
		{"NULL to empty string", "txt = ''", is(5, nil), nil},
		{"letter case", "txt = 'A'", is(5, "a"), nil},
		{"trailing space", "txt = 'trailing '", is(5, "trailing  "), nil},
		{"emoji", "txt = REPLACE(txt, '😀', '😃')", func(r []any) bool { s, ok := r[5].(string); return ok && len(s) > 4 && s[:4] == "😀" }, nil},
		{"one byte", "body = CONCAT(LEFT(body, 4), X'81')", func(r []any) bool { b, ok := r[4].([]byte); return ok && len(b) == 5 && b[0] == 0xff }, nil},
		{"empty bytes to NULL", "body = NULL", is(4, []byte{}), nil},
		{"one millisecond", "created = created + INTERVAL 1000 MICROSECOND", is(6, "1970-01-01 00:00:00.001"), nil},
		{"zero date", "created = '0001-01-01 00:00:00.000'", is(6, "0000-00-00 00:00:00.000"), nil},
		{"timestamp", "ts = '2021-03-28 01:30:00.123457'", is(7, "2021-03-28 01:30:00.123456"), nil},
		{"decimal last digit", "amount = amount - 0.0000000001", is(8, "-12345678901234567890.0123456789"), nil},
		{"float ulp", "f = ?", is(9, float32(1.0000001)), []any{float64(math.Nextafter32(1.0000001, 2))}},
		{"double ulp", "d = ?", is(10, 0.1+0.2), []any{math.Nextafter(0.1+0.2, 1)}},
		{"unsigned max", "u_big = u_big - 1", is(3, uint64(math.MaxUint64)), nil},
		{"signed min", "s_big = s_big + 1", is(2, int64(math.MinInt64)), nil},
		{"NULL moves to the next column", "s_big = u_big, u_big = NULL",
			func(r []any) bool { u, ok := r[3].(uint64); return r[2] == nil && ok && u > 0 && u < math.MaxInt64 }, nil},
		{"enum", "e = 'c'", is(11, "a"), nil},
		{"json", `j = '"😃"'`, is(12, `"😀"`), nil},
	} {
		var row []any
		for _, r := range rows {
			if m.match(r) {
				row = r
				break
			}
		}
		if row == nil {
			t.Fatalf("%s: no generated row matches", m.name)
		}
		conv, seq := row[0].(uint64), row[1].(uint64)
		res, err := e.ddb.Exec("UPDATE types.t SET "+m.set+" WHERE conv_id = ? AND seq = ?", append(m.args, conv, seq)...)
		if err != nil {
			t.Fatalf("%s: %v", m.name, err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			t.Fatalf("%s: the UPDATE changed %d rows", m.name, n)
		}
		st := checksum(t, ctx, cs)
		if len(st.Differing) != 1 || !contains(st.Differing[0], conv, seq) {
			t.Errorf("%s of (%d,%d): differing segments %v", m.name, conv, seq, st.Differing)
			continue
		}
		rep, err := cs.RepairSegment(ctx, st.Differing[0])
		if err != nil || rep.Deleted != 0 || rep.Written < 1 {
			t.Fatalf("%s: repair %+v, %v", m.name, rep, err)
		}
		if r, err := cs.CompareSegment(ctx, st.Differing[0]); err != nil || !r.Equal {
			t.Fatalf("%s: after repair %+v, %v", m.name, r, err)
		}
	}
	sameDump(t, "after repairs", dump(t, e.sdb, "types.t", f), dump(t, e.ddb, "types.t", nil))

	// Sampled rows name the column that differs.
	e.dst.Exec(t, "UPDATE types.t SET txt = CONCAT(COALESCE(txt, ''), '!')")
	sample, err = cs.Sample(ctx, 20)
	if err != nil || sample.Compared < 10 || len(sample.Diffs) != sample.Compared {
		t.Fatalf("sample after changing every txt: %+v, %v", sample, err)
	}
	for _, d := range sample.Diffs {
		if fmt.Sprint(d.Columns) != "[txt]" || d.Missing || d.Extra {
			t.Errorf("row %s: %+v", d.Key, d)
		}
	}
}

// conv_msg rows of four shards share one physical table. The shard's copy
// leaves the others behind; then rows extra on the target (before the
// shard's first key, in the middle, after its last), a row missing from it
// and a row of another shard that only the target has: the checksum finds
// the three extra and the missing row in their segments and ignores the
// other shard's row; repairs delete exactly the extra rows and restore the
// missing one.
func testSharedTable(t *testing.T, e *env) {
	ctx := testCtx(t)
	e.database(t, "shared")
	for _, l := range []string{"conv_msg", "msg_content"} {
		e.src.Exec(t, imTable(t, l, "shared", l+"_0000"))
		e.dst.Exec(t, imTable(t, l, "shared", l+"_0000"))
	}
	const shard = 441
	keys := keysOfShard(shard, 22, 1)
	var msgs, contents [][]any
	msgID := uint64(1)
	add := func(conv uint64, seqs int) {
		for seq := 1; seq <= seqs; seq++ {
			msgs = append(msgs, []any{conv, seq, msgID, 7, 1, "2024-05-01 12:00:00.250"})
			contents = append(contents, []any{msgID, conv, 7, 1, []byte{0xde, 0xad, byte(seq)}, "2024-05-01 12:00:00.250"})
			msgID++
		}
	}
	for _, k := range keys[1:21] {
		add(k, 100)
	}
	for sh := router.Shard(shard + 1); sh <= shard+3; sh++ {
		for _, k := range keysOfShard(sh, 3, 1) {
			add(k, 100)
		}
	}
	insert(t, e.sdb, "shared.conv_msg_0000", []string{"conv_id", "seq", "msg_id", "sender_uid", "msg_type", "created_at"}, msgs)
	insert(t, e.sdb, "shared.msg_content_0000", []string{"msg_id", "conv_id", "sender_uid", "msg_type", "content", "created_at"}, contents)

	for _, l := range []string{"conv_msg", "msg_content"} {
		f, _ := FilterFor(l, shard)
		src, dst := e.sides("shared", l+"_0000")
		c, err := NewCopier(ctx, src, dst, f, WithRate(0))
		if err != nil {
			t.Fatal(err)
		}
		if ck := copyAll(t, ctx, e, c); ck.Rows != 2000 {
			t.Errorf("%s: copied %d rows, want 2000", l, ck.Rows)
		}
		table := "shared." + l + "_0000"
		sameDump(t, l, dump(t, e.sdb, table, f), dump(t, e.ddb, table, nil))
		if n := count(t, e.sdb, "SELECT COUNT(*) FROM "+table); n != 2900 {
			t.Errorf("%s: the source has %d rows left, want 2900", l, n)
		}
	}

	f, _ := FilterFor("conv_msg", shard)
	other := keysOfShard(shard+1, 1, 1)[0]
	e.dst.Exec(t, fmt.Sprintf(`INSERT INTO shared.conv_msg_0000 VALUES
		(%d, 1, 900001, 7, 1, '2024-05-01 12:00:00.000'),
		(%d, 5000, 900002, 7, 1, '2024-05-01 12:00:00.000'),
		(%d, 1, 900003, 7, 1, '2024-05-01 12:00:00.000'),
		(%d, 99999, 900004, 7, 1, '2024-05-01 12:00:00.000')`, keys[0], keys[10], keys[21], other),
		fmt.Sprintf("DELETE FROM shared.conv_msg_0000 WHERE conv_id = %d AND seq = 50", keys[5]))
	src, dst := e.sides("shared", "conv_msg_0000")
	cs, err := NewChecksummer(ctx, src, dst, f, WithSegmentRows(500), fast)
	if err != nil {
		t.Fatal(err)
	}
	st := checksum(t, ctx, cs)
	if st.SourceRows != 2000 || st.TargetRows != 2002 || st.Segments != 5 {
		t.Errorf("checksum %+v; want 2000 vs 2002 rows in 5 segments", st)
	}
	for _, k := range [][2]uint64{{keys[0], 1}, {keys[10], 5000}, {keys[21], 1}, {keys[5], 50}} {
		found := false
		for _, seg := range st.Differing {
			found = found || contains(seg, k[0], k[1])
		}
		if !found {
			t.Errorf("no differing segment holds (%d,%d): %v", k[0], k[1], st.Differing)
		}
	}
	// Stopped after two segments and resumed from its JSON state, a run
	// ends where the uninterrupted one did.
	var saved []byte
	if _, err := cs.Run(ctx, ChecksumState{}, func(s ChecksumState) error {
		saved, _ = json.Marshal(s)
		if s.Segments == 2 {
			return errors.New("stop")
		}
		return nil
	}); err == nil {
		t.Fatal("a save error did not stop the run")
	}
	var mid ChecksumState
	if err := json.Unmarshal(saved, &mid); err != nil || mid.Segments != 2 {
		t.Fatalf("saved state %s: %v", saved, err)
	}
	resumed, err := cs.Run(ctx, mid, nil)
	if err != nil || fmt.Sprint(resumed) != fmt.Sprint(st) {
		t.Errorf("resumed run %+v, %v; uninterrupted %+v", resumed, err, st)
	}

	sample, err := cs.Sample(ctx, 5000) // every row
	if err != nil || sample.Compared != 2000 || len(sample.Diffs) != 1 || !sample.Diffs[0].Missing ||
		sample.Diffs[0].Key.String() != fmt.Sprintf("(%d,50)", keys[5]) {
		t.Errorf("sample of every row: compared %d, diffs %+v, %v", sample.Compared, sample.Diffs, err)
	}
	var deleted, written int64
	for _, seg := range st.Differing {
		r, err := cs.RepairSegment(ctx, seg)
		if err != nil {
			t.Fatal(err)
		}
		deleted += r.Deleted
		written += r.Written
	}
	if deleted != 3 {
		t.Errorf("repairs deleted %d rows, want 3", deleted)
	}
	if st := checksum(t, ctx, cs); !st.Equal() {
		t.Errorf("after repair: %+v", st)
	}
	sameDump(t, "repaired", dump(t, e.sdb, "shared.conv_msg_0000", f), dump(t, e.ddb, "shared.conv_msg_0000", f))
	if n := count(t, e.ddb, "SELECT COUNT(*) FROM shared.conv_msg_0000 WHERE conv_id = ?", other); n != 1 {
		t.Errorf("the other shard's target row: %d rows, want 1 (not the repair's business)", n)
	}
	t.Logf("%d segments differed; repairs wrote %d rows and deleted %d", len(st.Differing), written, deleted)

	// A difference that is gone when the segment is read again (a write in
	// flight) is not reported; without rechecks it would be.
	seg := Segment{Upto: Key{[]byte(fmt.Sprint(keys[3])), []byte("1")}}
	for _, rechecks := range []int{1, 0} {
		e.dst.Exec(t, fmt.Sprintf("UPDATE shared.conv_msg_0000 SET msg_type = 99 WHERE conv_id = %d AND seq = 1", keys[2]))
		cs, err := NewChecksummer(ctx, src, dst, f, WithRecheck(rechecks, 10*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		cs.onCompare = func(attempt int) {
			if attempt == 0 {
				e.dst.Exec(t, fmt.Sprintf("UPDATE shared.conv_msg_0000 SET msg_type = 1 WHERE conv_id = %d AND seq = 1", keys[2]))
			}
		}
		r, err := cs.CompareSegment(ctx, seg)
		if err != nil {
			t.Fatal(err)
		}
		if r.Equal != (rechecks > 0) || r.Rechecks != rechecks {
			t.Errorf("with %d rechecks: %+v", rechecks, r)
		}
	}

	// A segment the source writes faster than the rechecks look (each read
	// is followed by another change) differs at every ordinary read; the
	// settled recheck locks the source's rows, lets the "applier" (settle)
	// catch up with the source's position, and finds it equal. A target
	// change the source never made still differs.
	row := fmt.Sprintf("conv_id = %d AND seq = 1", keys[2])
	for _, real := range []bool{false, true} {
		e.src.Exec(t, "UPDATE shared.conv_msg_0000 SET msg_type = 1 WHERE "+row)
		e.dst.Exec(t, "UPDATE shared.conv_msg_0000 SET msg_type = 0 WHERE "+row)
		pending := 1
		var settled []string
		cs, err := NewChecksummer(ctx, src, dst, f, WithRecheck(1, 10*time.Millisecond),
			WithSettledRecheck(func(_ context.Context, pos binlog.Position) error {
				settled = append(settled, string(pos))
				v := pending
				if real {
					v += 1000
				}
				e.dst.Exec(t, fmt.Sprintf("UPDATE shared.conv_msg_0000 SET msg_type = %d WHERE %s", v%256, row))
				return nil
			}))
		if err != nil {
			t.Fatal(err)
		}
		cs.onCompare = func(attempt int) {
			pending = 100 + attempt
			e.src.Exec(t, fmt.Sprintf("UPDATE shared.conv_msg_0000 SET msg_type = %d WHERE %s", pending, row))
		}
		r, err := cs.CompareSegment(ctx, seg)
		if err != nil {
			t.Fatal(err)
		}
		if r.Equal == real || r.Rechecks != 2 || len(settled) != 1 || settled[0] == "" {
			t.Errorf("settled recheck (target really differs: %v): %+v, settle called with %q", real, r, settled)
		}
	}
	// The same for a sampled row: read again with the source's row locked
	// once the "applier" caught up, it is equal unless the target really
	// differs.
	for _, real := range []bool{false, true} {
		e.src.Exec(t, "UPDATE shared.conv_msg_0000 SET msg_type = 1 WHERE "+row)
		e.dst.Exec(t, "UPDATE shared.conv_msg_0000 SET msg_type = 0 WHERE "+row)
		settled := 0
		cs, err := NewChecksummer(ctx, src, dst, f, WithRecheck(1, 10*time.Millisecond),
			WithSettledRecheck(func(_ context.Context, pos binlog.Position) error {
				settled++
				v := map[bool]int{false: 1, true: 5}[real]
				e.dst.Exec(t, fmt.Sprintf("UPDATE shared.conv_msg_0000 SET msg_type = %d WHERE %s", v, row))
				return nil
			}))
		if err != nil {
			t.Fatal(err)
		}
		sample, err := cs.Sample(ctx, 5000) // every row
		if err != nil {
			t.Fatal(err)
		}
		if (len(sample.Diffs) == 1) != real || len(sample.Diffs) > 1 || settled != 1 {
			t.Errorf("settled sample (target really differs: %v): %+v after %d settled reads", real, sample.Diffs, settled)
		}
		if real && len(sample.Diffs) == 1 && sample.Diffs[0].String() != fmt.Sprintf("(%d,1) differs in msg_type", keys[2]) {
			t.Errorf("sampled row diff: %q", sample.Diffs[0])
		}
	}
	e.dst.Exec(t, "UPDATE shared.conv_msg_0000 SET msg_type = 1 WHERE "+row)
	e.src.Exec(t, "UPDATE shared.conv_msg_0000 SET msg_type = 1 WHERE "+row)
}

// Writes on the source while the copy runs are not in the copy (they are
// after its snapshot; the binlog replay brings them): the checksum finds the
// segments they touched, and repairing those segments makes the shard equal.
func testConcurrentWrites(t *testing.T, e *env) {
	ctx := testCtx(t)
	e.database(t, "live")
	e.src.Exec(t, imTable(t, "conv_msg", "live", "conv_msg_0000"))
	e.dst.Exec(t, imTable(t, "conv_msg", "live", "conv_msg_0000"))
	const shard = 77
	convs := keysOfShard(shard, 30, 1)
	others := keysOfShard(shard+1, 5, 1)
	var msgs [][]any
	msgID := uint64(1)
	for _, k := range append(append([]uint64{}, convs...), others...) {
		for seq := 1; seq <= 100; seq++ {
			msgs = append(msgs, []any{k, seq, msgID, 7, 1, "2024-05-01 12:00:00.250"})
			msgID++
		}
	}
	insert(t, e.sdb, "live.conv_msg_0000", []string{"conv_id", "seq", "msg_id", "sender_uid", "msg_type", "created_at"}, msgs)
	f, _ := FilterFor("conv_msg", shard)
	src, dst := e.sides("live", "conv_msg_0000")
	c, err := NewCopier(ctx, src, dst, f, WithRate(6000))
	if err != nil {
		t.Fatal(err)
	}
	snap, err := OpenSnapshot(ctx, e.sdb)
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()

	var ops atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(1, 2))
		next := uint64(1_000_000)
		for {
			select {
			case <-stop:
				return
			default:
			}
			conv := convs[rng.IntN(len(convs))]
			var q string
			var args []any
			switch rng.IntN(4) {
			case 0:
				q, args = "UPDATE live.conv_msg_0000 SET msg_type = msg_type + 1 WHERE conv_id = ? AND seq = ?", []any{conv, 1 + rng.IntN(100)}
			case 1:
				next++
				q, args = "INSERT INTO live.conv_msg_0000 VALUES (?, ?, ?, 9, 2, NOW(3))", []any{conv, next, next}
			case 2:
				q, args = "DELETE FROM live.conv_msg_0000 WHERE conv_id = ? AND seq = ?", []any{conv, 1 + rng.IntN(100)}
			default:
				q, args = "UPDATE live.conv_msg_0000 SET msg_type = 3 WHERE conv_id = ?", []any{others[rng.IntN(len(others))]}
			}
			if _, err := e.sdb.Exec(q, args...); err != nil {
				t.Errorf("writer: %v", err)
				return
			}
			ops.Add(1)
			time.Sleep(2 * time.Millisecond)
		}
	}()
	ck, err := c.Run(ctx, snap, Checkpoint{}, nil)
	for ops.Load() < 20 {
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if err != nil || !ck.Done || ck.Rows != 3000 {
		t.Fatalf("Run = %+v, %v; want the snapshot's 3000 rows", ck, err)
	}

	cs, err := NewChecksummer(ctx, src, dst, f, WithSegmentRows(200), fast)
	if err != nil {
		t.Fatal(err)
	}
	st := checksum(t, ctx, cs)
	if st.Equal() {
		t.Fatalf("%d writes after the snapshot, and the checksum found the shard equal: %+v", ops.Load(), st)
	}
	for _, seg := range st.Differing {
		if _, err := cs.RepairSegment(ctx, seg); err != nil {
			t.Fatal(err)
		}
	}
	if st2 := checksum(t, ctx, cs); !st2.Equal() {
		t.Fatalf("after repairing %d segments: %+v", len(st.Differing), st2)
	}
	sameDump(t, "repaired", dump(t, e.sdb, "live.conv_msg_0000", f), dump(t, e.ddb, "live.conv_msg_0000", nil))
	t.Logf("%d source writes during the copy; %d of %d segments differed and were repaired", ops.Load(), len(st.Differing), st.Segments)
}
