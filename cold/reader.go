package cold

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"

	"github.com/parquet-go/parquet-go"
)

// Page is the answer to one cold read.
type Page struct {
	// Tables are the column definitions the rows were archived with.
	Tables Tables
	// Rows in query order (Before: seq descending; After: ascending).
	Rows []Row
	// More is set when the context's deadline (the cold budget) cut the
	// read short: Rows is then a correct prefix of the full answer, and the
	// caller continues from the last row's seq. It is never set merely
	// because limit rows were returned.
	More bool
	// Frontier, with More, bounds what is final: Before returned every
	// answer row with seq > Frontier, After every one with seq < Frontier
	// (rows of other tiers beyond it may still be preceded by cold rows
	// not read). ByKeys leaves it 0: its rows are right, the set may lack
	// rows of files not searched.
	Frontier uint64
}

// Reader serves the three history reads from cold files. It is safe for
// concurrent use. Files are immutable, so each one's footer and page
// index are read once and kept (up to cacheFiles files); a page read then
// costs one or two rounds of parallel range reads: the key columns of the
// conversation's row span, then the value columns of the rows chosen.
type Reader struct {
	store    Store
	catalog  Catalog
	cache    *fileCache
	parallel int
}

// ReaderOptions tunes a Reader; zero values take the defaults.
type ReaderOptions struct {
	// CacheFiles bounds the open-file cache (default 1024; a footer and
	// page index of a default-sized part is some tens of KiB).
	CacheFiles int
	// Parallel bounds the files a page read reads at once (default 8; 1
	// reads them one after another).
	Parallel int
}

// NewReader returns a reader of the files catalog lists in store.
func NewReader(store Store, catalog Catalog, opt ReaderOptions) *Reader {
	if opt.CacheFiles <= 0 {
		opt.CacheFiles = 1024
	}
	if opt.Parallel <= 0 {
		opt.Parallel = defaultParallel
	}
	return &Reader{store: store, catalog: catalog, cache: newFileCache(opt.CacheFiles), parallel: opt.Parallel}
}

// With returns a reader of the files c lists, sharing r's store, open-file
// cache and options: a catalog made for one read (the files a read's own
// lookups found) costs one small allocation.
func (r *Reader) With(c Catalog) *Reader {
	cp := *r
	cp.catalog = c
	return &cp
}

// Before returns up to limit rows of conv with seq < before, seq descending
// (the scroll-up read). skip (ascending) are seqs to treat as absent on
// top of the catalog's own Skip lists: the engine's tombstones of archived
// rows users deleted.
func (r *Reader) Before(ctx context.Context, conv, before uint64, limit int, skip ...uint64) (Page, error) {
	if before == 0 || limit <= 0 {
		return Page{}, nil
	}
	files, err := r.files(ctx, conv, skip)
	if err != nil {
		return Page{}, err
	}
	files = slices.DeleteFunc(files, func(f FileRange) bool { return f.MinSeq >= before })
	// Highest first: once limit rows are held, a file whose MaxSeq is below
	// all of them cannot contribute, nor can any after it.
	slices.SortStableFunc(files, func(a, b FileRange) int { return cmp.Compare(b.MaxSeq, a.MaxSeq) })
	return r.page(ctx, conv, files, limit, true, pageWalk{
		bounds:   func(f FileRange) (uint64, uint64) { return 0, min(before-1, f.MaxSeq) },
		past:     func(f FileRange, last uint64) bool { return f.MaxSeq < last },
		frontier: func(f FileRange) uint64 { return min(before-1, f.MaxSeq) },
	})
}

// After returns up to limit rows of conv with seq > after, seq ascending
// (the catch-up read); skip as for Before.
func (r *Reader) After(ctx context.Context, conv, after uint64, limit int, skip ...uint64) (Page, error) {
	if limit <= 0 {
		return Page{}, nil
	}
	files, err := r.files(ctx, conv, skip)
	if err != nil {
		return Page{}, err
	}
	files = slices.DeleteFunc(files, func(f FileRange) bool { return f.MaxSeq <= after })
	// Files are ascending by MinSeq already.
	return r.page(ctx, conv, files, limit, false, pageWalk{
		bounds:   func(f FileRange) (uint64, uint64) { return max(after+1, f.MinSeq), f.MaxSeq },
		past:     func(f FileRange, last uint64) bool { return f.MinSeq > last },
		frontier: func(f FileRange) uint64 { return max(after+1, f.MinSeq) },
	})
}

