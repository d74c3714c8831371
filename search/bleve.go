package search

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/blevesearch/bleve/v2"
	"github.com/blevesearch/bleve/v2/analysis"
	"github.com/blevesearch/bleve/v2/analysis/analyzer/custom"
	"github.com/blevesearch/bleve/v2/index/scorch"
	"github.com/blevesearch/bleve/v2/mapping"
	"github.com/blevesearch/bleve/v2/registry"
	"github.com/blevesearch/bleve/v2/search/query"
)

// The embedded engine: a bleve (scorch) index in a local directory, zero
// set-up for `make run`. Bleve's stock CJK analyzer indexes bigrams only,
// so a one-character query would miss; the index's text field uses
// tokenizer imTokenizer instead, which emits exactly the terms and
// positions of tokens() (analyzer.go).

// imAnalyzer names the tokenizer and the analyzer in the index mapping;
// an index stores the names, so they must never change.
const imAnalyzer = "convoy_im"

func init() {
	if err := registry.RegisterTokenizer(imAnalyzer, func(map[string]interface{}, *registry.Cache) (analysis.Tokenizer, error) {
		return imTokenizer{}, nil
	}); err != nil {
		panic(err)
	}
}

// imTokenizer is tokens() as a bleve tokenizer.
type imTokenizer struct{}

func (imTokenizer) Tokenize(b []byte) analysis.TokenStream {
	ts := tokens(string(b))
	out := make(analysis.TokenStream, len(ts))
	for i, t := range ts {
		typ := analysis.AlphaNumeric
		if r, _ := utf8.DecodeRuneInString(t.term); isCJK(r) {
			typ = analysis.Ideographic
		}
		out[i] = &analysis.Token{Term: []byte(t.term), Start: t.start, End: t.end, Position: t.pos, Type: typ}
	}
	return out
}

// Field names of the bleve documents. mid is the msg_id zero-padded to 20
// digits: bleve sorts keywords as bytes, and msg_id (uint64) does not fit
// a float64 exactly.
const (
	fText    = "text"
	fConv    = "conv"
	fType    = "type"
	fTs      = "ts"
	fMid     = "mid"
	fSender  = "sender"
	fDeleted = "del"
	// fHit is stored, not indexed: the hit's anchors in one value
	// ("conv seq sender type created_ms"), the only field a hit loads.
	fHit    = "hit"
	docType = "msg"
)

// checkpointKey is the internal key (stored with the batch it follows)
// holding a source's position.
func checkpointKey(source string) []byte { return []byte("convoy/checkpoint/" + source) }

func bleveMapping() (mapping.IndexMapping, error) {
	im := bleve.NewIndexMapping()
	if err := im.AddCustomAnalyzer(imAnalyzer, map[string]interface{}{"type": custom.Name, "tokenizer": imAnalyzer}); err != nil {
		return nil, err
	}
	text := bleve.NewTextFieldMapping()
	text.Analyzer = imAnalyzer
	text.Store = false
	text.IncludeTermVectors = true // positions: CJK phrases of bigrams
	text.IncludeInAll = false
	text.DocValues = false

	keyword := func(store, docValues bool) *mapping.FieldMapping {
		f := bleve.NewKeywordFieldMapping()
		f.Store, f.DocValues, f.IncludeInAll, f.IncludeTermVectors = store, docValues, false, false
		return f
	}
	ts := bleve.NewNumericFieldMapping()
	ts.Store, ts.DocValues, ts.IncludeInAll = false, true, false
	hit := keyword(true, false)
	hit.Index = false
	del := bleve.NewBooleanFieldMapping()
	del.Store, del.IncludeInAll = false, false

	dm := bleve.NewDocumentStaticMapping()
	dm.AddFieldMappingsAt(fText, text)
	dm.AddFieldMappingsAt(fConv, keyword(false, false))
	dm.AddFieldMappingsAt(fType, keyword(false, false))
	dm.AddFieldMappingsAt(fTs, ts)
	dm.AddFieldMappingsAt(fHit, hit)
	dm.AddFieldMappingsAt(fMid, keyword(false, true))
	dm.AddFieldMappingsAt(fSender, keyword(false, false))
	dm.AddFieldMappingsAt(fDeleted, del)
	im.AddDocumentMapping(docType, dm)
	im.DefaultMapping = bleve.NewDocumentDisabledMapping()
	im.TypeField = "_type"
	im.DefaultAnalyzer = imAnalyzer
	return im, nil
}

