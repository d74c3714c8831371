package migrate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/convoy-im/convoy/binlog"
	"github.com/convoy-im/convoy/migrate/internal/physical"
	"github.com/convoy-im/convoy/router"
)

// planTable is s.t (conv_id, seq, g generated, v) keyed by (conv_id, seq),
// filtered by conv_id on shard planShard, mapped to d.t.
const planShard = router.Shard(282) // router.ShardOf(2^64-1)

func planApplier(filter bool) *Applier {
	u := func(name string) column {
		return column{Name: name, DataType: "bigint", ColumnType: "bigint(20) unsigned"}
	}
	src := &table{Table: physical.Table{Database: "s", Name: "t", PK: []int{0, 1}, Generated: []string{"g"},
		Columns: []column{u("conv_id"), u("seq"), {Name: "v", DataType: "varchar", ColumnType: "varchar(10)", Nullable: true}}}, filterCol: -1}
	at := &applyTable{src: src}
	if filter {
		at.filter = &ShardFilter{Column: "conv_id", Shard: planShard}
		src.filterCol = 0
	}
	at.dst = src.as("d", "t")
	return &Applier{tables: map[tableName]*applyTable{{"s", "t"}: at}}
}

var planCols = []string{"conv_id", "g", "seq", "v"} // binlog order: the generated column in between

// in and out are conversation ids of the shard and of another one.
var (
	in    = uint64(math.MaxUint64)
	in2   = keysOfShard(planShard, 1, 1)[0]
	out   = keysOfShard(planShard+1, 1, 1)[0]
	other = keysOfShard(planShard+2, 1, 1)[0]
)

func row(conv, seq uint64, v any) []any { return []any{conv, int64(seq * 2), seq, v} }

func ins(r []any) binlog.Change {
	return binlog.Change{Schema: "s", Table: "t", Kind: binlog.Insert, Columns: planCols, After: r}
}
func upd(b, a []any) binlog.Change {
	return binlog.Change{Schema: "s", Table: "t", Kind: binlog.Update, Columns: planCols, Before: b, After: a}
}
func del(r []any) binlog.Change {
	return binlog.Change{Schema: "s", Table: "t", Kind: binlog.Delete, Columns: planCols, Before: r}
}