// pageWalk is what a page read (Before, After) tells page about its
// direction: the seqs to read from a file, whether a file lies past the
// last row of a full page (it and every later one cannot contribute), and
// the frontier when the budget cuts the read at a file (the rows on the
// near side of it are final).
type pageWalk struct {
	bounds   func(f FileRange) (lo, hi uint64)
	past     func(f FileRange, last uint64) bool
	frontier func(f FileRange) uint64
}

// page reads up to limit rows from files (in query order) a wave at a
// time: each wave is the fewest next files whose rows can fill what the
// page still lacks (FileRange.Rows less its skips, an upper bound of what
// each can give), at most Parallel of them, read at once and merged in
// order. A sparse conversation (one message a day, a daily file each)
// then costs one wave of parallel reads per page instead of one read per
// file after another; a dense one reads the one or two files it needs.
// When the budget runs out, the rows before the first file not read are
// final (More, Frontier).
func (r *Reader) page(ctx context.Context, conv uint64, files []FileRange, limit int, desc bool, w pageWalk) (Page, error) {
	var p Page
	for i := 0; i < len(files); {
		if len(p.Rows) >= limit && w.past(files[i], p.Rows[limit-1].Seq) {
			break
		}
		need := int64(max(1, limit-len(p.Rows)))
		j, can := i, int64(0)
		for j < len(files) && j-i < r.parallel && (j == i || can < need) {
			n := files[j].Rows - int64(len(files[j].Skip))
			if files[j].Rows == 0 {
				n = need // unknown: it may fill the page
			}
			can += max(n, 0)
			j++
		}
		rows := make([][]Row, j-i)
		tables := make([]Tables, j-i)
		errs := make([]error, j-i)
		var wg sync.WaitGroup
		for k := i; k < j; k++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				lo, hi := w.bounds(files[k])
				rows[k-i], tables[k-i], errs[k-i] = r.fileRows(ctx, files[k], conv, lo, hi, nil, limit, desc)
			}()
		}
		wg.Wait()
		for k := i; k < j; k++ {
			if err := errs[k-i]; err != nil {
				if ctx.Err() != nil {
					frontier := w.frontier(files[k])
					p.Rows = slices.DeleteFunc(p.Rows, func(r Row) bool {
						if desc {
							return r.Seq <= frontier
						}
						return r.Seq >= frontier
					})
					p.More, p.Frontier = true, frontier
					return p, nil
				}
				return Page{}, err
			}
			if err := p.merge(tables[k-i], rows[k-i], limit, desc); err != nil {
				return Page{}, err
			}
		}
		i = j
	}
	return p, nil
}

// ByMsgID returns conv's row whose msg_id is msgID, if archived (the jump
// anchor). More means the budget ran out before every file was searched.
func (r *Reader) ByMsgID(ctx context.Context, conv, msgID uint64, skip ...uint64) (Page, error) {
	return r.ByKeys(ctx, conv, nil, []uint64{msgID}, skip...)
}

// defaultParallel is how many files a read reads at once by default
// (ReaderOptions.Parallel): a lookup by msg_id cannot prune by seq and may
// have to look into every file of the conversation, and a sparse
// conversation's page spans many small files, each one or two range
// reads.
const defaultParallel = 8

