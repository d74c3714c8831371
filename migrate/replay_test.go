package migrate

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/convoy-im/convoy/binlog"
	"github.com/convoy-im/convoy/coord"
	"github.com/convoy-im/convoy/internal/testsvc"
	"github.com/convoy-im/convoy/migrate/inproxy"
	"github.com/convoy-im/convoy/migrate/internal/physical"
)

// mirrorEnv is a source and a target with im_0.conv_msg_0007 on both, the
// dual-write's mirror of it for job "job-1" shard 7 (its compensation
// queue, which the runner replays), and that job's binlog apply, started
// and stopped by the test.
type mirrorEnv struct {
	src, dst *testsvc.MariaDB
	m        *inproxy.Mirror
	origin   binlog.Position
	moves    []TableMove
}

func newMirrorEnv(t *testing.T, ctx context.Context) *mirrorEnv {
	t.Helper()
	src, dst := testsvc.StartMariaDB(t), testsvc.StartMariaDB(t)
	for _, m := range []*testsvc.MariaDB{src, dst} {
		m.Exec(t, "CREATE DATABASE im_0", imTable(t, "conv_msg", "im_0", "conv_msg_0007"))
	}
	sdb, ddb := src.Open(t, ""), dst.Open(t, "")
	s, d := Side{DB: sdb, Database: "im_0", Table: "conv_msg_0007"}, Side{DB: ddb, Database: "im_0", Table: "conv_msg_0007"}
	m, err := inproxy.NewMirror(ctx, "job-1", 7, []inproxy.MirrorTable{{Logical: "conv_msg", Source: s, Target: d}})
	if err != nil {
		t.Fatal(err)
	}
	return &mirrorEnv{src: src, dst: dst, m: m, origin: currentPosition(t, sdb), moves: []TableMove{{Source: s, Target: d}}}
}

// apply starts the job's apply (from its checkpoint, once there is one).
func (me *mirrorEnv) apply(t *testing.T, ctx context.Context) (stop func() error) {
	t.Helper()
	a, err := NewApplier(ctx, ApplierConfig{Job: "job-1", Shard: 7, Tables: me.moves,
		Binlog: binlog.Config{Addr: me.src.Addr(), User: "root", ServerID: 7000 + readerIDs.Add(1), Log: zaptest.NewLogger(t)}})
	if err != nil {
		t.Fatal(err)
	}
	return runApplier(t, ctx, a, me.origin)
}

// queue puts keys of conversation 9 in the compensation queue as a proxy's
// late dual-write does (inproxy's Mirror.queueKeys: one row per job,
// table and key as JSON).
func (me *mirrorEnv) queue(t *testing.T, seqs ...uint64) {
	t.Helper()
	db := me.src.Open(t, "")
	for _, s := range seqs {
		k, err := physical.KeyOf(uint64(9), s)
		if err != nil {
			t.Fatal(err)
		}
		pk, err := json.Marshal(k)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec("INSERT INTO im_0."+inproxy.QueueTable+" (job, tbl, pk, last_error) VALUES ('job-1', 'conv_msg', ?, 'late')"+
			" ON DUPLICATE KEY UPDATE last_error = VALUES(last_error)", pk); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMirrorReplayFenced: the job runner replays the compensation queue
// only while it is elected; once its lease is revoked its replay confirms
// nothing and the queue keeps its keys for the successor.
func TestMirrorReplayFenced(t *testing.T) {
	ctx := testCtx(t)
	me := newMirrorEnv(t, ctx)
	me.apply(t, ctx)
	e := testsvc.StartEtcd(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	r, err := coord.CampaignRunner(ctx, coord.NewJobStore(cli, "fenced"), 7, "m1", coord.WithRunnerTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	j := &jobRun{r: r, mirror: me.m, log: zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))}

	me.queue(t, 1)
	var s Status
	j.replay(ctx, StepReady, "", &s)
	if s.Replayed != 1 || s.Backlog != 0 {
		t.Fatalf("replay by the elected runner: replayed %d, backlog %d; want the key confirmed", s.Replayed, s.Backlog)
	}

	me.queue(t, 2, 3)
	if _, err := cli.Revoke(ctx, r.Lease()); err != nil {
		t.Fatal(err)
	}
	s = Status{}
	j.replay(ctx, StepReady, "", &s)
	if s.Replayed != 0 {
		t.Errorf("a runner whose lease was revoked replayed %d keys", s.Replayed)
	}
	if n, err := me.m.Backlog(ctx); err != nil || n != 2 {
		t.Errorf("backlog %d, %v after the revoked runner's replay; want the 2 keys kept", n, err)
	}
}
