package archive

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/convoy-im/convoy/cold"
	"github.com/convoy-im/convoy/coord"
)

// File states (Record.State).
const (
	// StateCatalogued: written, verified, recorded; the warm rows are all
	// still in MySQL, which alone answers reads.
	StateCatalogued = "catalogued"
	// StateDeleting: the warm rows are being deleted chunk by chunk; a
	// reader takes from the file only what the shard database's read
	// bounds cover (FilesTable).
	StateDeleting = "deleting"
	// StateDeleted: every warm row the file holds is deleted, except those
	// in Skips (edited or deleted by users after archiving).
	StateDeleted = "deleted"
	// StateSuperseded: the file was rewritten without rows users deleted
	// (erase.go); the shard database's read bounds name its successor, and
	// the object is deleted supersededGrace after SupersededAt (a reader
	// that read the old bounds just before may still fetch it), its
	// record with it.
	StateSuperseded = "superseded"
)

// Record is what etcd holds about one cold file: everything mutable about
// it (its delete step) and enough for SHOW ARCHIVE and for a proxy to find
// its immutable description (Meta) in the store.
type Record struct {
	Kind  string `json:"kind"` // "conv_msg" (with msg_content bodies) or "im_inbox"
	Key   string `json:"key"`  // the Parquet object
	Meta  string `json:"meta"` // the catalog object: cold.FileInfo as JSON
	Shard int    `json:"shard"`
	Day   string `json:"day"` // yyyymmdd
	Part  int    `json:"part"`
	Rows  int64  `json:"rows"`
	Bytes int64  `json:"bytes"`
	// SHA256 of the Parquet object: ScanFile checks it before the delete
	// step trusts the file's rows.
	SHA256       string    `json:"sha256"`
	CataloguedAt time.Time `json:"catalogued_at"`
	State        string    `json:"state"`
	// Delete step. Chunks is how many chunks the file's rows make;
	// Location the datasource/database the delete runs on. Which chunks
	// committed, and what a reader may take from the file, is in the
	// shard's database (the progress row, FilesTable, tombstones), written
	// in each chunk's transaction: Bounds is BoundsMySQL.
	Chunks   int    `json:"chunks,omitempty"`
	Location string `json:"location,omitempty"`
	Bounds   string `json:"bounds,omitempty"`
	// The former layout (Bounds ""), kept for the records it wrote: etcd
	// got every chunk, before its delete committed. Done was a lower
	// bound of the chunks committed; Bound the last key of the chunk being
	// deleted, so every deleted row was at or below it; Skips, per chunk,
	// the rows not to read from the file (changed, or deleted by a user).
	// A record of that layout keeps them for its readers (Catalog.Files):
	// chunks deleted since are read through MySQL's bounds.
	Done      int               `json:"done,omitempty"`
	Bound     *key              `json:"bound,omitempty"`
	Skips     map[int][]skipped `json:"skips,omitempty"`
	Kept      int64             `json:"kept,omitempty"`
	Gone      int64             `json:"gone,omitempty"`
	DeletedAt time.Time         `json:"deleted_at,omitzero"`
	// FirstDay is the oldest day of a compacted file's rows (Day is the
	// newest: retention deletes the file once all are old); "" is Day.
	FirstDay string `json:"first_day,omitempty"`
	// SupersededAt: when a rewrite replaced the file (StateSuperseded).
	SupersededAt time.Time `json:"superseded_at,omitzero"`

	revision int64
}

// BoundsMySQL marks a record whose read bounds and skipped rows are in
// the shard's database (FilesTable and the tombstones), not in etcd.
const BoundsMySQL = "mysql"

// Record kinds: conv_msg files (with msg_content bodies) and im_inbox
// files.
const (
	kindHistory = "conv_msg"
	kindInbox   = "im_inbox"
)

// FilesPrefix holds the file records: files/<shard>/<day>-<part>.
func FilesPrefix(cluster string) string { return coord.ArchivePrefix(cluster) + "files/" }

func shardFilesPrefix(cluster string, shard int) string {
	return fmt.Sprintf("%s%04d/", FilesPrefix(cluster), shard)
}