// ByKeys returns conv's archived rows whose seq is in seqs or whose msg_id
// is in msgIDs (message bodies fetched by msg_id, writes checking whether
// the rows they name are archived), ascending by seq; skip as for Before.
// Files are searched a few at a time; More means the budget ran out first:
// the rows returned are right, rows of files not searched are missing.
func (r *Reader) ByKeys(ctx context.Context, conv uint64, seqs, msgIDs []uint64, skip ...uint64) (Page, error) {
	if len(seqs)+len(msgIDs) == 0 {
		return Page{}, nil
	}
	files, err := r.files(ctx, conv, skip)
	if err != nil {
		return Page{}, err
	}
	seqSet := make(map[uint64]bool, len(seqs))
	for _, s := range seqs {
		seqSet[s] = true
	}
	idSet := make(map[uint64]bool, len(msgIDs))
	for _, m := range msgIDs {
		idSet[m] = true
	}
	// A file can hold a key only within its ranges (msg_id ranges of
	// files catalogued before they were recorded are unknown: searched).
	files = slices.DeleteFunc(files, func(f FileRange) bool {
		inSeqs := slices.ContainsFunc(seqs, func(s uint64) bool { return s >= f.MinSeq && s <= f.MaxSeq })
		known := f.MinMsgID != 0 || f.MaxMsgID != 0
		inIDs := slices.ContainsFunc(msgIDs, func(m uint64) bool { return !known || m >= f.MinMsgID && m <= f.MaxMsgID })
		return !inSeqs && !inIDs
	})
	match := func(seq, msgID uint64) bool { return seqSet[seq] || idSet[msgID] }
	limit := len(seqs) + len(msgIDs)
	found := make([][]Row, len(files))
	tables := make([]Tables, len(files))
	errs := make([]error, len(files))
	r.eachFile(len(files), func(i int) {
		found[i], tables[i], errs[i] = r.fileRows(ctx, files[i], conv, files[i].MinSeq, files[i].MaxSeq, match, limit, false)
	})
	var p Page
	for i := range files {
		if errs[i] != nil {
			if ctx.Err() != nil {
				p.More = true
				continue
			}
			return Page{}, errs[i]
		}
		if err := p.merge(tables[i], found[i], limit, false); err != nil {
			return Page{}, err
		}
	}
	return p, nil
}

// files are the catalog's files of conv with the caller's extra skips
// merged into each one's Skip (those within its range).
func (r *Reader) files(ctx context.Context, conv uint64, skip []uint64) ([]FileRange, error) {
	files, err := r.catalog.Files(ctx, conv)
	if err != nil || len(skip) == 0 {
		return files, err
	}
	for i, f := range files {
		a, _ := slices.BinarySearch(skip, f.MinSeq)
		b, _ := slices.BinarySearch(skip, f.MaxSeq+1)
		if f.MaxSeq == ^uint64(0) {
			b = len(skip)
		}
		if a >= b {
			continue
		}
		merged := append(slices.Clone(f.Skip), skip[a:b]...)
		slices.Sort(merged)
		files[i].Skip = slices.Compact(merged)
	}
	return files, nil
}

// merge folds one file's rows (already in query order) into p, keeping
// the limit best.
func (p *Page) merge(t Tables, rows []Row, limit int, desc bool) error {
	if len(rows) == 0 {
		return nil
	}
	if p.Tables.Msg == nil {
		p.Tables = t
	} else if t.marshal() != p.Tables.marshal() {
		// An ALTER between archive runs; serving it needs per-row
		// definitions, which nothing produces yet.
		return errors.New("cold: files of one conversation have different column definitions")
	}
	p.Rows = append(p.Rows, rows...)
	slices.SortStableFunc(p.Rows, func(a, b Row) int {
		if desc {
			return cmp.Compare(b.Seq, a.Seq)
		}
		return cmp.Compare(a.Seq, b.Seq)
	})
	if len(p.Rows) > limit {
		p.Rows = p.Rows[:limit]
	}
	return nil
}

