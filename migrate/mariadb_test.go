package migrate

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/convoy-im/convoy/router"
)

// TestMariaDB runs every test that needs servers against one source and
// one target MariaDB (starting them is most of the cost); each subtest has
// databases of its own. Run one with -run 'TestMariaDB/Resume'.
func TestMariaDB(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct {
		name string
		f    func(*testing.T, *env)
	}{
		{"ShardFilterMatchesRouter", testShardFilterMatchesRouter},
		{"Snapshot", testSnapshot},
		{"CopyTypes", testCopyTypes},
		{"SharedTable", testSharedTable},
		{"Resume", testResume},
		{"TargetLost", testTargetLost},
		{"Rate", testRate},
		{"BinaryKey", testBinaryKey},
		{"Refusals", testRefusals},
		{"ConcurrentWrites", testConcurrentWrites},
		{"Apply", testApply},
		{"ApplyFence", testApplyFence},
		{"ApplyAtomic", testApplyAtomic},
		{"ApplyRate", testApplyRate},
		{"ApplyBehindMirror", testApplyBehindMirror},
		{"ApplyNeverOlder", testApplyNeverOlder},
		{"StaleChunk", testStaleChunk},
		{"Backfill", testBackfill},
		{"StorageFence", testStorageFence},
		{"Throttle", testThrottle},
		{"SyncGap", testSyncGap},
	} {
		t.Run(c.name, func(t *testing.T) { c.f(t, e) })
	}
}

// TestMariaDBImageApply runs the apply's test of column types and row
// shapes (updates leaving, entering and re-keying the shard, rows inserted
// and deleted in one transaction, a restart) with the apply as the
// target's only writer: binlog images, as a ready job applies.
func TestMariaDBImageApply(t *testing.T) {
	e := newEnv(t)
	e.soleApply = true
	testApply(t, e)
}

// The copier and the checksummer filter with CRC32(col) % 1024 in SQL; it
// must name the shard router.ShardOf names, for router's own vectors and
// for random keys up to 2^64-1, read from a BIGINT UNSIGNED column.
func testShardFilterMatchesRouter(t *testing.T, e *env) {
	e.src.Exec(t, "CREATE DATABASE crc", "CREATE TABLE crc.k (k BIGINT UNSIGNED PRIMARY KEY)")
	keys := []uint64{0, 1, 2, 42, 1<<63 + 5, math.MaxUint64, math.MaxInt64, 1 << 63}
	for i := 0; i < 2000; i++ {
		keys = append(keys, rand.Uint64()>>(rand.IntN(64)))
	}
	var rows [][]any
	seen := map[uint64]bool{}
	for _, k := range keys {
		if !seen[k] {
			seen[k] = true
			rows = append(rows, []any{k})
		}
	}
	insert(t, e.sdb, "crc.k", []string{"k"}, rows)
	rs, err := e.sdb.Query("SELECT k, CRC32(k) % 1024 FROM crc.k WHERE 1 = ?", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	n := 0
	for rs.Next() {
		var k uint64
		var sh int
		if err := rs.Scan(&k, &sh); err != nil {
			t.Fatal(err)
		}
		if router.ShardOf(k) != router.Shard(sh) {
			t.Errorf("key %d: MariaDB CRC32 %% 1024 = %d, router.ShardOf = %d", k, sh, router.ShardOf(k))
		}
		n++
	}
	if n != len(rows) {
		t.Fatalf("checked %d keys of %d", n, len(rows))
	}
}
