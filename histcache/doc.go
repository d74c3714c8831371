// Package histcache is Convoy's Redis hot tier for conversation history
// (docs/design.md §4). It knows nothing about SQL: the engine
// recognises the three history reads, asks this package, and goes to MySQL
// on any miss or error. It imports no other Convoy package.
//
// # Keys (all under the {convID} hash tag: one Lua script touches them all)
//
//	im:hist:conv:{c}    ZSet  score = seq, member = msg_id:sender_uid:msg_type:created_ms
//	                          (most recent Options.MaxEntries, TTL Options.TTL)
//	im:hist:maxseq:{c}  String highest seq written through or filled; a hint only,
//	                          never trusted by the protocol (no TTL, as designed)
//	im:hist:meta:{c}    Hash  the protocol state below, TTL Options.TTL
//
// meta holds the incarnation (random, chosen when meta is re-created after
// a loss), the write epoch, the incarnation's birth time, the pending-write
// markers (one field per writer, value = expiry), the coverage (lo: every
// committed seq >= lo is in the ZSet; vt: when a full fill last proved it)
// and n, the ZSet's expected size. Everything a decision depends on lives in
// this one key, so eviction, expiry or FLUSHALL can only lose it whole.
//
// # The invariant
//
// A page served from the hot tier equals the page MySQL returns for the same
// query at the moment the read script (or the LRU's epoch check) ran. The
// cache answers only when it can prove that from coverage: Before(before, n)
// is served if n entries below before are cached, or the coverage starts at
// the first message (lo = 0); After(after, n) is served if after+1 >= lo;
// ByMsgID says "absent" only when lo = 0. Anything else is a miss.
//
// # Protocol
//
// Write (every statement that changes conv_msg rows of the conversation):
//
//  1. BeginWrite before the statement that makes the change visible (the
//     autocommit statement or the COMMIT): adds a marker expiring at
//     now + MarkerTTL (Redis clock), bumps the epoch.
//  2. The MySQL commit, which must complete within MarkerTTL of step 1.
//  3. After the commit: EndWrite(committed rows) adds the rows that are
//     >= lo to the ZSet, trims it, releases the marker, bumps the epoch.
//     A rollback calls AbortWrite. A recall/delete/update calls Invalidate
//     and then AbortWrite (the marker covers the change until then).
//
// Read: a fresh marker means "a commit may be in flight that the ZSet does
// not show": miss (pending_write). An expired marker means its writer died
// or stalled, possibly after committing: the read script drops the ZSet and
// the coverage and bumps the epoch (stale_marker).
//
// Fill after a miss: BeginFill (records incarnation+epoch; refuses while any
// marker is present or the incarnation is younger than MarkerTTL), then the
// caller reads MySQL, then Fill installs only if incarnation and epoch are
// unchanged and no marker is present. A range reaching the newest message
// (hi = NoUpperBound) replaces the cached range; a bounded one may only
// extend a live coverage downwards. Why it is exact: a write whose marker
// existed at BeginFill blocks it; a write that began after BeginFill changed
// the epoch; a write that ended before BeginFill committed before the MySQL
// read; a marker cleaned as stale before BeginFill belonged to a writer that
// committed (if at all) before it expired, so before the read. Hence the
// committed set was the same from BeginFill to Fill and the fill equals it.
// While no marker is present, ZSet == committed rows >= lo, because every
// writer's rows are added by its own EndWrite (each writer keeps its own
// marker until then, so a gap a slower writer is about to fill is never
// claimed complete), a dead writer's stale marker drops everything, and a
// rollback leaves a gap MySQL has too. Trimming raises lo above what it
// removes.
//
// Redis restart / FLUSHALL / eviction of meta: markers are lost with it. A
// re-created meta gets a new incarnation (so older fill tokens fail, no ABA)
// and fills are refused for MarkerTTL after its birth, by which time every
// writer whose marker was lost has committed; its EndWrite finds no marker
// and invalidates. A ZSet lost without meta is detected by n != ZCARD.
//
// Several proxies share the state in Redis; a proxy keeps in process only
// what it owes Redis after a failure (see "Circuit breaker and repair").
//
// # Hot conversations (in-process LRU)
//
// A conversation read more than HotReads times per HotWindow (sliding) gets
// its pages kept in a small LRU (LRUSize pages, at most LRUTTL, dropped on
// EndWrite/AbortWrite/Invalidate through this instance). An LRU page is
// served only after one HMGET shows the conversation's incarnation:epoch
// unchanged since the page was read; every marker set or released bumps
// the epoch and nothing is served while a marker is present, so the page is
// still exactly what the read script would return: the LRU gives the same
// guarantee as Redis, with no cross-instance staleness window. It saves
// Redis CPU (an O(1) HMGET instead of the Lua range read), not round trips.
//
// # Circuit breaker and repair (breaker.go, unrepaired.go, repair.go)
//
// A Redis that is down or hung would make every statement wait out
// Timeout, several times for a write. After BreakerFailures consecutive
// failed calls, the first at least BreakerMinOutage old (at once if every
// one was a refused connection), the breaker opens: no call is sent; reads
// and fills miss at once, writes commit without a marker. A probe (PING
// within max(Timeout, 250 ms), then the repair below) runs in the
// background every back-off (BreakerBackoff doubling to
// BreakerBackoffMax); when it succeeds the breaker closes, and reads are
// served again settle later (BreakerBackoffMax + 2 x max(Timeout, 250 ms));
// writes and fills resume at once.
//
// Repair: a write whose BeginWrite failed or was skipped, an EndWrite or
// Invalidate that failed or was skipped, notes its conversation in the
// proxy's unrepaired set; a failed InvalidateAll, or more than
// MaxUnrepaired conversations, notes "the whole tier". Until a noted
// conversation has been invalidated (after its unmarked writes ended, or
// MarkerTTL after they began) this proxy neither serves nor fills it from
// Redis, and the breaker does not close before the notes made so far are
// repaired (pipelined Invalidate scripts; InvalidateAll for the whole
// tier). A repair bumps the epoch, so a fill begun before it (even one
// whose Fill reaches a hung Redis late) is rejected; one begun after it
// reads the unmarked rows from MySQL. While the breaker is closed, notes
// are repaired in the background right away. A failed Invalidate also
// keeps its write's marker (AbortWrite does not release it): readers
// drop the conversation when it expires instead of serving the old rows.
//
// # Residual windows (where the guarantee depends on an assumption)
//
//   - Lease: a commit that completes later than MarkerTTL after BeginWrite
//     (lock wait, stall) may be missed by a fill installed meanwhile, until
//     that writer's EndWrite (which then invalidates: lease_lost). Set
//     MarkerTTL above the backend statement timeout (innodb_lock_wait_timeout
//     / max_statement_time) and call BeginWrite right before the commit.
//   - No marker at all: a write commits without its marker in Redis when
//     BeginWrite failed (a timeout whose command never ran, a refused
//     connection) or was skipped (breaker open). The writing proxy serves
//     nothing of that conversation from Redis until its repair; other
//     proxies that read Redis meanwhile can serve pages without the row,
//     from the commit until the writer's repair, which runs when it next
//     reaches Redis (its probe, at most BreakerBackoffMax after Redis
//     answers it, or its next successful call). If the writer dies first,
//     or stays cut off (a partition: Redis reachable from the others, not
//     from it), the window lasts until the coverage ages out: CoverageTTL
//     (default 1 min) after the last full fill that missed the row. What
//     the breaker changes here: while it is open, every write of the proxy
//     is in this window, not only those whose calls failed; without it the
//     window closed only at CoverageTTL, now usually at the repair. In an
//     outage all proxies see (Redis down, hung or restarted for everyone),
//     a proxy whose breaker opened serves nothing from Redis for settle
//     after closing, by which time every other proxy that wrote during the
//     outage has probed and repaired: no window, provided all proxies use
//     the same BreakerBackoffMax and each one's probe and repair take less
//     than 2 x max(Timeout, 250 ms) (a proxy starved of CPU, or a Redis
//     answering PING slower than that, can break it). A proxy whose
//     breaker did not open (fewer than BreakerFailures calls during the
//     outage) serves at once when Redis answers again, so for it the
//     window lasts until the writers' repairs.
//     A Redis that is merely slow (calls time out for less than
//     BreakerMinOutage, or not BreakerFailures times in a row) leaves the
//     breaker closed: every write sends its marker and waits for it up to
//     Timeout as before (a marker that timed out usually still lands, late).
//     A process crash between the commit and EndWrite is covered by the
//     marker.
//   - Redis Cluster failover with asynchronous replication can lose a marker
//     written just before the failover without losing meta; WAIT would close
//     it at a latency cost and is not done.
//   - seq above MaxSeq (2^53-1, float64 scores) is never cached.
//
// # The cold tier
//
// Rows older than the warm window move to the archive (packages cold and
// archive) and are deleted from MySQL; "the page MySQL would return" is
// then the page MySQL and the archive return together (proxy/engine's
// cold read path). The invariant still holds, for three reasons:
//
//   - The cache is never filled with archived rows: a fill reads MySQL
//     only. Its coverage must then not reach below a row that only the
//     archive holds, so the engine reads the conversation's archived range
//     (maintained in the shard's database, in the transaction that deletes
//     the warm rows) after the fill's MySQL read and starts the coverage
//     above it (lo = archived max + 1, entries below dropped). Read after
//     the rows, the range counts every row the read missed; a row deleted
//     after the read is in the fill and in the archive alike.
//   - The archiver deletes a warm row only while it equals its archived
//     copy (rows locked, compared value by value), and a read serves the
//     archived copy from then on: a cached entry of a row archived after
//     the fill is still exactly that row. The archiver writes no markers:
//     its deletes change no answer.
//   - Writes of archived rows through Convoy (a DELETE recording a
//     tombstone) are conv_msg writes like any other: markers, then
//     invalidation.
//
// A hot-tier hit is therefore served without asking the archive; a miss
// goes to MySQL and, when the page runs below what MySQL holds, to the
// archive. The archiver also keeps each conversation's newest 500 rows
// (cold.keep_newest, the MaxEntries a fill reads) in MySQL, so a fill of
// a conversation with archived rows finds a full range there.
//
// Timeouts: every call is bounded by Options.Timeout through its context;
// the go-redis client must be built with ContextTimeoutEnabled, or a hung
// (not dead) Redis is only bounded by the client's ReadTimeout. With
// MaxRetries at most 1 and DialerRetries 1 a refused connection fails the
// call at once, as an error the breaker recognises (cmd/convoy does so);
// with go-redis's default retries it only shows as the call's timeout.
package histcache
