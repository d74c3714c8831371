package migrate

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/convoy-im/convoy/migrate/internal/physical"
	"github.com/convoy-im/convoy/router"
)

// applyAndMirror creates db.t (cols: its columns and key) on both servers
// and returns an applier of shard's rows of it (shard key conv_id, job db)
// and a live writer of it beside the apply.
func applyAndMirror(t *testing.T, ctx context.Context, e *env, db, cols string, shard router.Shard) (*Applier, *liveWriter, *ShardFilter) {
	t.Helper()
	e.database(t, db)
	e.both(t, "CREATE TABLE "+db+".t ("+cols+")")
	f := &ShardFilter{Column: "conv_id", Shard: shard}
	src, dst := e.sides(db, "t")
	a, err := NewApplier(ctx, ApplierConfig{Job: db, Shard: shard, Tables: []TableMove{{src, dst, f}}, Binlog: e.binlogConfig(t)})
	if err != nil {
		t.Fatal(err)
	}
	return a, newMirror(t, ctx, db, src, dst), f
}

// liveWriter writes rows of src to dst beside the apply by the protocol of
// every live writer of the target (resync.go), as a segment repair does
// (and the dual-write's mirror did): the source's current rows of the
// keys, under the target's row locks, a deadlock tried again.
type liveWriter struct {
	src, dst *sql.DB
	st, dt   *table
}

func newMirror(t *testing.T, ctx context.Context, _ string, src, dst Side) *liveWriter {
	t.Helper()
	st, err := loadTable(ctx, src.DB, src.Database, src.Table)
	if err != nil {
		t.Fatal(err)
	}
	return &liveWriter{src: src.DB, dst: dst.DB, st: st, dt: st.as(dst.Database, dst.Table)}
}

// Sync makes the target's rows with these keys equal to the source's (the
// logical table name is the tests' "t").
func (w *liveWriter) Sync(ctx context.Context, _ string, keys []Key) error {
	var err error
	for range 3 {
		if err = w.syncOnce(ctx, keys); err == nil || mysqlErrno(err) != 1213 {
			return err
		}
	}
	return err
}

func (w *liveWriter) syncOnce(ctx context.Context, keys []Key) error {
	sc, err := sessionConn(ctx, w.src)
	if err != nil {
		return err
	}
	defer discard(sc)
	dc, err := sessionConn(ctx, w.dst)
	if err != nil {
		return err
	}
	defer discard(dc)
	return txn(ctx, dc, func(tx *sql.Tx) error {
		_, err := syncKeys(ctx, tx, sourceRead{conn: sc}, []keySync{{src: w.st, dst: w.dt, keys: distinctKeys(keys)}})
		return err
	})
}

