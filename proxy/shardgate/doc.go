// Package shardgate is the migration hold inside one proxy (docs/design.md
// §5, step 6): while a shard's writes switch to another datasource, every
// proxy stops sending them, queues new ones in arrival order and lets the
// transactions open on the shard end. The lock protocol around it (etcd,
// acknowledgements, when to release) is coord's LockFollower, which
// reaches this package through the engine's Hold; the engine admits every
// write here before it routes it.
//
// The hot path is one atomic add and one atomic load per shard a write
// touches (Admit): no lock, nothing global. A shard's gate counts the
// writes that may reach a datasource (active); Hold publishes itself on the
// gate, then waits for active to drain. A writer increments active before
// it looks for a hold and Hold publishes before it reads active, so (the
// atomics being sequentially consistent) either the writer sees the hold
// and backs off into the queue, or Hold sees the writer and waits for it.
//
// What counts as active:
//   - an autocommit write, from admission until its last backend reply
//     (multi-shard writes: on every shard, until their COMMITs);
//   - a transaction that wrote the shard, from its first write until it
//     ends: it is then registered (Txn), through which the hold can fail
//     it. Its later statements are never queued (a queue inside a
//     transaction would hold its row locks for the queue's wait).
//   - a transaction's locking read (SELECT ... FOR UPDATE / LOCK IN SHARE
//     MODE) counts as its first write: its row locks are a write's. Were
//     it not counted, a switch could deadlock with the row locks: the
//     transaction's next write queued behind the hold while holding its
//     lock, an autocommit write admitted before the hold waiting for that
//     lock, and the hold waiting for that write.
//
// Plain reads are never held, and a transaction that has only read its
// shard that way does not count: the switch does not wait for it, and if
// the shard moved, its next statement rolls it back (the engine's
// Session.checkPinned) instead of running on the old side. Statements
// touching many shards wait like a single-shard write on each held shard
// they touch, after releasing the others (so a wide write never keeps a
// held shard's Hold waiting while it waits itself); DDL fans out to every
// shard, so it waits for every held shard (and, running, keeps a Hold
// waiting until Hold's deadline: a switch during a long ALTER aborts and
// is retried).
//
// A write fence (Fence) refuses every sharded write, whatever the shard:
// the proxy cannot prove it serves the current routes.
package shardgate