// fileRows returns up to limit rows of conv in fr's file with seq in
// [lo, hi] and not in fr.Skip (and for which match holds, when given): the
// highest seqs, descending, when desc, else the lowest, ascending.
func (r *Reader) fileRows(ctx context.Context, fr FileRange, conv, lo, hi uint64, match func(seq, msgID uint64) bool, limit int, desc bool) ([]Row, Tables, error) {
	key := fr.Key
	f, err := r.open(ctx, key)
	if err != nil {
		return nil, Tables{}, err
	}
	if f.lay.uid >= 0 {
		return nil, Tables{}, fmt.Errorf("[BUG] cold: %s is an inbox file, not history", key)
	}
	groups := f.pf.RowGroups()
	order := make([]int, len(groups))
	for i := range order {
		order[i] = i
	}
	if desc {
		slices.Reverse(order)
	}
	if match == nil {
		if lo, hi = outOfGaps(fr.Gaps, lo, hi, desc); lo > hi {
			return nil, f.tables, nil
		}
	}
	// Erased rows inside the range take room in the pages narrow counts,
	// as skipped ones do, but how many is not known: no count bound then.
	gapped := gapsWithin(fr.Gaps, lo, hi)
	var out []Row
	for _, g := range order {
		rg := groups[g]
		a, b, err := convSpan(rg.ColumnChunks()[f.lay.convID], conv, rg.NumRows())
		if err != nil {
			return nil, Tables{}, fmt.Errorf("cold: %s row group %d: %w", key, g, err)
		}
		if match == nil {
			// Skipped rows take room in the pages narrow counts.
			bound := limit - len(out) + len(fr.Skip)
			if gapped {
				bound = 0
			}
			a, b, err = narrow(rg, f.lay, conv, a, b, lo, hi, bound, desc)
			if err != nil {
				return nil, Tables{}, fmt.Errorf("cold: %s row group %d: %w", key, g, err)
			}
		}
		if a >= b {
			continue
		}
		keys, err := readColumns(ctx, r, f, rg, a, b, []int{f.lay.convID, f.lay.seq, f.lay.msgID}, parquet.Value.Uint64)
		if err != nil {
			return nil, Tables{}, err
		}
		var hits []int64 // row offsets from a, ascending
		for j := range keys[0] {
			c, s, m := keys[0][j], keys[1][j], keys[2][j]
			if c == conv && s >= lo && s <= hi && (match == nil || match(s, m)) && !skipped(fr.Skip, s) && !inGaps(fr.Gaps, s) {
				hits = append(hits, int64(j))
			}
		}
		need := limit - len(out)
		if len(hits) > need {
			if desc {
				hits = hits[len(hits)-need:]
			} else {
				hits = hits[:need]
			}
		}
		if len(hits) == 0 {
			continue
		}
		first, last := a+hits[0], a+hits[len(hits)-1]+1
		cols := append(slices.Clone(f.lay.msg), f.lay.content...)
		vals, err := readColumns(ctx, r, f, rg, first, last, cols, textValue)
		if err != nil {
			return nil, Tables{}, err
		}
		rows := make([]Row, 0, len(hits))
		for _, j := range hits {
			k := j - (first - a)
			values := make([][]byte, len(cols))
			for i := range cols {
				values[i] = vals[i][k]
			}
			rows = append(rows, f.assemble(keys[0][j], keys[1][j], keys[2][j], values))
		}
		if desc {
			slices.Reverse(rows)
		}
		out = append(out, rows...)
		if len(out) >= limit {
			break
		}
	}
	return out, f.tables, nil
}

func textValue(v parquet.Value) []byte {
	if v.IsNull() {
		return nil
	}
	return bytes.Clone(v.ByteArray())
}

// convSpan returns the row range [a, b) of a row group whose conv_id pages
// may hold conv (rows are sorted, so those pages are consecutive).
func convSpan(cc parquet.ColumnChunk, conv uint64, numRows int64) (int64, int64, error) {
	ci, err := cc.ColumnIndex()
	if err != nil {
		return 0, 0, err
	}
	oi, err := cc.OffsetIndex()
	if err != nil {
		return 0, 0, err
	}
	a, b := int64(-1), int64(-1)
	for p := 0; p < ci.NumPages(); p++ {
		if ci.NullPage(p) || ci.MinValue(p).Uint64() > conv || ci.MaxValue(p).Uint64() < conv {
			if a >= 0 && b < 0 {
				b = oi.FirstRowIndex(p)
			}
			continue
		}
		if a < 0 {
			a = oi.FirstRowIndex(p)
		}
	}
	if a < 0 {
		return 0, 0, nil
	}
	if b < 0 {
		b = numRows
	}
	return a, b, nil
}

