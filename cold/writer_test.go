package cold_test

import (
	"context"
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