// Bleve is the embedded engine.
type Bleve struct {
	idx  bleve.Index
	lock *os.File // dirLock's, held until Close
}

var _ Engine = (*Bleve)(nil)

// OpenBleve opens the index in dir, creating it if absent. A dir another
// process has open is refused at once (dirLock): bleve itself would wait
// for that process's lock forever.
func OpenBleve(dir string) (b *Bleve, err error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("search: %w", err)
	}
	lock, err := dirLock(dir)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			lock.Close()
		}
	}()
	// The index's directory names the analysis version: an index built by
	// another (its terms, or its mapping, differ) is dropped and built
	// again from a snapshot by the feed (it has no checkpoint then).
	path := filepath.Join(dir, fmt.Sprintf("messages-a%d.bleve", AnalysisVersion))
	if old, _ := filepath.Glob(filepath.Join(dir, "messages*.bleve")); len(old) > 0 {
		for _, o := range old {
			if o != path {
				if err := os.RemoveAll(o); err != nil {
					return nil, fmt.Errorf("search: remove the index of another analysis version %s: %w", o, err)
				}
			}
		}
	}
	// unsafe_batch: a batch returns once it is searchable, not once it is
	// fsynced. Safe here because the checkpoint rides in the batch it
	// covers and scorch persists batches in order: a crash loses the last
	// batches and their checkpoint together, and the feed replays them.
	cfg := map[string]interface{}{"unsafe_batch": true}
	idx, err := bleve.OpenUsing(path, cfg)
	if errors.Is(err, bleve.ErrorIndexPathDoesNotExist) {
		var m mapping.IndexMapping
		if m, err = bleveMapping(); err != nil {
			return nil, fmt.Errorf("search: index mapping: %w", err)
		}
		// Created without unsafe_batch, closed, then opened with it: the
		// mapping is written as an internal batch, and with unsafe_batch a
		// Close right after creation could leave it unpersisted (an index
		// no later open can read: "error parsing mapping JSON").
		var created bleve.Index
		created, err = bleve.NewUsing(path, m, scorch.Name, scorch.Name, nil)
		if err == nil {
			err = created.Close()
		}
		if err == nil {
			idx, err = bleve.OpenUsing(path, cfg)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("search: open bleve index %s: %w", path, err)
	}
	return &Bleve{idx: idx, lock: lock}, nil
}

