package migrate

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/convoy-im/convoy/binlog"
)

// Mirror is the dual-write of a migrating shard (step 2, DESIGN.md section
// 5): once the old side has committed a write, its ACK waits until the new
// side shows it too. The old side stays authoritative (its result is the
// client's), the new side's failures never reach the client: a write the
// target has not taken within the deadline goes to a durable compensation
// queue, replayed later, and is counted.
//
// The target takes the write from the binlog apply, its only writer until
// the switch: Write waits for the apply's checkpoint to pass the write's
// source transaction (applywait.go says why not a second writer). A
// replay from the queue makes rows equal by the protocol the binlog apply
// and RepairSegment follow (resync.go: the source's current row, read
// under the target's row lock), so a late replay and the apply running
// beside it can only converge on the source's value; none can bring back
// an older one. The apply is what makes the target exact (it also sees
// writes that never went through Convoy); the mirror makes each write
// through Convoy be on the target when its ACK is sent, and a target that
// falls behind visible at once (convoy_migration_dualwrites_total,
// alertable).
//
// The queue is a table in the source database (the side that just took the
// write, so it is up): one row per (job, table, primary key), so a key
// queued twice is replayed once (seed 001: "补偿队列要能去重").
type Mirror struct {
	job    string
	src    *sql.DB
	dst    *sql.DB
	queue  string // qualified queue table in the source
	tables map[string]*mirrorTable
	// applied waits for the apply's checkpoint on the target (Write).
	applied *applyWatch

	// srcConns and dstConns keep session connections (time zone and
	// sql_mode set, see sessionConn) between mirrored writes: a write
	// pays no connection set-up.
	srcConns, dstConns *sessionPool
}

type mirrorTable struct {
	logical  string
	src, dst *table
}

// QueueTable is the compensation queue's name in the source database.
const QueueTable = "_convoy_dualwrite_queue"

// MirrorTable names one logical table's physical table on each side.
type MirrorTable struct {
	Logical        string
	Source, Target Side // Side.DB: the source's and the target's pools
}

