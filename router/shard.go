// Package router maps IM shard keys to physical tables. It is pure: no I/O,
// no goroutines, no clocks. A Snapshot is immutable once built, so any number
// of sessions can route through one while routecfg swaps in the next.
package router

import (
	"fmt"
	"hash/crc32"
	"strconv"
)

// NumShards is the number of logical shards. It is fixed forever: the hash of a
// key never changes, expansion only moves shards between servers.
const NumShards = 1024

// Shard is a logical shard number in [0, NumShards).
type Shard uint16

// String renders the shard the way physical table names carry it (0441).
func (s Shard) String() string { return fmt.Sprintf("%04d", uint16(s)) }

// ShardOf returns CRC32(decimal text of key) % 1024. The decimal text is what
// MySQL/MariaDB hash for CRC32(bigint_column), so `CRC32(conv_id) % 1024` in
// plain SQL names the same shard; a DBA can check placement and a migration
// can filter rows server-side.
func ShardOf(key uint64) Shard {
	var buf [20]byte
	b := strconv.AppendUint(buf[:0], key, 10)
	return Shard(crc32.ChecksumIEEE(b) % NumShards)
}

// shardedTables lists the logical tables and their shard key column. The set
// is the IM data model of docs/design.md §1; any other table is unsharded
// and passes through to the default datasource.
var shardedTables = map[string]string{
	"conv_msg":       "conv_id",
	"msg_content":    "conv_id",
	"im_conv_seq":    "conv_id",
	"im_conv_member": "uid",
	"im_inbox":       "uid",
}

// ShardKeyColumn returns the shard key column of a logical table (lower-case
// name) and whether the table is sharded at all.
func ShardKeyColumn(table string) (string, bool) {
	col, ok := shardedTables[table]
	return col, ok
}

// ShardedTables returns the logical table names in a stable order.
func ShardedTables() []string {
	return []string{"conv_msg", "msg_content", "im_conv_seq", "im_conv_member", "im_inbox"}
}

// Companion tables: Convoy's own tables in a shard database beside the
// logical tables' physical ones, one per database whatever the layout, with
// rows keyed (and sharded) by conv_id like conv_msg's. They belong to the
// shards whose conversations they name, so a shard migration moves their
// rows with the logical tables'. The cold tier's: per conversation, the seq
// range of its archived rows whose warm copy is gone (written by the
// archiver in the transaction that deletes them), and the archived rows
// deleted through Convoy (written by the engine in the deleting
// statement's transaction, and by the archiver for the rows of a file it
// must not serve), and per conversation and cold file the part of the
// file's rows whose warm copy the archiver deleted (its read bound,
// written in the deleting transaction); cold reads need all three.
const (
	ColdRangesTable    = "_convoy_cold_conv"
	ColdTombstoneTable = "_convoy_cold_tombstone"
	ColdFilesTable     = "_convoy_cold_files"
	// ColdErasureTable: per conversation and table, the seq ranges of its
	// archived rows a DELETE erased (clear chat), written in the deleting
	// statement's transaction; cold reads treat them as absent.
	ColdErasureTable = "_convoy_cold_erasure"
)

// ArchiveProgressTable is the archiver's own table in a shard database:
// the delete chunks committed per cold file. Every transaction that
// deletes archived warm rows writes it, which is how a binlog reader (the
// search indexer) tells those deletes from users': the message lives on
// in the cold file.
const ArchiveProgressTable = "_convoy_archive_progress"

// OutboxAppliedTable is the cross-shard outbox's companion table (package
// outbox): the entries applied to the database's shards, written in the
// transaction that applies each, filed under a shard key of its rows so a
// migration moves the markers with them.
const OutboxAppliedTable = "_convoy_outbox_applied"

// KeysOf returns n keys from `from` upwards whose shard is sh (tests and
// tools that need conversations of a given shard).
func KeysOf(sh Shard, n int, from uint64) []uint64 {
	var out []uint64
	for k := from; len(out) < n; k++ {
		if ShardOf(k) == sh {
			out = append(out, k)
		}
	}
	return out
}

// CompanionTables lists the companion tables, all keyed by CompanionKey.
func CompanionTables() []string {
	return []string{ColdRangesTable, ColdTombstoneTable, ColdFilesTable, ColdErasureTable, OutboxAppliedTable}
}

// CompanionKey is the companion tables' shard key column.
const CompanionKey = "conv_id"

// PhysicalTableName is the physical name of a logical table at a table index:
// conv_msg + 441 -> conv_msg_0441, so a name tells where its rows came from.
func PhysicalTableName(logical string, index int) string {
	if index < 0 || index > 9999 {
		return fmt.Sprintf("%s_%04d", logical, index)
	}
	// Built by hand: this runs for every routed statement.
	b := make([]byte, 0, len(logical)+5)
	b = append(b, logical...)
	return string(append(b, '_', byte('0'+index/1000), byte('0'+index/100%10), byte('0'+index/10%10), byte('0'+index%10)))
}
