package cold

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"

	"github.com/parquet-go/parquet-go"
)

// ErrVerify: a file read back from storage does not hold what was written.
var ErrVerify = errors.New("cold: verify failed")

// Verify reads key back from store (whole, by range reads) and checks it
// is the file that was written (same SHA-256, which catches damage
// anywhere, statistics and indexes included) and holds exactly the rows
// want describes (same row count and Digest recomputed from the decoded
// values, which catches an encoder that lost or changed a value; same
// conversation ranges; same figures in the file's own metadata). The archiver calls it after
// PutIfAbsent and before cataloguing the file; a mismatch wraps ErrVerify.
func Verify(ctx context.Context, store Store, key string, want FileInfo) error {
	f, err := readWhole(ctx, store, key, want.SHA256)
	if err != nil {
		return err
	}
	var got FileInfo
	err = scanRows(f, func(r Row) error {
		got.Digest.Add(r)
		if f.lay.uid >= 0 {
			return nil // inbox files have no conversation ranges
		}
		extend(&got, r.ConvID, r.Seq, r.MsgID)
		return nil
	})
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrVerify, key, err)
	}
	if got.Digest != want.Digest {
		return fmt.Errorf("%w: %s: read back %s, wrote %s", ErrVerify, key, got.Digest, want.Digest)
	}
	if !sameRanges(got.Convs, want.Convs) {
		return fmt.Errorf("%w: %s: conversation ranges differ from what was written", ErrVerify, key)
	}
	if n, _ := f.pf.Lookup(metaRows); n != strconv.FormatInt(want.Digest.Rows, 10) {
		return fmt.Errorf("%w: %s: metadata says %s rows, wrote %d", ErrVerify, key, n, want.Digest.Rows)
	}
	if d, _ := f.pf.Lookup(metaDigest); d != want.Digest.String() {
		return fmt.Errorf("%w: %s: metadata digest %q, wrote %s", ErrVerify, key, d, want.Digest)
	}
	return nil
}

// sameRanges compares the ranges read back with those written; ranges
// written without msg_ids (older archivers) compare by seqs and rows.
func sameRanges(got, want []ConvRange) bool {
	return slices.EqualFunc(got, want, func(g, w ConvRange) bool {
		if w.MinMsgID == 0 && w.MaxMsgID == 0 {
			g.MinMsgID, g.MaxMsgID = 0, 0
		}
		return g == w
	})
}

// readWhole reads key from store in one range read and opens it,
// checking its SHA-256 first.
func readWhole(ctx context.Context, store Store, key, sha string) (*openFile, error) {
	size, err := store.Size(ctx, key)
	if err != nil {
		return nil, err
	}
	data, err := store.ReadRange(ctx, key, 0, size)
	if err != nil {
		return nil, err
	}
	if int64(len(data)) != size {
		return nil, fmt.Errorf("%w: %s: read %d bytes of %d", ErrVerify, key, len(data), size)
	}
	if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != sha {
		return nil, fmt.Errorf("%w: %s: sha256 %x of the stored object, wrote %s", ErrVerify, key, sum, sha)
	}
	f, err := openParquet(key, bytes.NewReader(data), size)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrVerify, err)
	}
	return f, nil
}

// ScanFile reads the file info describes back from store (checking its
// SHA-256) and calls fn for each row in file order ((conv_id, seq)
// ascending), with the column definitions it was written with. The
// archiver uses it to delete exactly the warm rows a file holds.
func ScanFile(ctx context.Context, store Store, info FileInfo, fn func(Tables, Row) error) error {
	f, err := readWhole(ctx, store, info.Key, info.SHA256)
	if err != nil {
		return err
	}
	return scanRows(f, func(r Row) error { return fn(f.tables, r) })
}

// SameRow reports whether a and b hold the same values (what Digest
// hashes): the archiver's test that a warm row is unchanged since it was
// archived.
func SameRow(a, b Row) bool { return bytes.Equal(rowBytes(a), rowBytes(b)) }

// scanRows calls fn for every row of f in file order.
func scanRows(f *openFile, fn func(Row) error) error {
	buf := make([]parquet.Row, 128)
	for _, rg := range f.pf.RowGroups() {
		rows := rg.Rows()
		for {
			n, err := rows.ReadRows(buf)
			for _, pr := range buf[:n] {
				if ferr := fn(f.rowOf(pr)); ferr != nil {
					rows.Close()
					return ferr
				}
			}
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				rows.Close()
				return err
			}
		}
		rows.Close()
	}
	return nil
}

// rowOf converts a whole Parquet row (values ordered by leaf column, one
// per column: the schema has no repetition).
func (f *openFile) rowOf(pr parquet.Row) Row {
	byCol := make([]parquet.Value, len(pr))
	for _, v := range pr {
		byCol[v.Column()] = v
	}
	values := make([][]byte, 0, len(f.lay.msg)+len(f.lay.content))
	for _, c := range append(slices.Clone(f.lay.msg), f.lay.content...) {
		values = append(values, textValue(byCol[c]))
	}
	if f.lay.uid >= 0 {
		return Row{UID: byCol[f.lay.uid].Uint64(), ConvID: byCol[f.lay.convID].Uint64(), Seq: byCol[f.lay.seq].Uint64(), Msg: values}
	}
	return f.assemble(byCol[f.lay.convID].Uint64(), byCol[f.lay.seq].Uint64(), byCol[f.lay.msgID].Uint64(), values)
}

// assemble builds a Row from its keys and its text values, conv_msg's
// then msg_content's; all-NULL msg_content values mean no body row.
func (f *openFile) assemble(conv, seq, msgID uint64, values [][]byte) Row {
	n := len(f.lay.msg)
	r := Row{ConvID: conv, Seq: seq, MsgID: msgID, Msg: values[:n:n]}
	if content := values[n:]; slices.ContainsFunc(content, func(v []byte) bool { return v != nil }) {
		r.Content = content
	}
	return r
}
