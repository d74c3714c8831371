package search

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/width"
)

// Match semantics, the one definition both engines and the brute-force
// matcher implement:
//
// A text is cut into segments. A word segment is a maximal run of letters,
// digits and combining marks of non-CJK scripts, folded to half width and
// lower-cased ("iPhone15" and "ｉＰｈｏｎｅ１５" -> "iphone15", "2024" ->
// "2024"); a CJK segment is a maximal run of Han, Hiragana, Katakana or
// Hangul characters, with half-width kana folded to full width and
// Traditional Chinese characters to Simplified (發 -> 发, 後 -> 后: a
// message written in one finds a query in the other; hans_table.go).
// Everything else (spaces, punctuation, symbols, emoji) separates segments
// and never matches.
//
// A query is cut the same way. A message matches when every query segment
// matches (AND, in any order):
//   - a word matches a word segment of the message equal to it (whole
//     words: "hell" does not find "hello");
//   - a CJK run matches when it occurs, contiguous, inside one CJK segment
//     of the message: one character finds every message containing it,
//     "中国" finds "中国人" but not "中。国".
//
// The index holds, per message, every word, every CJK character and every
// CJK bigram, with positions (bigram i of a run at the position of its
// character i, and a gap after each run), so a CJK query of n >= 3
// characters is the phrase of its n-1 bigrams at consecutive positions,
// which only a contiguous occurrence inside one run satisfies.

// segKind is a segment's kind.
type segKind uint8

const (
	segWord segKind = iota + 1
	segCJK
)

// segment is one word or one CJK run.
type segment struct {
	kind segKind
	text string
	// start is the segment's byte offset in the analysed text.
	start int
}

// isCJK reports the scripts indexed character by character: they are
// written without spaces between words.
func isCJK(r rune) bool {
	return unicode.Is(unicode.Han, r) || unicode.Is(unicode.Hiragana, r) ||
		unicode.Is(unicode.Katakana, r) || unicode.Is(unicode.Hangul, r)
}

func isWordRune(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsNumber(r) || unicode.Is(unicode.M, r)
}

// segments cuts s into its word and CJK segments, in order. Bytes that are
// not UTF-8 separate segments, like punctuation.
func segments(s string) []segment {
	var out []segment
	start, kind := -1, segKind(0)
	flush := func(end int) {
		if start < 0 {
			return
		}
		t := width.Fold.String(s[start:end])
		if kind == segWord {
			t = strings.ToLower(t)
		} else {
			t = strings.Map(simplified, t)
		}
		out = append(out, segment{kind: kind, text: t, start: start})
		start = -1
	}
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		var k segKind
		switch {
		case r == utf8.RuneError && n <= 1:
		case isCJK(r):
			k = segCJK
		case isWordRune(r):
			// A combining mark right after a CJK character belongs to
			// no word: it separates, as punctuation does.
			if !unicode.Is(unicode.M, r) || kind == segWord {
				k = segWord
			}
		}
		if k != kind || k == 0 {
			flush(i)
		}
		if k != 0 && start < 0 {
			start = i
		}
		kind = k
		i += n
	}
	flush(len(s))
	return out
}

// simplified folds a Traditional Chinese character to its Simplified form.
func simplified(r rune) rune {
	if s, ok := toSimplified[r]; ok {
		return s
	}
	return r
}

// AnalysisVersion names the analysis above. An index records it with each
// datasource's checkpoint (Checkpoint): one made by another version is
// rebuilt from a snapshot, since its terms would not match queries
// analysed now. 2: width and Traditional/Simplified folding.
const AnalysisVersion = 2

//go:generate go run ./internal/hansgen -o hans_table.go

// token is one indexed term and its 1-based position.
type token struct {
	term string
	pos  int
	// start and end are the term's byte offsets in the text.
	start, end int
}

// tokens returns the terms a text is indexed under (see the semantics
// above). Words and unigrams are their own text; a bigram is its two
// characters.
func tokens(s string) []token {
	var out []token
	pos := 1
	for _, seg := range segments(s) {
		if seg.kind == segWord {
			// (A lower-cased word may differ in length from the original;
			// offsets only serve highlighting.)
			out = append(out, token{term: seg.text, pos: pos, start: seg.start, end: seg.start + len(seg.text)})
			pos++
			continue
		}
		runes := []rune(seg.text)
		b := seg.start
		for i, r := range runes {
			n := utf8.RuneLen(r)
			out = append(out, token{term: string(r), pos: pos + i, start: b, end: b + n})
			if i+1 < len(runes) {
				m := utf8.RuneLen(runes[i+1])
				out = append(out, token{term: string(runes[i : i+2]), pos: pos + i, start: b, end: b + n + m})
			}
			b += n
		}
		// The gap keeps the last bigram of one run and the first of the
		// next from reading as a phrase across the break.
		pos += len(runes) + 1
	}
	return out
}

// clause is one query segment as index terms: a single term (a word, a
// character, a bigram) or a phrase of bigrams at consecutive positions.
type clause struct {
	terms []string
}

// Parsed is an analysed query: the clauses every hit must satisfy, and the
// segments the brute-force matcher compares.
type Parsed struct {
	segs    []segment
	clauses []clause
}

// ParseQuery analyses a query text. ErrEmptyQuery: nothing to match.
func ParseQuery(q string) (*Parsed, error) {
	p := &Parsed{}
	seen := map[segment]bool{}
	for _, seg := range segments(q) {
		seg.start = 0 // a condition is its kind and text
		if seen[seg] {
			continue // "中 中": one condition
		}
		seen[seg] = true
		p.segs = append(p.segs, seg)
		if seg.kind == segWord {
			p.clauses = append(p.clauses, clause{terms: []string{seg.text}})
			continue
		}
		runes := []rune(seg.text)
		if len(runes) == 1 {
			p.clauses = append(p.clauses, clause{terms: []string{seg.text}})
			continue
		}
		c := clause{}
		for i := 0; i+1 < len(runes); i++ {
			c.terms = append(c.terms, string(runes[i:i+2]))
		}
		p.clauses = append(p.clauses, c)
	}
	if len(p.segs) == 0 {
		return nil, ErrEmptyQuery
	}
	return p, nil
}
