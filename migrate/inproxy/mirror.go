package inproxy

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/convoy-im/convoy/binlog"
	"github.com/convoy-im/convoy/internal/sqlq"
	"github.com/convoy-im/convoy/migrate/internal/physical"
)

// Mirror is the dual-write of a migrating shard (step 2, docs/design.md
// §5): once the old side has committed a write, its ACK waits until the new
// side shows it too. The old side stays authoritative (its result is the
// client's), the new side's failures never reach the client: a write the
// target has not taken within the deadline goes to a durable compensation
// queue, replayed later, and is counted.
//
// The target takes the write from the binlog apply, its only writer until
// the switch: Write waits for the apply's checkpoint to pass the write's
// source transaction (applywait.go says why not a second writer). The
// queue records the writes whose wait ran out; its replay writes nothing
// either: it confirms, once the apply has passed the source's position,
// that the target has them, and only then drops them (the apply, being
// the only writer, can then write the binlog's images: migrate.Applier.
// SetSoleWriter). The job's runner replays the queue (Replay); the
// proxies fill it. The apply is what makes the target exact (it also sees
// writes that never went through Convoy); the dual-write makes each write
// through Convoy be on the target when its ACK is sent, and a target that
// falls behind visible at once (convoy_migration_dualwrites_total,
// alertable).
//
// The queue is a table in the source database (the side that just took the
// write, so it is up): one row per (job, table, primary key), so a key
// queued twice is replayed once (docs/design.md §5; seed 001: "补偿队列要能去重").
type Mirror struct {
	job    string
	src    *sql.DB
	dst    *sql.DB
	queue  string // qualified queue table in the source
	tables map[string]*mirrorTable
	// applied waits for the apply's checkpoint on the target.
	applied *applyWatch
}

type mirrorTable struct {
	logical string
	src     *physical.Table // the source's definition: where a row's key is
}

// QueueTable is the compensation queue's name in the source database.
const QueueTable = "_convoy_dualwrite_queue"

// MirrorTable names one logical table's physical table on each side.
type MirrorTable struct {
	Logical        string
	Source, Target physical.Side // Side.DB: the source's and the target's pools
}

// NewMirror loads the source's tables and creates the queue table in the
// source database if it is missing. job and shard name the binlog apply's
// checkpoint row, in the target database of tables[0].
func NewMirror(ctx context.Context, job string, shard int, tables []MirrorTable) (*Mirror, error) {
	if len(tables) == 0 || job == "" || len(job) > 64 {
		return nil, errors.New("migrate: a mirror needs a job id (at most 64 bytes) and tables")
	}
	m := &Mirror{job: job, src: tables[0].Source.DB, dst: tables[0].Target.DB, tables: map[string]*mirrorTable{}}
	if err := physical.CheckDriver(ctx, m.src); err != nil {
		return nil, fmt.Errorf("migrate: mirror source pool: %w", err)
	}
	for _, t := range tables {
		if t.Source.DB != m.src || t.Target.DB != m.dst {
			return nil, errors.New("migrate: a mirror's tables share one source and one target server")
		}
		// The source only: a mirror must exist while the target is down,
		// to queue.
		st, err := physical.LoadTable(ctx, t.Source.DB, t.Source.Database, t.Source.Table)
		if err != nil {
			return nil, err
		}
		m.tables[t.Logical] = &mirrorTable{logical: t.Logical, src: st}
	}
	m.queue = sqlq.Ident(tables[0].Source.Database) + "." + sqlq.Ident(QueueTable)
	m.applied = newApplyWatch(m.dst, tables[0].Target.Database, job, shard)
	_, err := m.src.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+m.queue+` (
  job        VARBINARY(64)   NOT NULL,
  tbl        VARBINARY(64)   NOT NULL,
  pk         VARBINARY(2048) NOT NULL COMMENT 'migrate.Key as JSON',
  queued_at  DATETIME(6)    NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  attempts   INT UNSIGNED   NOT NULL DEFAULT 0,
  last_error VARCHAR(512)   NOT NULL DEFAULT '',
  PRIMARY KEY (job, tbl, pk)
) COMMENT 'Convoy: dual-write compensation queue of shard migrations'`)
	if err != nil {
		return nil, fmt.Errorf("migrate: create the compensation queue %s: %w", m.queue, err)
	}
	return m, nil
}

// TableKeys are the primary keys of a logical table's rows a write
// touched.
type TableKeys struct {
	Table string
	Keys  []physical.Key
}

// queueKeys puts a late write's keys in the compensation queue, under its
// own short deadline (a wait that ran out of its time is still queued);
// cause is why the write is late.
func (m *Mirror) queueKeys(writes []TableKeys, cause error) error {
	ctx, cancel := context.WithTimeout(context.Background(), queueTimeout)
	defer cancel()
	for _, w := range writes {
		if err := m.push(ctx, w.Table, w.Keys, cause); err != nil {
			return fmt.Errorf("migrate: dual-write of %s was late (%v) and could not be queued: %w", w.Table, cause, err)
		}
	}
	return nil
}

