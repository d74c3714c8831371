package inproxy_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"go.uber.org/zap/zaptest"

	"github.com/convoy-im/convoy/binlog"
	"github.com/convoy-im/convoy/coord"
	"github.com/convoy-im/convoy/internal/testsvc"
	"github.com/convoy-im/convoy/migrate"
	"github.com/convoy-im/convoy/migrate/inproxy"
	"github.com/convoy-im/convoy/migrate/internal/jobrec"
	"github.com/convoy-im/convoy/router"
)

// A proxy's dual-write follows the job record: the mirror opens while the
// job prepares, no write waits before the job is ready and has a READ
// PERCENT, then only the writes of conversations in that share, whose ACK
// waits until the binlog apply shows them on the target; a write the
// target has not taken by the deadline is queued, and nothing waits once
// the job rolls back or is gone. Against a real MariaDB (the two sides as
// two databases of one server) and a real binlog apply.
func TestDualWrites(t *testing.T) {
	srv := testsvc.StartMariaDB(t)
	const shard = 7
	for _, db := range []string{"im_0", "im_9"} {
		srv.Exec(t, "CREATE DATABASE "+db)
		for _, logical := range router.ShardedTables() {
			srv.Exec(t, imTable(t, logical, db, router.PhysicalTableName(logical, shard)))
		}
	}
	db := srv.Open(t, "")
	ctx := testCtx(t)
	ds := []router.Datasource{{Name: "ds0", Addr: srv.Addr(), User: "root"}}
	doc, err := router.DefaultLayout(ds, 1)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := router.NewSnapshot(doc)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	metrics, err := inproxy.NewDualWriteMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	d := inproxy.NewDualWrites(inproxy.DualWriteConfig{Connect: connect, Routes: func() *router.Snapshot { return snap }, Metrics: metrics})
	defer d.Close()
	count := func(result string) float64 { return testutil.ToFloat64(metrics.Writes(result)) }

	// The job's binlog apply, as its runner would run it.
	var moves []migrate.TableMove
	for _, logical := range []string{"conv_msg", "im_conv_seq"} {
		name := router.PhysicalTableName(logical, shard)
		moves = append(moves, migrate.TableMove{Source: migrate.Side{DB: db, Database: "im_0", Table: name}, Target: migrate.Side{DB: db, Database: "im_9", Table: name}})
	}
	a, err := migrate.NewApplier(ctx, migrate.ApplierConfig{Job: "j1", Shard: shard, Tables: moves,
		Binlog: binlog.Config{Addr: srv.Addr(), User: "root", ServerID: 7000 + readerIDs.Add(1), Log: zaptest.NewLogger(t)}})
	if err != nil {
		t.Fatal(err)
	}
	runApplier(t, ctx, a, currentPosition(t, db))

	src := router.Target{Datasource: "ds0", Database: "im_0"}
	job := coord.Job{ID: "j1", Shard: shard, Step: jobrec.StepPrepare,
		From: coord.Endpoint{Datasource: "ds0", Database: "im_0"}, To: coord.Endpoint{Datasource: "ds0", Database: "im_9"}}
	var conv uint64 = 1
	for router.ShardOf(conv) != shard || inproxy.Share(conv) == 0 || inproxy.Share(conv) > 98 {
		conv++
	}
	percent := func(p int) {
		job.Progress = inproxy.EncodeProgress(jobrec.Progress{Commands: jobrec.Commands{ReadPercent: p}})
		d.Update(shard, &job)
	}
	d.Update(shard, &job)
	if !d.Any() || d.Mirrors(shard, src) {
		t.Fatalf("at prepare: Any %v Mirrors %v, want true, false", d.Any(), d.Mirrors(shard, src))
	}
	job.Step = jobrec.StepBackfill
	percent(0)
	if !d.Mirrors(shard, src) || d.Mirrors(shard, router.Target{Datasource: "ds0", Database: "im_9"}) || d.Mirrors(shard+1, src) {
		t.Fatal("at backfill: looks at the wrong writes")
	}
	job.Step = jobrec.StepReady
	percent(0)
	for deadline := time.Now().Add(10 * time.Second); !d.MirrorOpen(shard); {
		if time.Now().After(deadline) {
			t.Fatal("the mirror did not open")
		}
		time.Sleep(10 * time.Millisecond)
	}

	onTarget := func(seq int) int {
		t.Helper()
		var n int
		if err := db.QueryRow("SELECT COUNT(*) FROM im_9.conv_msg_0007 WHERE conv_id = ? AND seq = ?", conv, seq).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	client, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	// send commits a message on the source as a proxy would, and hands its
	// rows and its transaction's GTID to the dual-write; it returns how
	// long the ACK waited.
	send := func(seq int) time.Duration {
		t.Helper()
		if _, err := client.ExecContext(ctx, "INSERT INTO im_0.conv_msg_0007 (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES (?, ?, ?, 1, 1, NOW(3))", conv, seq, 1000+seq); err != nil {
			t.Fatal(err)
		}
		var gtid string
		if err := client.QueryRowContext(ctx, "SELECT @@last_gtid").Scan(&gtid); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		d.Mirror(shard, []inproxy.TableRows{
			{Table: "conv_msg", Columns: []string{"conv_id", "seq", "msg_id"}, Rows: [][]any{{conv, uint64(seq), uint64(1000 + seq)}}},
			{Table: "im_conv_seq", Columns: []string{"conv_id"}, Rows: [][]any{{conv}}},
		}, gtid)
		return time.Since(start)
	}
	// lockTarget holds a write lock on the target's conv_msg table, which
	// stalls the apply, until the returned func is called.
	lockTarget := func() (unlock func()) {
		t.Helper()
		lock, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := lock.ExecContext(ctx, "LOCK TABLES im_9.conv_msg_0007 WRITE"); err != nil {
			t.Fatal(err)
		}
		return func() {
			if _, err := lock.ExecContext(ctx, "UNLOCK TABLES"); err != nil {
				t.Error(err)
			}
			lock.Close()
		}
	}
	// READ PERCENT 0, then a share that leaves the conversation out: the
	// ACK does not wait (the binlog apply brings the rows later).
	send(11)
	percent(inproxy.Share(conv))
	send(12)
	if count(inproxy.DualWriteMirrored) != 0 {
		t.Fatalf("writes outside the read ramp's share waited: mirrored %v", count(inproxy.DualWriteMirrored))
	}
	percent(inproxy.Share(conv) + 1)
	// In the share: the ACK waits for the apply, held back here for a
	// while, and the row is on the target when it returns.
	unlock := lockTarget()
	go func() { time.Sleep(150 * time.Millisecond); unlock() }()
	took := send(1)
	if onTarget(1) != 1 || count(inproxy.DualWriteMirrored) != 2 || took < 100*time.Millisecond {
		t.Fatalf("mirrored write: on target %d when its ACK returned after %v, mirrored %v", onTarget(1), took, count(inproxy.DualWriteMirrored))
	}
	// Not knowing the transaction, the wait covers all the source has.
	if _, err := client.ExecContext(ctx, "UPDATE im_0.conv_msg_0007 SET msg_type = 9 WHERE conv_id = ? AND seq = 1", conv); err != nil {
		t.Fatal(err)
	}
	d.Mirror(shard, []inproxy.TableRows{{Table: "conv_msg", Columns: []string{"conv_id", "seq"}, Rows: [][]any{{conv, uint64(1)}}}}, "")
	var typ int
	if err := db.QueryRow("SELECT msg_type FROM im_9.conv_msg_0007 WHERE conv_id = ? AND seq = 1", conv).Scan(&typ); err != nil || typ != 9 || count(inproxy.DualWriteMirrored) != 3 {
		t.Fatalf("a write without its GTID: msg_type %d on the target (%v), mirrored %v", typ, err, count(inproxy.DualWriteMirrored))
	}

	// The apply stalled past the deadline: the write's keys are queued;
	// a write whose rows are not named by key cannot be.
	unlock = lockTarget()
	took = send(2)
	if took < inproxy.DualWriteTimeout || count(inproxy.DualWriteQueued) != 2 {
		t.Fatalf("a write the target stalled waited %v, queued %v", took, count(inproxy.DualWriteQueued))
	}
	d.Mirror(shard, []inproxy.TableRows{{Table: "conv_msg", Columns: []string{"conv_id"}, Rows: [][]any{{conv}}}}, "")
	if count(inproxy.DualWriteUnkeyed) != 1 {
		t.Fatalf("unkeyed %v, want 1", count(inproxy.DualWriteUnkeyed))
	}
	unlock()
	var queued string
	if err := db.QueryRow("SELECT GROUP_CONCAT(job, ' ', tbl ORDER BY tbl) FROM im_0." + inproxy.QueueTable).Scan(&queued); err != nil || queued != "j1 conv_msg,j1 im_conv_seq" {
		t.Fatalf("compensation queue holds %q (%v)", queued, err)
	}

	// Rolling back, then gone: nothing waits.
	job.Intent = jobrec.IntentRollback
	d.Update(shard, &job)
	if d.Mirrors(shard, src) {
		t.Fatal("a job rolling back is mirrored")
	}
	d.Update(shard, nil)
	if d.Any() || len(d.Shards()) != 0 {
		t.Fatal("a deleted job is still followed")
	}
	send(3)
	if count(inproxy.DualWriteMirrored) != 3 {
		t.Fatal("a write after the job was gone was mirrored")
	}
	if got := testutil.CollectAndCount(reg, inproxy.MetricDualWrites); got != 5 || !strings.HasPrefix(inproxy.MetricDualWriteSeconds, "convoy_") {
		t.Fatalf("%d result series, want 5", got)
	}
}