// waitFor polls cond every few milliseconds for up to 20 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 20 s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The apply lags behind the mirror: the mirror has written a row's newest
// value (v = 10) to the target while the apply has yet to handle the
// source transactions that wrote v = 1 .. 9. The apply's first batch (v =
// 1 alone: the test holds the checkpoint row's lock while the rest
// arrives) must leave the target at 10, and so must the second (the rest,
// held on another row's lock by the test so that the target can be read
// between the two). Then the target equals the source.
func testApplyBehindMirror(t *testing.T, e *env) {
	ctx := testCtx(t)
	const shard = 17
	a, m, f := applyAndMirror(t, ctx, e, "ahead", "conv_id BIGINT UNSIGNED NOT NULL, seq INT NOT NULL, v INT NOT NULL, PRIMARY KEY (conv_id, seq)", shard)
	src, dst := e.sides("ahead", "t")
	conv := keysOfShard(shard, 1, 1)[0]
	key := func(seq int) Key {
		k, err := physical.KeyOf(conv, uint64(seq))
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	mirror := func(seq int) {
		t.Helper()
		if err := m.Sync(ctx, "t", []Key{key(seq)}); err != nil {
			t.Fatal(err)
		}
	}
	target := func() int {
		t.Helper()
		return int(count(t, e.ddb, "SELECT v FROM ahead.t WHERE conv_id = ? AND seq = 1", conv))
	}
	setV := func(seq, v int) {
		e.src.Exec(t, fmt.Sprintf("UPDATE ahead.t SET v = %d WHERE conv_id = %d AND seq = %d", v, conv, seq))
	}

	origin := currentPosition(t, e.sdb)
	stop := runApplier(t, ctx, a, origin)
	e.src.Exec(t, fmt.Sprintf("INSERT INTO ahead.t VALUES (%[1]d, 1, 0), (%[1]d, 2, 0)", conv))
	mirror(1)
	mirror(2)
	waitCaughtUp(t, ctx, a.CaughtUp)
	base := a.Stats()

	begin := func(q string, args ...any) *sql.Tx {
		t.Helper()
		tx, err := e.ddb.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tx.Rollback() })
		var any1 any
		if err := tx.QueryRowContext(ctx, q, args...).Scan(&any1); err != nil {
			t.Fatal(err)
		}
		return tx
	}
	holdCheckpoint := begin("SELECT position FROM ahead." + CheckpointTable + " WHERE job = 'ahead' FOR UPDATE")
	holdRow2 := begin("SELECT v FROM ahead.t WHERE conv_id = ? AND seq = 2 FOR UPDATE", conv)

	setV(1, 1)
	mirror(1)
	// The batch is formed before its target transaction starts: with v = 1
	// alone in it, the later values queue behind the checkpoint row's lock.
	// (A state, not a sample: the batch stays under way until the test lets
	// the lock go.)
	waitFor(t, "the apply's batch of v = 1 under way", func() bool { return a.Stats().Applying == 1 })
	for v := 2; v <= 10; v++ {
		setV(1, v)
		mirror(1)
	}
	setV(2, 1) // not mirrored: the test holds that row
	waitFor(t, "the reader handing over every transaction", func() bool { return a.Stats().Reader.Txns == base.Reader.Txns+11 })
	if got := target(); got != 10 {
		t.Fatalf("the mirror left v = %d on the target, want 10", got)
	}

	if err := holdCheckpoint.Rollback(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the apply's first batch", func() bool { return a.Stats().Txns > base.Txns })
	if got := target(); got != 10 {
		t.Errorf("after the apply's first batch the target shows v = %d where it showed 10: an older value", got)
	}
	if s := a.Stats(); s.Txns != base.Txns+1 {
		t.Fatalf("the first batch applied %d transactions, want 1 (stats %+v)", s.Txns-base.Txns, s)
	}
	// The second batch waits for row 2.
	time.Sleep(50 * time.Millisecond)
	if got := target(); got != 10 {
		t.Errorf("while the apply's second batch waits, the target shows v = %d where it showed 10", got)
	}
	if err := holdRow2.Rollback(); err != nil {
		t.Fatal(err)
	}
	waitCaughtUp(t, ctx, a.CaughtUp)
	if got := target(); got != 10 {
		t.Errorf("caught up, the target shows v = %d, want 10", got)
	}
	sameShard(t, ctx, e, src, dst, f)
	if err := stop(); err != context.Canceled {
		t.Errorf("Run: %v", err)
	}
}

// rowHistory is one key's states on the source in commit order: a
// positive v for a row of the shard with that value, 0 for none (no row,
// or a row of another shard). v is unique across the test.
type rowHistory []int64