// await waits until the target shows a committed source transaction,
// commit (its GTID; "" when unknown: then everything the source committed
// so far), or ctx ends.
func (m *Mirror) await(ctx context.Context, commit binlog.Position) error {
	if commit == "" {
		pos, err := binlog.CurrentPosition(ctx, m.src)
		if err != nil {
			return err
		}
		commit = pos
	} else if _, err := binlog.ParsePosition(string(commit)); err != nil {
		return err
	}
	if err := m.applied.wait(ctx, commit); err != nil {
		return fmt.Errorf("migrate: the target's binlog apply has not reached the write's transaction %s: %w", commit, err)
	}
	return nil
}

// queueTimeout bounds a compensation queue write.
const queueTimeout = 2 * time.Second

// Keys returns the primary keys of rows given by column values (names
// lower-case, values as the engine holds them); an error when the columns
// do not cover the table's primary key or a key value is not plain.
func (m *Mirror) Keys(logical string, cols []string, rows [][]any) ([]physical.Key, error) {
	mt, ok := m.tables[logical]
	if !ok {
		return nil, fmt.Errorf("migrate: the mirror has no table %q", logical)
	}
	at := make([]int, len(mt.src.PK))
	for i, ci := range mt.src.PK {
		at[i] = slices.IndexFunc(cols, func(c string) bool { return strings.EqualFold(c, mt.src.Columns[ci].Name) })
		if at[i] < 0 {
			return nil, fmt.Errorf("migrate: the write does not name %s's key column %s", logical, mt.src.Columns[ci].Name)
		}
	}
	keys := make([]physical.Key, 0, len(rows))
	vals := make([]any, len(at))
	for _, r := range rows {
		for i, c := range at {
			vals[i] = r[c]
		}
		k, err := physical.KeyOf(vals...)
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return keys, nil
}

func (m *Mirror) push(ctx context.Context, logical string, keys []physical.Key, cause error) error {
	msg := cause.Error()
	if len(msg) > 500 {
		msg = msg[:500]
	}
	for _, k := range keys {
		pk, err := json.Marshal(k)
		if err != nil {
			return err
		}
		if _, err := m.src.ExecContext(ctx, "INSERT INTO "+m.queue+" (job, tbl, pk, last_error) VALUES (?, ?, ?, ?)"+
			" ON DUPLICATE KEY UPDATE last_error = VALUES(last_error)", m.job, logical, pk, msg); err != nil {
			return err
		}
	}
	return nil
}

// Backlog is the number of queued keys of this job.
func (m *Mirror) Backlog(ctx context.Context) (int64, error) {
	var n int64
	err := m.src.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+m.queue+" WHERE job = ?", m.job).Scan(&n)
	return n, err
}

// Replay confirms up to limit queued keys, oldest first: once the apply
// has passed the source's position read after them, the target shows what
// their writes committed, and they are dropped. It writes nothing to the
// target (the apply stays its only writer). A wait that runs out (replayWait)
// counts an attempt on each key and returns its error; the keys stay.
//
// owner (the job runner's election check) is asked first: a runner whose
// lease expired leaves the queue to its successor.
func (m *Mirror) Replay(ctx context.Context, limit int, owner func(context.Context) error) (int, error) {
	if owner != nil {
		if err := owner(ctx); err != nil {
			return 0, err
		}
	}
	rs, err := m.src.QueryContext(ctx, "SELECT tbl, pk FROM "+m.queue+" WHERE job = ? ORDER BY queued_at LIMIT ?", m.job, limit)
	if err != nil {
		return 0, err
	}
	type entry struct{ tbl, pk []byte }
	var entries []entry
	for rs.Next() {
		var e entry
		if err := rs.Scan(&e.tbl, &e.pk); err != nil {
			rs.Close()
			return 0, err
		}
		entries = append(entries, e)
	}
	rs.Close()
	if err := rs.Err(); err != nil || len(entries) == 0 {
		return 0, err
	}
	// Each key was queued after its write committed on the source: the
	// position read now covers every one of them.
	wctx, cancel := context.WithTimeout(ctx, replayWait)
	err = m.await(wctx, "")
	cancel()
	if err != nil {
		for _, e := range entries {
			_, _ = m.src.ExecContext(ctx, "UPDATE "+m.queue+" SET attempts = attempts + 1, last_error = LEFT(?, 500) WHERE job = ? AND tbl = ? AND pk = ?",
				err.Error(), m.job, e.tbl, e.pk)
		}
		return 0, err
	}
	for i, e := range entries {
		if _, err := m.src.ExecContext(ctx, "DELETE FROM "+m.queue+" WHERE job = ? AND tbl = ? AND pk = ?", m.job, e.tbl, e.pk); err != nil {
			return i, err
		}
	}
	return len(entries), nil
}

// replayWait bounds a replay's wait for the apply.
const replayWait = 2 * time.Second

// DropQueue removes the job's entries (rollback, cleanup).
func (m *Mirror) DropQueue(ctx context.Context) error {
	_, err := m.src.ExecContext(ctx, "DELETE FROM "+m.queue+" WHERE job = ?", m.job)
	return err
}
