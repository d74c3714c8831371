package migrate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/convoy-im/convoy/internal/ratelimit"
)

// Checkpoint is how far a copy has come. It is JSON-serialisable; the job
// stores it with the migration's state and passes it back to resume.
type Checkpoint struct {
	// After is the primary key of the last row copied; nil: nothing yet.
	After Key `json:"after,omitempty"`
	// Rows counts the rows copied by every run so far.
	Rows int64 `json:"rows"`
	// Done is set once the snapshot had no row after After.
	Done bool `json:"done,omitempty"`
}

// Progress is a copy's state for SHOW MIGRATIONS and the progress line.
type Progress struct {
	Rows int64 // copied so far, earlier runs included
	// Estimate is the total the copy will reach: Rows at the start of the
	// run plus the exact count of the rows left in its snapshot. Rows
	// inserted later reach the target through the binlog replay.
	Estimate   int64
	RowsPerSec float64       // over the last rateWindow
	ETA        time.Duration // 0 when unknown or done
	Done       bool
}

// rateWindow is how far back RowsPerSec looks: long enough to smooth the
// limiter's chunk rhythm (a chunk every quarter second), short enough that
// a SetRate shows within seconds.
const rateWindow = 10 * time.Second

// DefaultChunkRows bounds one chunk: 500 rows of msg_content (4 KiB bodies)
// make a 2 MiB transaction on the target, a fraction of a second's locks.
const DefaultChunkRows = 500

// Copier is step 3 of a shard migration (backfill): it copies one logical
// shard's rows of one physical table from the source server to the target,
// in primary-key order (keyset chunks), at a limited rate, resumably.
// Create it with NewCopier; Run it once at a time; Progress and SetRate may
// be called from any goroutine while it runs.
//
// # Consistency model
//
// The copy alone is never exact on a live table; it is made exact by the
// binlog replay that follows it. The argument:
//
//  1. Every chunk is read inside a Snapshot whose binlog position P is
//     recorded before the first chunk of that snapshot reaches the target.
//     So each copied row is the row's value at some P_i, the position of
//     the snapshot that read it.
//  2. Writes to the target are idempotent upserts of whole rows: copying a
//     row twice, or copying an older version over a newer one, leaves the
//     target holding exactly one of the row's historical values, never a
//     mixture and never a duplicate.
//  3. Let P_min be the earliest snapshot position of the whole copy (the
//     first snapshot's, since later snapshots start later). Replaying the
//     source binlog from P_min, in commit order, writing for each change
//     the source's row of its key as the source has it when the change is
//     handled (upserted, or deleted when the source no longer has it in
//     the shard; the Applier), and starting the replay after the last
//     chunk has been written, ends with every row of the shard equal to
//     the source: a row changed after P_min ends at its value after its
//     last change or later (the replay reads it after every chunk write);
//     a row not changed after P_min was copied with its current value (it
//     had that value in every snapshot at or after P_min); a row deleted
//     after P_min is deleted by the replay even if a stale chunk wrote it
//     back (so a stale chunk cannot resurrect a row a later DELETE
//     removed).
//  4. A restart is one more snapshot: the caller opens a new Snapshot and
//     calls Run with the last saved Checkpoint. The rows after the
//     checkpoint are read at the new, later position; rows before it stay
//     as copied. Points 1-3 hold unchanged, with P_min still the first
//     snapshot's position. Rotating snapshots on purpose
//     (WithSnapshotMaxAge) is the same thing, and keeps InnoDB's purge lag
//     on the live source bounded.
//
// What the caller (the job) must do:
//   - Start with an empty target table (step 1, prepare). The copier never
//     deletes, so only rows that existed on the source can be there.
//   - Persist the first snapshot's Position before Run writes anything (the
//     copier calls nothing before the first chunk, so "open snapshot,
//     persist position, Run" is the order) and never move it forward until
//     the replay has started from it. A restart keeps the persisted P_min;
//     a fresh copy from an empty Checkpoint with a non-empty target needs
//     the target truncated or P_min kept.
//   - Persist each Checkpoint the save callback receives; resume with the
//     last one saved. The callback runs after the chunk committed on the
//     target, so a crash between commit and save re-copies one chunk, which
//     point 2 makes harmless.
//   - Start the binlog replay at P_min only after Run returned Done: an
//     event applied before the chunk that covers its row would be
//     overwritten by that chunk's older image. (Interleaving copy and apply
//     as Vitess does needs a fresh snapshot for every copy cycle.)
//   - Keep the source's binary logs from P_min until the replay has passed
//     them (binlog_expire_logs_seconds longer than the copy), with
//     binlog_format=ROW and binlog_row_image=FULL.
//   - Dual-writes running during the copy do not change the argument: each
//     is also a source commit, replayed in order. But a write that reaches
//     the target late with a remembered image (a compensation queue entry
//     replayed after the binlog apply passed its event) would bring back an
//     older value: such writers must re-read the source row at write time
//     under the target's row lock (resync.go, the protocol of the mirror,
//     the apply and RepairSegment), or stop once the binlog apply runs,
//     which covers them.
//   - The target equals the source when the replay has caught up with the
//     source's current position; confirm with a Checksummer.
type Copier struct {
	src, dst       *table
	dstDB          *sql.DB
	filter         *ShardFilter
	srcServer      uint64
	chunkRows      int
	limiter        *ratelimit.Limiter
	maxSnapshotAge time.Duration

	mu       sync.Mutex
	progress Progress
	samples  []rateSample
	counted  bool // progress.Estimate holds a count
}

