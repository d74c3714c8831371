// Package inproxy is the part of an online shard migration that every
// proxy runs (convoy serve), beside the statements its clients send to a
// moving shard, as opposed to the job that one elected runner executes
// (package migrate). One concept a file:
//
//	jobwatch.go  WatchJobs: the cluster's job records kept current in a
//	             proxy's views of them (DualWrites, then Ramps)
//	dualwrite.go DualWrites (step 2): which writes a proxy mirrors, and the
//	             ACK of a write in the read ramp's share waiting until the
//	             target shows it; engine.DualWrites
//	mirror.go    Mirror: one job's dual-write, its wait for the binlog
//	             apply and the deduplicated compensation queue of writes
//	             the target took late (filled by the proxies, replayed and
//	             confirmed by the job's runner: Replay)
//	applywait.go waiting until the apply's checkpoint passes a source
//	             transaction, one poller per watch
//	ramp.go      Ramps (step 5): the reads of READ PERCENT of a ready
//	             shard's keys sent to the target, announced in etcd before
//	             a proxy ramps (a rollback waits for none); engine.ReadRamps
//	rampstats.go the ramp's reads per side (errors, latency) on every
//	             proxy, published under its lease; ReadRampTotals sums them
//	             for SHOW MIGRATIONS
//
// cmd/convoy wires it (NewDualWrites, NewRamps, WatchJobs, PublishStats)
// into the engine, which names its own interfaces and imports neither
// package. inproxy does not import migrate; migrate imports it for the
// compensation queue (Mirror) and the ramp's figures (ReadRampTotals,
// RampColumns). The job record's fields both read (migrate/internal/jobrec)
// and the pools, physical tables and keys both use
// (migrate/internal/physical) live below the two. Its error messages keep
// the "migrate:" prefix they had before the package was split off.
//
// The name says where the code runs: in the proxy process, for as long as
// a migration's job record says so; its types (DualWrites, Ramps, Mirror)
// then read without a stutter.
package inproxy
