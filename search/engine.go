package search

import (
	"context"
	"fmt"
	"slices"
)

// Engine is an inverted index of messages. Writes come from one indexer
// per source (a datasource's binlog), each with its own checkpoint; queries
// from every proxy. Implementations: Bleve (embedded, the default) and
// Sphinx (SphinxQL, distributed over searchd partitions).
type Engine interface {
	// Apply upserts b.Upserts (a later Apply of the same MsgID replaces
	// the document: replays are idempotent), marks b.Deletes deleted, and
	// records pos as source's checkpoint, so that a Checkpoint read after
	// a crash never names a position past what the index holds.
	Apply(ctx context.Context, source string, b Batch, pos string) error
	// Checkpoint is source's last recorded position; "" if none.
	Checkpoint(ctx context.Context, source string) (string, error)
	// Search returns the hits of q in result order (Hit.Before), at most
	// q.Limit, never a deleted message or one outside q.Convs.
	Search(ctx context.Context, q Query) ([]Hit, error)
	// Counts returns how many messages of each conversation of q.Convs
	// match q (its text and filters; not its cursor, order or limit):
	// conversations without one are absent.
	Counts(ctx context.Context, q Query) (map[uint64]int64, error)
	// Live returns the msg_ids of conv's documents not deleted whose seq
	// is in [lo, hi]: what a range of the conversation erased (a "clear
	// chat" of archived messages) removes from the index.
	Live(ctx context.Context, conv, lo, hi uint64) ([]uint64, error)
	Close() error
}

// Batch is what one Apply writes.
type Batch struct {
	Upserts []Doc
	// Deletes are soft deletes: the message stays, flagged, and no query
	// returns it. ConvID places it (the Sphinx partition).
	Deletes []Ref
}

// Ref names a message.
type Ref struct {
	MsgID, ConvID uint64
}

// Len is the number of documents the batch touches.
func (b *Batch) Len() int { return len(b.Upserts) + len(b.Deletes) }

// checkQuery validates what every engine needs of a query and returns its
// analysis and the permitted conversations sorted and distinct.
func checkQuery(q *Query) (*Parsed, []uint64, error) {
	p, err := ParseQuery(q.Text)
	if err != nil {
		return nil, nil, err
	}
	if q.Limit <= 0 || q.Limit > MaxLimit {
		return nil, nil, fmt.Errorf("search: limit %d outside 1..%d", q.Limit, MaxLimit)
	}
	convs := slices.Clone(q.Convs)
	slices.Sort(convs)
	return p, slices.Compact(convs), nil
}
