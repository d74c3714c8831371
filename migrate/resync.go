package migrate

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/convoy-im/convoy/binlog"
	"github.com/convoy-im/convoy/migrate/internal/physical"
)

// Besides the copier, two writers bring the source's changes to the target
// while it is live: the binlog apply and a segment repair (the dual-write
// only waits for the apply, inproxy's applywait.go). Until the job is
// ready neither writes a remembered image of a row: each writes the
// source's current rows, under one protocol, so that whichever of them
// runs late neither replaces a newer value of a row with an older one
// (from ready on the apply is the only writer and writes the binlog's
// images in order: Applier.SetSoleWriter):
//
//  1. In one target transaction, lock the keys' rows (SELECT ... FOR
//     UPDATE; a missing row's gap under REPEATABLE READ).
//  2. Read the source's rows of those keys: its latest committed ones.
//  3. Delete the locked rows the source no longer has (or has in another
//     shard), upsert the source's rows.
//  4. Read the source again for the rows step 3 inserted, now that each
//     insert holds its row's exclusive lock, and write what changed (the
//     apply skips it: sourceRead.follows).
//  5. Commit.
//
// Why never older: a row of the target changes only in such a
// transaction, and from its source read to its commit nobody else can
// change the row: a row found at step 1 is locked from there; a missing
// row's gap is locked under REPEATABLE READ, and nobody can insert into
// it; at step 4 the inserted row itself is locked. So of two transactions
// that changed a row, the later one read the source after the earlier one
// committed, so after the earlier one read: it wrote the row as the
// source had it later, and a source row only moves forward.
//
// Why step 4, then: InnoDB grants one gap to several transactions at once.
// Another writer can lock the same gap, read the source later, find the
// row deleted, commit nothing (a delete of a missing row), and only then
// this one's insert (which waited for that gap lock) lands with its older
// read. The target's rows still move forward, but it keeps a row the
// source deleted, and the writer that saw the delete is done (the apply's
// checkpoint past it): step 4 finds the row gone. Under READ COMMITTED
// step 1 locks nothing for a missing row, and step 4 is also what keeps
// the order.
//
// The copier writes snapshot images without this protocol: it runs before
// the apply starts, and the apply's replay from the copy's first snapshot
// position brings every row changed since then to its current value.

// snapshotWait bounds the wait for the source to show a streamed batch:
// the gap is the server's commit of a group already in its binary log,
// microseconds; a longer one is a sick server, or a binlog stream from
// another server than the source pool's.
const snapshotWait = 10 * time.Second

// sourceRead is how a writer reads the source in syncKeys.
type sourceRead struct {
	conn *sql.Conn // a session connection, outside any transaction
	// covers, if set, is where in the source's binary log the transactions
	// the writer must reflect end (the apply's batch): the read waits until
	// the source shows them (binlog.SnapshotCovering).
	covers *binlog.FileOffset
	// follows: the writer writes a key again after every later source
	// change of it, and its target transactions are REPEATABLE READ (the
	// apply, following the binlog). It skips step 4: the gap lock keeps
	// the order, and a row it inserts that the source has deleted
	// meanwhile is deleted by its own next batch, the delete's.
	follows bool
}

// keySync is one table's keys a writer brings to the target.
type keySync struct {
	src, dst *table
	// filter, if set, is the shard the target holds: a source row of
	// another shard counts as absent (a shared table's row that moved).
	filter *ShardFilter
	keys   []Key // distinct (distinctKeys)
}

// syncCounts are the rows a sync wrote.
type syncCounts struct{ upserts, deletes int }

func (c *syncCounts) add(o syncCounts) { c.upserts += o.upserts; c.deletes += o.deletes }

// syncKeys makes the target's rows with the items' keys equal to the
// source's current ones (steps 1 to 4) in tx, a transaction on the target.
// The caller commits tx.
func syncKeys(ctx context.Context, tx queryer, src sourceRead, items []keySync) (syncCounts, error) {
	s, err := lockAndRead(ctx, tx, src, items)
	if err != nil {
		return syncCounts{}, err
	}
	return s.write(ctx, tx, src)
}

// syncRead is what steps 1 and 2 found for one table.
type syncRead struct {
	keySync
	held map[string]Key // the keys with a target row at step 1, locked
	rows [][]any        // the source's rows, source column order
}

type syncState []syncRead

