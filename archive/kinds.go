package archive

import (
	"time"

	"github.com/convoy-im/convoy/cold"
)

// kind is one family of rows the archiver moves, each with its own
// checkpoint, files and records, through the same steps: history (conv_msg
// rows older than cold.after with their msg_content bodies) and inbox
// (seed 001's TTL cleanup, docs/design.md §9: im_inbox rows already read,
// older than cold.inbox_after). Both are laid out by logical shard and UTC
// day of their day column.
type kind struct {
	name      string // Record.Kind
	table     string // the logical table whose rows are archived by day
	dayColumn string // the column whose UTC day a row belongs to
	// shardKey is the table's shard key column: rows of other shards in
	// a shared physical table are left alone.
	shardKey  string
	after     func(Config) time.Duration
	objectKey func(prefix string, shard int, day time.Time, part int) string
}

var (
	history = &kind{name: kindHistory, table: "conv_msg", dayColumn: "created_at", shardKey: "conv_id",
		after: func(c Config) time.Duration { return c.After }, objectKey: cold.ObjectKey}
	inbox = &kind{name: kindInbox, table: "im_inbox", dayColumn: "send_time", shardKey: "uid",
		after: func(c Config) time.Duration { return c.InboxAfter }, objectKey: cold.InboxObjectKey}
	// kinds in the order a run archives them.
	kinds = []*kind{history, inbox}
)

// kindNamed is the kind of a record.
func kindNamed(name string) *kind {
	if name == kindInbox {
		return inbox
	}
	return history
}

// progress is k's checkpoint and figures in the run's state.
func (u *run) progress(k *kind) *progress {
	if k == inbox {
		return &u.st.Inbox
	}
	return &u.st.progress
}
