package migrate

import (
	"context"
	"database/sql"
	"fmt"
)

// RepairResult says what RepairSegment did.
type RepairResult struct {
	Written int64 // the source's rows of the segment, upserted on the target
	Deleted int64 // target rows of the segment the source does not have
}

// repairReadRows bounds one read of the source while repairing.
const repairReadRows = 1000

// RepairSegment makes the target's rows of one segment (of the filter's
// shard) equal to the source's: it deletes the target rows whose keys the
// source does not have, then upserts every source row of the segment. It
// runs in one target transaction that first locks the segment's key range
// on the target (SELECT ... FOR UPDATE takes the rows and the gaps between
// them), and only then reads the source. A writer that brings source
// changes to the target in source-commit order (the binlog apply, a
// dual-write) and touches the range either committed before the lock, and
// the source read sees that change or a later one, or waits for the lock
// and lands after the repair; so a repair cannot overwrite a newer value
// with an older one. Rows it inserted where the target had none are read
// again before it commits, as every live writer of the target does
// (resync.go: a gap lock is shared). It may time out on the lock
// (innodb_lock_wait_timeout) or be chosen as a deadlock victim: retry.
// Confirm with CompareSegment.
func (c *Checksummer) RepairSegment(ctx context.Context, seg Segment) (RepairResult, error) {
	var res RepairResult
	sc, dc, release, err := c.conns(ctx)
	if err != nil {
		return res, err
	}
	defer release()

	err = txn(ctx, dc, func(tx *sql.Tx) error {
		res = RepairResult{}
		w, err := segmentWhere(c.dst, c.filter, seg.After, seg.Upto)
		if err != nil {
			return err
		}
		locked, err := readRows(ctx, tx, selectSQL(c.dst, c.pkSQL, w, " FOR UPDATE"), w.args, len(c.dst.PK))
		if err != nil {
			return fmt.Errorf("migrate: lock %s %s: %w", c.dst.qualified(), seg, err)
		}

		var rows [][]any
		after := seg.After
		for {
			w, err := segmentWhere(c.src, c.filter, after, seg.Upto)
			if err != nil {
				return err
			}
			chunk, err := readRows(ctx, sc, selectSQL(c.src, c.src.columnList(), w, " LIMIT ?"),
				append(w.args, repairReadRows), len(c.src.Columns))
			if err != nil {
				return fmt.Errorf("migrate: read %s %s: %w", c.src.qualified(), seg, err)
			}
			rows = append(rows, chunk...)
			if len(chunk) < repairReadRows {
				break
			}
			if after, err = c.src.keyOf(chunk[len(chunk)-1]); err != nil {
				return err
			}
		}

		held, err := heldKeys(locked)
		if err != nil {
			return err
		}
		n, inserted, err := writeRows(ctx, tx, c.src, c.dst, held, rows)
		if err != nil {
			return err
		}
		again, err := recheck(ctx, tx, sc, keySync{src: c.src, dst: c.dst, filter: c.filter}, inserted)
		if err != nil {
			return err
		}
		n.add(again)
		res = RepairResult{Written: int64(n.upserts), Deleted: int64(n.deletes)}
		return nil
	})
	return res, err
}