// lockAndRead is steps 1 and 2: every lock first, then every read, so that
// what is read cannot change on the target before it is written.
func lockAndRead(ctx context.Context, tx queryer, src sourceRead, items []keySync) (syncState, error) {
	s := make(syncState, len(items))
	for i, it := range items {
		locked, err := selectKeys(ctx, tx, it.dst, it.dst.pkList(), len(it.dst.PK), nil, it.keys, " FOR UPDATE")
		if err != nil {
			return nil, fmt.Errorf("migrate: lock %s: %w", it.dst.qualified(), err)
		}
		held, err := heldKeys(locked)
		if err != nil {
			return nil, err
		}
		s[i] = syncRead{keySync: it, held: held}
	}
	if src.covers != nil {
		wctx, cancel := context.WithTimeout(ctx, snapshotWait)
		err := binlog.SnapshotCovering(wctx, src.conn, *src.covers)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("migrate: source snapshot: %w", err)
		}
	}
	err := func() error {
		for i := range s {
			t := s[i].src
			rows, err := selectKeys(ctx, src.conn, t, t.columnList(), len(t.Columns), s[i].filter, s[i].keys, "")
			if err != nil {
				return fmt.Errorf("migrate: read %s: %w", t.qualified(), err)
			}
			s[i].rows = rows
		}
		return nil
	}()
	if src.covers != nil {
		// A read-only snapshot: ending it either way releases its view.
		end := "COMMIT"
		if err != nil {
			end = "ROLLBACK"
		}
		if _, eerr := src.conn.ExecContext(context.WithoutCancel(ctx), end); err == nil && eerr != nil {
			err = fmt.Errorf("migrate: end the source snapshot: %w", eerr)
		}
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

// write is steps 3 and 4.
func (s syncState) write(ctx context.Context, tx queryer, src sourceRead) (syncCounts, error) {
	var n syncCounts
	inserted := make([][][]any, len(s))
	for i, r := range s {
		c, ins, err := writeRows(ctx, tx, r.src, r.dst, r.held, r.rows)
		if err != nil {
			return n, err
		}
		n.add(c)
		inserted[i] = ins
	}
	if src.follows {
		return n, nil
	}
	for i, r := range s {
		c, err := recheck(ctx, tx, src.conn, r.keySync, inserted[i])
		if err != nil {
			return n, err
		}
		n.add(c)
	}
	return n, nil
}

// heldKeys indexes the keys a locking read of key columns returned.
func heldKeys(locked [][]any) (map[string]Key, error) {
	held := make(map[string]Key, len(locked))
	for _, r := range locked {
		k := make(Key, len(r))
		for i, v := range r {
			b, err := physical.ValueBytes(v)
			if err != nil {
				return nil, err
			}
			k[i] = b
		}
		held[k.String()] = k
	}
	return held, nil
}

// writeRows deletes the held target rows whose keys rows (the source's,
// read under the locks) lack, upserts rows, and returns the rows whose keys
// were not held: inserted, so to be read again (step 4). Deletes go first,
// so that a row that should be gone cannot block an upsert through a
// secondary unique key, and so that a key equal only under the collation
// (abc vs ABC) ends as the source has it.
func writeRows(ctx context.Context, tx queryer, src, dst *table, held map[string]Key, rows [][]any) (syncCounts, [][]any, error) {
	have := make(map[string]bool, len(rows))
	var inserted [][]any
	for _, r := range rows {
		k, err := src.keyOf(r)
		if err != nil {
			return syncCounts{}, nil, err
		}
		have[k.String()] = true
		if _, ok := held[k.String()]; !ok {
			inserted = append(inserted, r)
		}
	}
	var gone []Key
	for s, k := range held {
		if !have[s] {
			gone = append(gone, k)
		}
	}
	if err := deleteKeys(ctx, tx, dst, gone); err != nil {
		return syncCounts{}, nil, err
	}
	if err := upsert(ctx, tx, dst, rows); err != nil {
		return syncCounts{}, nil, err
	}
	return syncCounts{upserts: len(rows), deletes: len(gone)}, inserted, nil
}

// recheck is step 4 for one table: it reads the source's rows of the keys
// of written (rows just inserted into keys without a target row, source
// column order) again and writes those that changed since the first read.
func recheck(ctx context.Context, tx queryer, src queryer, it keySync, written [][]any) (syncCounts, error) {
	if len(written) == 0 {
		return syncCounts{}, nil
	}
	wrote := make(map[string][]any, len(written))
	keys := make([]Key, 0, len(written))
	for _, r := range written {
		k, err := it.src.keyOf(r)
		if err != nil {
			return syncCounts{}, err
		}
		wrote[k.String()] = r
		keys = append(keys, k)
	}
	now, err := selectKeys(ctx, src, it.src, it.src.columnList(), len(it.src.Columns), it.filter, keys, "")
	if err != nil {
		return syncCounts{}, fmt.Errorf("migrate: read %s again: %w", it.src.qualified(), err)
	}
	var changed [][]any
	have := make(map[string]bool, len(now))
	for _, r := range now {
		k, err := it.src.keyOf(r)
		if err != nil {
			return syncCounts{}, err
		}
		have[k.String()] = true
		if diffColumns(it.src, wrote[k.String()], r) != nil {
			changed = append(changed, r)
		}
	}
	var gone []Key
	for _, k := range keys {
		if !have[k.String()] {
			gone = append(gone, k)
		}
	}
	if err := deleteKeys(ctx, tx, it.dst, gone); err != nil {
		return syncCounts{}, err
	}
	if err := upsert(ctx, tx, it.dst, changed); err != nil {
		return syncCounts{}, err
	}
	return syncCounts{upserts: len(changed), deletes: len(gone)}, nil
}

// distinctKeys returns keys sorted and without repeats (a new slice).
func distinctKeys(keys []Key) []Key {
	keys = slices.Clone(keys)
	slices.SortFunc(keys, func(a, b Key) int { return strings.Compare(a.String(), b.String()) })
	return slices.CompactFunc(keys, func(a, b Key) bool { return a.String() == b.String() })
}
