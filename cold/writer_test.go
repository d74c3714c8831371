package cold_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/convoy-im/convoy/cold"
)

// synthTables are hand-made definitions of a minimal conv_msg and
// msg_content, for tests that need no server.
func synthTables() cold.Tables {
	u64 := func(n string) cold.Column {
		return cold.Column{Name: n, Type: mysql.MYSQL_TYPE_LONGLONG, Flags: mysql.UNSIGNED_FLAG | mysql.NOT_NULL_FLAG, Charset: 63, Length: 20}
	}
	return cold.Tables{
		Msg:     []cold.Column{u64("conv_id"), u64("seq"), u64("msg_id")},
		Content: []cold.Column{u64("msg_id"), {Name: "content", Type: mysql.MYSQL_TYPE_VAR_STRING, Charset: 63, Length: 4096}},
	}
}

func synthRow(conv, seq, msgID string, content []byte) cold.Row {
	r := cold.Row{Msg: [][]byte{[]byte(conv), []byte(seq), []byte(msgID)}}
	if content != nil {
		r.Content = [][]byte{[]byte(msgID), content}
	}
	return r
}

// TestWriterRejects: input the format cannot hold faithfully is an error
// from NewWriter or Add, never a panic and never a silently different file.
func TestWriterRejects(t *testing.T) {
	day := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	bad := func(mutate func(*cold.Tables)) cold.Tables {
		tb := synthTables()
		mutate(&tb)
		return tb
	}
	for name, tb := range map[string]cold.Tables{
		"no content columns": bad(func(t *cold.Tables) { t.Content = nil }),
		"no seq":             bad(func(t *cold.Tables) { t.Msg = t.Msg[:1] }),
		"signed conv_id":     bad(func(t *cold.Tables) { t.Msg[0].Flags = 0 }),
		"int seq":            bad(func(t *cold.Tables) { t.Msg[1].Type = mysql.MYSQL_TYPE_LONG }),
		"duplicate column":   bad(func(t *cold.Tables) { t.Msg = append(t.Msg, t.Msg[0]) }),
		"no body msg_id":     bad(func(t *cold.Tables) { t.Content = t.Content[1:] }),
	} {
		if _, err := cold.NewWriter(tb, 1, day, cold.WriterOptions{}); err == nil {
			t.Errorf("%s: NewWriter accepted", name)
		}
	}

	for name, rows := range map[string][]cold.Row{
		"seq out of order":  {synthRow("1", "2", "10", []byte("a")), synthRow("1", "1", "11", []byte("b"))},
		"repeated key":      {synthRow("1", "2", "10", []byte("a")), synthRow("1", "2", "11", []byte("b"))},
		"conv out of order": {synthRow("2", "1", "10", []byte("a")), synthRow("1", "5", "11", []byte("b"))},
		"NULL seq":          {{Msg: [][]byte{[]byte("1"), nil, []byte("10")}}},
		"non-numeric key":   {synthRow("1", "x", "10", nil)},
		"negative key":      {synthRow("-1", "1", "10", nil)},
		"too few values":    {{Msg: [][]byte{[]byte("1"), []byte("1")}}},
		"all-NULL body":     {{Msg: [][]byte{[]byte("1"), []byte("1"), []byte("10")}, Content: [][]byte{nil, nil}}},
		"short body":        {{Msg: [][]byte{[]byte("1"), []byte("1"), []byte("10")}, Content: [][]byte{[]byte("10")}}},
	} {
		w, err := cold.NewWriter(synthTables(), 1, day, cold.WriterOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var addErr error
		for _, r := range rows {
			if addErr = w.Add(r); addErr != nil {
				break
			}
		}
		if addErr == nil {
			t.Errorf("%s: Add accepted", name)
		}
	}
}

// TestMemCatalog: files come back ascending by MinSeq, only for their
// conversations, and adding a file twice changes nothing.
func TestMemCatalog(t *testing.T) {
	c := cold.NewMemCatalog()
	c.Add(cold.FileInfo{Key: "b", Convs: []cold.ConvRange{{ConvID: 1, MinSeq: 50, MaxSeq: 90}, {ConvID: 2, MinSeq: 1, MaxSeq: 1}}})
	c.Add(cold.FileInfo{Key: "a", Convs: []cold.ConvRange{{ConvID: 1, MinSeq: 1, MaxSeq: 49}}})
	c.Add(cold.FileInfo{Key: "b", Convs: []cold.ConvRange{{ConvID: 1, MinSeq: 50, MaxSeq: 90}}})
	got, _ := c.Files(context.Background(), 1)
	var keys []string
	for _, f := range got {
		keys = append(keys, f.Key)
	}
	if strings.Join(keys, ",") != "a,b" || got[1].MinSeq != 50 || got[1].MaxSeq != 90 {
		t.Fatalf("conv 1: %+v", got)
	}
	if got, _ := c.Files(context.Background(), 3); len(got) != 0 {
		t.Fatalf("conv 3: %+v", got)
	}
}

// TestInboxFile: im_inbox rows read from MariaDB go into an inbox file
// that Verify accepts and ScanFile reads back value for value, in primary
// key order; rows out of order and history-shaped rows are refused, and a
// history Reader handed an inbox file errs instead of reading it as
// history.
func TestInboxFile(t *testing.T) {
	f := startFixture(t)
	var sb strings.Builder
	for uid := 1; uid <= 3; uid++ {
		for seq := 1; seq <= 40; seq++ {
			fmt.Fprintf(&sb, "INSERT INTO coldtest.im_inbox VALUES (%d, %d, %d, %d, '2026-01-01 08:%02d:%02d.%03d');\n", uid, 900+seq%2, seq, 10_000*uid+seq, seq/60, seq%60, seq)
		}
	}
	fmt.Fprintf(&sb, "INSERT INTO coldtest.im_inbox VALUES (18446744073709551615, 1, 1, 1, '2026-01-01 23:59:59.999');\n")
	f.db.Exec(t, sb.String())
	all := textQuery(t, f.conn, "SELECT * FROM im_inbox ORDER BY uid, conv_id, seq")
	day := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	w, err := cold.NewWriter(cold.Tables{Inbox: all.cols}, 441, day, cold.WriterOptions{RowsPerGroup: 16, PageBytes: 256})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range all.rows {
		if err := w.Add(cold.Row{Msg: r}); err != nil {
			t.Fatal(err)
		}
	}
	data, info, err := w.Finish()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	store, err := cold.OpenStore(ctx, "file://"+t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	info.Key = cold.InboxObjectKey("h", 441, day, 0)
	if info.Key != "h/0441/20260101/inbox-0000.parquet" {
		t.Fatalf("key %s", info.Key)
	}
	if err := store.PutIfAbsent(ctx, info.Key, data); err != nil {
		t.Fatal(err)
	}
	if err := cold.Verify(ctx, store, info.Key, info); err != nil {
		t.Fatal(err)
	}
	var got [][][]byte
	var uids []uint64
	err = cold.ScanFile(ctx, store, info, func(tb cold.Tables, r cold.Row) error {
		if fmt.Sprint(tb.Inbox) != fmt.Sprint(all.cols) {
			return fmt.Errorf("definitions %v, want %v", tb.Inbox, all.cols)
		}
		got = append(got, r.Msg)
		uids = append(uids, r.UID)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(all.rows) || uids[len(uids)-1] != 18446744073709551615 {
		t.Fatalf("read back %d rows (last uid %d), wrote %d", len(got), uids[len(uids)-1], len(all.rows))
	}
	for i := range got {
		if !equalValues(got[i], all.rows[i]) {
			t.Fatalf("row %d: %q, want %q", i, got[i], all.rows[i])
		}
	}
	w, _ = cold.NewWriter(cold.Tables{Inbox: all.cols}, 441, day, cold.WriterOptions{})
	if err := w.Add(cold.Row{Msg: all.rows[1]}); err != nil {
		t.Fatal(err)
	}
	if err := w.Add(cold.Row{Msg: all.rows[0]}); err == nil {
		t.Error("an inbox row out of order was accepted")
	}
	if err := w.Add(cold.Row{Msg: all.rows[5], Content: all.rows[5]}); err == nil {
		t.Error("an inbox row with a body was accepted")
	}
	if _, err := cold.NewWriter(cold.Tables{Inbox: all.cols, Msg: f.tables.Msg}, 441, day, cold.WriterOptions{}); err == nil {
		t.Error("a file of both kinds was accepted")
	}
	cat := cold.NewMemCatalog()
	cat.Add(cold.FileInfo{Key: info.Key, Convs: []cold.ConvRange{{ConvID: 900, MinSeq: 1, MaxSeq: 40}}})
	if _, err := cold.NewReader(store, cat, cold.ReaderOptions{}).Before(ctx, 900, 41, 5); err == nil {
		t.Error("a history read of an inbox file did not fail")
	}
}
