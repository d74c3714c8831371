package migrate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/convoy-im/convoy/internal/ratelimit"
	"github.com/convoy-im/convoy/migrate/internal/physical"
)

// Deleting one shard's rows of a physical table: PURGE on a done job's
// source, and a rollback on the job's target. The table is often shared
// with live shards (small layouts put up to 128 in one), whose writes must
// not wait for it. A "DELETE ... WHERE CRC32(k) % 1024 = s LIMIT n" does:
// each statement scans the table from its start, and under REPEATABLE READ
// InnoDB keeps a next-key lock on every row it examined, other shards'
// rows included, until the statement ends; a live shard's transaction
// holding one of those rows blocks the purge, and the purge blocks the
// live shard's inserts into the gaps it locked.
//
// So each chunk first reads the next keys of the shard in key order
// (WHERE key > last AND <shard filter> ORDER BY key LIMIT n: a consistent,
// non-locking read of the primary key range after the last chunk). Then,
// in a transaction of its own under READ COMMITTED (no gap locks; a row
// that does not match is let go at once), it locks those rows, the shard
// filter checked again, with SELECT ... FOR UPDATE SKIP LOCKED, and
// deletes the ones it locked one primary key equality at a time. Nothing
// in it ever waits for a live shard:
//
//   - SKIP LOCKED passes over a row another transaction holds instead of
//     waiting, whatever plan the optimizer takes: for a few hundred key
//     equalities in one statement MariaDB 10.11 was seen to prefer a scan
//     of the whole primary key (with rows of the statement's keys deleted
//     earlier in the transaction, or statistics of a freshly filled
//     table), which would otherwise have waited for every row any live
//     transaction held.
//   - A DELETE, unlike a locking read, has no such way out, so each one
//     names one whole primary key: a unique lookup, which no statistics
//     turn into a scan, of a row the chunk already holds. One statement,
//     prepared once per chunk, per row: a round trip per row, cheap
//     beside the job's rate.
//
// A row of the shard that a live transaction happens to hold (REPEATABLE
// READ locks the first row past a range it read, whoever's it is) is left
// for a pass over the table from its start, after a pause, once this one
// is done; passes go on until one deletes every row it read. Only the
// shard's rows, which nothing writes any more (the routes send them
// elsewhere), stay locked until a chunk commits. After each commit the
// caller is handed the last key up to which every row of the shard is gone
// (never past a row passed over): persisted, it is where a restarted purge
// goes on (a chunk deleted again deletes nothing).

// deleteChunk is how many keys one chunk reads and deletes: a short
// transaction. skippedPause spaces the passes over rows other
// transactions held.
const (
	deleteChunk  = 500
	skippedPause = 500 * time.Millisecond
)

// purgePosition is where a job's purge got to, saved after each chunk:
// the source table it was deleting from (Side.String()) and the key up to
// which the shard's rows there are gone. The tables before it, in the
// job's order, are done.
type purgePosition struct {
	Table string `json:"table,omitempty"`
	After Key    `json:"after,omitempty"`
}

// shardPurge deletes the rows of filter's shard from side's table.
type shardPurge struct {
	side   Side
	filter *ShardFilter
	lim    *ratelimit.Limiter // paid per chunk for the rows deleted; nil: unthrottled
	// drop removes the table once no row of any shard is left in it (a
	// table the shard had to itself).
	drop bool
	// saved is called after a chunk's commit with the key up to which the
	// shard's rows are gone, when that moved (nil: no checkpoint).
	saved func(Key) error
	// inChunk runs inside each chunk's transaction after its deletes, for
	// tests to look at what the chunk locks.
	inChunk func(context.Context) error
}

// deleteShard deletes the shard's rows of one table from the start, and
// drops the table if drop is set and nothing is left in it. A missing
// table is not an error.
func deleteShard(ctx context.Context, s Side, f *ShardFilter, lim *ratelimit.Limiter, drop bool) error {
	p := &shardPurge{side: s, filter: f, lim: lim, drop: drop}
	return p.run(ctx, nil)
}

