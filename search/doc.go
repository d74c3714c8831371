// Package search is Convoy's message search (docs/design.md §10; seed 000:
// "检索"): an inverted index of messages fed from the shards' committed rows,
// queried through the proxy as SQL on the virtual table msg_search.
//
// The package holds one concept a file:
//   - doc.go: the indexed document, a query and its hits
//   - analyzer.go: the one definition of what matches (CJK unigrams and
//     bigrams, lower-cased words and numbers)
//   - match.go: a brute-force matcher with the same semantics, used for the
//     fresh window (messages younger than the index's lag) and as the
//     tests' oracle
//   - engine.go: the Engine interface the indexer and the proxy use
//   - bleve.go, sphinx.go: the embedded default and the distributed
//     SphinxQL engine
//   - extract.go: what text a message body yields
//   - indexer.go: the binlog feed of one datasource into an Engine
//   - runner.go: one indexer per datasource, elected through etcd
//
// Results are message ids with their anchors (conv_id, seq, created_at),
// never bodies: the application fetches bodies from msg_content, so an
// edit or a recall shows there at once, whatever the index's lag.
package search

import (
	"errors"
	"time"
)

// Doc is one indexed message: the seed's {msg_id, conv_id, sender_uid,
// created_at, msg_type, text} plus the conversation's seq (the pagination
// anchor results carry) and the soft-delete flag of a recall or a delete.
type Doc struct {
	Hit
	Text string
	// Deleted marks a recalled or deleted message: it stays in the index
	// (a late replay of its insert cannot resurrect it) and every query
	// filters it out.
	Deleted bool
}

// Query is one search, already restricted to the conversations the
// searching user may read: the caller derives Convs from im_conv_member on
// the server side, never from the client.
type Query struct {
	// Text is what the user typed (MATCH(text) AGAINST (...)): analysed
	// with ParseQuery.
	Text string
	// Convs are the permitted conversations; empty matches nothing.
	Convs []uint64
	// MsgType, when HasMsgType, keeps messages of that type only.
	MsgType    uint8
	HasMsgType bool
	// SinceMs, when HasSince, keeps messages created at or after it;
	// BeforeMs, when HasBefore, those created before it (the proxy asks
	// the index for what is older than its fresh window and reads the
	// window from MySQL).
	SinceMs   int64
	HasSince  bool
	BeforeMs  int64
	HasBefore bool
	// SenderUID, when HasSender, keeps the messages of that sender.
	SenderUID uint64
	HasSender bool
	// CursorMs and CursorMsgID, when HasCursor, are the last hit of the
	// previous page: only hits after it in result order are returned.
	CursorMs    int64
	CursorMsgID uint64
	HasCursor   bool
	// Asc orders the hits oldest first; else newest first.
	Asc bool
	// Limit is the number of hits wanted, in result order; at most
	// MaxLimit.
	Limit int
}

// MaxLimit bounds one search's hits: a search page is small, and an engine
// collects every match before it sorts, so an unbounded LIMIT would make
// one query as expensive as a scan.
const MaxLimit = 1000

// Hit is one message found, the anchors of a document. CreatedMs is
// created_at in milliseconds since the epoch, read as UTC wall-clock time
// (DATETIME(3) has no time zone; the hot tier reads it the same way). Hits are ordered by CreatedMs, newest first,
// then by MsgID, highest first (a total order, so two engines and the
// oracle agree on which messages a LIMIT keeps).
type Hit struct {
	MsgID     uint64
	ConvID    uint64
	Seq       uint64
	SenderUID uint64
	MsgType   uint8
	CreatedMs int64
}

// Before reports whether h sorts before o in result order.
func (h Hit) Before(o Hit) bool {
	if h.CreatedMs != o.CreatedMs {
		return h.CreatedMs > o.CreatedMs
	}
	return h.MsgID > o.MsgID
}

// ErrEmptyQuery means the query text has no word, number or CJK character
// to match (punctuation only, or nothing).
var ErrEmptyQuery = errors.New("search: the query has no word, number or CJK character to match")

// Time converts CreatedMs to a time.Time in UTC.
func (h Hit) Time() time.Time { return time.UnixMilli(h.CreatedMs).UTC() }
