package migrate

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/convoy-im/convoy/internal/testsvc"
	"github.com/convoy-im/convoy/router"
)

// TestPurgeSharedTable: the purge of shard A from a physical table that
// the live shard B shares. A transaction of B holding row locks of B's
// rows does not stop it; B's inserts and updates next to the rows a chunk
// deletes, made while that chunk's transaction is open, do not wait for
// it; a row of A another transaction holds is deleted once it is free,
// the others without waiting for it; only A's rows go; a purge stopped
// after a chunk goes on from the last key it handed over.
func TestPurgeSharedTable(t *testing.T) {
	m := testsvc.StartMariaDB(t)
	// A lock wait that should not happen fails in seconds, not 50 s.
	m.Exec(t, "SET GLOBAL innodb_lock_wait_timeout = 5")
	db := m.Open(t, "")
	m.Exec(t, "CREATE DATABASE im_0", imTable(t, "conv_msg", "im_0", "conv_msg_0000"))
	const table = "im_0.conv_msg_0000"
	ctx := testCtx(t)
	const a, b = router.Shard(17), router.Shard(15)
	// Every other key of B is left free: keys of B between A's rows that
	// B's inserts take during the purge.
	ka := keysOfShard(a, 300, 1)
	var kb, spare []uint64
	for i, k := range keysOfShard(b, 600, 1) {
		if i%2 == 0 {
			kb = append(kb, k)
		} else {
			spare = append(spare, k)
		}
	}
	var rows [][]any
	for _, k := range append(append([]uint64{}, ka...), kb...) {
		for s := 1; s <= 3; s++ {
			rows = append(rows, []any{k, s, k*10 + uint64(s), 7, 1, "2026-01-02 03:04:05"})
		}
	}
	insert(t, db, table, []string{"conv_id", "seq", "msg_id", "sender_uid", "msg_type", "created_at"}, rows)
	shardRows := func(sh router.Shard) int64 {
		return count(t, db, "SELECT COUNT(*) FROM "+table+" WHERE CRC32(conv_id) % 1024 = ?", uint64(sh))
	}

	// B's open transaction: row locks on half of B's rows, all along the
	// table (updates by primary key, as Convoy's writes are). The old
	// purge's scanning DELETE waited for them.
	held, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Rollback()
	heldRows := 0
	for i := 0; i < len(kb); i += 2 {
		for s := 1; s <= 3; s++ {
			if _, err := held.ExecContext(ctx, "UPDATE "+table+" SET msg_type = 2 WHERE conv_id = ? AND seq = ?", kb[i], s); err != nil {
				t.Fatal(err)
			}
			heldRows++
		}
	}

	// B's writer: a lock wait of a second fails its statement.
	bw, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer bw.Close()
	if _, err := bw.ExecContext(ctx, "SET SESSION innodb_lock_wait_timeout = 1"); err != nil {
		t.Fatal(err)
	}
	chunks, inserted := 0, 0
	side := Side{DB: db, Database: "im_0", Table: "conv_msg_0000"}
	filter := &ShardFilter{Column: "conv_id", Shard: a}
	var last Key
	stop := errors.New("stopped after the first chunk")
	p := &shardPurge{side: side, filter: filter,
		saved: func(k Key) error {
			last = k
			return stop // as if the process died once the position was saved
		},
		inChunk: func(ctx context.Context) error {
			chunks++
			// Inside the chunk's transaction, its A rows deleted and
			// locked: B inserts rows between them and updates its rows
			// next to them.
			upto := ka[deleteChunk/3-1] // the last conversation of A this chunk deletes
			for _, k := range spare {
				if k > upto {
					break
				}
				if _, err := bw.ExecContext(ctx, "INSERT INTO "+table+" VALUES (?, 1, ?, 7, 1, NOW())", k, k*10+1); err != nil {
					return fmt.Errorf("B's insert of conversation %d during the purge's chunk: %w", k, err)
				}
				inserted++
			}
			for i := 1; i < len(kb) && kb[i] < upto; i += 2 {
				if _, err := bw.ExecContext(ctx, "UPDATE "+table+" SET msg_type = 3 WHERE conv_id = ? AND seq = 1", kb[i]); err != nil {
					return fmt.Errorf("B's update of conversation %d during the purge's chunk: %w", kb[i], err)
				}
			}
			return nil
		}}
	if err := p.run(ctx, nil); !errors.Is(err, stop) {
		t.Fatalf("purge, first chunk: %v", err)
	}
	if chunks != 1 || inserted == 0 {
		t.Fatalf("%d chunks, %d of B's rows inserted during the first one: the test checks nothing", chunks, inserted)
	}
	if n := shardRows(a); n != int64(3*len(ka)-deleteChunk) {
		t.Fatalf("%d rows of A left after the first chunk, want %d", n, 3*len(ka)-deleteChunk)
	}

	// Resumed from the saved key, B's transaction still open, while
	// another transaction holds a row of A (REPEATABLE READ locks the
	// first row past a range it read, whoever's it is): every other row
	// goes without waiting for it, that one once it is free.
	other, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Rollback()
	var locked uint64
	if err := other.QueryRowContext(ctx, "SELECT conv_id FROM "+table+" WHERE conv_id = ? AND seq = 1 FOR UPDATE", ka[250]).Scan(&locked); err != nil {
		t.Fatal(err)
	}
	p.saved, p.inChunk = nil, nil
	done := make(chan error, 1)
	go func() { done <- p.run(ctx, last) }()
	waitRows := func(want int64) bool {
		for range 600 {
			if shardRows(a) == want {
				return true
			}
			select {
			case err := <-done:
				t.Fatalf("the purge returned (%v) with %d rows of A left", err, shardRows(a))
			case <-time.After(50 * time.Millisecond):
			}
		}
		return false
	}
	if !waitRows(1) {
		t.Fatalf("%d rows of A left while one is held, want only that one", shardRows(a))
	}
	if err := other.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("purge resumed after %s: %v", last, err)
	}
	if n := shardRows(a); n != 0 {
		t.Fatalf("%d rows of A left after the purge", n)
	}
	if err := held.Commit(); err != nil {
		t.Fatal(err)
	}
	if n, want := shardRows(b), int64(3*len(kb)+inserted); n != want {
		t.Fatalf("B has %d rows after the purge, want %d", n, want)
	}
	if n := count(t, db, "SELECT COUNT(*) FROM "+table+" WHERE msg_type = ?", 2); n != int64(heldRows) {
		t.Fatalf("%d rows carry B's held update, want %d", n, heldRows)
	}

	// A table the shard had to itself goes once empty; a missing one is
	// no error.
	m.Exec(t, "CREATE TABLE im_0.conv_msg_0017 LIKE "+table,
		fmt.Sprintf("INSERT INTO im_0.conv_msg_0017 VALUES (%d, 1, 1, 7, 1, NOW())", ka[0]))
	own := Side{DB: db, Database: "im_0", Table: "conv_msg_0017"}
	for range 2 {
		if err := deleteShard(ctx, own, filter, nil, true); err != nil {
			t.Fatal(err)
		}
	}
	if n := count(t, db, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = 'conv_msg_0017'", "im_0"); n != 0 {
		t.Fatal("the shard's own table was not dropped")
	}
}