// run deletes the shard's rows after key after (nil: all of them).
func (p *shardPurge) run(ctx context.Context, after Key) error {
	s, f := p.side, p.filter
	// One session, past the read-only triggers of a done job's source, and
	// set to READ COMMITTED: it is discarded afterwards, not pooled.
	c, err := purgeConn(ctx, s.DB)
	if err != nil {
		return fmt.Errorf("migrate: delete shard %d from %s: %w", f.Shard, s, err)
	}
	defer discard(c)
	if _, err := c.ExecContext(ctx, "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED"); err != nil {
		return fmt.Errorf("migrate: delete shard %d from %s: %w", f.Shard, s, err)
	}
	t, err := loadTable(ctx, c, s.Database, s.Table)
	if errors.Is(err, ErrNoTable) {
		return nil // never created, or dropped by an earlier attempt
	}
	if err != nil {
		return err
	}
	if err := t.withFilter(f); err != nil {
		return err
	}
	for {
		skipped, err := p.pass(ctx, c, t, after)
		if err != nil {
			return err
		}
		if skipped == 0 {
			break
		}
		// Rows another transaction held: a pass from the start finds what
		// is left of the shard, once they had a moment to finish.
		after = nil
		if err := sleep(ctx, skippedPause); err != nil {
			return err
		}
	}
	if !p.drop {
		return nil
	}
	var left int
	if err := c.QueryRowContext(ctx, "SELECT COUNT(*) FROM (SELECT 1 FROM "+t.qualified()+" LIMIT 1) x").Scan(&left); err != nil {
		return fmt.Errorf("migrate: check %s: %w", s, err)
	}
	if left > 0 {
		return nil // other shards' rows: the table stays
	}
	if _, err := c.ExecContext(ctx, "DROP TABLE IF EXISTS "+t.qualified()); err != nil {
		return fmt.Errorf("migrate: drop %s: %w", s, err)
	}
	return nil
}

// pass deletes the shard's rows after key after, chunk by chunk, and
// returns how many of the keys it read it did not delete (held by another
// transaction, or gone meanwhile).
func (p *shardPurge) pass(ctx context.Context, c *sql.Conn, t *table, after Key) (skipped int, err error) {
	s, f := p.side, p.filter
	done := after // every row of the shard up to it is gone
	for {
		w, err := segmentWhere(t, f, after, nil)
		if err != nil {
			return skipped, err
		}
		rows, err := readRows(ctx, c, selectSQL(t, t.pkList(), w, " LIMIT "+strconv.Itoa(deleteChunk)), w.args, len(t.PK))
		if err != nil {
			return skipped, fmt.Errorf("migrate: read shard %d's keys in %s: %w", f.Shard, s, err)
		}
		if len(rows) == 0 {
			return skipped, nil
		}
		keys := make([]Key, len(rows))
		for i, r := range rows {
			if keys[i], err = pkKey(r); err != nil {
				return skipped, err
			}
		}
		var held []Key
		if err := txn(ctx, c, func(tx *sql.Tx) error {
			if held, err = lockKeys(ctx, tx, t, keys, f, true); err != nil {
				return err
			}
			if err := deleteEach(ctx, tx, t, held, f); err != nil {
				return err
			}
			if p.inChunk != nil {
				return p.inChunk(ctx)
			}
			return nil
		}); err != nil {
			return skipped, fmt.Errorf("migrate: delete shard %d from %s: %w", f.Shard, s, err)
		}
		advanced := false
		if skipped == 0 {
			// Up to the first row passed over: both lists are in key
			// order, held a subsequence of keys.
			i := 0
			for i < len(held) && held[i].String() == keys[i].String() {
				i++
			}
			if i > 0 {
				done, advanced = keys[i-1], true
			}
		}
		skipped += len(keys) - len(held)
		if p.saved != nil && advanced {
			if err := p.saved(done); err != nil {
				return skipped, err
			}
		}
		// Paid after the fact, for the rows deleted: a small shard's
		// tables are not charged a whole chunk each.
		if p.lim != nil && len(held) > 0 {
			if err := p.lim.Wait(ctx, len(held)); err != nil {
				return skipped, err
			}
		}
		if len(keys) < deleteChunk {
			return skipped, nil
		}
		after = keys[len(keys)-1]
	}
}

// deleteEach deletes the rows with these primary keys (of f's shard), one
// statement per row: see above for why not one for many.
func deleteEach(ctx context.Context, tx *sql.Tx, t *table, keys []Key, f *ShardFilter) error {
	var stmt *sql.Stmt
	defer func() {
		if stmt != nil {
			stmt.Close()
		}
	}()
	for _, k := range keys {
		w := &where{}
		if err := w.keyEquals(t, k); err != nil {
			return err
		}
		w.shard(t, f)
		if stmt == nil {
			var err error
			if stmt, err = tx.PrepareContext(ctx, "DELETE FROM "+t.qualified()+w.String()); err != nil {
				return err
			}
		}
		if _, err := stmt.ExecContext(ctx, w.args...); err != nil {
			return err
		}
	}
	return nil
}

// pkKey is a primary key scanned as the key columns alone (SELECT of
// pkList).
func pkKey(parts []any) (Key, error) {
	k := make(Key, len(parts))
	for i, v := range parts {
		b, err := physical.ValueBytes(v)
		if err != nil {
			return nil, err
		}
		k[i] = b
	}
	return k, nil
}