type rateSample struct {
	at   time.Time
	rows int64
}

// CopyOption customises NewCopier.
type CopyOption func(*Copier)

// WithChunkRows sets the largest chunk (default DefaultChunkRows). At low
// rates chunks are smaller: a quarter second's worth of rows, so the load
// is even rather than a burst every few seconds.
func WithChunkRows(n int) CopyOption {
	return func(c *Copier) {
		if n > 0 {
			c.chunkRows = n
		}
	}
}

// DefaultRate is the copy rate of one shard in rows per second: docs/design.md §5's
// figure ("1024 shards x 5M rows at 2000 rows/s per shard"), low enough that
// a backfill does not show in the live writes' latency.
const DefaultRate = 2000

// WithRate sets the rate in rows per second (default DefaultRate; <= 0
// unlimited) on a limiter of the copier's own.
func WithRate(rowsPerSec float64) CopyOption {
	return func(c *Copier) { c.limiter = ratelimit.New(rowsPerSec) }
}

// WithLimiter shares a limiter, e.g. one per shard for its five tables.
func WithLimiter(l *ratelimit.Limiter) CopyOption { return func(c *Copier) { c.limiter = l } }

// WithSnapshotMaxAge makes Run return, not Done, once its snapshot is older
// than d (checked after each chunk), so the caller opens a fresh one and
// resumes (consistency point 4). 0, the default, keeps one snapshot for the
// whole copy.
func WithSnapshotMaxAge(d time.Duration) CopyOption {
	return func(c *Copier) { c.maxSnapshotAge = d }
}

// NewCopier checks that both tables exist with the same shape (columns,
// types, character sets, primary key) and the filter column, and returns a
// copier from src to dst. filter nil copies every row.
func NewCopier(ctx context.Context, src, dst Side, filter *ShardFilter, opts ...CopyOption) (*Copier, error) {
	st, dt, err := loadPair(ctx, src, dst, filter)
	if err != nil {
		return nil, err
	}
	id, err := serverID(ctx, src.DB)
	if err != nil {
		return nil, fmt.Errorf("migrate: source %s: %w", src, err)
	}
	c := &Copier{src: st, dst: dt, dstDB: dst.DB, filter: filter, srcServer: id, chunkRows: DefaultChunkRows}
	for _, o := range opts {
		o(c)
	}
	if c.limiter == nil {
		c.limiter = ratelimit.New(DefaultRate)
	}
	return c, nil
}

// SetRate changes the rate while the copy runs (the limiter's, so a shared
// limiter changes for every copier using it).
func (c *Copier) SetRate(rowsPerSec float64) { c.limiter.SetRate(rowsPerSec) }

// Progress returns the current progress.
func (c *Copier) Progress() Progress {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.progress
	if n := len(c.samples); n >= 2 {
		first, last := c.samples[0], c.samples[n-1]
		if d := last.at.Sub(first.at).Seconds(); d > 0 {
			p.RowsPerSec = float64(last.rows-first.rows) / d
		}
	}
	if !p.Done && p.RowsPerSec > 0 && p.Estimate > p.Rows {
		p.ETA = time.Duration(float64(p.Estimate-p.Rows) / p.RowsPerSec * float64(time.Second))
	}
	return p
}

func (c *Copier) record(ck Checkpoint, estimate int64) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.progress.Rows, c.progress.Done = ck.Rows, ck.Done
	if estimate >= 0 {
		c.progress.Estimate = estimate
	}
	if ck.Rows > c.progress.Estimate {
		c.progress.Estimate = ck.Rows
	}
	c.samples = append(c.samples, rateSample{at: now, rows: ck.Rows})
	// Keep one sample at or before the window's start as the baseline.
	i := 0
	for i+1 < len(c.samples) && now.Sub(c.samples[i+1].at) >= rateWindow {
		i++
	}
	c.samples = c.samples[i:]
}

