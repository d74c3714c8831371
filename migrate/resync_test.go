package migrate

import (
	"testing"

	"github.com/convoy-im/convoy/migrate/internal/physical"
)

// A writer that inserted a row where the target had none reads the source
// again before it commits (resync.go, step 4). Here the first writer reads
// the source's row under the gap lock of the missing key, the source then
// deletes the row, and the mirror of that delete locks the same gap (a gap
// lock is shared), reads the source later, finds nothing to write and
// commits; the first writer's insert then lands with its older read. The
// second read finds the row gone: without it the target would keep a row
// the source deleted, with every writer that saw the delete done.
func testSyncGap(t *testing.T, e *env) {
	ctx := testCtx(t)
	e.database(t, "gap")
	e.both(t, "CREATE TABLE gap.t (id BIGINT UNSIGNED PRIMARY KEY, v INT)")
	e.src.Exec(t, "INSERT INTO gap.t VALUES (5, 1), (6, 1)")
	src, dst := e.sides("gap", "t")
	st, dt, err := loadPair(ctx, src, dst, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := newMirror(t, ctx, "gap", src, dst)
	key := func(id uint64) Key {
		k, err := physical.KeyOf(id)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	sc, err := sessionConn(ctx, e.sdb)
	if err != nil {
		t.Fatal(err)
	}
	defer discard(sc)
	dc, err := sessionConn(ctx, e.ddb)
	if err != nil {
		t.Fatal(err)
	}
	defer discard(dc)
	tx, err := dc.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	s, err := lockAndRead(ctx, tx, sourceRead{conn: sc}, []keySync{{src: st, dst: dt, keys: []Key{key(5), key(6)}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(s[0].rows) != 2 || len(s[0].held) != 0 {
		t.Fatalf("read %d source rows, %d target rows held; want 2 and 0", len(s[0].rows), len(s[0].held))
	}
	e.src.Exec(t, "DELETE FROM gap.t WHERE id = 5", "UPDATE gap.t SET v = 2 WHERE id = 6")
	if err := m.Sync(ctx, "t", []Key{key(5)}); err != nil {
		t.Fatal(err)
	}
	n, err := s.write(ctx, tx, sourceRead{conn: sc})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	sameDump(t, "gap.t", dump(t, e.sdb, "gap.t", nil), dump(t, e.ddb, "gap.t", nil))
	// Two rows inserted, then one deleted and one rewritten.
	if n.upserts != 3 || n.deletes != 1 {
		t.Errorf("counts %+v, want 3 upserts and 1 delete", n)
	}
}