// A writer changes a few rows of a shared table on the source at random
// (insert, update, delete, re-insert, move to another shard and back),
// each write through Convoy mirrored at once, while the apply follows and
// a reader polls the target. Every state the reader sees of a row must be
// at or after the previous one in the row's history on the source (the
// writer records each state before writing it, so the reader can only be
// behind the record); at the end the target equals the source.
func testApplyNeverOlder(t *testing.T, e *env) {
	ctx := testCtx(t)
	const shard = 23
	a, m, f := applyAndMirror(t, ctx, e, "older", "id BIGINT UNSIGNED NOT NULL PRIMARY KEY, conv_id BIGINT UNSIGNED NOT NULL, v BIGINT NOT NULL", shard)
	src, dst := e.sides("older", "t")
	in, out := keysOfShard(shard, 1, 1)[0], keysOfShard(shard+1, 1, 1)[0]
	const keys = 6
	var mu sync.Mutex
	hist := make([]rowHistory, keys+1) // by id, 1..keys
	for id := range hist {
		hist[id] = rowHistory{0}
	}
	record := func(id int, v int64) {
		mu.Lock()
		hist[id] = append(hist[id], v)
		mu.Unlock()
	}

	origin := currentPosition(t, e.sdb)
	stop := runApplier(t, ctx, a, origin)

	// The reader: at most the first few regressions are reported.
	done := make(chan struct{})
	var reads, regressions int
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		at := make([]int, keys+1) // index in hist of the last state seen
		for {
			select {
			case <-done:
				return
			default:
			}
			rs, err := e.ddb.QueryContext(ctx, "SELECT id, v FROM older.t WHERE id <= ?", keys)
			if err != nil {
				t.Errorf("reader: %v", err)
				return
			}
			seen := make([]int64, keys+1)
			for rs.Next() {
				var id, v int64
				if err := rs.Scan(&id, &v); err != nil {
					t.Errorf("reader: %v", err)
				}
				seen[id] = v
			}
			rs.Close()
			reads++
			mu.Lock()
			for id := 1; id <= keys; id++ {
				h, v := hist[id], seen[id]
				i := at[id]
				for i < len(h) && h[i] != v {
					i++
				}
				if i == len(h) {
					regressions++
					if regressions <= 5 {
						t.Errorf("row %d: the target shows v = %d (0: no row), not at or after its state %d (v = %d) in the source's history %v",
							id, v, at[id], h[at[id]], h)
					}
					continue
				}
				at[id] = i
			}
			mu.Unlock()
		}
	}()

	rnd := rand.New(rand.NewPCG(24, 5))
	var next int64
	state := make([]string, keys+1) // "", "in" or "out"
	var mirrorFailures int
	for deadline := time.Now().Add(1500 * time.Millisecond); time.Now().Before(deadline); {
		id := 1 + rnd.IntN(keys)
		next++
		mirrored := true
		switch {
		case state[id] == "":
			record(id, next)
			e.src.Exec(t, fmt.Sprintf("INSERT INTO older.t VALUES (%d, %d, %d)", id, in, next))
			state[id] = "in"
		case state[id] == "out" && rnd.IntN(2) == 0:
			record(id, next)
			e.src.Exec(t, fmt.Sprintf("UPDATE older.t SET conv_id = %d, v = %d WHERE id = %d", in, next, id))
			state[id] = "in"
		case state[id] == "out":
			// Deleted in the other shard: the target has no row either
			// way, a state of its own for the history.
			record(id, 0)
			e.src.Exec(t, fmt.Sprintf("DELETE FROM older.t WHERE id = %d", id))
			state[id] = ""
			mirrored = false
		default:
			switch rnd.IntN(6) {
			case 0:
				record(id, 0)
				e.src.Exec(t, fmt.Sprintf("DELETE FROM older.t WHERE id = %d", id))
				state[id] = ""
			case 1:
				// Not through Convoy (it never moves a row between
				// shards): the apply alone brings it.
				record(id, 0)
				e.src.Exec(t, fmt.Sprintf("UPDATE older.t SET conv_id = %d, v = %d WHERE id = %d", out, next, id))
				state[id] = "out"
				mirrored = false
			default:
				record(id, next)
				e.src.Exec(t, fmt.Sprintf("UPDATE older.t SET v = %d WHERE id = %d", next, id))
			}
		}
		if mirrored {
			k, err := physical.KeyOf(uint64(id))
			if err != nil {
				t.Fatal(err)
			}
			// A failed mirror (deadlocks three times) is left to the
			// apply, as Convoy leaves it to the queue.
			if err := m.Sync(ctx, "t", []Key{k}); err != nil {
				mirrorFailures++
			}
		}
	}
	waitCaughtUp(t, ctx, a.CaughtUp)
	close(done)
	<-readerDone
	sameShard(t, ctx, e, src, dst, f)
	s := a.Stats()
	t.Logf("%d writes (%d mirrors failed), %d target reads, %d regressions; apply: %d transactions, %d upserts, %d deletes",
		next, mirrorFailures, reads, regressions, s.Txns, s.Upserts, s.Deletes)
	if reads < 10 {
		t.Errorf("only %d reads of the target", reads)
	}
	if err := stop(); err != context.Canceled {
		t.Errorf("Run: %v", err)
	}
}
