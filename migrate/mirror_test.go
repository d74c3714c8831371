package migrate

import (
	"context"
	"testing"
	"time"

	"github.com/convoy-im/convoy/internal/testsvc"
)

// TestMirror: dual-written rows reach the target as the source holds them
// (insert, update, delete); with the target down the writes are queued,
// once per key, and a replay after it is back makes the target equal.
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

	m, err := NewMirror(ctx, "job-1", []MirrorTable{{Logical: "conv_msg",
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

	if _, err := m.Write(ctx, TableKeys{"conv_msg", []Key{key(9, 1), key(9, 2), key(9, 1)}}); err != nil {
		t.Fatal(err)
	}
	if n := count("SELECT COUNT(*) FROM im_0.conv_msg_0007 WHERE conv_id = 9 AND created_at = '2026-01-02 03:04:05.678'"); n != 2 {
		t.Fatalf("target holds %d of the 2 mirrored rows", n)
	}
	// An update and a delete on the source, mirrored.
	src.Exec(t, "UPDATE im_0.conv_msg_0007 SET msg_type = 7 WHERE conv_id = 9 AND seq = 1", "DELETE FROM im_0.conv_msg_0007 WHERE conv_id = 9 AND seq = 2")
	if _, err := m.Write(ctx, TableKeys{"conv_msg", []Key{key(9, 1), key(9, 2)}}); err != nil {
		t.Fatal(err)
	}
	if n := count("SELECT COUNT(*) FROM im_0.conv_msg_0007 WHERE conv_id = 9 AND seq = 1 AND msg_type = 7"); n != 1 {
		t.Fatal("the update did not reach the target")
	}
	if n := count("SELECT COUNT(*) FROM im_0.conv_msg_0007 WHERE conv_id = 9 AND seq = 2"); n != 0 {
		t.Fatal("the delete did not reach the target")
	}

	// Target down: writes are queued (a key twice is one entry), nothing
	// reaches the caller.
	dst.Kill()
	for range 2 {
		if queued, err := m.Write(ctx, TableKeys{"conv_msg", []Key{key(9, 3), key(10, 1)}}); err != nil || queued == nil {
			t.Fatalf("a target failure reached the caller (%v) or was not queued (%v)", err, queued)
		}
	}
	if failed, lost := m.Failures(); failed != 2 || lost != 0 {
		t.Fatalf("failures %d lost %d, want 2 and 0", failed, lost)
	}
	if n, err := m.Backlog(ctx); err != nil || n != 2 {
		t.Fatalf("backlog %d, %v; want 2 (deduplicated)", n, err)
	}
	if _, err := m.Replay(ctx, 10); err == nil {
		t.Fatal("a replay with the target down succeeded")
	}
	dst.Start()
	done, err := m.Replay(ctx, 10)
	if err != nil || done != 2 {
		t.Fatalf("replay: %d, %v", done, err)
	}
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
	if _, err := m.Write(ctx, TableKeys{"conv_msg", nil}); err != nil {
		t.Fatalf("an empty write: %v", err)
	}
	if err := m.Sync(ctx, "im_inbox", []Key{key(1, 1)}); err == nil {
		t.Fatal("a table the mirror does not have was accepted")
	}
}
