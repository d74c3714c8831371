// Package migrate is the online shard migration's job runner
// (docs/design.md §5): the resumable job an elected runner
// executes, the building blocks it is made of, and the jobs' admin. One
// concept a file:
//
//	table.go     what a physical table looks like to the copier (the shard
//	             filter) and the SQL fragments built from it
//	snapshot.go  a consistent-snapshot read transaction and its binlog position
//	rows.go      reading rows and writing them idempotently (upsert, delete)
//	copier.go    backfill: one shard's rows of one table, chunked, resumable
//	applier.go   backfill: the source's binlog followed for the shard's
//	             changed rows, written as the source has them now, one
//	             target transaction per batch of source transactions,
//	             checkpointed
//	prepared.go  the apply's statements prepared once per target connection
//	lag.go       the apply's lag to a fraction of a second, without writing
//	             to the source
//	backfill.go  backfill as one resumable unit: copy every table, then
//	             replay the binlog from the first snapshot's position
//	throttle.go  the copy slowed down while either side's write latency
//	             is over the line
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
//	breach.go    the fence's alarm: writes of the moved shard seen on the
//	             old side after the switch
//	switch.go    the switch both ways under the migration lock: fence
//	             marker (the old side's fence), stream past it, route flip
//	metrics.go   the jobs' Prometheus metrics
//	manager.go   runner hosting: watch the job records, campaign for each
//	             job's runner election, run the jobs won
//	admin.go     what directives and the CLI write: jobs and commands; SHOW
//	             MIGRATIONS
//	layout.go    a whole new route document as one change: checked for
//	             what jobs can carry out, planned, applied as one job a move
//
// What every proxy runs while clients use a moving shard is package
// migrate/inproxy: the read ramp and its per-side figures, the dual-write
// (a write's ACK waits for the apply) and its compensation queue, and the
// watch of the job records that feeds them. migrate imports it (the runner
// replays the queue, SHOW MIGRATIONS sums the ramp figures); it does not
// import migrate. What both read and write alike lives below them: the job
// record's steps, commands, status and table placement
// (migrate/internal/jobrec), and pools, physical tables and their primary
// keys (migrate/internal/physical). migrate keeps its names for those it
// exported (StepReady, Commands, Status, Side, Key,
// CheckpointTable ...) as aliases.
//
// The building blocks keep no state between runs: each long operation takes a
// JSON-serialisable position (Checkpoint, ChecksumState, BackfillState) and
// hands the next one to a callback after every step, so the job layer
// persists it (etcd) and a crash resumes from it. The one exception is the
// Applier's checkpoint, which lives in the target database so that it
// commits with the rows it covers. The copier's doc comment states the
// consistency model the job and the binlog applier must follow.
package migrate
