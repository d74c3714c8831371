package integration

import "testing"

func TestSmoke(t *testing.T) {
	s := newStack(t)
	db := s.convoy.open(t, "convoy", "convoy", "im")
	if _, err := db.Exec("INSERT INTO conv_msg (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES (42, 1, 1001, 7, 1, '2026-01-01 00:00:00.123')"); err != nil {
		t.Fatal(err)
	}
	var seq, msgID int64
	if err := db.QueryRow("SELECT seq, msg_id FROM conv_msg WHERE conv_id = 42").Scan(&seq, &msgID); err != nil {
		t.Fatal(err)
	}
	if seq != 1 || msgID != 1001 {
		t.Fatalf("got %d %d", seq, msgID)
	}
	if err := db.QueryRow("SELECT seq, msg_id FROM conv_msg WHERE conv_id = ?", 42).Scan(&seq, &msgID); err != nil {
		t.Fatal(err)
	}
	// shard of 42 is 136: im_0 (shards 0..511) on ds0, table conv_msg_0128 (shards 128..255).
	var n int
	if err := s.ds[0].Open(t, "im_0").QueryRow("SELECT COUNT(*) FROM conv_msg_0128 WHERE conv_id = 42").Scan(&n); err != nil || n != 1 {
		t.Fatalf("row not in physical table im_0.conv_msg_0128: n=%d err=%v", n, err)
	}
}