// coldPrefix holds one key per shard that has catalogued history files:
// cold/<shard>, put with the first file's record (and again with every
// later one and every delete chunk, which costs nothing and covers shards
// archived before the key existed). It is there delete_after before any
// warm row of the shard is deleted, so every proxy watching it knows the
// shard may have archived rows long before it has any; a proxy treats a
// shard without the key as having none (Catalog.Archived).
func coldPrefix(cluster string) string { return coord.ArchivePrefix(cluster) + "cold/" }

func markShard(cluster string, shard int) clientv3.Op {
	return clientv3.OpPut(fmt.Sprintf("%s%04d", coldPrefix(cluster), shard), "1")
}

// recordKey names a file's record: files/<shard>/<day>-<part> for
// history, files/<shard>/inbox-<day>-<part> for inbox files.
func recordKey(cluster string, kind string, shard int, day string, part int) string {
	if kind == kindInbox {
		day = "inbox-" + day
	}
	return fmt.Sprintf("%s%s-%04d", shardFilesPrefix(cluster, shard), day, part)
}

// metaKey names a Parquet object's catalog object.
func metaKey(parquetKey string) string { return strings.TrimSuffix(parquetKey, ".parquet") + ".json" }

// skipped is a row of a file not to be read from it: Gone when the warm
// row was deleted by a user, else it was changed and stays in MySQL.
type skipped struct {
	key
	Gone bool `json:"gone,omitempty"`
}

// skippedKeys is every row of the record's Skips, in key order.
func (r Record) skippedKeys() []key {
	var out []key
	for _, ks := range r.Skips {
		for _, k := range ks {
			out = append(out, k.key)
		}
	}
	slices.SortFunc(out, func(a, b key) int {
		if a.less(b) {
			return -1
		}
		if b.less(a) {
			return 1
		}
		return 0
	})
	return out
}

// readable says whether a proxy may serve rows from the file.
func (r Record) readable() bool { return r.State == StateDeleting || r.State == StateDeleted }

// legacy: a record of the former layout, whose read bound and skips etcd
// holds (Catalog reads them).
func (r Record) legacy() bool { return r.Bounds != BoundsMySQL }

func decodeRecord(b []byte, rev int64) (Record, error) {
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("archive: file record: %w", err)
	}
	r.revision = rev
	return r, nil
}

func (r Record) put(cluster string) clientv3.Op {
	b, err := json.Marshal(r)
	if err != nil {
		panic("[BUG] archive: marshal file record: " + err.Error())
	}
	return clientv3.OpPut(recordKey(cluster, r.Kind, r.Shard, r.Day, r.Part), string(b))
}

// listRecords returns a shard's file records, by day and part.
func listRecords(ctx context.Context, cli *clientv3.Client, cluster string, shard int) ([]Record, int64, error) {
	resp, err := cli.Get(ctx, shardFilesPrefix(cluster, shard), clientv3.WithPrefix())
	if err != nil {
		return nil, 0, fmt.Errorf("archive: list the files of shard %04d: %w", shard, err)
	}
	out := make([]Record, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		r, err := decodeRecord(kv.Value, kv.ModRevision)
		if err != nil {
			return nil, 0, fmt.Errorf("%w (%s)", err, kv.Key)
		}
		out = append(out, r)
	}
	return out, resp.Header.Revision, nil
}

// meta is the catalog object: the file's cold.FileInfo, immutable, next to
// the file in the store, so the store alone says what each file holds (a
// lost etcd can be rebuilt from it) and a proxy reads a file's
// conversation ranges without opening the Parquet file.
type meta struct {
	Kind string        `json:"kind"`
	Info cold.FileInfo `json:"info"`
}

func encodeMeta(kind string, info cold.FileInfo) []byte {
	b, err := json.Marshal(meta{Kind: kind, Info: info})
	if err != nil {
		panic("[BUG] archive: marshal catalog object: " + err.Error())
	}
	return b
}

// readMeta reads a catalog object.
func readMeta(ctx context.Context, store cold.Store, key string) (meta, error) {
	var m meta
	size, err := store.Size(ctx, key)
	if err != nil {
		return m, err
	}
	b, err := store.ReadRange(ctx, key, 0, size)
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("archive: catalog object %s: %w", key, err)
	}
	return m, nil
}