// narrow shrinks a conversation's candidate rows [a, b) with the seq page
// index, so a page of a conversation holding many rows in one row group
// does not read all their keys. Where conv_id pages have min = max = conv,
// every row is conv's and seq ascends, so a seq page lying wholly there
// can be judged by its min and max: pages below lo (above hi) and all rows
// before (after) them go; once pages wholly inside [lo, hi] nearest the
// cursor hold limit rows, everything beyond them goes too.
func narrow(rg parquet.RowGroup, lay layout, conv uint64, a, b int64, lo, hi uint64, limit int, desc bool) (int64, int64, error) {
	chunks := rg.ColumnChunks()
	pages := func(c int) (parquet.ColumnIndex, parquet.OffsetIndex, func(p int) (int64, int64), error) {
		ci, err := chunks[c].ColumnIndex()
		if err != nil {
			return nil, nil, nil, err
		}
		oi, err := chunks[c].OffsetIndex()
		if err != nil {
			return nil, nil, nil, err
		}
		rows := func(p int) (int64, int64) {
			end := rg.NumRows()
			if p+1 < oi.NumPages() {
				end = oi.FirstRowIndex(p + 1)
			}
			return oi.FirstRowIndex(p), end
		}
		return ci, oi, rows, nil
	}
	ci, _, rows, err := pages(lay.convID)
	if err != nil {
		return a, b, err
	}
	cs, ce := int64(-1), int64(-1) // rows that are certainly conv's
	for p := range ci.NumPages() {
		if !ci.NullPage(p) && ci.MinValue(p).Uint64() == conv && ci.MaxValue(p).Uint64() == conv {
			s, e := rows(p)
			if cs < 0 {
				cs = s
			}
			ce = e
		}
	}
	if cs < 0 {
		return a, b, nil
	}
	sci, soi, srows, err := pages(lay.seq)
	if err != nil {
		return a, b, err
	}
	type page struct {
		s, e     int64
		min, max uint64
	}
	var in []page // seq pages wholly inside [cs, ce), ascending
	for p := range soi.NumPages() {
		if s, e := srows(p); s >= cs && e <= ce {
			in = append(in, page{s, e, sci.MinValue(p).Uint64(), sci.MaxValue(p).Uint64()})
		}
	}
	for _, p := range in {
		if p.max < lo {
			a = max(a, p.e)
		}
		if p.min > hi {
			b = min(b, p.s)
		}
	}
	if limit <= 0 {
		return a, b, nil
	}
	held := int64(0)
	if desc {
		for i := len(in) - 1; i >= 0; i-- {
			if p := in[i]; p.e <= b && p.min >= lo && p.max <= hi {
				if held += p.e - p.s; held >= int64(limit) {
					return max(a, p.s), b, nil
				}
			}
		}
		return a, b, nil
	}
	for _, p := range in {
		if p.s >= a && p.min >= lo && p.max <= hi {
			if held += p.e - p.s; held >= int64(limit) {
				return a, min(b, p.e), nil
			}
		}
	}
	return a, b, nil
}

// readColumns reads rows [a, b) of rg for the given leaf columns,
// converting each value with conv while its page is in memory. It first
// fetches, in parallel, the byte spans of the pages holding those rows
// (spans closer than mergeGap are fetched as one), then decodes from
// memory.
func readColumns[T any](ctx context.Context, r *Reader, f *openFile, rg parquet.RowGroup, a, b int64, cols []int, conv func(parquet.Value) T) ([][]T, error) {
	chunks := rg.ColumnChunks()
	var spans []span
	for _, c := range cols {
		s, err := pageSpan(chunks[c], a, b)
		if err != nil {
			return nil, err
		}
		spans = append(spans, s...)
	}
	mem, err := r.fetch(ctx, f.key, spans)
	if err != nil {
		return nil, err
	}
	out := make([][]T, len(cols))
	for i, c := range cols {
		fcc, ok := chunks[c].(*parquet.FileColumnChunk)
		if !ok {
			return nil, fmt.Errorf("[BUG] cold: column chunk %T is not a file chunk", chunks[c])
		}
		vals, err := readValues(fcc.PagesFrom(mem), a, b, conv)
		if err != nil {
			return nil, fmt.Errorf("cold: %s column %d rows [%d,%d): %w", f.key, c, a, b, err)
		}
		out[i] = vals
	}
	return out, nil
}

