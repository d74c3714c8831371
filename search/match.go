package search

import (
	"slices"
	"strings"
)

// Matcher is the brute-force form of the match semantics (analyzer.go):
// the fresh window runs it over the messages younger than the index's lag
// read from MySQL, and the tests run it over a whole corpus as the oracle
// the engines must equal.
type Matcher struct {
	p *Parsed
}

// NewMatcher analyses q once for many Match calls.
func NewMatcher(q string) (*Matcher, error) {
	p, err := ParseQuery(q)
	if err != nil {
		return nil, err
	}
	return &Matcher{p: p}, nil
}

// Match reports whether text satisfies every condition of the query.
func (m *Matcher) Match(text string) bool {
	return m.MatchSegments(Analyse(text))
}

// Analysed is a text cut into segments once, for a caller matching many
// queries against one text (the tests' oracle over a corpus).
type Analysed struct {
	words []string // sorted, distinct
	runs  []string // CJK segments
}

// Analyse cuts text into the segments Match compares.
func Analyse(text string) Analysed {
	var a Analysed
	for _, s := range segments(text) {
		if s.kind == segWord {
			a.words = append(a.words, s.text)
		} else {
			a.runs = append(a.runs, s.text)
		}
	}
	slices.Sort(a.words)
	a.words = slices.Compact(a.words)
	return a
}

// MatchSegments is Match on an analysed text.
func (m *Matcher) MatchSegments(a Analysed) bool {
	for _, seg := range m.p.segs {
		if seg.kind == segWord {
			if _, ok := slices.BinarySearch(a.words, seg.text); !ok {
				return false
			}
			continue
		}
		found := false
		for _, r := range a.runs {
			// A substring of one run: both are whole runs of CJK
			// characters, so a byte match is a character match.
			if strings.Contains(r, seg.text) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// Keep reports whether a document passes a query's filters other than the
// text: not deleted, a permitted conversation, the type and time bounds.
// convs must be sorted.
func (q *Query) Keep(d *Doc, convs []uint64) bool {
	if d.Deleted {
		return false
	}
	if _, ok := slices.BinarySearch(convs, d.ConvID); !ok {
		return false
	}
	if q.HasMsgType && d.MsgType != q.MsgType {
		return false
	}
	if q.HasSince && d.CreatedMs < q.SinceMs {
		return false
	}
	if q.HasBefore && d.CreatedMs >= q.BeforeMs {
		return false
	}
	return q.Keeps(d.Hit)
}

// Keeps reports whether h passes q's sender and cursor conditions (those
// the fresh window checks after its MySQL read, as the engines do in
// their query).
func (q *Query) Keeps(h Hit) bool {
	if q.HasSender && h.SenderUID != q.SenderUID {
		return false
	}
	if q.HasCursor {
		if q.Asc {
			return h.CreatedMs > q.CursorMs || h.CreatedMs == q.CursorMs && h.MsgID > q.CursorMsgID
		}
		return h.CreatedMs < q.CursorMs || h.CreatedMs == q.CursorMs && h.MsgID < q.CursorMsgID
	}
	return true
}

// Order sorts hits in q's result order (newest first, or with Asc oldest
// first).
func (q *Query) Order(hs []Hit) {
	SortHits(hs)
	if q.Asc {
		slices.Reverse(hs)
	}
}

// SortHits puts hits in result order (Hit.Before).
func SortHits(hs []Hit) {
	slices.SortFunc(hs, func(a, b Hit) int {
		switch {
		case a.Before(b):
			return -1
		case b.Before(a):
			return 1
		}
		return 0
	})
}