// renderPlan prints a plan as "d.t (k) (k) | d.u (k)".
func renderPlan(items []keySync) string {
	var parts []string
	for _, it := range items {
		part := it.dst.Database + "." + it.dst.Name
		for _, k := range it.keys {
			part += " " + k.String()
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, " | ")
}

// The plan of a source transaction: the keys of the shard's rows, by the
// After image for inserts and the Before image for deletes, both for
// updates (a row leaving the shard names the key whose target row must go,
// one entering it the key whose row must come, a primary key change both
// keys); each key once, whatever happened to it in between; nothing for
// rows of other shards only. The generated column does not disturb the
// key.
func TestApplyPlan(t *testing.T) {
	a := planApplier(true)
	keys := func(pairs ...uint64) string {
		var ks []Key
		for i := 0; i < len(pairs); i += 2 {
			k, err := physical.KeyOf(pairs[i], pairs[i+1])
			if err != nil {
				t.Fatal(err)
			}
			ks = append(ks, k)
		}
		return renderPlan([]keySync{{dst: &table{Table: physical.Table{Database: "d", Name: "t"}}, keys: distinctKeys(ks)}})
	}
	for _, c := range []struct {
		name    string
		changes []binlog.Change
		want    string // "": no key
		of      int    // changes of the shard
	}{
		{"insert of the shard", []binlog.Change{ins(row(in, 1, "a"))}, keys(in, 1), 1},
		{"insert of another shard", []binlog.Change{ins(row(out, 1, "a"))}, "", 0},
		{"update in place", []binlog.Change{upd(row(in, 1, "a"), row(in, 1, "b"))}, keys(in, 1), 1},
		{"update of another shard", []binlog.Change{upd(row(out, 1, "a"), row(out, 1, "b"))}, "", 0},
		{"update leaving the shard", []binlog.Change{upd(row(in, 1, "a"), row(out, 1, "a"))}, keys(in, 1), 1},
		{"update entering the shard", []binlog.Change{upd(row(out, 1, "a"), row(in2, 1, "a"))}, keys(in2, 1), 1},
		{"update between other shards", []binlog.Change{upd(row(out, 1, "a"), row(other, 1, "a"))}, "", 0},
		{"key change within the shard", []binlog.Change{upd(row(in, 1, "a"), row(in2, 7, "a"))}, keys(in, 1, in2, 7), 1},
		{"delete of the shard", []binlog.Change{del(row(in, 1, nil))}, keys(in, 1), 1},
		{"delete of another shard", []binlog.Change{del(row(out, 1, nil))}, "", 0},
		{"each key once", []binlog.Change{
			ins(row(in, 1, "a")), ins(row(out, 1, "x")), ins(row(in, 2, "b")),
			del(row(in, 1, "a")), del(row(in, 2, "b")),
			ins(row(in, 1, "c")),
			upd(row(in, 1, "c"), row(in, 1, "d")),
		}, keys(in, 1, in, 2), 6},
		{"a table not mapped", []binlog.Change{{Schema: "s", Table: "u", Kind: binlog.Insert, Columns: planCols, After: row(in, 1, "a")}}, "", 0},
	} {
		items, of, err := planOne(a, binlog.Txn{GTID: "0-1-1", Changes: c.changes})
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if got := renderPlan(items); got != c.want || of != c.of {
			t.Errorf("%s:\n got %s (%d changes of the shard)\nwant %s (%d)", c.name, got, of, c.want, c.of)
		}
	}

	// Without a filter every row is the shard's.
	if items, _, err := planOne(planApplier(false), binlog.Txn{Changes: []binlog.Change{ins(row(out, 1, "a"))}}); err != nil || len(items) != 1 {
		t.Errorf("unfiltered: %s, %v", renderPlan(items), err)
	}

	for _, c := range []struct {
		name   string
		change binlog.Change
		want   error
	}{
		{"a column the table lacks", binlog.Change{Schema: "s", Table: "t", Kind: binlog.Insert,
			Columns: []string{"conv_id", "g", "seq", "v", "new"}, After: append(row(in, 1, "a"), int64(1))}, ErrSchemaMismatch},
		{"a stored column missing", binlog.Change{Schema: "s", Table: "t", Kind: binlog.Insert,
			Columns: []string{"conv_id", "g", "seq"}, After: row(in, 1, "a")[:3]}, ErrSchemaMismatch},
		{"a negative shard key", ins([]any{int64(-5), int64(2), uint64(1), "a"}), nil},
		{"an update without its after image", upd(row(in, 1, "a"), nil), nil},
	} {
		_, _, err := planOne(a, binlog.Txn{Changes: []binlog.Change{c.change}})
		if err == nil || c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want an error (%v)", c.name, err, c.want)
		}
	}
	// A NULL shard key belongs to no shard, as CRC32(NULL) matches none.
	if items, _, err := planOne(a, binlog.Txn{Changes: []binlog.Change{ins([]any{nil, nil, uint64(1), "a"})}}); err != nil || len(items) != 0 {
		t.Errorf("NULL key: %s, %v", renderPlan(items), err)
	}
}

// ---- against MariaDB -------------------------------------------------------

var readerIDs atomic.Uint32

// binlogConfig is a replication connection to the source with a replica id
// of its own.
func (e *env) binlogConfig(t *testing.T) binlog.Config {
	return binlog.Config{Addr: e.src.Addr(), User: "root", ServerID: 7000 + readerIDs.Add(1), Log: zaptest.NewLogger(t)}
}

