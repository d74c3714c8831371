package migrate

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/convoy-im/convoy/internal/testsvc"
	"github.com/convoy-im/convoy/routecfg"
)

// TestMirror: the compensation queue of late dual-writes holds a key once,
// and its replay brings the rows to the target as the source holds them
// (insert, update, delete); with the target down the replay fails and
// keeps the keys, and once it is back it makes the target equal.
func TestMirror(t *testing.T) {
	src, dst := testsvc.StartMariaDB(t), testsvc.StartMariaDB(t)
	sdb, ddb := src.Open(t, ""), dst.Open(t, "")
	for _, m := range []*testsvc.MariaDB{src, dst} {
		m.Exec(t, "CREATE DATABASE im_0", imTable(t, "conv_msg", "im_0", "conv_msg_0007"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	row := func(conv, seq, msg int) []any { return []any{conv, seq, msg, 1, 1, "2026-01-02 03:04:05.678"} }
	cols := []string{"conv_id", "seq", "msg_id", "sender_uid", "msg_type", "created_at"}
	insert(t, sdb, "im_0.conv_msg_0007", cols, [][]any{row(9, 1, 901), row(9, 2, 902), row(9, 3, 903), row(10, 1, 1001)})

	m, err := NewMirror(ctx, "job-1", 7, []MirrorTable{{Logical: "conv_msg",
		Source: Side{DB: sdb, Database: "im_0", Table: "conv_msg_0007"}, Target: Side{DB: ddb, Database: "im_0", Table: "conv_msg_0007"}}})
	if err != nil {
		t.Fatal(err)
	}
	key := func(conv, seq uint64) Key {
		k, err := KeyOf(conv, seq)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	count := func(q string) int {
		t.Helper()
		var n int
		if err := ddb.QueryRowContext(ctx, q).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	late := errors.New("late")
	replay := func(want int) {
		t.Helper()
		if done, err := m.Replay(ctx, 10, nil); err != nil || done != want {
			t.Fatalf("replay: %d, %v; want %d", done, err, want)
		}
	}
	if err := m.queueKeys([]TableKeys{{"conv_msg", []Key{key(9, 1), key(9, 2), key(9, 1)}}}, late); err != nil {
		t.Fatal(err)
	}
	replay(2)
	if n := count("SELECT COUNT(*) FROM im_0.conv_msg_0007 WHERE conv_id = 9 AND created_at = '2026-01-02 03:04:05.678'"); n != 2 {
		t.Fatalf("target holds %d of the 2 replayed rows", n)
	}
	// An update and a delete on the source, replayed.
	src.Exec(t, "UPDATE im_0.conv_msg_0007 SET msg_type = 7 WHERE conv_id = 9 AND seq = 1", "DELETE FROM im_0.conv_msg_0007 WHERE conv_id = 9 AND seq = 2")
	if err := m.queueKeys([]TableKeys{{"conv_msg", []Key{key(9, 1), key(9, 2)}}}, late); err != nil {
		t.Fatal(err)
	}
	replay(2)
	if n := count("SELECT COUNT(*) FROM im_0.conv_msg_0007 WHERE conv_id = 9 AND seq = 1 AND msg_type = 7"); n != 1 {
		t.Fatal("the update did not reach the target")
	}
	if n := count("SELECT COUNT(*) FROM im_0.conv_msg_0007 WHERE conv_id = 9 AND seq = 2"); n != 0 {
		t.Fatal("the delete did not reach the target")
	}

	// Target down: a wait for it fails by its deadline; the keys queued
	// (a key twice is one entry) stay until a replay succeeds.
	dst.Kill()
	wctx, wcancel := context.WithTimeout(ctx, 200*time.Millisecond)
	if err := m.await(wctx, "0-1-1"); err == nil {
		t.Fatal("a wait for a target that is down succeeded")
	}
	wcancel()
	for range 2 {
		if err := m.queueKeys([]TableKeys{{"conv_msg", []Key{key(9, 3), key(10, 1)}}}, late); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := m.Backlog(ctx); err != nil || n != 2 {
		t.Fatalf("backlog %d, %v; want 2 (deduplicated)", n, err)
	}
	if _, err := m.Replay(ctx, 10, nil); err == nil {
		t.Fatal("a replay with the target down succeeded")
	}
	dst.Start()
	replay(2)
	if n, _ := m.Backlog(ctx); n != 0 {
		t.Fatalf("backlog after replay: %d", n)
	}
	if n := count("SELECT COUNT(*) FROM im_0.conv_msg_0007"); n != 3 {
		t.Fatalf("target has %d rows after the replay, want 3 (9/1, 9/3, 10/1)", n)
	}
	var attempts int
	if err := sdb.QueryRowContext(ctx, "SELECT COUNT(*) FROM im_0."+QueueTable).Scan(&attempts); err != nil || attempts != 0 {
		t.Fatalf("queue rows left: %d, %v", attempts, err)
	}
	if err := m.Sync(ctx, "im_inbox", []Key{key(1, 1)}); err == nil {
		t.Fatal("a table the mirror does not have was accepted")
	}
}

// TestMirrorReplayFenced: the job runner replays the compensation queue
// only while it is elected. Once its lease is revoked (its successor may
// switch the shard any time, after which a row synced from the source
// would overwrite the target's newer write), its replay writes nothing and
// the queue keeps its keys for the successor.
func TestMirrorReplayFenced(t *testing.T) {
	src, dst := testsvc.StartMariaDB(t), testsvc.StartMariaDB(t)
	sdb, ddb := src.Open(t, ""), dst.Open(t, "")
	for _, m := range []*testsvc.MariaDB{src, dst} {
		m.Exec(t, "CREATE DATABASE im_0", imTable(t, "conv_msg", "im_0", "conv_msg_0007"))
	}
	ctx := testCtx(t)
	cols := []string{"conv_id", "seq", "msg_id", "sender_uid", "msg_type", "created_at"}
	insert(t, sdb, "im_0.conv_msg_0007", cols, [][]any{{9, 1, 901, 1, 1, "2026-01-02 03:04:05"}, {9, 2, 902, 1, 1, "2026-01-02 03:04:05"},
		{9, 3, 903, 1, 1, "2026-01-02 03:04:05"}})
	m, err := NewMirror(ctx, "job-7", 7, []MirrorTable{{Logical: "conv_msg",
		Source: Side{DB: sdb, Database: "im_0", Table: "conv_msg_0007"}, Target: Side{DB: ddb, Database: "im_0", Table: "conv_msg_0007"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	queue := func(seqs ...uint64) {
		t.Helper()
		var keys []Key
		for _, s := range seqs {
			k, err := KeyOf(uint64(9), s)
			if err != nil {
				t.Fatal(err)
			}
			keys = append(keys, k)
		}
		if err := m.push(ctx, "conv_msg", keys, errors.New("the target failed")); err != nil {
			t.Fatal(err)
		}
	}

	e := testsvc.StartEtcd(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	r, err := routecfg.CampaignRunner(ctx, routecfg.NewJobStore(cli, "fenced"), 7, "m1", routecfg.WithRunnerTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	j := &jobRun{r: r, mirror: m, log: zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))}

	queue(1)
	var s Status
	j.replay(ctx, StepReady, "", &s)
	if s.Replayed != 1 || s.Backlog != 0 || count(t, ddb, "SELECT COUNT(*) FROM im_0.conv_msg_0007 WHERE 1 = ?", 1) != 1 {
		t.Fatalf("replay by the elected runner: replayed %d, backlog %d; want the key synced", s.Replayed, s.Backlog)
	}

	queue(2, 3)
	if _, err := cli.Revoke(ctx, r.Lease()); err != nil {
		t.Fatal(err)
	}
	s = Status{}
	j.replay(ctx, StepReady, "", &s)
	if s.Replayed != 0 {
		t.Errorf("a runner whose lease was revoked replayed %d keys", s.Replayed)
	}
	if n := count(t, ddb, "SELECT COUNT(*) FROM im_0.conv_msg_0007 WHERE 1 = ?", 1); n != 1 {
		t.Errorf("the target holds %d rows after the revoked runner's replay, want 1", n)
	}
	if n, err := m.Backlog(ctx); err != nil || n != 2 {
		t.Errorf("backlog %d, %v after the revoked runner's replay; want the 2 keys kept", n, err)
	}
	// The check inside the transaction, on its own: a replay that passed
	// the first check still commits nothing.
	if _, err := m.Replay(ctx, 10, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	src.Exec(t, "UPDATE im_0.conv_msg_0007 SET msg_type = 5 WHERE conv_id = 9 AND seq = 2")
	queue(2)
	calls := 0
	done, err := m.Replay(ctx, 10, func(context.Context) error {
		if calls++; calls > 1 {
			return routecfg.ErrNotRunner
		}
		return nil
	})
	if done != 0 || !errors.Is(err, routecfg.ErrNotRunner) {
		t.Errorf("Replay whose owner check fails before the commit: %d, %v; want none and ErrNotRunner", done, err)
	}
	if n, _ := m.Backlog(ctx); n != 1 {
		t.Errorf("backlog %d, want the key kept", n)
	}
	if n := count(t, ddb, "SELECT COUNT(*) FROM im_0.conv_msg_0007 WHERE msg_type = ?", 5); n != 0 {
		t.Errorf("the source's update reached the target through a replay whose owner check failed")
	}
}
