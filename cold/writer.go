package cold

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/parquet-go/parquet-go"
)

// Writer defaults. A row group is the unit the reader fetches with one
// range read when a page needs most of it, so it is kept to a few hundred
// KiB; pages are what a conversation page actually decodes (20-50 messages
// of a few hundred bytes each fill one or two).
const (
	DefaultRowsPerGroup = 4096
	DefaultPageBytes    = 16 << 10
)

// WriterOptions tunes the file layout; zero values take the defaults.
type WriterOptions struct {
	RowsPerGroup int64
	PageBytes    int
}

// Writer builds one cold file in memory: rows of one shard and one day,
// added in (conv_id, seq) order (an inbox file's in (uid, conv_id, seq)
// order). The archiver bounds a part's rows so the
// buffer stays small; Finish returns the file's bytes and what the catalog
// records about it. The same rows and options always give the same bytes,
// which is what makes a rerun's PutIfAbsent idempotent.
type Writer struct {
	tables Tables
	shard  int
	day    time.Time
	lay    layout
	buf    bytes.Buffer
	//lint:ignore SA1019 the schema-driven writer takes rows built at run time (its generic successor needs a Go type per schema)
	pw     *parquet.Writer
	info   FileInfo
	last   *ConvRange
	keyIdx [len(keyColumns)]int
	// lastInbox is the key of an inbox file's last row.
	lastInbox *[3]uint64
}

// NewWriter starts a file for shard's rows of day (UTC).
func NewWriter(t Tables, shard int, day time.Time, opt WriterOptions) (*Writer, error) {
	if err := t.validate(); err != nil {
		return nil, err
	}
	if opt.RowsPerGroup <= 0 {
		opt.RowsPerGroup = DefaultRowsPerGroup
	}
	if opt.PageBytes <= 0 {
		opt.PageBytes = DefaultPageBytes
	}
	s := schema(t)
	lay, err := newLayout(s, t)
	if err != nil {
		return nil, err
	}
	w := &Writer{tables: t, shard: shard, day: day.UTC().Truncate(24 * time.Hour), lay: lay}
	sorting := parquet.SortingWriterConfig(parquet.SortingColumns(parquet.Ascending("conv_id"), parquet.Ascending("seq")))
	// msg_id lookups without a conversation (msg_content by msg_id) can
	// skip a file by its bloom filter.
	bloom := parquet.BloomFilters(parquet.SplitBlockFilter(10, "msg_id"))
	if t.inbox() {
		for i, k := range inboxKeyColumns {
			w.keyIdx[i] = columnAt(t.Inbox, k)
		}
		sorting = parquet.SortingWriterConfig(parquet.SortingColumns(parquet.Ascending("uid"), parquet.Ascending("conv_id"), parquet.Ascending("seq")))
		bloom = parquet.BloomFilters()
	} else {
		for i, k := range keyColumns {
			w.keyIdx[i] = t.msgIndex(k)
		}
	}
	w.pw = parquet.NewWriter(&w.buf, s,
		parquet.MaxRowsPerRowGroup(opt.RowsPerGroup),
		parquet.PageBufferSize(opt.PageBytes),
		parquet.CreatedBy("convoy", formatVersion, ""),
		sorting,
		bloom,
		parquet.KeyValueMetadata(metaVersion, formatVersion),
		parquet.KeyValueMetadata(metaColumns, t.marshal()),
		parquet.KeyValueMetadata(metaShard, strconv.Itoa(shard)),
		parquet.KeyValueMetadata(metaDay, w.day.Format("20060102")),
	)
	return w, nil
}

