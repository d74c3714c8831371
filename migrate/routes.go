package migrate

import (
	"slices"

	"github.com/convoy-im/convoy/router"
)

// moveShard returns doc with shard mapped to database db of datasource ds,
// in the physical table the shard has everywhere (table: the shared index
// of the range it came from, nil for a table of its own), the range that held it cut
// around it, and ranges that the move (or a move back) left adjacent and
// alike merged again, so that a migration and its rollback return the
// document to its original shape. doc is not modified.
func moveShard(doc router.Document, shard int, ds, db string, table *int) router.Document {
	out := doc
	out.Shards = nil // a new slice: doc's stays as it was
	for _, r := range doc.Shards {
		if shard < r.From || shard > r.To {
			out.Shards = append(out.Shards, r)
			continue
		}
		if r.From < shard {
			lo := r
			lo.To = shard - 1
			out.Shards = append(out.Shards, lo)
		}
		if shard < r.To {
			hi := r
			hi.From = shard + 1
			out.Shards = append(out.Shards, hi)
		}
	}
	moved := router.ShardRange{From: shard, To: shard, Datasource: ds, Database: db}
	if table != nil {
		idx := *table
		moved.Table = &idx
	}
	out.Shards = append(out.Shards, moved)
	slices.SortFunc(out.Shards, func(a, b router.ShardRange) int { return a.From - b.From })
	merged := out.Shards[:0:0]
	for _, r := range out.Shards {
		if n := len(merged); n > 0 && mergeable(merged[n-1], r) {
			merged[n-1].To = r.To
			continue
		}
		merged = append(merged, r)
	}
	out.Shards = merged
	return out
}

// mergeable: b continues a with the same placement (a shared table index
// must be the same index; per-shard tables stay per-shard).
func mergeable(a, b router.ShardRange) bool {
	if a.To+1 != b.From || a.Datasource != b.Datasource || a.Database != b.Database {
		return false
	}
	if a.Table == nil || b.Table == nil {
		return a.Table == nil && b.Table == nil
	}
	return *a.Table == *b.Table
}
