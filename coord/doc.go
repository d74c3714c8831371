// Package coord is Convoy's cluster coordination in etcd: migration and
// archive jobs and their elected runners, the per-shard migration lock
// every proxy follows, switch turns, the proxy registry, shard size
// samples.
//
// It is separate from package routecfg, which keeps the route table (the
// route document's store, the proxies' watcher of it, the `routes` CLI):
// the route table is what every proxy needs to serve, coordination is how
// the processes of a cluster agree on who does what and on changing that
// table. coord builds on routecfg, never the other way round: the
// migration lock reads the route document and flips it in the same etcd
// transaction as the lock (routecfg.RoutesKey, DecodeDocument,
// EncodeDocument), and a proxy's LockFollower releases a shard once its
// routecfg.Watcher serves the routes the switch left.
//
// # Layout
//
// Under /convoy/<cluster>/:
//
//	migrations/       migration jobs, their runners, locks, switch turns,
//	                  acknowledgements and read ramps (next section)
//	archive/          archive job records (package archive), one per shard,
//	                  laid out and guarded like the migration jobs, and
//	                  runners/<shard>/<lease> of their elections; package
//	                  archive keeps its other subtrees there
//	proxies/<id>      a live proxy's registration (registry.go), under a
//	                  lease it keeps alive
//	sizes/<yyyymmdd>  one day's shard sizes, for the capacity planner
//	                  (sizes.go)
//
// Elections (election.go, Elect) choose the job runners (runner.go) and
// package search's indexers.
//
// # Migration state
//
// Under /convoy/<cluster>/migrations/ (jobs.go, runner.go, miglock.go,
// switchturn.go, lockfollow.go):
//
//	<shard>                  job record (JSON: id, from, to, step, intent,
//	                         times, last error, opaque progress); shard as
//	                         four digits
//	runners/<shard>/<lease>  election candidates (etcd concurrency.Election);
//	                         the oldest key is the runner
//	locks/<shard>            the migration lock, under the runner's lease
//	switching/<lease>        a runner queued for the cluster's switch turn
//	                         (one switch at a time), under its lease; the
//	                         oldest key's runner switches
//	acks/<shard>/<proxy-id>  a proxy's acknowledgement, under its
//	                         registration lease
//	ramping/<shard>/<proxy-id> a proxy that may send the shard's reads to
//	                         its migration target (a read ramp), under its
//	                         registration lease: written before its first
//	                         ramped read, deleted after its last
//	ramps/<proxy-id>         a proxy's read-ramp figures (reads, errors,
//	                         latency per side of each ramped shard), under
//	                         its registration lease, while ramps exist
//
// Job records are written by compare-and-swap on the ModRevision the writer
// read (JobStore.Update, Delete): of two migrators that read one revision,
// one wins and the other gets ErrJobConflict. One process runs a job: the
// one CampaignRunner elects. Its lease carries its election key and its
// locks; when it dies, both vanish after the TTL (default 10 s) and the next
// candidate's CampaignRunner returns, to resume from the job's last
// persisted step. Every write of a runner (SaveJob, DeleteJob, the lock,
// the route flip) also compares its election key in the same transaction,
// so a runner whose lease expired unnoticed writes nothing.
//
// # Migration lock
//
// Switching a shard's writes to its new datasource (docs/design.md §5, step 6) must
// not let any proxy send a write of the shard to the old side after the new
// side became authoritative, nor reorder writes. The protocol:
//
//  0. The runner (Runner.Switch) waits for the cluster's switch turn
//     (switchturn.go), holding nothing: every flip is a compare-and-swap on
//     the one route document, so two shards switching at once would both
//     hold their writes and the loser's flip would fail. A dead runner's
//     turn goes with its lease; a wait ends with the caller's context.
//  1. The runner reads the route document (version V) and, in one
//     transaction that also checks the routes are still at that read, the
//     job exists, it still has its turn and is still elected, puts
//     locks/<shard> under its lease with {job, runner, route_version V+1,
//     state "holding", ack timeout, max hold, deadline} and reads the
//     registered proxies: the snapshot. Every proxy that registers later
//     starts its follower after that revision and so finds the lock.
//  2. Every proxy's LockFollower sees the lock (a watch on the migrations
//     prefix) and calls ShardHolder.Hold: the engine stops sending the
//     shard's new writes, queues them in order and lets the transactions
//     open on the shard end, failing those still open when Hold's context
//     ends (shortly before the ack timeout). Once holding, it writes
//     acks/<shard>/<proxy-id> = {lock revision, ...} under its registration
//     lease, in a transaction conditional on the lock still being this one.
//  3. The runner waits (default 2 s) until each proxy of the snapshot, and
//     each proxy that registers during the wait, has acknowledged this lock
//     revision, lost its registration (key deleted: its lease expired), or
//     refuses connections at its registered listen address (its process is
//     gone: miglock_proxies.go says why that signal, and only that one, is
//     trusted). An acknowledgement of another lock revision does not
//     count. If one is missing at the deadline, the switch aborts: the lock
//     is deleted, nothing else changed. If the missing proxies then turn
//     out to be gone (registration expired without a renewal, or refusing
//     connections), Switch waits for that holding nothing and tries again,
//     up to three locks in all; else it returns ErrSwitchAborted naming
//     the proxies by their registered address.
//  4. With every live proxy holding, the runner calls the caller's flip
//     callback (fence marker, wait for the binlog apply, route flip, reverse
//     replication), whose context ends at the lock's deadline (default 5 s
//     after the lock) or when the runner's lease is lost. The route flip,
//     SwitchTx.FlipRoutes, is one transaction: if the routes are still at
//     the version read in 1, the lock is unchanged and the runner still
//     elected, store the edited document as V+1 and rewrite the lock's state
//     to "switched" (and checks the runner's turn). So the routes change
//     under a lock only while that lock exists, and a lock's last value
//     says whether they did.
//  5. The runner deletes the lock (whatever happened) and learns from the
//     deleted value whether the routes were flipped, then gives its turn
//     back. It retries both deletes while etcd does not answer, until its
//     lease is lost (the keys then go with it).
//  6. A proxy that sees the lock gone releases only once it knows the routes
//     the switch left: if the lock's last value (the delete event's previous
//     value) says "switched", once its route watcher serves at least V+1; if
//     it says "holding", at once (the switch changed nothing); if it learned
//     of the lock's end by a re-read instead of an event, once its watcher
//     serves the version the same read found, which is final for that lock
//     since no flip can land once the lock is gone. A watcher that lags is
//     told to re-read (every 200 ms) while the proxy waits. ShardHold.Release
//     then lets the queued writes run in order under those routes.
//
// Rules for the failure cases:
//
//   - Migrator dies: its lease expires after the runner TTL, taking the lock
//     (and its election key) with it; proxies proceed as in 6 from the
//     lock's last value. A migrator cut off from etcd cannot flip late: the
//     flip compares the lock and its election key.
//   - Proxy dies (SIGKILL) before acknowledging: its listen address refuses
//     connections at once, and the runner stops waiting for it (probed
//     from 100 ms after the lock). A proxy that cannot be probed (a
//     wildcard or host name address, a host that went away) counts until
//     its registration expires after its TTL (default 10 s, longer than the
//     2 s ack timeout): that switch aborts, and Switch tries again once the
//     registration is gone. A proxy that is alive but silent (its lease
//     still renewed) makes the switch abort; the job retries later.
//   - Deadline: a proxy counts the lock's max hold from when it saw the lock
//     (so clock skew does not matter). If it still holds the shard then (the
//     lock is still there, or it vanished but the proxy could not learn the
//     routes: etcd unreachable, watcher behind), it calls ShardHold.Fail with
//     an error wrapping ErrShardUnavailable: queued and new writes of the
//     shard get that error. It never releases into routes it cannot confirm;
//     it releases as in 6 as soon as it can.
//   - etcd unreachable from a proxy while holding: it keeps holding (no
//     event can release it), fails at the deadline, and resolves by a
//     re-read when etcd answers.
//   - A proxy whose own registration may have expired (no renewal answered
//     for its TTL minus a margin of min(1 s, TTL/4), counted from when the
//     last answered renewal was sent) may be skipped by a migrator, and a
//     job may even have started that it never saw (created while it was
//     cut off). So it refuses every write to a sharded table, whatever the
//     shard (ShardHolder.Fence: one engine-wide write fence), fails the
//     queued writes of the shards it holds, and gives the transactions
//     that wrote until the estimated lease expiry, then fails them. Reads
//     go on. Once the registration is renewed, a re-read of the locks and
//     routes, and the watcher serving the routes of that read, lift the
//     fence. Renewals are counted from their send time, not their answer's
//     arrival, so a proxy paused past its lease (SIGSTOP, a long GC pause)
//     resumes fenced, however old an answer it finds in its socket.
//   - A proxy starting while a lock exists: LockFollower.Start holds every
//     locked shard before it returns (and fails if it cannot), so the proxy
//     serves none of that shard's writes before the switch resolves. Start
//     also waits until the route watcher serves at least the route version
//     etcd held with the locks it read: a switch that flipped and ended
//     between the watcher's start and that read left no lock to see. Start
//     it after Register and after the route watcher's Start, and before
//     accepting clients.
//   - A lock deleted by hand (operator cancel) before the flip makes the
//     flip fail with ErrLockLost; after the flip, proxies still wait for the
//     flipped routes. Deleting a stuck lock is therefore safe.
//
// Residual windows and assumptions:
//
//   - The write fence relies on the proxy's clock and etcd's lease timer
//     running at about the same rate, and on the follower noticing (it
//     looks every 20 ms) and the fence stopping writes within the margin
//     (min(1 s, TTL/4)). etcd extends leases across its own restarts and
//     leader changes, which only errs on the safe side. A write admitted
//     in the instant before the fence, or by a proxy resumed from a pause
//     before its follower ran, is what the datasources' storage fence is
//     for (migrate/fence.go): the old side refuses a moved shard's writes
//     from the switch's fence marker on, whoever sends them.
//   - A proxy serving without a registration (Register failed) is invisible
//     to migrators: it must not serve writes while unregistered (convoy
//     serve refuses them and retries: cmd/convoy/miglock.go).
//   - A write the engine already sent to the datasource must have finished
//     (or be known failed) when Hold returns; the engine owns that
//     (proxy/engine/hold.go).
//   - A migrator stuck inside its callback, ignoring its context, while its
//     lease stays alive keeps the lock: the shard's writes fail (past the
//     deadline) until the lock goes; delete it by hand or stop the runner.
//   - If a newer Convoy writes a route document an older proxy rejects, that
//     proxy never serves V+1 and keeps failing the shard's writes: upgrade
//     proxies before migrating.
//   - After FlipRoutes got no answer and the lock vanished with the runner's
//     lease, Switch may report ErrFlipUnknown; the next runner decides from
//     where the routes put the shard.
//
// Measured in the tests (loopback etcd): a switch with three proxies holds
// each for about 10 ms; one with a killed proxy still registered holds the
// live ones for about 120 ms; a dead migrator's lock is resolved TTL after
// its death; a registration lapse fences every sharded write 1.5 s after
// etcd went away with a 2 s TTL.
//
// Migration lock metrics (LockMetrics, registered by the caller, label
// cluster):
//
//	convoy_migration_lock_seconds{outcome}          histogram migrator: lock taken -> removed (switched, aborted)
//	convoy_migration_lock_ack_wait_seconds          histogram migrator: lock taken -> every live proxy acknowledged
//	convoy_migration_lock_acks_total                counter   migrator: acknowledgements received
//	convoy_migration_lock_vanished_proxies_total    counter   migrator: proxies dropped because their registration expired
//	                                                          or their listen address refused connections
//	convoy_migration_lock_aborts_total{reason}      counter   migrator: switches aborted, routes unchanged (ack_timeout, callback, runner_lost, canceled)
//	convoy_migration_shard_hold_seconds             histogram proxy: shard held -> released
//	convoy_migration_shard_hold_failures_total{reason} counter proxy: held writes failed (deadline, fenced, closed)
//	convoy_migration_shards_held                    gauge     proxy: shards held now
package coord
