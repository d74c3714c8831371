package engine

import (
	"fmt"
	"strings"
	"testing"

	"github.com/convoy-im/convoy/router"
)

// recordingDual mirrors one shard at its datasource and records the calls.
type recordingDual struct {
	shard router.Shard
	at    router.Target
	calls []string
}

func (d *recordingDual) Any() bool { return true }
func (d *recordingDual) Mirrors(sh router.Shard, at router.Target) bool {
	return sh == d.shard && at.Datasource == d.at.Datasource && at.Database == d.at.Database
}
func (d *recordingDual) Mirror(sh router.Shard, writes []MirrorRows, commit string) {
	for _, w := range writes {
		var rs []string
		for _, r := range w.Rows {
			rs = append(rs, strings.TrimSpace(fmt.Sprintln(r[:len(w.Columns)]...)))
		}
		d.calls = append(d.calls, fmt.Sprintf("%d %s(%s) %s @%s", sh, w.Table, strings.Join(w.Columns, ","), strings.Join(rs, " | "), commit))
	}
}

func (d *recordingDual) take() string {
	out := strings.Join(d.calls, "\n")
	d.calls = nil
	return out
}

func TestDualWriteRows(t *testing.T) {
	s, _ := newTestSession()
	sh := router.ShardOf(42)
	d := &recordingDual{shard: sh, at: s.e.routes.Current().Target(sh)}
	s.e.SetDualWrites(d)
	other := uint64(43)
	for router.ShardOf(other) == sh {
		other++
	}
	for _, c := range []struct{ sql, want string }{
		{"INSERT INTO msg_content (msg_id, conv_id, sender_uid, msg_type, content, created_at) VALUES (9, 42, 1, 1, 'x', NOW())",
			fmt.Sprintf("%d msg_content(msg_id,conv_id,sender_uid,msg_type,content,created_at) 9 42 1 1 x <nil> @0-1-77", sh)},
		// Seqs allocated by Convoy (the fake's max_seq is 1000): the
		// conversation's im_conv_seq row and the rows with their seqs.
		{"INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (42, 5, 1, 1, NOW()), (42, 6, 1, 1, NOW())",
			fmt.Sprintf("%d im_conv_seq(conv_id) 42 @0-1-77\n%[1]d conv_msg(conv_id,msg_id,sender_uid,msg_type,created_at,seq) 42 5 1 1 <nil> 999 | 42 6 1 1 <nil> 1000 @0-1-77", sh)},
		{"UPDATE conv_msg SET msg_type = 2 WHERE conv_id = 42 AND seq IN (3, 4)", fmt.Sprintf("%d conv_msg(conv_id,seq) 42 3 | 42 4 @0-1-77", sh)},
		// Rows it does not name by their whole key: the ACK waits all
		// the same; a late target leaves them to the binlog apply.
		{"DELETE FROM conv_msg WHERE conv_id = 42 AND seq > 5", fmt.Sprintf("%d conv_msg(conv_id) 42 @0-1-77", sh)},
		{fmt.Sprintf("UPDATE conv_msg SET msg_type = 2 WHERE conv_id = %d AND seq = 1", other), ""},
		{"SELECT * FROM conv_msg WHERE conv_id = 42", ""},
		// A transaction's writes are mirrored at COMMIT, never at ROLLBACK.
		{"BEGIN", ""},
		{"UPDATE im_conv_seq SET member_cnt = 3 WHERE conv_id = 42", ""},
		{"COMMIT", fmt.Sprintf("%d im_conv_seq(conv_id) 42 @0-1-77", sh)},
		{"BEGIN", ""},
		{"DELETE FROM conv_msg WHERE conv_id = 42 AND seq = 7", ""},
		{"ROLLBACK", ""},
	} {
		if _, err := s.Query(c.sql); err != nil {
			t.Fatalf("%s: %v", c.sql, err)
		}
		if got := d.take(); got != c.want {
			t.Errorf("%s:\n got %q\nwant %q", c.sql, got, c.want)
		}
	}
	// A prepared write resolves its placeholders.
	p, err := s.Prepare("DELETE FROM im_conv_seq WHERE conv_id = ?")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Execute(p, []any{int64(42)}); err != nil {
		t.Fatal(err)
	}
	if got, want := d.take(), fmt.Sprintf("%d im_conv_seq(conv_id) 42 @0-1-77", sh); got != want {
		t.Errorf("prepared DELETE: got %q want %q", got, want)
	}
}
