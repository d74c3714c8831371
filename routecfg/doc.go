// Package routecfg keeps the route table in etcd and the proxies' copies of
// it current.
//
// # Layout
//
// Each cluster has one key, /convoy/<cluster>/routes, holding the
// router.Document as JSON: a version, the datasources and the shard ranges.
// Datasources only name where a proxy reads the password (password_env or
// password_file); no password is ever stored in etcd, printed by `routes
// show`, or accepted by `routes apply`.
//
// # Writes: compare-and-swap on the version
//
// Store.Init creates the key only if absent (a transaction on
// CreateRevision == 0). Store.Apply takes a document whose Version is the
// stored version, i.e. the one the operator showed and edited, and stores it
// as Version+1 with a transaction comparing the key's ModRevision from the
// same read: of two concurrent applies on one version exactly one wins, the
// other gets ErrVersionConflict and must re-read. Store.Replace (`routes init
// --force`) overwrites whatever is stored but still as the next version and
// still by compare-and-swap. Every write is validated with router.NewSnapshot
// first, so an invalid document is never stored by these tools; a document
// written into etcd by other means is validated again by every proxy.
//
// Versions only move forward. Proxies ignore a document older than the one
// they serve, so deleting the key and running `routes init` again (version
// 1) would be ignored by running proxies: use `routes init --force`, which
// continues the sequence.
//
// # Watch and resync
//
// A Watcher loads the document at Start, then follows the key with an etcd
// watch starting right after the revision it read, so no change between the
// read and the watch is lost. Every resync period (default 30 s) it re-reads
// the key in full, which backs the watch up against anything it could miss;
// when the watch breaks (channel closed, canceled, compacted, leader lost)
// it re-reads and re-watches with a backoff of 100 ms to 5 s. Each newer
// valid document is built into an immutable router.Snapshot and swapped in
// with one atomic store: Current() never blocks and never returns a half
// built table. A document that fails validation is rejected (logged, counted)
// and the last good snapshot keeps serving; an older version is ignored; an
// equal version is a no-op that confirms the snapshot. Reload forces a full
// re-read now, on the watcher goroutine, for the RELOAD ROUTES directive.
//
// # Fallback
//
// If etcd is unreachable later, the proxy keeps serving its last snapshot
// and the stale metric says so. For a cold start, WithCacheFile keeps a local
// copy of the last accepted document (written to a temp file and renamed, mode
// 0600, so a crash never leaves a torn copy). Start reads etcd with a bounded
// timeout (default 3 s); if etcd is unreachable, has no document, or holds an
// invalid one, it serves the cache file and marks itself stale until etcd
// confirms; with neither, Start fails: a proxy without routes refuses to serve.
//
// gRPC backs reconnects off for up to two minutes while etcd is down; a
// resync made while stale resets that backoff, so a proxy notices etcd's
// return within one resync period.
//
// # Metrics
//
// All carry the constant label cluster=<name>. By default they register with
// a private registry; pass WithRegisterer to export them.
//
//	convoy_route_version                      gauge   version being served
//	convoy_route_last_sync_timestamp_seconds  gauge   last time the served snapshot was confirmed to be what etcd holds
//	convoy_route_stale                        gauge   1 while the last look at etcd did not confirm the snapshot:
//	                                                  etcd unreachable, key missing, document invalid or older; else 0
//	convoy_route_staleness_seconds            gauge   now - last sync, computed at scrape time
//	convoy_route_rejected_total               counter documents refused by validation (each etcd write counted once)
//	convoy_route_reloads_total                counter snapshots swapped in, the initial one included
//
// After a cold start from the cache file, last sync is the file's
// modification time (when a proxy last accepted that document from etcd).
//
// # Coordination
//
// Migration and archive jobs and their elected runners, the per-shard
// migration lock (whose route flip writes this package's document in the
// lock's own transaction), switch turns, the proxy registry and shard size
// samples are in package coord, which imports this one. DecodeDocument and
// EncodeDocument are exported for it.
//
// # CLI
//
// RunCLI implements `routes init`, `routes show` and `routes apply FILE`; see
// CLIUsage for the flags.
package routecfg
