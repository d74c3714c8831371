package search

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"testing"
	"time"
)

var corpusSize = flag.Int("search.corpus", 200_000, "messages of the generated corpus of the exactness tests")

// corpus is a generated message set and what the oracle needs of it.
type corpus struct {
	docs   []Doc // final state, by index
	byConv map[uint64][]int
	convs  []uint64
	an     []Analysed
}

// buildCorpus generates n messages over n/50 conversations (sizes vary:
// a few conversations are large), writes them to eng in batches as an
// indexer would (inserts, then some edits and deletes, replayed twice
// where a restart would replay them), and returns the final state.
func buildCorpus(t testing.TB, eng Engine, n int, seed uint64) *corpus {
	t.Helper()
	ctx := context.Background()
	g := newCorpusGen(seed)
	c := &corpus{byConv: map[uint64][]int{}}
	nconv := max(n/50, 10)
	for i := range nconv {
		c.convs = append(c.convs, 1_000_000+uint64(i)*7919)
	}
	base := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	seqs := map[uint64]uint64{}
	c.docs = make([]Doc, n)
	for i := range n {
		conv := c.convs[g.r.IntN(nconv)]
		if g.r.IntN(4) == 0 {
			conv = c.convs[g.r.IntN(min(nconv, 20))] // big groups
		}
		seqs[conv]++
		mt := uint8(1)
		if g.r.IntN(10) == 0 {
			mt = 2
		}
		c.docs[i] = Doc{Hit: Hit{
			MsgID: 1<<40 + uint64(i)*13, ConvID: conv, Seq: seqs[conv], SenderUID: uint64(g.r.IntN(5000)),
			MsgType: mt, CreatedMs: base + int64(i/3)*250, // three messages share each millisecond
		}, Text: g.text()}
		if i%97 == 0 {
			c.docs[i].MsgID = 1<<63 + uint64(i) // ids past int64
		}
	}
	apply := func(b Batch, pos string) {
		if err := eng.Apply(ctx, "corpus", b, pos); err != nil {
			t.Fatal(err)
		}
	}
	const batch = 20000
	for i := 0; i < n; i += batch {
		end := min(i+batch, n)
		apply(Batch{Upserts: c.docs[i:end]}, strconv.Itoa(end))
	}
	// Edits and deletes, then a replay of an older stretch (a restart
	// from a checkpoint before them must not resurrect anything).
	var edits, dels Batch
	for i := range c.docs {
		switch g.r.IntN(40) {
		case 0:
			c.docs[i].Text = g.text()
			edits.Upserts = append(edits.Upserts, c.docs[i])
		case 1:
			c.docs[i].Deleted = true
			dels.Deletes = append(dels.Deletes, Ref{MsgID: c.docs[i].MsgID, ConvID: c.docs[i].ConvID})
		}
	}
	apply(edits, "edits")
	apply(dels, "dels")
	apply(edits, "edits-replayed")
	apply(dels, "dels-replayed")
	if got, err := eng.Checkpoint(ctx, "corpus"); err != nil || got != "dels-replayed" {
		t.Fatalf("checkpoint %q, %v; want the last one applied", got, err)
	}
	c.an = make([]Analysed, n)
	for i, d := range c.docs {
		c.byConv[d.ConvID] = append(c.byConv[d.ConvID], i)
		if !d.Deleted {
			c.an[i] = Analyse(d.Text)
		}
	}
	return c
}

// oracle is the brute-force answer: every permitted message scanned.
func (c *corpus) oracle(q Query) []Hit {
	m, err := NewMatcher(q.Text)
	if err != nil {
		return nil
	}
	convs := slices.Clone(q.Convs)
	slices.Sort(convs)
	convs = slices.Compact(convs)
	var out []Hit
	for _, conv := range convs {
		for _, i := range c.byConv[conv] {
			d := &c.docs[i]
			if q.Keep(d, convs) && m.MatchSegments(c.an[i]) {
				out = append(out, d.Hit)
			}
		}
	}
	q.Order(out)
	if len(out) > q.Limit {
		out = out[:q.Limit]
	}
	return out
}

// oracleCounts is the brute-force answer of Counts: q's matches per
// conversation, its cursor, order and limit aside.
func (c *corpus) oracleCounts(q Query) map[uint64]int64 {
	q.HasCursor, q.Limit = false, len(c.docs)+1
	out := map[uint64]int64{}
	for _, h := range c.oracle(q) {
		out[h.ConvID]++
	}
	return out
}