// Add appends one row. Rows must come in strictly increasing (conv_id, seq)
// order with len(Msg) and len(Content) (when not nil) matching the tables.
func (w *Writer) Add(r Row) error {
	if w.tables.inbox() {
		return w.addInbox(r)
	}
	if len(r.Msg) != len(w.tables.Msg) {
		return fmt.Errorf("cold: row has %d conv_msg values, want %d", len(r.Msg), len(w.tables.Msg))
	}
	if r.Content != nil && len(r.Content) != len(w.tables.Content) {
		return fmt.Errorf("cold: row has %d msg_content values, want %d", len(r.Content), len(w.tables.Content))
	}
	if r.Content != nil && !slices.ContainsFunc(r.Content, func(v []byte) bool { return v != nil }) {
		// Stored as all-NULL columns, it would read back as "no body row".
		return fmt.Errorf("cold: msg_content values are all NULL")
	}
	var keys [len(keyColumns)]uint64
	for i, k := range keyColumns {
		v, err := parseUint(r.Msg[w.keyIdx[i]], "conv_msg."+k)
		if err != nil {
			return err
		}
		keys[i] = v
	}
	conv, seq, msgID := keys[0], keys[1], keys[2]
	if l := w.last; l != nil && (conv < l.ConvID || conv == l.ConvID && seq <= l.MaxSeq) {
		return fmt.Errorf("cold: row (%d,%d) after (%d,%d): rows must be in (conv_id, seq) order", conv, seq, l.ConvID, l.MaxSeq)
	}
	row := make(parquet.Row, len(w.lay.msg)+len(w.lay.content)+len(keyColumns))
	row[w.lay.convID] = parquet.Int64Value(int64(conv)).Level(0, 0, w.lay.convID)
	row[w.lay.seq] = parquet.Int64Value(int64(seq)).Level(0, 0, w.lay.seq)
	row[w.lay.msgID] = parquet.Int64Value(int64(msgID)).Level(0, 0, w.lay.msgID)
	text := func(v []byte, col int) parquet.Value {
		if v == nil {
			return parquet.NullValue().Level(0, 0, col)
		}
		return parquet.ByteArrayValue(v).Level(0, 1, col)
	}
	for i, col := range w.lay.msg {
		row[col] = text(r.Msg[i], col)
	}
	for i, col := range w.lay.content {
		var v []byte
		if r.Content != nil {
			v = r.Content[i]
		}
		row[col] = text(v, col)
	}
	if _, err := w.pw.WriteRows([]parquet.Row{row}); err != nil {
		return fmt.Errorf("cold: write row (%d,%d): %w", conv, seq, err)
	}
	w.info.Digest.Add(r)
	extend(&w.info, conv, seq, msgID)
	w.last = &w.info.Convs[len(w.info.Convs)-1]
	return nil
}

// addInbox appends one im_inbox row (values in r.Msg), in strictly
// increasing (uid, conv_id, seq) order. An inbox file's FileInfo has no
// conversation ranges: nothing reads inbox rows back by conversation.
func (w *Writer) addInbox(r Row) error {
	if len(r.Msg) != len(w.tables.Inbox) || r.Content != nil {
		return fmt.Errorf("cold: inbox row has %d values (and a body %v), want %d", len(r.Msg), r.Content != nil, len(w.tables.Inbox))
	}
	var k [3]uint64
	for i, name := range inboxKeyColumns {
		v, err := parseUint(r.Msg[w.keyIdx[i]], "im_inbox."+name)
		if err != nil {
			return err
		}
		k[i] = v
	}
	if l := w.lastInbox; l != nil && slices.Compare(k[:], l[:]) <= 0 {
		return fmt.Errorf("cold: inbox row %v after %v: rows must be in (uid, conv_id, seq) order", k, *l)
	}
	row := make(parquet.Row, len(w.lay.msg)+len(inboxKeyColumns))
	for i, col := range []int{w.lay.uid, w.lay.convID, w.lay.seq} {
		row[col] = parquet.Int64Value(int64(k[i])).Level(0, 0, col)
	}
	for i, col := range w.lay.msg {
		if v := r.Msg[i]; v == nil {
			row[col] = parquet.NullValue().Level(0, 0, col)
		} else {
			row[col] = parquet.ByteArrayValue(v).Level(0, 1, col)
		}
	}
	if _, err := w.pw.WriteRows([]parquet.Row{row}); err != nil {
		return fmt.Errorf("cold: write inbox row %v: %w", k, err)
	}
	w.info.Digest.Add(r)
	w.lastInbox = &k
	return nil
}

// Finish closes the file and returns its bytes and description (Key is
// left for the caller, who names the object).
func (w *Writer) Finish() ([]byte, FileInfo, error) {
	w.pw.SetKeyValueMetadata(metaRows, strconv.FormatInt(w.info.Digest.Rows, 10))
	w.pw.SetKeyValueMetadata(metaDigest, w.info.Digest.String())
	if err := w.pw.Close(); err != nil {
		return nil, FileInfo{}, fmt.Errorf("cold: close file: %w", err)
	}
	w.info.Shard, w.info.Day = w.shard, w.day
	w.info.Bytes = int64(w.buf.Len())
	sum := sha256.Sum256(w.buf.Bytes())
	w.info.SHA256 = hex.EncodeToString(sum[:])
	return w.buf.Bytes(), w.info, nil
}