// NewMirror loads the source's tables and creates the queue table in the
// source database if it is missing. job and shard name the binlog apply's
// checkpoint row, in the target database of tables[0].
func NewMirror(ctx context.Context, job string, shard int, tables []MirrorTable) (*Mirror, error) {
	if len(tables) == 0 || job == "" || len(job) > 64 {
		return nil, errors.New("migrate: a mirror needs a job id (at most 64 bytes) and tables")
	}
	m := &Mirror{job: job, src: tables[0].Source.DB, dst: tables[0].Target.DB, tables: map[string]*mirrorTable{}}
	m.srcConns, m.dstConns = newSessionPool(m.src), newSessionPool(m.dst)
	if err := checkDriver(ctx, m.src); err != nil {
		return nil, fmt.Errorf("migrate: mirror source pool: %w", err)
	}
	for _, t := range tables {
		if t.Source.DB != m.src || t.Target.DB != m.dst {
			return nil, errors.New("migrate: a mirror's tables share one source and one target server")
		}
		// The source only: prepare created the target's tables from the
		// source's definitions (and the copier compared them), and a
		// mirror must exist while the target is down, to queue.
		st, err := loadTable(ctx, t.Source.DB, t.Source.Database, t.Source.Table)
		if err != nil {
			return nil, err
		}
		m.tables[t.Logical] = &mirrorTable{logical: t.Logical, src: st, dst: st.as(t.Target.Database, t.Target.Table)}
	}
	m.queue = quoteIdent(tables[0].Source.Database) + "." + quoteIdent(QueueTable)
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

// KeyOf builds a primary key from values as the engine holds them
// (uint64, int64, string, []byte, ...).
func KeyOf(values ...any) (Key, error) {
	k := make(Key, len(values))
	for i, v := range values {
		switch x := v.(type) {
		case uint64:
			k[i] = fmt.Appendf(nil, "%d", x)
		case int:
			k[i] = fmt.Appendf(nil, "%d", x)
		case string:
			k[i] = []byte(x)
		default:
			b, err := valueBytes(v)
			if err != nil {
				return nil, err
			}
			k[i] = b
		}
	}
	return k, nil
}

// TableKeys are the primary keys of a logical table's rows a write
// touched.
type TableKeys struct {
	Table string
	Keys  []Key
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
func (m *Mirror) Keys(logical string, cols []string, rows [][]any) ([]Key, error) {
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
	keys := make([]Key, 0, len(rows))
	vals := make([]any, len(at))
	for _, r := range rows {
		for i, c := range at {
			vals[i] = r[c]
		}
		k, err := KeyOf(vals...)
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// Sync makes the target's rows with these keys equal to the source's, in
// one target transaction that locks them (rows or gaps) before reading the
// source.
func (m *Mirror) Sync(ctx context.Context, logical string, keys []Key) error {
	return m.sync(ctx, []TableKeys{{Table: logical, Keys: keys}}, nil)
}

// errNotOwner marks the error of a sync's owner check: the transaction
// rolled back, and retrying is pointless.
var errNotOwner = errors.New("migrate: no longer the owner of the job's writes")

// sync makes the target's rows equal to the source's; owner, if set, is
// checked inside the target transaction just before it commits (Replay).
func (m *Mirror) sync(ctx context.Context, writes []TableKeys, owner func(context.Context) error) error {
	byTable := map[string][]Key{}
	for _, w := range writes {
		if _, ok := m.tables[w.Table]; !ok {
			return fmt.Errorf("migrate: the mirror has no table %q", w.Table)
		}
		byTable[w.Table] = append(byTable[w.Table], w.Keys...)
	}
	// Table and key order: two syncs of overlapping keys lock in the same
	// order.
	var items []keySync
	for _, name := range slices.Sorted(maps.Keys(byTable)) {
		keys := byTable[name]
		if len(keys) == 0 {
			continue
		}
		mt := m.tables[name]
		items = append(items, keySync{src: mt.src, dst: mt.dst, keys: distinctKeys(keys)})
	}
	if len(items) == 0 {
		return nil
	}
	var err error
	for range 3 {
		if err = m.syncOnce(ctx, items, owner); err == nil || ctx.Err() != nil || errors.Is(err, errNotOwner) {
			return err
		}
		// A deadlock with the binlog apply or another proxy's mirror (both
		// take the target's gap locks), or a pooled connection the server
		// closed: again, on fresh terms.
		if n := mysqlErrno(err); n != 0 && n != 1213 {
			return err
		}
	}
	return err
}

// syncOnce is one target transaction of the protocol every live writer of
// the target follows (resync.go).
func (m *Mirror) syncOnce(ctx context.Context, items []keySync, owner func(context.Context) error) (err error) {
	sc, err := m.srcConns.get(ctx)
	if err != nil {
		return err
	}
	defer func() { m.srcConns.put(sc, err) }()
	dc, err := m.dstConns.get(ctx)
	if err != nil {
		return err
	}
	defer func() { m.dstConns.put(dc, err) }()
	return txn(ctx, dc, func(tx *sql.Tx) error {
		// The client's commit returned before the mirror was called: the
		// source shows it, no binlog point to wait for.
		if _, err := syncKeys(ctx, tx, sourceRead{conn: sc}, items); err != nil {
			return err
		}
		if owner != nil {
			if err := owner(ctx); err != nil {
				return fmt.Errorf("%w: %w", errNotOwner, err)
			}
		}
		return nil
	})
}

func (m *Mirror) push(ctx context.Context, logical string, keys []Key, cause error) error {
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

// Replay syncs up to limit queued keys, oldest first, and removes each one
// that synced; a key that fails again stays, with its attempts counted. It
// returns how many it removed and the first error.
//
// owner (the job runner's election check) is asked before the queue is read
// and inside each key's target transaction, just before it commits: once it
// fails, that transaction rolls back and Replay returns its error. A runner
// whose lease expired unnoticed must not write the target: its successor
// may have switched the shard since, and a row synced from the old side
// then would overwrite a write the new side took. The residual window is a
// stall of the old runner between the check and the commit longer than
// its successor's election, catch-up and switch.
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
	type entry struct {
		tbl string
		pk  []byte
	}
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
	if err := rs.Err(); err != nil {
		return 0, err
	}
	done := 0
	var first error
	for _, e := range entries {
		var k Key
		if err := json.Unmarshal(e.pk, &k); err != nil {
			return done, fmt.Errorf("migrate: queued key %q: %w", e.pk, err)
		}
		if err := m.sync(ctx, []TableKeys{{Table: e.tbl, Keys: []Key{k}}}, owner); err != nil {
			if errors.Is(err, errNotOwner) {
				return done, err
			}
			if first == nil {
				first = err
			}
			_, _ = m.src.ExecContext(ctx, "UPDATE "+m.queue+" SET attempts = attempts + 1, last_error = LEFT(?, 500) WHERE job = ? AND tbl = ? AND pk = ?",
				err.Error(), m.job, e.tbl, e.pk)
			continue
		}
		if _, err := m.src.ExecContext(ctx, "DELETE FROM "+m.queue+" WHERE job = ? AND tbl = ? AND pk = ?", m.job, e.tbl, e.pk); err != nil {
			return done, err
		}
		done++
	}
	return done, first
}

// DropQueue removes the job's entries (rollback, cleanup).
func (m *Mirror) DropQueue(ctx context.Context) error {
	_, err := m.src.ExecContext(ctx, "DELETE FROM "+m.queue+" WHERE job = ?", m.job)
	return err
}

// sessionPool keeps a few idle session connections of a pool.
type sessionPool struct {
	db   *sql.DB
	idle chan *sql.Conn
}

func newSessionPool(db *sql.DB) *sessionPool {
	return &sessionPool{db: db, idle: make(chan *sql.Conn, 8)}
}

func (p *sessionPool) get(ctx context.Context) (*sql.Conn, error) {
	select {
	case c := <-p.idle:
		return c, nil
	default:
		return sessionConn(ctx, p.db)
	}
}

// put keeps c unless it failed (its state is unknown) or enough are idle.
func (p *sessionPool) put(c *sql.Conn, err error) {
	if err == nil {
		select {
		case p.idle <- c:
			return
		default:
		}
	}
	discard(c)
}

// Close discards the idle session connections (the pools stay open).
func (m *Mirror) Close() {
	for _, p := range []*sessionPool{m.srcConns, m.dstConns} {
		for {
			select {
			case c := <-p.idle:
				discard(c)
				continue
			default:
			}
			break
		}
	}
}