func readValues[T any](pages *parquet.FilePages, a, b int64, conv func(parquet.Value) T) ([]T, error) {
	defer pages.Close()
	if err := pages.SeekToRow(a); err != nil {
		return nil, err
	}
	out := make([]T, 0, b-a)
	buf := make([]parquet.Value, 256)
	for int64(len(out)) < b-a {
		p, err := pages.ReadPage()
		if err != nil {
			return nil, err
		}
		vr := p.Values()
		for int64(len(out)) < b-a {
			n, err := vr.ReadValues(buf[:min(int64(len(buf)), b-a-int64(len(out)))])
			for _, v := range buf[:n] {
				out = append(out, conv(v))
			}
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				parquet.Release(p)
				return nil, err
			}
		}
		parquet.Release(p)
	}
	return out, nil
}

// span is a byte range [off, end) of a file.
type span struct{ off, end int64 }

// mergeGap: two spans closer than this are fetched as one range read; a
// GET costs far more than 64 KiB of transfer.
const mergeGap = 64 << 10

// pageSpan returns the byte ranges of a column chunk's pages holding rows
// [a, b), plus its dictionary page if it has one.
func pageSpan(cc parquet.ColumnChunk, a, b int64) ([]span, error) {
	oi, err := cc.OffsetIndex()
	if err != nil {
		return nil, err
	}
	// Text columns are PLAIN-encoded (no dictionary page); were one
	// present, spanReader would fetch it on demand.
	var out []span
	first, last := -1, -1
	for p := 0; p < oi.NumPages(); p++ {
		start := oi.FirstRowIndex(p)
		end := int64(-1)
		if p+1 < oi.NumPages() {
			end = oi.FirstRowIndex(p + 1)
		}
		if start < b && (end < 0 || end > a) {
			if first < 0 {
				first = p
			}
			last = p
		}
	}
	if first < 0 {
		return out, nil
	}
	return append(out, span{oi.Offset(first), oi.Offset(last) + oi.CompressedPageSize(last)}), nil
}

