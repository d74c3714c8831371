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
type Row struct {
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
)

// schema builds the Parquet schema of a file holding t's columns.
func schema(t Tables) *parquet.Schema {
	key := parquet.Compressed(parquet.Encoded(parquet.Uint(64), &parquet.DeltaBinaryPacked), &parquet.Zstd)
	text := parquet.Compressed(parquet.Optional(parquet.Leaf(parquet.ByteArrayType)), &parquet.Zstd)
	g := parquet.Group{}
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
// schema orders leaves by name, not by MySQL column order).
type layout struct {
	convID, seq, msgID int
	msg, content       []int
}

func newLayout(s *parquet.Schema, t Tables) (layout, error) {
	idx := func(name string) (int, error) {
		leaf, ok := s.Lookup(name)
		if !ok {
			return 0, fmt.Errorf("cold: file has no column %q", name)
		}
		return leaf.ColumnIndex, nil
	}
	var l layout
	var err error
	if l.convID, err = idx("conv_id"); err != nil {
		return l, err
	}
	if l.seq, err = idx("seq"); err != nil {
		return l, err
	}
	if l.msgID, err = idx("msg_id"); err != nil {
		return l, err
	}
	for _, c := range t.Msg {
		i, err := idx(msgPrefix + c.Name)
		if err != nil {
			return l, err
		}
		l.msg = append(l.msg, i)
	}
	for _, c := range t.Content {
		i, err := idx(contentPrefix + c.Name)
		if err != nil {
			return l, err
		}
		l.content = append(l.content, i)
	}
	return l, nil
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
