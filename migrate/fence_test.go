package migrate

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/convoy-im/convoy/router"
)

// The storage fence (fence.go) on a physical table two shards share: once
// a shard is fenced, no write of it by anyone but the migration commits
// there, including a transaction that wrote it before the fence and was
// still open (it is killed, so its commit fails); the other shard writes
// as before; lifting the fence lets the shard's writes in again.
func testStorageFence(t *testing.T, e *env) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e.src.Exec(t, "CREATE DATABASE sfence", imTable(t, "conv_msg", "sfence", "conv_msg_0000"))
	const moved, other = router.Shard(5), router.Shard(6)
	keys, otherKeys := keysOfShard(moved, 3, 1), keysOfShard(other, 1, 1)
	s := Side{DB: e.sdb, Database: "sfence", Table: "conv_msg_0000"}
	f, err := FilterFor("conv_msg", moved)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // idempotent
		if err := ensureFenceTable(ctx, e.sdb, "sfence"); err != nil {
			t.Fatal(err)
		}
		if err := installFence(ctx, s, f); err != nil {
			t.Fatal(err)
		}
	}
	if n := count(t, e.sdb, "SELECT COUNT(*) FROM sfence."+FenceTable); n != int64(router.NumShards) {
		t.Fatalf("the fence table has %d rows, want one per shard", n)
	}
	ins := func(c interface {
		ExecContext(context.Context, string, ...any) (sql.Result, error)
	}, conv uint64, seq int) error {
		_, err := c.ExecContext(ctx, "INSERT INTO sfence.conv_msg_0000 (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES (?, ?, ?, 7, 1, NOW(3))",
			conv, seq, conv*100+uint64(seq))
		return err
	}
	for _, k := range append(append([]uint64{}, keys...), otherKeys...) {
		if err := ins(e.sdb, k, 1); err != nil {
			t.Fatalf("a write before any fence: %v", err)
		}
	}

	// A transaction that wrote the shard and is still open when the fence
	// goes up: the fence waits for it, then kills it.
	open, err := e.sdb.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	if _, err := open.ExecContext(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	if err := ins(open, keys[0], 2); err != nil {
		t.Fatal(err)
	}
	pos, err := setFence(ctx, e.sdb, fenceChange{database: "sfence", shard: moved, fenced: true, job: "j1", movedTo: "ds9:im_9"}, zap.NewNop())
	if err != nil || pos == "" {
		t.Fatalf("setFence with an open writer: %q, %v", pos, err)
	}
	if _, err := open.ExecContext(ctx, "COMMIT"); err == nil {
		t.Fatal("the transaction open across the fence committed")
	}
	if n := count(t, e.sdb, fmt.Sprintf("SELECT COUNT(*) FROM sfence.conv_msg_0000 WHERE conv_id = %d AND seq = 2", keys[0])); n != 0 {
		t.Fatalf("the killed transaction's row is there %d times", n)
	}

	// Every write of the fenced shard is refused, naming where it went;
	// the other shard of the table writes as before.
	for _, stmt := range []string{
		fmt.Sprintf("INSERT INTO sfence.conv_msg_0000 (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES (%d, 3, 1, 7, 1, NOW(3))", keys[1]),
		fmt.Sprintf("UPDATE sfence.conv_msg_0000 SET msg_type = 2 WHERE conv_id = %d", keys[1]),
		fmt.Sprintf("DELETE FROM sfence.conv_msg_0000 WHERE conv_id = %d", keys[2]),
		// A row of the other shard may not enter the fenced one either.
		fmt.Sprintf("UPDATE sfence.conv_msg_0000 SET conv_id = %d WHERE conv_id = %d", keysOfShard(moved, 1, 1<<40)[0], otherKeys[0]),
	} {
		_, err := e.sdb.ExecContext(ctx, stmt)
		if mysqlErrno(err) != 1036 || !strings.Contains(err.Error(), "Table 'sfence.conv_msg_0000' is read only for shard 5: Convoy moved it to ds9:im_9") {
			t.Errorf("%s on a fenced shard: %v, want 1036 naming the shard and where it went", stmt, err)
		}
	}
	if err := ins(e.sdb, otherKeys[0], 2); err != nil {
		t.Fatalf("a write of the other shard of the fenced table: %v", err)
	}
	if _, err := e.sdb.ExecContext(ctx, "DELETE FROM sfence.conv_msg_0000 WHERE conv_id = ? AND seq = 2", otherKeys[0]); err != nil {
		t.Fatalf("a delete of the other shard: %v", err)
	}
	// The migration's sessions pass (the reverse stream, the purge).
	mc, err := purgeConn(ctx, e.sdb)
	if err != nil {
		t.Fatal(err)
	}
	if err := ins(mc, keys[1], 4); err != nil {
		t.Fatalf("a migration session's write of the fenced shard: %v", err)
	}
	discard(mc)

	// Lifted: the shard writes again.
	if _, err := setFence(ctx, e.sdb, fenceChange{database: "sfence", shard: moved, job: "j1"}, zap.NewNop()); err != nil {
		t.Fatal(err)
	}
	if err := ins(e.sdb, keys[1], 5); err != nil {
		t.Fatalf("a write after the fence was lifted: %v", err)
	}
	if fenced, err := fenceState(ctx, e.sdb, "sfence", moved); err != nil || fenced {
		t.Fatalf("fenceState after lifting: %v, %v", fenced, err)
	}
}
