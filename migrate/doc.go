// Package migrate holds the building blocks of online shard migration
// (DESIGN.md section 5, docs/design.md §5), one concept a file:
//
//	table.go     what a physical table looks like (columns, primary key,
//	             shard filter) and the SQL fragments built from it
//	snapshot.go  a consistent-snapshot read transaction and its binlog position
//	ratelimit.go the rows-per-second token bucket shared by a shard's copies
//	rows.go      reading rows and writing them idempotently (upsert, delete)
//	copier.go    backfill: one shard's rows of one table, chunked, resumable
//	applier.go   backfill: the source's binlog followed for the shard's
//	             changed rows, written as the source has them now, one
//	             target transaction per batch of source transactions,
//	             checkpointed
//	backfill.go  backfill as one resumable unit: copy every table, then
//	             replay the binlog from the first snapshot's position
//	checksum.go  verify: segmented checksums and sampled row comparison
//	repair.go    re-copy one differing segment
//	resync.go    the one way the live writers of the target (the binlog
//	             apply before ready, a repair) write a row: the source's
//	             current row, read under the target's row lock, so none
//	             replaces a newer value with an older one
//	precheck.go  prepare: server settings compared, target tables created
//	             from the source's definition and checked empty of the shard
//	purge.go     a shard's rows deleted from a table live shards share,
//	             without waiting for their locks, resumably (PURGE, rollback)
//	job.go       the job state machine (queued, prepare, backfill, verify,
//	             ready, switched, done; rollback at any step), persisted in
//	             the coord.Job record before each action
//	fence.go     the storage fence: each side refuses, in MariaDB, the
//	             writes of a shard it is not authoritative for
//	switch.go    the switch both ways under the migration lock: fence
//	             marker (the old side's fence), stream past it, route flip
//	metrics.go   the jobs' Prometheus metrics
//	manager.go   runner hosting: watch the job records, campaign for each
//	             job's runner election, run the jobs won
//	admin.go     what directives and the CLI write: jobs and commands
//	mirror.go    dual-write: a write's ACK waits for the apply to show it
//	             on the target (applywait.go); late writes' keys go to a
//	             deduplicated compensation queue the runner confirms
//	ramp.go      the proxies' view of read ramps (step 5), announced in
//	             etcd before a proxy ramps (a rollback waits for none)
//	rampstats.go the ramp's reads per side (errors, latency) on every
//	             proxy, published under its lease and summed for status
//	plan.go      the shard moves between two route documents, and their
//	             copy time
//	layout.go    a whole new route document as one change: checked for
//	             what jobs can carry out, planned, applied as one job a move
//
// The building blocks keep no state between runs: each long operation takes a
// JSON-serialisable position (Checkpoint, ChecksumState, BackfillState) and
// hands the next one to a callback after every step, so the job layer
// persists it (etcd) and a crash resumes from it. The one exception is the
// Applier's checkpoint, which lives in the target database so that it
// commits with the rows it covers. The copier's doc comment states the
// consistency model the job and the binlog applier must follow.
package migrate