// dirLock takes an exclusive lock on dir/convoy.lock without waiting, and
// writes this process's id into it: a second `convoy serve` configured
// with the same search.dir (two proxies on one host with the default
// config) fails at start with the holder's pid instead of hanging. The
// kernel drops the lock when the process dies, however it dies.
func dirLock(dir string) (*os.File, error) {
	name := filepath.Join(dir, "convoy.lock")
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("search: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(name)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("search: search.dir %s is in use by another Convoy process (pid %s): give each process its own search.dir",
				dir, strings.TrimSpace(string(holder)))
		}
		return nil, fmt.Errorf("search: lock %s: %w", name, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

func bleveDoc(d Doc) map[string]interface{} {
	m := map[string]interface{}{
		"_type":  docType,
		fConv:    strconv.FormatUint(d.ConvID, 10),
		fType:    strconv.Itoa(int(d.MsgType)),
		fHit:     fmt.Sprintf("%d %d %d %d %d", d.ConvID, d.Seq, d.SenderUID, d.MsgType, d.CreatedMs),
		fTs:      float64(d.CreatedMs),
		fMid:     fmt.Sprintf("%020d", d.MsgID),
		fSender:  strconv.FormatUint(d.SenderUID, 10),
		fDeleted: d.Deleted,
	}
	if !d.Deleted {
		m[fText] = d.Text
	}
	return m
}

// Apply writes the batch and the checkpoint in one bleve batch: scorch
// persists batches in order, so a checkpoint that survived a crash covers
// every document before it.
func (b *Bleve) Apply(_ context.Context, source string, batch Batch, pos string) error {
	bb := b.idx.NewBatch()
	for _, d := range batch.Upserts {
		if err := bb.Index(strconv.FormatUint(d.MsgID, 10), bleveDoc(d)); err != nil {
			return fmt.Errorf("search: index message %d: %w", d.MsgID, err)
		}
	}
	for _, r := range batch.Deletes {
		// A tombstone, not a removal: the flag is what queries filter, and
		// the text goes (a deleted message must not be found by it).
		d := Doc{Hit: Hit{MsgID: r.MsgID, ConvID: r.ConvID}, Deleted: true}
		if err := bb.Index(strconv.FormatUint(r.MsgID, 10), bleveDoc(d)); err != nil {
			return fmt.Errorf("search: delete message %d: %w", r.MsgID, err)
		}
	}
	if source != "" {
		bb.SetInternal(checkpointKey(source), []byte(pos))
	}
	if err := b.idx.Batch(bb); err != nil {
		return fmt.Errorf("search: bleve batch: %w", err)
	}
	return nil
}

// Checkpoint reads source's position from the index.
func (b *Bleve) Checkpoint(_ context.Context, source string) (string, error) {
	v, err := b.idx.GetInternal(checkpointKey(source))
	if err != nil {
		return "", fmt.Errorf("search: read checkpoint of %s: %w", source, err)
	}
	return string(v), nil
}

// Search runs q as a conjunction: every clause of the text, one of the
// permitted conversations, not deleted, and the optional filters.
func (b *Bleve) Search(ctx context.Context, q Query) ([]Hit, error) {
	conj, err := b.conjunction(&q)
	if err != nil || conj == nil {
		return nil, err
	}
	if !q.HasCursor {
		return b.run(ctx, conj, q.Limit, q.Asc)
	}
	// The cursor: the hits beyond its millisecond (a numeric range, cheap),
	// and those in its millisecond past its msg_id, filtered here (a term
	// range over msg_ids would enumerate every id in the index). One
	// millisecond holds a handful of messages; tieMax bounds it anyway.
	at := float64(q.CursorMs)
	incl, excl := true, false
	beyond := bleve.NewNumericRangeInclusiveQuery(nil, &at, nil, &excl)
	if q.Asc {
		beyond = bleve.NewNumericRangeInclusiveQuery(&at, nil, &excl, nil)
	}
	beyond.SetField(fTs)
	same := bleve.NewNumericRangeInclusiveQuery(&at, &at, &incl, &incl)
	same.SetField(fTs)
	hits, err := b.run(ctx, append(slices.Clone(conj), beyond), q.Limit, q.Asc)
	if err != nil {
		return nil, err
	}
	ties, err := b.run(ctx, append(conj, same), tieMax, q.Asc)
	if err != nil {
		return nil, err
	}
	ties = slices.DeleteFunc(ties, func(h Hit) bool { return !q.Keeps(h) })
	hits = append(ties, hits...) // ties come first in result order
	return hits[:min(len(hits), q.Limit)], nil
}

// Counts implements Engine: a terms facet on the conversation field of
// the query's matches (no hit is loaded).
func (b *Bleve) Counts(ctx context.Context, q Query) (map[uint64]int64, error) {
	q.HasCursor, q.Limit = false, 1
	conj, err := b.conjunction(&q)
	if err != nil || conj == nil {
		return nil, err
	}
	req := bleve.NewSearchRequestOptions(bleve.NewConjunctionQuery(conj...), 0, 0, false)
	req.AddFacet("convs", bleve.NewFacetRequest(fConv, len(q.Convs)))
	res, err := b.idx.SearchInContext(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("search: bleve: %w", err)
	}
	out := map[uint64]int64{}
	if f := res.Facets["convs"]; f != nil && f.Terms != nil {
		for _, t := range f.Terms.Terms() {
			c, err := strconv.ParseUint(t.Term, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("search: [BUG] bleve conversation term %q", t.Term)
			}
			out[c] = int64(t.Count)
		}
	}
	return out, nil
}

// conjunction is q's query as the conjunction of its clauses, without its
// cursor (nil, nil: it can match nothing).
func (b *Bleve) conjunction(q *Query) ([]query.Query, error) {
	p, convs, err := checkQuery(q)
	if err != nil {
		return nil, err
	}
	if len(convs) == 0 {
		return nil, nil
	}
	q.Convs = convs
	var conj []query.Query
	for _, c := range p.clauses {
		if len(c.terms) == 1 {
			t := bleve.NewTermQuery(c.terms[0])
			t.SetField(fText)
			conj = append(conj, t)
			continue
		}
		conj = append(conj, bleve.NewPhraseQuery(c.terms, fText))
	}
	disj := make([]query.Query, len(convs))
	for i, c := range convs {
		t := bleve.NewTermQuery(strconv.FormatUint(c, 10))
		t.SetField(fConv)
		disj[i] = t
	}
	conj = append(conj, bleve.NewDisjunctionQuery(disj...))
	live := bleve.NewBoolFieldQuery(false)
	live.SetField(fDeleted)
	conj = append(conj, live)
	if q.HasMsgType {
		t := bleve.NewTermQuery(strconv.Itoa(int(q.MsgType)))
		t.SetField(fType)
		conj = append(conj, t)
	}
	if q.HasSince || q.HasBefore {
		var lo, hi *float64
		incl, excl := true, false
		if q.HasSince {
			v := float64(q.SinceMs)
			lo = &v
		}
		if q.HasBefore {
			v := float64(q.BeforeMs)
			hi = &v
		}
		r := bleve.NewNumericRangeInclusiveQuery(lo, hi, &incl, &excl)
		r.SetField(fTs)
		conj = append(conj, r)
	}
	if q.HasSender {
		t := bleve.NewTermQuery(strconv.FormatUint(q.SenderUID, 10))
		t.SetField(fSender)
		conj = append(conj, t)
	}
	return conj, nil
}

// tieMax bounds the messages of one millisecond a cursor's page reads.
const tieMax = 10_000

// run is one bleve search of the conjunction, in result order.
func (b *Bleve) run(ctx context.Context, conj []query.Query, size int, asc bool) ([]Hit, error) {
	req := bleve.NewSearchRequestOptions(bleve.NewConjunctionQuery(conj...), size, 0, false)
	if asc {
		req.SortBy([]string{fTs, fMid})
	} else {
		req.SortBy([]string{"-" + fTs, "-" + fMid})
	}
	req.Fields = []string{fHit}
	res, err := b.idx.SearchInContext(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("search: bleve: %w", err)
	}
	hits := make([]Hit, 0, len(res.Hits))
	for _, h := range res.Hits {
		hit, err := bleveHit(h.ID, h.Fields)
		if err != nil {
			return nil, err
		}
		hits = append(hits, hit)
	}
	return hits, nil
}

func bleveHit(id string, f map[string]interface{}) (Hit, error) {
	var h Hit
	v, _ := f[fHit].(string)
	var mt uint64
	_, err := fmt.Sscanf(id+" "+v, "%d %d %d %d %d %d", &h.MsgID, &h.ConvID, &h.Seq, &h.SenderUID, &mt, &h.CreatedMs)
	if err != nil || mt > 255 {
		return Hit{}, fmt.Errorf("search: [BUG] bleve hit %s has an unreadable %s field %q: %v", id, fHit, v, err)
	}
	h.MsgType = uint8(mt)
	return h, nil
}

// Live implements Engine: the conversation's live documents, a page at a
// time in msg_id order (the seq is in the stored hit field only).
func (b *Bleve) Live(ctx context.Context, conv, lo, hi uint64) ([]uint64, error) {
	t := bleve.NewTermQuery(strconv.FormatUint(conv, 10))
	t.SetField(fConv)
	live := bleve.NewBoolFieldQuery(false)
	live.SetField(fDeleted)
	var out []uint64
	var after []string
	for {
		req := bleve.NewSearchRequestOptions(bleve.NewConjunctionQuery(t, live), liveBatch, 0, false)
		req.SortBy([]string{fMid})
		req.Fields = []string{fHit}
		if after != nil {
			req.SearchAfter = after
		}
		res, err := b.idx.SearchInContext(ctx, req)
		if err != nil {
			return nil, fmt.Errorf("search: bleve: %w", err)
		}
		for _, h := range res.Hits {
			hit, err := bleveHit(h.ID, h.Fields)
			if err != nil {
				return nil, err
			}
			if hit.Seq >= lo && hit.Seq <= hi {
				out = append(out, hit.MsgID)
			}
		}
		if len(res.Hits) < liveBatch {
			return out, nil
		}
		after = res.Hits[len(res.Hits)-1].Sort
	}
}

// liveBatch is one page of Live (a variable: tests page in small steps).
var liveBatch = 5000

// DocCount is the number of documents, tombstones included.
func (b *Bleve) DocCount() (uint64, error) { return b.idx.DocCount() }

// Close closes the index.
func (b *Bleve) Close() error {
	err := b.idx.Close()
	b.lock.Close() // after the index: its files are flushed
	return err
}
