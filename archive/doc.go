// Package archive moves conversation history older than the warm window
// out of MySQL into the cold tier (package cold) and keeps the catalog
// proxies read it through (docs/design.md §9; seed 000, 冷热分离:
// 先写冷、再删温，温层删除延迟 7 天).
//
// # One job per shard
//
// Each logical shard has an archive job record in etcd
// (/convoy/<cluster>/archive/<shard>, coord.NewArchiveJobStore: the
// migration job records' layout and compare-and-swap) and one runner at a
// time, elected under .../archive/runners/<shard> (coord.CampaignRunner);
// every write the runner makes is fenced by its election key. Manager, in
// every convoy serve with cold.enabled, sweeps the shards every 10 s and
// runs those due (never run, ARCHIVE SHARD n NOW, an hour since the last
// good run, a minute after a failed one); a shard another process runs is
// passed over. A run reads the routes itself and works on the shard's
// physical tables; where a table holds several logical shards (small
// layouts) it keeps only rows with router.ShardOf(conv_id) = shard. A
// shard with an unfinished migration job is skipped (SHOW ARCHIVE says
// why), and a run stops when one appears or the routes move the shard:
// the archiver never works on a shard that is moving. ARCHIVE PAUSE (a
// key under .../archive/paused) stops every run before its next step.
//
// A run moves two kinds of rows (kinds.go), each with its own checkpoint,
// files and records, through the same steps below: history (conv_msg rows
// with their msg_content bodies, by day of created_at, older than cold.after)
// and inbox (seed 001's TTL cleanup, docs/design.md §9: im_inbox rows whose
// member has read them, seq <= im_conv_member.last_read_seq, by day of
// send_time, older than cold.inbox_after; <prefix>/<shard>/<day>/inbox-<n>
// .parquet, records of kind im_inbox). A history row among its conversation's
// newest cold.keep_newest (500) is never archived: the hot tier keeps the
// newest 500 (docs/design.md §4), so first screens and hot-tier fills never
// need the archive. Nothing reads inbox files back (read inbox rows are kept
// for audit); an inbox row read after its day was archived stays warm.
//
// # Archive step
//
// Days are UTC days of conv_msg.created_at. Every day wholly older than
// cold.after is archived in order, from the checkpoint (or the oldest warm
// row). conv_msg has no index on created_at, so finding a day's rows costs
// a scan of the table's keys and times in key order (5000 a statement);
// one scan serves many days (archivePass): the first day's rows are
// written as the scan finds them, and the keys of the later days are kept
// (up to 500,000, whole days) and written day by day after it, so a shard
// with years behind the warm window takes a pass per 500,000 rows, not one
// per day, and days the scan found empty count as archived. The full rows
// are fetched by primary key, 500 at a time, with their msg_content rows
// (two statements in the text protocol, so the values and column
// definitions are exactly what a client of Convoy gets), at cold.rate
// rows/s (migrate's Limiter; the key scan may go 50 times faster). A
// whole pass also gathers the old days' warm rows that have become
// eligible since their day was archived (kept among their conversation's
// newest, written later with an old time) and writes them as new parts of
// their day (archiveLate). Rows go
// into parts of up to 20000 rows in (conv_id, seq) order. For each part:
//
//  1. intent "write <key>" in the job record;
//  2. the Parquet object, create-if-absent (cold.Store.PutIfAbsent);
//  3. cold.Verify from storage (SHA-256, every row decoded, digest);
//  4. the catalog object next to it (<key>.json: cold.FileInfo), also
//     create-if-absent;
//  5. the next version of the shard's catalog manifest with the file's
//     record in it (state catalogued; manifest.go), create-if-absent,
//     then in one etcd transaction the job record: the manifest pointer
//     and the checkpoint (next part, last key).
//
// A crash before 5 redoes the part from the previous checkpoint: the
// Writer is deterministic, so the same rows give the same bytes and 2 and
// 4 find their objects already there; if the rows changed in between, 2
// refuses (ErrConflict), the object is left uncatalogued (listed as an
// orphan in the job record) and the part takes the next number. After 5
// there is nothing to redo. Object keys carry the logical shard:
// <prefix>/<shard>/<yyyymmdd>/part-<n>.parquet, so a shard's files stay its
// own whichever table or server holds it.
//
// # Delete step
//
// A file catalogued cold.delete_after ago has its warm rows deleted:
// exactly the rows it holds, by primary key, read back from the stored
// file, in chunks of 500, each one transaction on the shard's database:
// lock the rows (SELECT ... FOR UPDATE, both tables), compare each with
// the file's copy value by value; tombstone the rows that are not equal
// (changed or gone) and move each conversation's read bound in the file
// (FilesTable) past the chunk; delete the equal rows, widen their
// conversations' archived ranges (ConvTable, history only) and bump a
// progress row (_convoy_archive_progress, with the chunk's kept and gone
// counts); commit. etcd hears of it twice per file: the record's state
// deleting before the first chunk, deleted after the last. A crash rolls
// the chunk back (redone) or leaves it committed with the progress row
// and the bounds saying so.
//
// A row edited after it was archived (msg_type, the body, a recalled
// message's content) is not deleted: it stays in MySQL with the edit, and
// the file's stale copy is tombstoned. A row deleted by a user after
// archiving stays deleted and is tombstoned too, so it never comes back
// from cold. Both are counted in SHOW ARCHIVE (edited_kept,
// deleted_by_users) and logged. Rows deleted through Convoy once their
// warm row is gone get a tombstone (TombstoneTable, written by the engine
// in the deleting statement's transaction); updating them is refused:
// archived files are immutable.
//
// # Catalog
//
// The store holds the archive's truth: each Parquet object and its
// immutable catalog object, and per shard the catalog manifest listing
// every file's record (state, sizes, the catalogue time the delete waits
// for), one immutable object per version. etcd holds per shard the job
// record (checkpoint, pointer to the manifest) and the marker key proxies
// follow (Catalog.Archived): nothing per file. RebuildCatalog makes a lost
// manifest again from the catalog objects.
// What a reader may take from a file is in the shard's database, beside
// the rows, written with their delete: the read bounds (FilesTable: per
// conversation and file, the seqs whose warm row is gone) and the
// tombstones. The engine reads MySQL's rows, then the bounds, then the
// tombstones (proxy/engine/cold.go), so for any row missing from MySQL it
// knows whether a file stands in for it; the cold read path merges warm
// and cold over the bounds, a warm row superseding its cold copy. A shard
// migration moves the bounds with the shard (router.CompanionTables).
// Records written by the version before carry their own read bound and
// skip lists (Record.legacy), which Catalog reads from etcd as before.
//
// # Erase step
//
// Archived rows deleted through Convoy are rewritten out of their files
// cold.erase_after after the delete (erase.go): the file's other rows as
// the next part of its day, the read bounds swapped in one transaction,
// the old file superseded and deleted from the store later.
//
// # Retention
//
// With cold.retention, files of days older than it are deleted with their
// rows, which are recorded as erased first (retention.go).
//
// # Compaction
//
// Small deleted history files of up to 31 consecutive days are merged
// into files of up to PartRows rows by the same rewrite (compact.go).
package archive
