package inproxy_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/convoy-im/convoy/binlog"
	"github.com/convoy-im/convoy/internal/testsvc"
	"github.com/convoy-im/convoy/migrate"
	"github.com/convoy-im/convoy/migrate/inproxy"
	"github.com/convoy-im/convoy/migrate/internal/physical"
)

// mirrorEnv is a source and a target with im_0.conv_msg_0007 on both, a
// mirror of it for job "job-1" shard 7, and that job's binlog apply,
// started and stopped by the test.
type mirrorEnv struct {
	src, dst *testsvc.MariaDB
	m        *inproxy.Mirror
	origin   binlog.Position
	moves    []migrate.TableMove
}

func newMirrorEnv(t *testing.T, ctx context.Context) *mirrorEnv {
	t.Helper()
	src, dst := testsvc.StartMariaDB(t), testsvc.StartMariaDB(t)
	for _, m := range []*testsvc.MariaDB{src, dst} {
		m.Exec(t, "CREATE DATABASE im_0", imTable(t, "conv_msg", "im_0", "conv_msg_0007"))
	}
	sdb, ddb := src.Open(t, ""), dst.Open(t, "")
	s, d := migrate.Side{DB: sdb, Database: "im_0", Table: "conv_msg_0007"}, migrate.Side{DB: ddb, Database: "im_0", Table: "conv_msg_0007"}
	m, err := inproxy.NewMirror(ctx, "job-1", 7, []inproxy.MirrorTable{{Logical: "conv_msg", Source: s, Target: d}})
	if err != nil {
		t.Fatal(err)
	}
	return &mirrorEnv{src: src, dst: dst, m: m, origin: currentPosition(t, sdb), moves: []migrate.TableMove{{Source: s, Target: d}}}
}

// apply starts the job's apply (from its checkpoint, once there is one).
func (me *mirrorEnv) apply(t *testing.T, ctx context.Context) (stop func() error) {
	t.Helper()
	a, err := migrate.NewApplier(ctx, migrate.ApplierConfig{Job: "job-1", Shard: 7, Tables: me.moves,
		Binlog: binlog.Config{Addr: me.src.Addr(), User: "root", ServerID: 7000 + readerIDs.Add(1), Log: zaptest.NewLogger(t)}})
	if err != nil {
		t.Fatal(err)
	}
	return runApplier(t, ctx, a, me.origin)
}

func (me *mirrorEnv) queue(t *testing.T, seqs ...uint64) {
	t.Helper()
	var keys []physical.Key
	for _, s := range seqs {
		k, err := physical.KeyOf(uint64(9), s)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	if err := me.m.QueueKeys([]inproxy.TableKeys{{Table: "conv_msg", Keys: keys}}, errors.New("late")); err != nil {
		t.Fatal(err)
	}
}

// TestMirror: the compensation queue of late dual-writes holds a key once;
// its replay writes nothing to the target, and drops the keys only once
// the binlog apply has passed the source's position read after them (the
// target then shows what their writes committed). With the apply stopped,
// the replay fails by its deadline and keeps the keys, counting the
// attempt.
func TestMirror(t *testing.T) {
	ctx := testCtx(t)
	me := newMirrorEnv(t, ctx)
	sdb, ddb := me.src.Open(t, ""), me.dst.Open(t, "")
	stop := me.apply(t, ctx)
	cols := []string{"conv_id", "seq", "msg_id", "sender_uid", "msg_type", "created_at"}
	row := func(seq, msg int) []any { return []any{9, seq, msg, 1, 1, "2026-01-02 03:04:05.678"} }
	insert(t, sdb, "im_0.conv_msg_0007", cols, [][]any{row(1, 901), row(2, 902)})
	me.queue(t, 1, 2, 1)
	if n, err := me.m.Backlog(ctx); err != nil || n != 2 {
		t.Fatalf("backlog %d, %v; want 2 (deduplicated)", n, err)
	}
	if done, err := me.m.Replay(ctx, 10, nil); err != nil || done != 2 {
		t.Fatalf("replay with the apply running: %d, %v; want 2", done, err)
	}
	if n := count(t, ddb, "SELECT COUNT(*) FROM im_0.conv_msg_0007 WHERE conv_id = ?", 9); n != 2 {
		t.Fatalf("the target holds %d of the 2 rows once the replay confirmed them", n)
	}

	// The apply stopped: the replay cannot confirm, keeps the key and
	// counts the attempt; once the apply runs again it confirms.
	if err := stop(); !errors.Is(err, context.Canceled) {
		t.Fatalf("apply: %v", err)
	}
	me.src.Exec(t, "UPDATE im_0.conv_msg_0007 SET msg_type = 7 WHERE conv_id = 9 AND seq = 1")
	me.queue(t, 1)
	start := time.Now()
	if done, err := me.m.Replay(ctx, 10, nil); err == nil || done != 0 || time.Since(start) < inproxy.ReplayWait {
		t.Fatalf("replay with the apply stopped: %d, %v after %v; want an error after %v", done, err, time.Since(start), inproxy.ReplayWait)
	}
	var attempts int
	if err := sdb.QueryRowContext(ctx, "SELECT attempts FROM im_0."+inproxy.QueueTable+" WHERE job = 'job-1'").Scan(&attempts); err != nil || attempts != 1 {
		t.Fatalf("attempts %d, %v; want 1", attempts, err)
	}
	if n := count(t, ddb, "SELECT COUNT(*) FROM im_0.conv_msg_0007 WHERE msg_type = ?", 7); n != 0 {
		t.Fatal("the replay wrote the target itself")
	}
	me.apply(t, ctx)
	if done, err := me.m.Replay(ctx, 10, nil); err != nil || done != 1 {
		t.Fatalf("replay once the apply runs again: %d, %v", done, err)
	}
	if n := count(t, ddb, "SELECT COUNT(*) FROM im_0.conv_msg_0007 WHERE msg_type = ?", 7); n != 1 {
		t.Fatal("the update is not on the target once the replay confirmed it")
	}
	if n, _ := me.m.Backlog(ctx); n != 0 {
		t.Fatalf("backlog after the replay: %d", n)
	}
}
