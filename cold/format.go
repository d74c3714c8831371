package cold

import (
	"fmt"
	"strconv"
	"time"

	"github.com/parquet-go/parquet-go"
)

// Row is one archived message: a conv_msg row and the msg_content row with
// the same msg_id. Values are MySQL's text-protocol values in the order of
// Tables.Msg / Tables.Content; a nil element is SQL NULL, an empty non-nil
// slice the empty string. Content is nil when conv_msg had no body row.
// ConvID, Seq and MsgID are filled by the reader; the writer derives them
// from Msg.
//
// In an inbox file (Tables.Inbox) a Row is one im_inbox row: its values in
// Msg (in Tables.Inbox order), UID, ConvID and Seq its primary key, MsgID
// and Content unused.
type Row struct {
	UID                uint64
	ConvID, Seq, MsgID uint64
	Msg                [][]byte
	Content            [][]byte
}

// File format, version 1 (see doc.go). Parquet column names: the three typed
// keys under their own names, conv_msg text values as "m_<column>",
// msg_content text values as "c_<column>".
const (
	formatVersion = "1"
	metaVersion   = "convoy.cold.version"
	metaColumns   = "convoy.cold.columns" // Tables as JSON
	metaShard     = "convoy.cold.shard"
	metaDay       = "convoy.cold.day"
	metaRows      = "convoy.cold.rows"
	metaDigest    = "convoy.cold.digest" // Digest.String()

	msgPrefix     = "m_"
	contentPrefix = "c_"
	inboxPrefix   = "i_"
)

// schema builds the Parquet schema of a file holding t's columns.
func schema(t Tables) *parquet.Schema {
	key := parquet.Compressed(parquet.Encoded(parquet.Uint(64), &parquet.DeltaBinaryPacked), &parquet.Zstd)
	text := parquet.Compressed(parquet.Optional(parquet.Leaf(parquet.ByteArrayType)), &parquet.Zstd)
	g := parquet.Group{}
	if t.inbox() {
		for _, k := range inboxKeyColumns {
			g[k] = key
		}
		for _, c := range t.Inbox {
			g[inboxPrefix+c.Name] = text
		}
		return parquet.NewSchema("convoy_cold_inbox", g)
	}
	for _, k := range keyColumns {
		g[k] = key
	}
	for _, c := range t.Msg {
		g[msgPrefix+c.Name] = text
	}
	for _, c := range t.Content {
		g[contentPrefix+c.Name] = text
	}
	return parquet.NewSchema("convoy_cold", g)
}

// layout maps each logical value to its Parquet leaf column index (the
// schema orders leaves by name, not by MySQL column order). An inbox
// file's values are in msg; uid is -1 in a history file, msgID -1 in an
// inbox file.
type layout struct {
	uid, convID, seq, msgID int
	msg, content            []int
}

func newLayout(s *parquet.Schema, t Tables) (layout, error) {
	var err error
	idx := func(name string) int {
		leaf, ok := s.Lookup(name)
		if !ok && err == nil {
			err = fmt.Errorf("cold: file has no column %q", name)
		}
		return leaf.ColumnIndex
	}
	texts := func(prefix string, cols []Column) []int {
		out := make([]int, len(cols))
		for i, c := range cols {
			out[i] = idx(prefix + c.Name)
		}
		return out
	}
	l := layout{uid: -1, msgID: -1, convID: idx("conv_id"), seq: idx("seq")}
	if t.inbox() {
		l.uid, l.msg = idx("uid"), texts(inboxPrefix, t.Inbox)
	} else {
		l.msgID, l.msg, l.content = idx("msg_id"), texts(msgPrefix, t.Msg), texts(contentPrefix, t.Content)
	}
	return l, err
}

// ObjectKey is where part n of shard's archive of day lives:
// <prefix>/<shard 4 digits>/<yyyymmdd>/part-<n 4 digits>.parquet. The shard
// is the logical shard (the physical table of one-table-per-shard layouts:
// conv_msg_0441 -> 0441), day the UTC day of the rows' created_at.
func ObjectKey(prefix string, shard int, day time.Time, part int) string {
	k := fmt.Sprintf("%04d/%s/part-%04d.parquet", shard, day.UTC().Format("20060102"), part)
	if prefix != "" {
		k = prefix + "/" + k
	}
	return k
}

// InboxObjectKey is where part n of shard's archive of the im_inbox rows
// of day lives: next to the history parts of the same shard and day,
// <prefix>/<shard>/<yyyymmdd>/inbox-<n 4 digits>.parquet (day: the UTC day
// of send_time).
func InboxObjectKey(prefix string, shard int, day time.Time, part int) string {
	k := fmt.Sprintf("%04d/%s/inbox-%04d.parquet", shard, day.UTC().Format("20060102"), part)
	if prefix != "" {
		k = prefix + "/" + k
	}
	return k
}

func parseUint(b []byte, what string) (uint64, error) {
	if b == nil {
		return 0, fmt.Errorf("cold: %s is NULL", what)
	}
	v, err := strconv.ParseUint(string(b), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("cold: %s %q: %w", what, b, err)
	}
	return v, nil
}
