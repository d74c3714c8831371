package migrate

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/convoy-im/convoy/internal/testsvc"
	"github.com/convoy-im/convoy/routecfg"
	"github.com/convoy-im/convoy/router"
)

// A proxy's dual-write follows the job record: the mirror opens while the
// job prepares, no write is mirrored before the job is ready and has a
// READ PERCENT, then only the writes of conversations in that share; a
// write the target cannot take is queued, and nothing is mirrored once the
// job rolls back or is gone. Against a real MariaDB (the two sides as two
// databases of one server).
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
	metrics, err := NewDualWriteMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	d := NewDualWrites(DualWriteConfig{Connect: connect, Routes: func() *router.Snapshot { return snap }, Metrics: metrics})
	defer d.Close()
	count := func(result string) float64 { return testutil.ToFloat64(metrics.writes.WithLabelValues(result)) }

	src := router.Target{Datasource: "ds0", Database: "im_0"}
	job := routecfg.Job{ID: "j1", Shard: shard, Step: StepPrepare,
		From: routecfg.Endpoint{Datasource: "ds0", Database: "im_0"}, To: routecfg.Endpoint{Datasource: "ds0", Database: "im_9"}}
	var conv uint64 = 1
	for router.ShardOf(conv) != shard || Share(conv) == 0 || Share(conv) > 98 {
		conv++
	}
	percent := func(p int) {
		job.Progress = encodeProgress(jobProgress{Commands: Commands{ReadPercent: p}})
		d.Update(shard, &job)
	}
	d.Update(shard, &job)
	if !d.Any() || d.Mirrors(shard, src) {
		t.Fatalf("at prepare: Any %v Mirrors %v, want true, false", d.Any(), d.Mirrors(shard, src))
	}
	job.Step = StepBackfill
	percent(0)
	if !d.Mirrors(shard, src) || d.Mirrors(shard, router.Target{Datasource: "ds0", Database: "im_9"}) || d.Mirrors(shard+1, src) {
		t.Fatal("at backfill: looks at the wrong writes")
	}
	job.Step = StepReady
	percent(0)
	for deadline := time.Now().Add(10 * time.Second); d.state(shard).mirror.Load() == nil; {
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
	send := func(seq int) {
		t.Helper()
		if _, err := db.Exec("INSERT INTO im_0.conv_msg_0007 (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES (?, ?, ?, 1, 1, NOW(3))", conv, seq, 1000+seq); err != nil {
			t.Fatal(err)
		}
		d.Mirror(shard, []TableRows{
			{Table: "conv_msg", Columns: []string{"conv_id", "seq", "msg_id"}, Rows: [][]any{{conv, uint64(seq), uint64(1000 + seq)}}},
			{Table: "im_conv_seq", Columns: []string{"conv_id"}, Rows: [][]any{{conv}}},
		})
	}
	// READ PERCENT 0, then a share that leaves the conversation out: no
	// mirror (the binlog apply brings it).
	send(11)
	percent(Share(conv))
	send(12)
	if onTarget(11)+onTarget(12) != 0 || count(DualWriteMirrored) != 0 {
		t.Fatalf("writes outside the read ramp's share mirrored: %d on target, mirrored %v", onTarget(11)+onTarget(12), count(DualWriteMirrored))
	}
	percent(Share(conv) + 1)
	send(1)
	if onTarget(1) != 1 || count(DualWriteMirrored) != 2 {
		t.Fatalf("mirrored write: on target %d, mirrored %v", onTarget(1), count(DualWriteMirrored))
	}
	// Rows the write does not name by key: counted, left to the binlog.
	d.Mirror(shard, []TableRows{{Table: "conv_msg", Columns: []string{"conv_id"}, Rows: [][]any{{conv}}}})
	if count(DualWriteUnkeyed) != 1 {
		t.Fatalf("unkeyed %v, want 1", count(DualWriteUnkeyed))
	}

	// The target table locked: the write is queued after the deadline.
	lock, err := srv.Open(t, "").Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if _, err := lock.ExecContext(t.Context(), "LOCK TABLES im_9.conv_msg_0007 WRITE"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	send(2)
	if took := time.Since(start); took < DualWriteTimeout || count(DualWriteQueued) != 2 {
		t.Fatalf("blocked mirror took %v, queued %v", took, count(DualWriteQueued))
	}
	if _, err := lock.ExecContext(t.Context(), "UNLOCK TABLES"); err != nil {
		t.Fatal(err)
	}
	var queued string
	if err := db.QueryRow("SELECT GROUP_CONCAT(job, ' ', tbl ORDER BY tbl) FROM im_0." + QueueTable).Scan(&queued); err != nil || queued != "j1 conv_msg,j1 im_conv_seq" {
		t.Fatalf("compensation queue holds %q (%v)", queued, err)
	}

	// Rolling back, then gone: nothing mirrored.
	job.Intent = IntentRollback
	d.Update(shard, &job)
	if d.Mirrors(shard, src) {
		t.Fatal("a job rolling back is mirrored")
	}
	d.Update(shard, nil)
	if d.Any() || len(d.Shards()) != 0 {
		t.Fatal("a deleted job is still followed")
	}
	send(3)
	if onTarget(3) != 0 || count(DualWriteMirrored) != 2 {
		t.Fatal("a write after the job was gone was mirrored")
	}
	if got := testutil.CollectAndCount(reg, MetricDualWrites); got != 5 || !strings.HasPrefix(MetricDualWriteSeconds, "convoy_") {
		t.Fatalf("%d result series, want 5", got)
	}
}