// checkExactness runs random searches (random permitted conversation sets,
// single conversations, filters, limits) and compares every answer with
// the oracle's, hit for hit.
func checkExactness(t *testing.T, eng Engine, c *corpus, queries int, seed uint64) {
	t.Helper()
	ctx := context.Background()
	g := newCorpusGen(seed)
	// Live: a conversation's documents not deleted in a seq range (the
	// big groups first: they have the most), in pages of 97.
	defer func(n int) { liveBatch = n }(liveBatch)
	liveBatch = 97
	for i, conv := range c.convs[:min(len(c.convs), 25)] {
		lo, hi := uint64(1+i), uint64(1+i*40)
		if i%5 == 0 {
			hi = ^uint64(0)
		}
		var want []uint64
		for _, d := range c.byConv[conv] {
			if doc := c.docs[d]; !doc.Deleted && doc.Seq >= lo && doc.Seq <= hi {
				want = append(want, doc.MsgID)
			}
		}
		got, err := eng.Live(ctx, conv, lo, hi)
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("Live(%d, %d, %d): %d ids, want %d", conv, lo, hi, len(got), len(want))
		}
	}
	nonEmpty, countChecks := 0, 0
	for qi := range queries {
		var q Query
		switch g.r.IntN(3) {
		case 0:
			q.Convs = []uint64{c.convs[g.r.IntN(len(c.convs))]}
		default:
			k := 1 + g.r.IntN(300)
			for range k {
				q.Convs = append(q.Convs, c.convs[g.r.IntN(len(c.convs))])
			}
		}
		// A sample message of a permitted conversation gives the text.
		conv := q.Convs[g.r.IntN(len(q.Convs))]
		sample, sampleDoc := "", -1
		if idx := c.byConv[conv]; len(idx) > 0 {
			sampleDoc = idx[g.r.IntN(len(idx))]
			sample = c.docs[sampleDoc].Text
		}
		q.Text = g.query(sample)
		if _, err := ParseQuery(q.Text); err != nil {
			continue
		}
		q.Limit = []int{1, 20, 20, 100, MaxLimit}[g.r.IntN(5)]
		if g.r.IntN(5) == 0 {
			q.HasMsgType, q.MsgType = true, uint8(1+g.r.IntN(2))
		}
		if g.r.IntN(5) == 0 {
			q.HasSince, q.SinceMs = true, c.docs[g.r.IntN(len(c.docs))].CreatedMs
		}
		if g.r.IntN(5) == 0 {
			q.HasBefore, q.BeforeMs = true, c.docs[g.r.IntN(len(c.docs))].CreatedMs
		}
		// Paging: a cursor from a message of the sampled conversation (ids
		// below 2^63: see the Sphinx engine), either order; a sender
		// filter, the sample's sender (so the sample itself can match).
		q.Asc = g.r.IntN(4) == 0
		if idx := c.byConv[conv]; len(idx) > 0 && g.r.IntN(4) == 0 {
			d := c.docs[idx[g.r.IntN(len(idx))]]
			if d.MsgID < 1<<63 {
				q.HasCursor, q.CursorMs, q.CursorMsgID = true, d.CreatedMs, d.MsgID
			}
		}
		if sampleDoc >= 0 && g.r.IntN(8) == 0 {
			q.HasSender, q.SenderUID = true, c.docs[sampleDoc].SenderUID
		}
		want := c.oracle(q)
		got, err := eng.Search(ctx, q)
		if err != nil {
			t.Fatalf("query %d %q: %v", qi, q.Text, err)
		}
		if len(want) > 0 {
			nonEmpty++
		}
		if !slices.Equal(got, want) {
			t.Fatalf("query %d %q (convs %d, type %v/%d, since %v/%d, before %v/%d, sender %v/%d, cursor %v/%d/%d, asc %v, limit %d): %s",
				qi, q.Text, len(q.Convs), q.HasMsgType, q.MsgType, q.HasSince, q.SinceMs, q.HasBefore, q.BeforeMs,
				q.HasSender, q.SenderUID, q.HasCursor, q.CursorMs, q.CursorMsgID, q.Asc, q.Limit, diffHits(got, want))
		}
		// Per-conversation hit counts: every match, whatever the page.
		if qi%4 == 0 {
			counts, err := eng.Counts(ctx, q)
			if err != nil {
				t.Fatalf("query %d %q: counts: %v", qi, q.Text, err)
			}
			if wantCounts := c.oracleCounts(q); !maps.Equal(counts, wantCounts) {
				t.Fatalf("query %d %q (convs %d): counts %v, want %v", qi, q.Text, len(q.Convs), counts, wantCounts)
			}
			countChecks++
		}
	}
	// The comparison proves little if every answer was empty.
	if nonEmpty < queries/2 {
		t.Fatalf("only %d of %d queries had hits: the generator no longer exercises the engine", nonEmpty, queries)
	}
	t.Logf("%d queries equal to the brute-force oracle (%d with hits; %d per-conversation counts too)", queries, nonEmpty, countChecks)
}

func diffHits(got, want []Hit) string {
	gs := map[uint64]bool{}
	for _, h := range got {
		gs[h.MsgID] = true
	}
	ws := map[uint64]bool{}
	for _, h := range want {
		ws[h.MsgID] = true
	}
	var extra, missing []uint64
	for id := range gs {
		if !ws[id] {
			extra = append(extra, id)
		}
	}
	for id := range ws {
		if !gs[id] {
			missing = append(missing, id)
		}
	}
	return fmt.Sprintf("got %d hits, want %d; %d not expected %v, %d missing %v (first got %v, first want %v)",
		len(got), len(want), len(extra), head(extra), len(missing), head(missing), head(got), head(want))
}

func head[T any](xs []T) []T { return xs[:min(len(xs), 3)] }