// fetch reads spans of key (merged) in parallel and returns a ReaderAt
// over them. A read outside every span falls through to the store.
func (r *Reader) fetch(ctx context.Context, key string, spans []span) (*spanReader, error) {
	slices.SortFunc(spans, func(x, y span) int { return cmp.Compare(x.off, y.off) })
	var merged []span
	for _, s := range spans {
		if n := len(merged); n > 0 && s.off <= merged[n-1].end+mergeGap {
			merged[n-1].end = max(merged[n-1].end, s.end)
			continue
		}
		merged = append(merged, s)
	}
	sr := &spanReader{storeReaderAt: storeReaderAt{ctx: ctx, store: r.store, key: key}, spans: merged, data: make([][]byte, len(merged))}
	errs := make([]error, len(merged))
	var wg sync.WaitGroup
	for i, s := range merged {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sr.data[i], errs[i] = r.store.ReadRange(ctx, key, s.off, s.end-s.off)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return sr, nil
}

// spanReader serves reads from prefetched spans. A read that starts inside
// a span but runs past its end returns the span's bytes only (n < len(p),
// nil error): parquet reads pages through a bufio.Reader that asks for a
// whole buffer, and must not turn that into a range read of bytes it will
// not decode. It comes back for more only if it needs them.
type spanReader struct {
	storeReaderAt // reads outside every span
	spans         []span
	data          [][]byte
}

func (s *spanReader) ReadAt(p []byte, off int64) (int, error) {
	for i, sp := range s.spans {
		if off >= sp.off && off < sp.off+int64(len(s.data[i])) {
			return copy(p, s.data[i][off-sp.off:]), nil
		}
	}
	return s.storeReaderAt.ReadAt(p, off)
}

// Key is what Keys returns of one archived row: its keys, its sender and
// whether a body row (msg_content) was archived with it.
type Key struct {
	Seq, MsgID, Sender uint64
	Body               bool
}

// Keys returns the keys of conv's archived rows with seq in [lo, hi] that
// the files' Skip and Gaps and skip (as for Before) leave, ascending by seq, reading key columns
// only (no message values): what a DELETE of a conversation's archived
// rows by range or by sender counts and names. All or nothing: a read
// that ctx cuts short is an error.
func (r *Reader) Keys(ctx context.Context, conv, lo, hi uint64, skip ...uint64) ([]Key, error) {
	files, err := r.files(ctx, conv, skip)
	if err != nil {
		return nil, err
	}
	files = slices.DeleteFunc(files, func(f FileRange) bool { return f.MaxSeq < lo || f.MinSeq > hi })
	found := make([][]Key, len(files))
	errs := make([]error, len(files))
	r.eachFile(len(files), func(i int) {
		found[i], errs[i] = r.fileKeys(ctx, files[i], conv, max(lo, files[i].MinSeq), min(hi, files[i].MaxSeq))
	})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	var out []Key
	for _, k := range found {
		out = append(out, k...)
	}
	slices.SortFunc(out, func(a, b Key) int { return cmp.Compare(a.Seq, b.Seq) })
	return slices.CompactFunc(out, func(a, b Key) bool { return a.Seq == b.Seq }), nil
}

// eachFile calls fn(0..n-1), at most Parallel at once, and returns when
// all have.
func (r *Reader) eachFile(n int, fn func(i int)) {
	sem := make(chan struct{}, r.parallel)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			fn(i)
		}()
	}
	wg.Wait()
}

// fileKeys is Keys in one file.
func (r *Reader) fileKeys(ctx context.Context, fr FileRange, conv, lo, hi uint64) ([]Key, error) {
	f, err := r.open(ctx, fr.Key)
	if err != nil {
		return nil, err
	}
	if f.lay.uid >= 0 {
		return nil, fmt.Errorf("[BUG] cold: %s is an inbox file, not history", fr.Key)
	}
	sender := slices.IndexFunc(f.tables.Msg, func(c Column) bool { return c.Name == "sender_uid" })
	body := slices.IndexFunc(f.tables.Content, func(c Column) bool { return c.Name == "msg_id" })
	if sender < 0 || body < 0 {
		return nil, fmt.Errorf("cold: %s has no sender_uid or body msg_id column", fr.Key)
	}
	var out []Key
	for g, rg := range f.pf.RowGroups() {
		a, b, err := convSpan(rg.ColumnChunks()[f.lay.convID], conv, rg.NumRows())
		if err == nil {
			a, b, err = narrow(rg, f.lay, conv, a, b, lo, hi, 0, false)
		}
		if err != nil {
			return nil, fmt.Errorf("cold: %s row group %d: %w", fr.Key, g, err)
		}
		if a >= b {
			continue
		}
		keys, err := readColumns(ctx, r, f, rg, a, b, []int{f.lay.convID, f.lay.seq, f.lay.msgID}, parquet.Value.Uint64)
		if err != nil {
			return nil, err
		}
		vals, err := readColumns(ctx, r, f, rg, a, b, []int{f.lay.msg[sender], f.lay.content[body]}, textValue)
		if err != nil {
			return nil, err
		}
		for j := range keys[0] {
			c, s, m := keys[0][j], keys[1][j], keys[2][j]
			if c != conv || s < lo || s > hi || skipped(fr.Skip, s) || inGaps(fr.Gaps, s) {
				continue
			}
			u, err := strconv.ParseUint(string(vals[0][j]), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("cold: %s: sender_uid %q of seq %d: %w", fr.Key, vals[0][j], s, err)
			}
			out = append(out, Key{Seq: s, MsgID: m, Sender: u, Body: vals[1][j] != nil})
		}
	}
	return out, nil
}
