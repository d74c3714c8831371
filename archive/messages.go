package archive

import (
	"context"
	"fmt"
	"strconv"

	"github.com/convoy-im/convoy/cold"
)

// Message is one archived message whose warm row the archiver deleted, as
// a search index rebuild reads it: the file's copy is the message now.
type Message struct {
	ConvID, Seq, MsgID, SenderUID uint64
	MsgType                       uint8
	// CreatedAt is conv_msg.created_at as MySQL prints it.
	CreatedAt string
	// Body is msg_content.content; nil when the message had no body row.
	Body []byte
}

// ReadBounds are a shard database's read bounds as a reader loads them
// (FilesTable): per cold file, per conversation, the last seq the file
// may serve.
type ReadBounds map[string]map[uint64]uint64

// Messages calls fn with every message of shard that only the cold tier
// holds: the rows of its history files up to their read bound (bounds,
// read by the caller from the shard's database after the MySQL rows it
// reads anyway; the former layout's records carry their own), except
// those the former layout's skip lists name. Rows not to read from a file
// of the current layout (changed before their delete, deleted by a user)
// are tombstones in the shard's database: the caller skips them. One etcd
// read and one object read per file with readable rows.
func (c *Catalog) Messages(ctx context.Context, shard int, bounds ReadBounds, fn func(Message) error) error {
	if !c.Archived(shard) {
		return nil
	}
	recs, err := shardRecords(ctx, c.cli, c.cluster, c.store, shard)
	if err != nil {
		return err
	}
	for _, r := range recs {
		if r.Kind != kindHistory {
			continue
		}
		fb := bounds[r.Key]
		if r.legacy() && !r.readable() || !r.legacy() && len(fb) == 0 {
			continue
		}
		skip := map[key]bool{}
		for _, k := range r.skippedKeys() {
			skip[k] = true
		}
		readable := func(k key) bool {
			if skip[k] {
				return false
			}
			if b, ok := fb[k.Conv]; ok && k.Seq <= b {
				return true // (MySQL's bound: also past a former-layout record's own)
			}
			return r.legacy() && (r.Bound == nil || !r.Bound.less(k))
		}
		var idx map[string]int
		var bodyIdx = -1
		err := cold.ScanFile(ctx, c.store, cold.FileInfo{Key: r.Key, SHA256: r.SHA256}, func(t cold.Tables, row cold.Row) error {
			if idx == nil {
				idx = map[string]int{}
				for i, col := range t.Msg {
					idx[col.Name] = i
				}
				for i, col := range t.Content {
					if col.Name == "content" {
						bodyIdx = i
					}
				}
			}
			if !readable(keyOf(row)) {
				return nil
			}
			m := Message{ConvID: row.ConvID, Seq: row.Seq, MsgID: row.MsgID}
			if i, ok := idx["created_at"]; ok {
				m.CreatedAt = string(row.Msg[i])
			}
			if i, ok := idx["sender_uid"]; ok {
				m.SenderUID, _ = strconv.ParseUint(string(row.Msg[i]), 10, 64)
			}
			if i, ok := idx["msg_type"]; ok {
				t, _ := strconv.ParseUint(string(row.Msg[i]), 10, 8)
				m.MsgType = uint8(t)
			}
			if row.Content != nil && bodyIdx >= 0 {
				m.Body = row.Content[bodyIdx]
			}
			return fn(m)
		})
		if err != nil {
			return fmt.Errorf("archive: read %s for its messages: %w", r.Key, err)
		}
	}
	return nil
}