// estimate counts the rows left in the snapshot, once per Copier: a
// rotated snapshot keeps the first count (rows inserted since reach the
// target through the binlog replay, not the copy). One COUNT(*) reads the
// shard's rows once, a small cost beside a copy that writes them at 2000
// rows/s; information_schema's TABLE_ROWS is an estimate of the whole
// physical table, off by tens of percent and blind to the shard filter.
func (c *Copier) estimate(ctx context.Context, snap *Snapshot, from Checkpoint) error {
	c.mu.Lock()
	counted := c.counted
	c.mu.Unlock()
	if counted {
		c.record(from, -1)
		return nil
	}
	w := &where{}
	if err := w.keyCompare(c.src, from.After, true); err != nil {
		return err
	}
	w.shard(c.src, c.filter)
	var left int64
	if err := snap.conn.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+c.src.qualified()+w.String(), w.args...).Scan(&left); err != nil {
		return fmt.Errorf("migrate: count %s: %w", c.src.qualified(), err)
	}
	c.mu.Lock()
	c.counted = true
	c.mu.Unlock()
	c.record(from, from.Rows+left)
	return nil
}

// chunkSize is the next chunk's row count: a quarter second at the current
// rate, at most chunkRows.
func (c *Copier) chunkSize() int {
	n := c.chunkRows
	if r := c.limiter.Rate(); r > 0 {
		n = min(n, max(1, int(r*ratelimit.BurstSeconds)))
	}
	return n
}

// Run copies the rows after from.After, as snap sees them, to the target,
// calling save with the new checkpoint after each chunk has committed on the
// target (a save error stops the copy). It returns the last checkpoint
// reached: Done when the snapshot has no more rows; not Done with a nil
// error when the snapshot grew older than WithSnapshotMaxAge; not Done with
// an error when ctx ended or a server failed (then close snap and resume
// with a new one).
func (c *Copier) Run(ctx context.Context, snap *Snapshot, from Checkpoint, save func(Checkpoint) error) (Checkpoint, error) {
	if from.Done {
		c.record(from, from.Rows)
		return from, nil
	}
	if snap == nil || snap.conn == nil {
		return from, errors.New("migrate: Run needs an open Snapshot")
	}
	if snap.Position.ServerID != c.srcServer {
		return from, fmt.Errorf("migrate: the snapshot is of server %d, the copier's source is server %d",
			snap.Position.ServerID, c.srcServer)
	}
	if err := c.estimate(ctx, snap, from); err != nil {
		return from, err
	}

	tconn, err := sessionConn(ctx, c.dstDB)
	if err != nil {
		return from, fmt.Errorf("migrate: target %s: %w", c.dst.qualified(), err)
	}
	defer discard(tconn)

	ck := from
	for {
		n := c.chunkSize()
		w := &where{}
		if err := w.keyCompare(c.src, ck.After, true); err != nil {
			return ck, err
		}
		w.shard(c.src, c.filter)
		rows, err := readRows(ctx, snap.conn, selectSQL(c.src, c.src.columnList(), w, " LIMIT ?"), append(w.args, n), len(c.src.Columns))
		if err != nil {
			return ck, fmt.Errorf("migrate: read %s: %w", c.src.qualified(), err)
		}
		// Pay for the rows read, before writing them: the rate bounds the
		// target's writes, and the final empty read costs no wait.
		if err := c.limiter.Wait(ctx, len(rows)); err != nil {
			return ck, err
		}
		next := ck
		if len(rows) > 0 {
			if err := txn(ctx, tconn, func(tx *sql.Tx) error { return upsert(ctx, tx, c.dst, rows) }); err != nil {
				// Named: a target that died mid-copy otherwise shows in
				// SHOW MIGRATIONS as a bare "invalid connection".
				return ck, fmt.Errorf("migrate: write %s on the target: %w", c.dst.qualified(), err)
			}
			if next.After, err = c.src.keyOf(rows[len(rows)-1]); err != nil {
				return ck, err
			}
			next.Rows += int64(len(rows))
		}
		next.Done = len(rows) < n
		ck = next
		c.record(ck, -1)
		if save != nil {
			if err := save(ck); err != nil {
				return ck, fmt.Errorf("migrate: save checkpoint: %w", err)
			}
		}
		if ck.Done || (c.maxSnapshotAge > 0 && snap.Age() > c.maxSnapshotAge) {
			return ck, nil
		}
	}
}
