package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/convoy-im/convoy/router"
)

// table is one logical table's multi-row INSERT: rows are grouped by the
// shard of their key (router.ShardOf, the proxy's own function) so that a
// batch through Convoy touches one physical table; against plain MySQL the
// grouping is harmless. ON DUPLICATE KEY UPDATE makes --prepare re-runnable.
type table struct {
	name   string
	cols   string
	upsert string
	rows   map[router.Shard][]string
}

func newTable(name, cols, upsert string) *table {
	return &table{name: name, cols: cols, upsert: upsert, rows: map[router.Shard][]string{}}
}

func (t *table) add(key uint64, row string) {
	s := router.ShardOf(key)
	t.rows[s] = append(t.rows[s], row)
}

func (t *table) count() int {
	n := 0
	for _, r := range t.rows {
		n += len(r)
	}
	return n
}

// statements splits every shard's rows into batches of at most batch rows.
func (t *table) statements(batch int) []string {
	shards := make([]int, 0, len(t.rows))
	for s := range t.rows {
		shards = append(shards, int(s))
	}
	sort.Ints(shards)
	var out []string
	for _, s := range shards {
		rows := t.rows[router.Shard(s)]
		for i := 0; i < len(rows); i += batch {
			j := min(i+batch, len(rows))
			var b strings.Builder
			fmt.Fprintf(&b, "INSERT INTO %s (%s) VALUES ", t.name, t.cols)
			b.WriteString(strings.Join(rows[i:j], ","))
			b.WriteString(" ON DUPLICATE KEY UPDATE ")
			b.WriteString(t.upsert)
			out = append(out, b.String())
		}
	}
	return out
}

func ts(t time.Time) string { return "'" + t.Format("2006-01-02 15:04:05.000") + "'" }

const lorem = "the quick brown fox jumps over the lazy dog and keeps running through the long grass of the summer meadow until night falls "

func prepareData(ctx context.Context, db *sql.DB, d *dataset, o *options) error {
	t0 := time.Now()
	base := t0.Add(-24 * time.Hour).Truncate(time.Second)
	msg := newTable("conv_msg", "conv_id, seq, msg_id, sender_uid, msg_type, created_at", "sender_uid = VALUES(sender_uid)")
	content := newTable("msg_content", "msg_id, conv_id, sender_uid, msg_type, content, created_at", "sender_uid = VALUES(sender_uid)")
	seqT := newTable("im_conv_seq", "conv_id, max_seq, member_cnt", "max_seq = GREATEST(max_seq, VALUES(max_seq)), member_cnt = VALUES(member_cnt)")
	member := newTable("im_conv_member", "uid, conv_id, last_read_seq, mute, updated_at", "last_read_seq = VALUES(last_read_seq)")
	inbox := newTable("im_inbox", "uid, conv_id, seq, msg_id, send_time", "msg_id = VALUES(msg_id)")

	for ci := 0; ci < d.numConvs(); ci++ {
		conv := d.convID(ci)
		n := d.msgCount(conv)
		mem := d.members(ci)
		for seq := uint64(1); seq <= n; seq++ {
			sender := mem[int(seq)%len(mem)]
			at := ts(base.Add(time.Duration(seq) * time.Second))
			id := preparedMsgID(conv, seq)
			msg.add(conv, fmt.Sprintf("(%d,%d,%d,%d,1,%s)", conv, seq, id, sender, at))
			body := lorem[:40+int((conv*31+seq*17)%80)]
			content.add(conv, fmt.Sprintf("(%d,%d,%d,1,'%s',%s)", id, conv, sender, body, at))
		}
		seqT.add(conv, fmt.Sprintf("(%d,%d,%d)", conv, n, len(mem)))
		last := ts(base.Add(time.Duration(n) * time.Second))
		for k, uid := range mem {
			member.add(uid, fmt.Sprintf("(%d,%d,%d,%d,%s)", uid, conv, n-uint64(k%3), k%2, last))
			for seq := n - min(n, 5) + 1; seq <= n; seq++ {
				inbox.add(uid, fmt.Sprintf("(%d,%d,%d,%d,%s)", uid, conv, seq, preparedMsgID(conv, seq), ts(base.Add(time.Duration(seq)*time.Second))))
			}
		}
	}
	for _, t := range []*table{msg, content, seqT, member, inbox} {
		stmts := t.statements(o.batch)
		t1 := time.Now()
		if err := execParallel(ctx, db, stmts, 4); err != nil {
			return fmt.Errorf("%s: %w", t.name, err)
		}
		fmt.Fprintf(os.Stderr, "prepare: %-15s %7d rows in %5d statements, %s\n", t.name, t.count(), len(stmts), time.Since(t1).Round(time.Millisecond))
	}
	fmt.Fprintf(os.Stderr, "prepare: done in %s (%d conversations + %d huge groups, %d users)\n",
		time.Since(t0).Round(time.Millisecond), o.convs, o.huge, o.users)
	return nil
}

func execParallel(ctx context.Context, db *sql.DB, stmts []string, par int) error {
	ch := make(chan string)
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for range par {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := range ch {
				if _, err := db.ExecContext(ctx, s); err != nil {
					once.Do(func() {
						first = fmt.Errorf("%w (statement: %.120s...)", err, s)
						cancel()
					})
				}
			}
		}()
	}
	for _, s := range stmts {
		select {
		case ch <- s:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	close(ch)
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}
