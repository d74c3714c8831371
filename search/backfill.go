package search

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/zap"

	"github.com/convoy-im/convoy/binlog"
	"github.com/convoy-im/convoy/router"
)

// backfillChunk is the rows one backfill read and one Apply take.
const backfillChunk = 1000

// backfill indexes the messages a datasource already stores, read in a
// consistent snapshot, and records the snapshot's binlog position as the
// checkpoint: the stream from there delivers exactly what the snapshot
// did not see. It runs when an index has no checkpoint for the datasource
// (a new index, or search enabled on a running cluster); a crash part way
// leaves no checkpoint, so the next runner starts it again (the upserts
// are idempotent).
func (ix *Indexer) backfill(ctx context.Context) (string, error) {
	conn, err := ix.cfg.DB.Conn(ctx)
	if err != nil {
		return "", fmt.Errorf("search: %s: backfill: %w", ix.cfg.Source, err)
	}
	defer conn.Close()
	pos, err := binlog.SnapshotPosition(ctx, conn)
	if err != nil {
		return "", fmt.Errorf("search: %s: backfill: %w", ix.cfg.Source, err)
	}
	// The snapshot is read-only: ending it can only fail with the
	// connection, which Close drops anyway.
	defer func() { _, _ = conn.ExecContext(context.WithoutCancel(ctx), "COMMIT") }()
	t0, total := time.Now(), 0
	snap := ix.cfg.Routes()
	for _, g := range snap.AllPhysical("msg_content") {
		if g.Datasource != ix.cfg.Source {
			continue
		}
		var after uint64
		for {
			rows, err := conn.QueryContext(ctx, fmt.Sprintf(
				"SELECT c.msg_id, c.conv_id, c.sender_uid, c.msg_type, c.content, c.created_at, m.seq FROM %[1]s.%[2]s c JOIN %[1]s.%[3]s m ON m.msg_id = c.msg_id "+
					"WHERE c.msg_id > ? ORDER BY c.msg_id LIMIT %[4]d",
				quoteIdent(g.Database), quoteIdent(g.Table), quoteIdent(sibling(g.Table, "conv_msg")), backfillChunk), after)
			var me *mysql.MySQLError
			if errors.As(err, &me) && me.Number == 1146 {
				break // no such table (yet): nothing stored
			}
			if err != nil {
				return "", fmt.Errorf("search: %s: backfill %s.%s: %w", ix.cfg.Source, g.Database, g.Table, err)
			}
			var b Batch
			n, skipped := 0, 0
			for rows.Next() {
				var d Doc
				var body []byte
				var created string
				if err := rows.Scan(&d.MsgID, &d.ConvID, &d.SenderUID, &d.MsgType, &body, &created, &d.Seq); err != nil {
					rows.Close()
					return "", fmt.Errorf("search: %s: backfill %s.%s: %w", ix.cfg.Source, g.Database, g.Table, err)
				}
				n++
				after = d.MsgID
				if !slices.Contains(g.Shards, router.ShardOf(d.ConvID)) {
					continue // a shared table's row of a shard that lives elsewhere now
				}
				text, ok := ix.cfg.Extract.Text(d.MsgType, body)
				if !ok {
					skipped++
					continue
				}
				t, err := time.Parse("2006-01-02 15:04:05.999999", created)
				if err != nil {
					rows.Close()
					return "", fmt.Errorf("search: %s: created_at %q of message %d: %w", ix.cfg.Source, created, d.MsgID, err)
				}
				d.Text, d.CreatedMs = text, t.UnixMilli()
				b.Upserts = append(b.Upserts, d)
			}
			if err := errors.Join(rows.Err(), rows.Close()); err != nil {
				return "", fmt.Errorf("search: %s: backfill %s.%s: %w", ix.cfg.Source, g.Database, g.Table, err)
			}
			if b.Len() > 0 {
				if err := ix.cfg.Engine.Apply(ctx, "", b, ""); err != nil {
					return "", err
				}
			}
			ix.cfg.Metrics.applied(ix.cfg.Source, b, skipped, nil)
			total += len(b.Upserts)
			if n < backfillChunk {
				break
			}
		}
	}
	if err := ix.cfg.Engine.Apply(ctx, ix.cfg.Source, Batch{}, string(pos)); err != nil {
		return "", err
	}
	ix.log.Info("search backfill done", zap.Int("messages", total), zap.String("position", string(pos)),
		zap.Duration("took", time.Since(t0)))
	return string(pos), nil
}