// runApplier runs a.Run in the background; stop cancels it and returns
// Run's error.
func runApplier(t *testing.T, ctx context.Context, a *Applier, origin binlog.Position) (stop func() error) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		err := a.Run(ctx, origin)
		if ctx.Err() == nil {
			// Ended by itself: say so now, a test waiting on the apply
			// would otherwise only time out.
			t.Logf("the applier stopped by itself: %v (stats %+v)", err, a.Stats())
		}
		done <- err
	}()
	var err error
	stopped := false
	stop = func() error {
		if !stopped {
			cancel()
			err = <-done
			stopped = true
		}
		return err
	}
	t.Cleanup(func() { stop() })
	return stop
}

// waitCaughtUp polls until caught() is true (at most 30 s).
func waitCaughtUp(t *testing.T, ctx context.Context, caught func(context.Context) (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, err := caught(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("not caught up after 30 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func currentPosition(t *testing.T, db *sql.DB) binlog.Position {
	t.Helper()
	p, err := binlog.CurrentPosition(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// checkpointRow reads the applier's checkpoint row.
func checkpointRow(t *testing.T, db *sql.DB, database, job string, shard router.Shard) (origin, position string) {
	t.Helper()
	err := db.QueryRow("SELECT origin, position FROM `"+database+"`."+CheckpointTable+" WHERE job = ? AND shard = ?", job, uint64(shard)).Scan(&origin, &position)
	if err != nil {
		t.Fatalf("checkpoint row %s/%d: %v", job, shard, err)
	}
	return origin, position
}

// sameShard compares the shard's rows of src.table with every row of
// dst.table, by dump and by checksum.
func sameShard(t *testing.T, ctx context.Context, e *env, src, dst Side, f *ShardFilter) {
	t.Helper()
	sameDump(t, src.String(), dump(t, e.sdb, src.String(), f), dump(t, e.ddb, dst.String(), nil))
	cs, err := NewChecksummer(ctx, src, dst, f, fast)
	if err != nil {
		t.Fatal(err)
	}
	if st := checksum(t, ctx, cs); !st.Equal() {
		t.Fatalf("checksum of %s: %+v", src, st)
	}
}

// Every kind of source change reaches the target exactly, for the shard
// only: multi-row inserts of every value type (BIGINT UNSIGNED max keys,
// FLOAT bits, zero dates, non-UTF-8 bytes, ENUM, SET, BIT, BINARY(n), a
// generated column), updates, deletes, key updates leaving and entering the
// shard, primary key changes, a transaction that inserts, changes and
// deletes the same rows, a rolled-back one. Then a restart resumes from the
// checkpoint row (not from the origin), a Reset replays everything again
// and converges the same (idempotence), and another origin is refused.
func testApply(t *testing.T, e *env) {
	ctx := testCtx(t)
	e.database(t, "apply")
	ddl := strings.Replace(typesTable, "types.t", "apply.t", 1)
	e.both(t, ddl, "ALTER TABLE apply.t ADD COLUMN half BIGINT UNSIGNED AS (seq DIV 2) VIRTUAL, "+
		"ADD COLUMN st SET('x','y','z') NULL, ADD COLUMN bits BIT(64) NULL, ADD COLUMN fixed BINARY(4) NULL")
	const shard = 282
	f := &ShardFilter{Column: "conv_id", Shard: shard}
	src, dst := e.sides("apply", "t")
	a, err := NewApplier(ctx, ApplierConfig{Job: "apply", Shard: shard, Tables: []TableMove{{src, dst, f}}, Binlog: e.binlogConfig(t)})
	if err != nil {
		t.Fatal(err)
	}
	e.applyMode(t, a)
	origin := currentPosition(t, e.sdb)
	stop := runApplier(t, ctx, a, origin)

	convs := append(keysOfShard(shard, 10, 1), math.MaxUint64)
	others := keysOfShard(shard+1, 5, 1)
	var rows [][]any
	i := 0
	for _, conv := range append(append([]uint64{}, convs...), others...) {
		for seq := uint64(1); seq <= 20; seq++ {
			rows = append(rows, typesRow(conv, seq, i))
			i++
		}
	}
	rows = append(rows, typesRow(math.MaxUint64, math.MaxUint64, i))
	insert(t, e.sdb, "apply.t", typesCols, rows)
	c0, c1, o0 := convs[0], convs[1], others[0]
	e.src.Exec(t,
		"UPDATE apply.t SET st = 'x,z', bits = b'1010', fixed = X'0100', txt = CONCAT(txt, '!'), f = f / 3, d = -d WHERE seq % 3 = 0",
		"UPDATE apply.t SET bits = 18446744073709551615, fixed = 'ab' WHERE conv_id = 18446744073709551615 AND seq = 18446744073709551615",
		"DELETE FROM apply.t WHERE seq = 5",
		// leaving the shard, entering it, and a primary key change inside it
		fmt.Sprintf("UPDATE apply.t SET seq = seq + 1000 WHERE conv_id = %d AND seq > 15", c1),
		fmt.Sprintf("UPDATE apply.t SET conv_id = %d, seq = 101 WHERE conv_id = %d AND seq = 1", o0, c0),
		fmt.Sprintf("UPDATE apply.t SET conv_id = %d, seq = 102 WHERE conv_id = %d AND seq = 2", c1, o0),
		// one transaction: inserted then deleted, inserted twice, changed twice
		fmt.Sprintf(`BEGIN;
			INSERT INTO apply.t (conv_id, seq, created) VALUES (%[1]d, 500, NOW(3)), (%[1]d, 501, NOW(3));
			UPDATE apply.t SET txt = 'gone' WHERE conv_id = %[1]d AND seq = 500;
			DELETE FROM apply.t WHERE conv_id = %[1]d AND seq = 500;
			DELETE FROM apply.t WHERE conv_id = %[1]d AND seq = 501;
			INSERT INTO apply.t (conv_id, seq, created, txt) VALUES (%[1]d, 501, NOW(3), 'again');
			UPDATE apply.t SET txt = 'one' WHERE conv_id = %[1]d AND seq = 6;
			UPDATE apply.t SET txt = 'two' WHERE conv_id = %[1]d AND seq = 6;
			COMMIT`, c1),
		fmt.Sprintf("BEGIN; INSERT INTO apply.t (conv_id, seq, created) VALUES (%d, 900, NOW(3)); ROLLBACK", c1),
		// other shards only: delivered, nothing applied
		fmt.Sprintf("UPDATE apply.t SET txt = 'other' WHERE conv_id = %d", others[2]),
	)
	waitCaughtUp(t, ctx, a.CaughtUp)
	sameShard(t, ctx, e, src, dst, f)
	if n := count(t, e.ddb, "SELECT COUNT(*) FROM apply.t WHERE CRC32(conv_id) % 1024 <> ?", shard); n != 0 {
		t.Errorf("%d rows of other shards on the target", n)
	}
	if n := count(t, e.ddb, "SELECT COUNT(*) FROM apply.t WHERE conv_id = ? AND seq IN (1016, 1020, 102, 501, 6)", c1); n != 5 {
		t.Errorf("moved, re-keyed or re-inserted rows: %d of 5 on the target", n)
	}
	s := a.Stats()
	// No delete need reach the target here: a row inserted and deleted
	// within one batch never does (Deletes counts target rows deleted).
	if s.Txns < 8 || s.Skipped < 1 || s.Upserts == 0 || s.SourceTime.IsZero() || s.Reader.Txns != s.Txns+s.Skipped {
		t.Errorf("stats %+v", s)
	}
	if err := stop(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run after cancel: %v", err)
	}
	o, p := checkpointRow(t, e.ddb, "apply", "apply", shard)
	if o != string(origin) || p == o {
		t.Errorf("checkpoint row origin %q position %q; origin was %q", o, p, origin)
	}

	// A restart resumes at the row: the transactions before it are not
	// delivered again.
	b, err := NewApplier(ctx, ApplierConfig{Job: "apply", Shard: shard, Tables: []TableMove{{src, dst, f}}, Binlog: e.binlogConfig(t)})
	if err != nil {
		t.Fatal(err)
	}
	e.applyMode(t, b)
	stop = runApplier(t, ctx, b, origin)
	e.src.Exec(t, fmt.Sprintf("UPDATE apply.t SET txt = 'after restart' WHERE conv_id = %d AND seq = 3", c0))
	waitCaughtUp(t, ctx, b.CaughtUp)
	if s := b.Stats(); s.Txns != 1 {
		t.Errorf("after a restart at the checkpoint, %d transactions applied, want 1 (stats %+v)", s.Txns, s)
	}
	sameShard(t, ctx, e, src, dst, f)
	e.src.Exec(t, fmt.Sprintf("DELETE FROM apply.t WHERE conv_id = %d AND seq = 3", c0))
	waitCaughtUp(t, ctx, b.CaughtUp)
	if s := b.Stats(); s.Txns != 2 || s.Upserts != 1 || s.Deletes != 1 {
		t.Errorf("an update and a delete of rows the target has: stats %+v", s)
	}
	sameShard(t, ctx, e, src, dst, f)
	stop()

	// Replaying everything again is harmless: the same end state.
	if err := b.Reset(ctx, origin); err != nil {
		t.Fatal(err)
	}
	stop = runApplier(t, ctx, b, origin)
	waitCaughtUp(t, ctx, b.CaughtUp)
	sameShard(t, ctx, e, src, dst, f)
	stop()

	// A replay from another origin is refused while the row says otherwise.
	if err := b.Run(ctx, currentPosition(t, e.sdb)); !errors.Is(err, ErrCheckpointOrigin) {
		t.Errorf("Run from another origin: %v", err)
	}
}

// Two appliers of one job and shard (a migrator that lost its lease and
// still runs): the checkpoint row fences them. An applier that finds the
// row moved from where it left it stops with ErrCheckpointMoved and its
// transaction rolls back; of two appliers racing for the same transactions
// one stops, and the target stays exact.
func testApplyFence(t *testing.T, e *env) {
	ctx := testCtx(t)
	e.database(t, "fence")
	e.both(t, "CREATE TABLE fence.t (conv_id BIGINT UNSIGNED NOT NULL, seq INT NOT NULL, v INT, PRIMARY KEY (conv_id, seq))")
	const shard = 7
	f := &ShardFilter{Column: "conv_id", Shard: shard}
	src, dst := e.sides("fence", "t")
	cfg := func() ApplierConfig {
		return ApplierConfig{Job: "fence", Shard: shard, Tables: []TableMove{{src, dst, f}}, Binlog: e.binlogConfig(t)}
	}
	conv := keysOfShard(shard, 1, 1)[0]
	insertRow := func(seq int) {
		e.src.Exec(t, fmt.Sprintf("INSERT INTO fence.t VALUES (%d, %d, %d)", conv, seq, seq))
	}

	// The row moved by someone else: the next transaction is not applied.
	a, err := NewApplier(ctx, cfg())
	if err != nil {
		t.Fatal(err)
	}
	origin := currentPosition(t, e.sdb)
	stop := runApplier(t, ctx, a, origin)
	insertRow(1)
	waitCaughtUp(t, ctx, a.CaughtUp)
	e.dst.Exec(t, "UPDATE fence."+CheckpointTable+" SET position = CONCAT(position, '0')")
	insertRow(2)
	for deadline := time.Now().Add(10 * time.Second); a.Stats().Reader.Connected; {
		if time.Now().After(deadline) {
			t.Fatal("the applier goes on after its checkpoint row moved")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := stop(); !errors.Is(err, ErrCheckpointMoved) {
		t.Fatalf("Run after the row moved: %v", err)
	}
	if n := count(t, e.ddb, "SELECT COUNT(*) FROM fence.t"); n != 1 {
		t.Fatalf("the fenced-off transaction left %d rows on the target, want 1", n)
	}

	// Two appliers racing.
	origin = currentPosition(t, e.sdb)
	if err := a.Reset(ctx, origin); err != nil {
		t.Fatal(err)
	}
	var appliers [2]*Applier
	var errs [2]chan error
	for i := range appliers {
		a, err := NewApplier(ctx, cfg())
		if err != nil {
			t.Fatal(err)
		}
		appliers[i], errs[i] = a, make(chan error, 1)
		rctx, cancel := context.WithCancel(ctx)
		t.Cleanup(cancel)
		go func() { errs[i] <- a.Run(rctx, origin) }()
	}
	var loser int
	for seq := 3; ; seq++ {
		insertRow(seq)
		select {
		case err := <-errs[0]:
			loser = 0
			if !errors.Is(err, ErrCheckpointMoved) {
				t.Fatalf("applier 0: %v", err)
			}
		case err := <-errs[1]:
			loser = 1
			if !errors.Is(err, ErrCheckpointMoved) {
				t.Fatalf("applier 1: %v", err)
			}
		case <-time.After(100 * time.Millisecond):
			if seq == 50 {
				t.Fatal("two appliers of one job and shard ran side by side for 50 transactions")
			}
			continue
		}
		break
	}
	e.src.Exec(t, fmt.Sprintf("UPDATE fence.t SET v = -v WHERE conv_id = %d", conv))
	waitCaughtUp(t, ctx, appliers[1-loser].CaughtUp)
	// Row 2 never reached the target (its transaction was fenced off, and
	// the racing appliers start after it): gone from the source too, the
	// rest must be equal.
	e.src.Exec(t, fmt.Sprintf("DELETE FROM fence.t WHERE conv_id = %d AND seq = 2", conv))
	waitCaughtUp(t, ctx, appliers[1-loser].CaughtUp)
	sameShard(t, ctx, e, src, dst, f)
}

// A source transaction is applied whole or not at all, with its
// checkpoint: a row the target refuses (a CHECK only the target has) rolls
// back the other rows of the transaction and leaves the checkpoint where it
// was, Run stops with the error, and once the target accepts the row a new
// Run resumes from the checkpoint and applies the transaction. (The first
// transaction's row may already show the second one's update: the apply
// writes the source's current row of each key a transaction changed.)
func testApplyAtomic(t *testing.T, e *env) {
	ctx := testCtx(t)
	e.database(t, "atomic")
	e.src.Exec(t, "CREATE TABLE atomic.t (conv_id BIGINT UNSIGNED NOT NULL, seq INT NOT NULL, v INT, PRIMARY KEY (conv_id, seq))")
	e.dst.Exec(t, "CREATE TABLE atomic.t (conv_id BIGINT UNSIGNED NOT NULL, seq INT NOT NULL, v INT, PRIMARY KEY (conv_id, seq), "+
		"CONSTRAINT no13 CHECK (v <> 13))")
	const shard = 9
	f := &ShardFilter{Column: "conv_id", Shard: shard}
	src, dst := e.sides("atomic", "t")
	a, err := NewApplier(ctx, ApplierConfig{Job: "atomic", Shard: shard, Tables: []TableMove{{src, dst, f}}, Binlog: e.binlogConfig(t)})
	if err != nil {
		t.Fatal(err)
	}
	conv := keysOfShard(shard, 1, 1)[0]
	origin := currentPosition(t, e.sdb)
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx, origin) }()
	e.src.Exec(t, fmt.Sprintf("INSERT INTO atomic.t VALUES (%d, 1, 1)", conv))
	e.src.Exec(t, fmt.Sprintf("BEGIN; INSERT INTO atomic.t VALUES (%[1]d, 2, 12); UPDATE atomic.t SET v = 2 WHERE conv_id = %[1]d AND seq = 1; "+
		"INSERT INTO atomic.t VALUES (%[1]d, 3, 13); COMMIT", conv))
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "no13") {
			t.Fatalf("Run: %v, want the target's CHECK failure", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run goes on past a transaction the target refuses")
	}
	_, saved := checkpointRow(t, e.ddb, "atomic", "atomic", shard)
	if n, v1 := count(t, e.ddb, "SELECT COUNT(*) FROM atomic.t"), count(t, e.ddb, "SELECT COUNT(*) FROM atomic.t WHERE seq = 1 AND v IN (1, 2)"); n != 1 || v1 != 1 {
		t.Errorf("after the refused transaction the target holds %d rows (%d is row 1 with v = 1 or 2), want only row 1", n, v1)
	}
	if a.Stats().Saved != binlog.Position(saved) || a.Stats().Txns != 1 {
		t.Errorf("checkpoint row at %q, stats %+v", saved, a.Stats())
	}
	e.dst.Exec(t, "ALTER TABLE atomic.t DROP CONSTRAINT no13")
	stop := runApplier(t, ctx, a, origin)
	waitCaughtUp(t, ctx, a.CaughtUp)
	sameShard(t, ctx, e, src, dst, f)
	if err := stop(); !errors.Is(err, context.Canceled) {
		t.Errorf("Run: %v", err)
	}
}

// The apply rate with nothing else running: transactions of 100 rows of
// conv_msg, then single-row transactions, written while no applier runs and
// applied from the checkpoint. A figure, not a bound.
func testApplyRate(t *testing.T, e *env) {
	ctx := testCtx(t)
	e.database(t, "arate")
	e.both(t, imTable(t, "conv_msg", "arate", "conv_msg_0000"))
	const shard = 441
	f, err := FilterFor("conv_msg", shard)
	if err != nil {
		t.Fatal(err)
	}
	src, dst := e.sides("arate", "conv_msg_0000")
	a, err := NewApplier(ctx, ApplierConfig{Job: "rate", Shard: shard, Tables: []TableMove{{src, dst, f}}, Binlog: e.binlogConfig(t)})
	if err != nil {
		t.Fatal(err)
	}
	origin := currentPosition(t, e.sdb)
	convs := keysOfShard(shard, 100, 1)
	msg := 0
	batch := func(n int) [][]any {
		var rows [][]any
		for i := 0; i < n; i++ {
			msg++
			rows = append(rows, []any{convs[msg%len(convs)], msg, msg, 42, 1, "2024-05-01 12:00:00.125"})
		}
		return rows
	}
	cols := []string{"conv_id", "seq", "msg_id", "sender_uid", "msg_type", "created_at"}
	for _, c := range []struct {
		txns, rows int
	}{{100, 100}, {1000, 1}} {
		if err := a.Reset(ctx, origin); err != nil { // nothing to replay before these writes
			t.Fatal(err)
		}
		for i := 0; i < c.txns; i++ {
			insert(t, e.sdb, "arate.conv_msg_0000", cols, batch(c.rows))
		}
		start := time.Now()
		stop := runApplier(t, ctx, a, origin)
		waitCaughtUp(t, ctx, a.CaughtUp)
		el := time.Since(start)
		stop()
		t.Logf("applied %d transactions of %d rows in %v: %.0f rows/s, %.0f transactions/s",
			c.txns, c.rows, el, float64(c.txns*c.rows)/el.Seconds(), float64(c.txns)/el.Seconds())
		origin = currentPosition(t, e.sdb)
	}
	sameShard(t, ctx, e, src, dst, f)
}

// planOne is the plan of one source transaction and its count of changes
// of the shard.
func planOne(a *Applier, t binlog.Txn) ([]keySync, int, error) {
	var p keyPlan
	n, err := a.plan(&p, t)
	return p.items(), n, err
}

// A batch's plan: the keys of each table once, sorted, whatever the order
// and the kind of the changes; tables in the order they first appear.
func TestKeyPlanBatch(t *testing.T) {
	t1 := &applyTable{dst: &table{Table: physical.Table{Database: "d", Name: "t1"}}}
	t2 := &applyTable{dst: &table{Table: physical.Table{Database: "d", Name: "t2"}}}
	key := func(k int) Key { kk, _ := physical.KeyOf(k); return kk }
	var p keyPlan
	p.add(t2, key(9)) // txn 1
	p.add(t1, key(2))
	p.add(t1, key(1)) // txn 2
	p.add(t2, key(9))
	p.add(t1, key(2)) // txn 3
	got := renderPlan(p.items())
	want := "d.t2 (9) | d.t1 (1) (2)"
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}
