// Package migrate holds the building blocks of online shard migration
// (DESIGN.md section 5, issue 14), one concept a file:
//
//	table.go     what a physical table looks like (columns, primary key,
//	             shard filter) and the SQL fragments built from it
//	snapshot.go  a consistent-snapshot read transaction and its binlog position
//	ratelimit.go the rows-per-second token bucket shared by a shard's copies
//	upsert.go    idempotent writes of copied rows to the target
//	copier.go    backfill: one shard's rows of one table, chunked, resumable
//	checksum.go  verify: segmented checksums and sampled row comparison
//	repair.go    re-copy one differing segment
//
// Nothing here keeps state between runs: each long operation takes a
// JSON-serialisable position (Checkpoint, ChecksumState) and hands the next
// one to a callback after every step, so the job layer persists it (etcd)
// and a crash resumes from it. The copier's doc comment states the
// consistency model the job and the binlog applier must follow.
package migrate
