package search

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/zap"

	"github.com/convoy-im/convoy/binlog"
	"github.com/convoy-im/convoy/internal/sqlq"
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
	t0 := time.Now()
	snap := ix.cfg.Routes()
	// The archived messages first, then the snapshot's rows: a message in
	// both (its delete chunk not committed yet) gets MySQL's version, which
	// is the newer if it was edited meanwhile. The catalog is read after
	// the snapshot began, so every row the snapshot lacks because the
	// archiver deleted it is under a read bound by then.
	total, err := ix.backfillArchived(ctx, conn, snap)
	if err != nil {
		return "", err
	}
	for _, g := range snap.AllPhysical("msg_content") {
		if g.Datasource != ix.cfg.Source {
			continue
		}
		var after uint64
		for {
			rows, err := conn.QueryContext(ctx, fmt.Sprintf(
				"SELECT c.msg_id, c.conv_id, c.sender_uid, c.msg_type, c.content, c.created_at, m.seq FROM %[1]s.%[2]s c JOIN %[1]s.%[3]s m ON m.msg_id = c.msg_id "+
					"WHERE c.msg_id > ? ORDER BY c.msg_id LIMIT %[4]d",
				sqlq.Ident(g.Database), sqlq.Ident(g.Table), sqlq.Ident(sibling(g.Table, "conv_msg")), backfillChunk), after)
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
	if err := ix.cfg.Engine.Apply(ctx, ix.cfg.Source, Batch{}, checkpointOf(string(pos))); err != nil {
		return "", err
	}
	ix.log.Info("search backfill done", zap.Int("messages", total), zap.String("position", string(pos)),
		zap.Duration("took", time.Since(t0)))
	return string(pos), nil
}

// backfillArchived indexes the messages of this datasource's shards that
// only the cold tier holds, skipping those deleted through Convoy since
// (tombstones, read in the snapshot: a later one reaches the index through
// the stream).
func (ix *Indexer) backfillArchived(ctx context.Context, conn *sql.Conn, snap *router.Snapshot) (int, error) {
	if ix.cfg.Archived == nil {
		return 0, nil
	}
	tombstoned := map[uint64]bool{}
	erased := map[uint64][][2]uint64{} // per conversation: seq ranges
	bounds := ReadBounds{}
	dbs := map[string]bool{}
	var shards []int
	for sh := range router.NumShards {
		p := snap.Physical("conv_msg", router.Shard(sh))
		if p.Datasource != ix.cfg.Source {
			continue
		}
		shards = append(shards, sh)
		if dbs[p.Database] {
			continue
		}
		dbs[p.Database] = true
		rows, err := conn.QueryContext(ctx, fmt.Sprintf("SELECT msg_id FROM %s.%s", sqlq.Ident(p.Database), sqlq.Ident(router.ColdTombstoneTable)))
		var me *mysql.MySQLError
		if errors.As(err, &me) && me.Number == 1146 {
			continue // nothing archived in this database yet
		}
		if err != nil {
			return 0, fmt.Errorf("search: %s: backfill: tombstones of %s: %w", ix.cfg.Source, p.Database, err)
		}
		for rows.Next() {
			var id uint64
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return 0, err
			}
			tombstoned[id] = true
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return 0, fmt.Errorf("search: %s: backfill: tombstones of %s: %w", ix.cfg.Source, p.Database, err)
		}
		if err := readBounds(ctx, conn, p.Database, bounds); err != nil {
			return 0, fmt.Errorf("search: %s: backfill: cold read bounds of %s: %w", ix.cfg.Source, p.Database, err)
		}
		if err := readErasures(ctx, conn, p.Database, erased); err != nil {
			return 0, fmt.Errorf("search: %s: backfill: erased ranges of %s: %w", ix.cfg.Source, p.Database, err)
		}
	}
	var b Batch
	total, skipped := 0, 0
	flush := func() error {
		if b.Len() == 0 {
			return nil
		}
		if err := ix.cfg.Engine.Apply(ctx, "", b, ""); err != nil {
			return err
		}
		ix.cfg.Metrics.applied(ix.cfg.Source, b, skipped, nil)
		total += len(b.Upserts)
		b, skipped = Batch{}, 0
		return nil
	}
	for _, sh := range shards {
		err := ix.cfg.Archived(ctx, sh, bounds, func(m ArchivedMessage) error {
			if tombstoned[m.MsgID] || m.Body == nil || slices.ContainsFunc(erased[m.ConvID], func(g [2]uint64) bool { return g[0] <= m.Seq && m.Seq <= g[1] }) {
				return nil
			}
			text, ok := ix.cfg.Extract.Text(m.MsgType, m.Body)
			if !ok {
				skipped++
				return nil
			}
			t, err := time.Parse("2006-01-02 15:04:05.999999", m.CreatedAt)
			if err != nil {
				return fmt.Errorf("search: archived message %d: created_at %q: %w", m.MsgID, m.CreatedAt, err)
			}
			b.Upserts = append(b.Upserts, Doc{Hit: Hit{MsgID: m.MsgID, ConvID: m.ConvID, Seq: m.Seq, SenderUID: m.SenderUID,
				MsgType: m.MsgType, CreatedMs: t.UnixMilli()}, Text: text})
			if b.Len() >= backfillChunk {
				return flush()
			}
			return nil
		})
		if err != nil {
			return 0, fmt.Errorf("search: %s: backfill of shard %04d's archive: %w", ix.cfg.Source, sh, err)
		}
	}
	if err := flush(); err != nil {
		return 0, err
	}
	if total > 0 {
		ix.log.Info("search backfill: archived messages indexed", zap.Int("messages", total))
	}
	return total, nil
}

// readErasures adds database's erased ranges (router.ColdErasureTable:
// conv_msg's and msg_content's, either takes a message out of search) to
// into, read in the caller's snapshot.
func readErasures(ctx context.Context, conn *sql.Conn, database string, into map[uint64][][2]uint64) error {
	rows, err := conn.QueryContext(ctx, fmt.Sprintf("SELECT conv_id, min_seq, max_seq FROM %s.%s", sqlq.Ident(database), sqlq.Ident(router.ColdErasureTable)))
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == 1146 {
		return nil
	}
	if err != nil {
		return err
	}
	for rows.Next() {
		var conv, lo, hi uint64
		if err := rows.Scan(&conv, &lo, &hi); err != nil {
			rows.Close()
			return err
		}
		into[conv] = append(into[conv], [2]uint64{lo, hi})
	}
	return errors.Join(rows.Err(), rows.Close())
}

// readBounds adds database's cold read bounds (router.ColdFilesTable) to
// into, read in the caller's snapshot; a database without the table has
// none.
func readBounds(ctx context.Context, conn *sql.Conn, database string, into ReadBounds) error {
	rows, err := conn.QueryContext(ctx, fmt.Sprintf("SELECT file, conv_id, max_seq FROM %s.%s", sqlq.Ident(database), sqlq.Ident(router.ColdFilesTable)))
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == 1146 {
		return nil
	}
	if err != nil {
		return err
	}
	for rows.Next() {
		var file string
		var conv, seq uint64
		if err := rows.Scan(&file, &conv, &seq); err != nil {
			rows.Close()
			return err
		}
		if into[file] == nil {
			into[file] = map[uint64]uint64{}
		}
		into[file][conv] = seq
	}
	return errors.Join(rows.Err(), rows.Close())
}
