package archive

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"go.uber.org/zap"

	"github.com/convoy-im/convoy/cold"
)

// deleteDue deletes the warm rows of every file of the shard (history and
// inbox) catalogued at least DeleteAfter ago (and finishes any delete a
// crash interrupted).
func (u *run) deleteDue(ctx context.Context) error {
	recs, err := u.records(ctx)
	if err != nil {
		return err
	}
	now := u.a.cfg.Now()
	for _, rec := range recs {
		switch {
		case rec.State == StateDeleted, rec.State == StateSuperseded:
		case rec.State == StateCatalogued && now.Before(rec.CataloguedAt.Add(u.a.cfg.DeleteAfter)):
		default:
			if err := u.deleteFile(ctx, rec); err != nil {
				return err
			}
		}
	}
	return nil
}

// deleteFile deletes exactly the warm rows rec's file holds and nothing
// else, in chunks of ChunkRows in the file's key order. etcd is written
// twice per file (the record's state deleting, then deleted), never per
// chunk. Each chunk is one transaction on the shard's database:
//
//  0. lock the file's progress row and check it still says the chunk is
//     next: an archiver whose lease ran out while its chunk transaction
//     was open (a pause, a slow statement) may still commit that chunk,
//     since its MySQL statements are not fenced by the election. Its
//     successor must not take the rows that archiver deleted for rows
//     deleted by users (they would be skipped by every cold read): it
//     waits for the row lock, sees the chunk done, and starts over from
//     the progress row;
//  1. lock the chunk's rows (SELECT ... FOR UPDATE, both tables) and
//     compare each with the file's copy (cold.SameRow): equal rows will be
//     deleted; a row changed since it was archived (edited message, body
//     changed or gone) stays in MySQL, and a row no longer there (deleted
//     by a user) stays deleted;
//  2. history files: tombstone the rows of step 1 that are not deleted
//     (the file's copy is stale: MySQL serves the row, or nobody does)
//     and move each conversation's read bound (FilesTable) past the
//     chunk;
//  3. delete the equal rows, widen the conversations' archived ranges and
//     advance the progress row (with the chunk's kept and gone counts),
//     commit.
//
// A reader reads MySQL's rows first, then the read bounds and the
// tombstones (proxy/engine/cold.go): a row missing from its first read is
// either deleted by a chunk committed before the second, whose bound and
// tombstones it sees, or by a user and never under a bound. A crash before
// the commit rolls the chunk back (its locks end with the connection) and
// the chunk is redone; after it, the progress row and the bounds say the
// chunk is done. The rows are locked from the comparison to the delete,
// so a user's edit either happens before the comparison (the row is kept)
// or waits for the delete (and finds the row gone, as it would have after
// 180 days anyway).
func (u *run) deleteFile(ctx context.Context, rec Record) error {
	var rows []cold.Row
	sctx, cancel := u.storeCtx(ctx)
	err := cold.ScanFile(sctx, u.a.cfg.Store, cold.FileInfo{Key: rec.Key, SHA256: rec.SHA256}, func(_ cold.Tables, r cold.Row) error {
		rows = append(rows, r)
		return nil
	})
	cancel()
	if err != nil {
		return fmt.Errorf("archive: read %s back to delete its warm rows: %w", rec.Key, err)
	}
	if int64(len(rows)) != rec.Rows {
		return fmt.Errorf("archive: %s holds %d rows, its record says %d", rec.Key, len(rows), rec.Rows)
	}
	if rec.State == StateCatalogued {
		rec.Bounds = BoundsMySQL // (a record from before the bounds were kept in MySQL keeps its own)
	}
	chunk := u.a.cfg.ChunkRows
	rec.Chunks = (len(rows) + chunk - 1) / chunk
	done, err := u.src.chunksDone(rec.Key)
	if err != nil {
		return err
	}
	// A shard moved (by a finished migration) while a delete was under
	// way: the progress row stayed behind on the old server. A history
	// file's read bounds moved with the shard (FilesTable is a companion
	// table) and say exactly which chunks committed.
	ambiguous := -1
	moved := rec.Location != "" && rec.Location != u.location()
	switch k := kindNamed(rec.Kind); {
	case k == history:
		b, err := u.src.bounds(rec.Key)
		if err != nil {
			return err
		}
		done = max(done, chunksDealt(rows, chunk, b))
		if moved && rec.Bounds != BoundsMySQL && done == 0 {
			// A record of the former layout, whose chunks etcd counted:
			// chunk Done may have committed there before the move, its
			// missing rows are taken as deleted by us, not by a user (the
			// other guess would hide archived rows from reads).
			done, ambiguous = rec.Done, rec.Done
		}
	case moved && done == 0:
		// Inbox files are never read back: their missing rows are taken
		// as deleted by us; only SHOW ARCHIVE's counts could be off.
		ambiguous = rec.Chunks
	}
	rec.Location = u.location()
	if err := u.src.startProgress(rec.Key, done); err != nil {
		return err
	}
	if rec.Skips == nil {
		rec.Skips = map[int][]skipped{} // the former layout's, kept for its readers
	}
	u.job.Step = StepDeleting
	if rec.State != StateDeleting {
		rec.State, rec.Done = StateDeleting, done
		u.job.Intent = "delete " + rec.Key
		var ops []clientv3.Op
		if rec.Kind == kindHistory {
			ops = append(ops, markShard(u.a.cfg.Cluster, u.shard))
		}
		if err := u.putRecord(ctx, rec, ops...); err != nil {
			return err
		}
	}
	for i := done; i < rec.Chunks; i++ {
		if err := u.check(ctx); err != nil {
			return err
		}
		part := rows[i*chunk : min(len(rows), (i+1)*chunk)]
		if err := u.a.rows.Wait(ctx, len(part)); err != nil {
			return err
		}
		n, err := u.deleteChunk(ctx, &rec, i, part, i <= ambiguous)
		if err != nil {
			return err
		}
		u.progress(kindNamed(rec.Kind)).Deleted += int64(n)
		u.a.cfg.Metrics.deleted(kindNamed(rec.Kind), n)
		if err := u.hook(HookDeleted); err != nil {
			return err
		}
	}
	kept, gone, err := u.src.counts(rec.Key)
	if err != nil {
		return err
	}
	for _, ss := range rec.Skips {
		for _, sk := range ss {
			if sk.Gone {
				gone++
			} else {
				kept++
			}
		}
	}
	rec.State, rec.Done, rec.DeletedAt = StateDeleted, rec.Chunks, u.a.cfg.Now().UTC()
	rec.Kept, rec.Gone = kept, gone
	if rec.Bounds == BoundsMySQL {
		rec.Bound = nil
	} // else the former layout's readers keep its last bound: later chunks are read through MySQL's
	pr := u.progress(kindNamed(rec.Kind))
	pr.Kept += rec.Kept
	pr.Gone += rec.Gone
	u.job.Intent = ""
	if err := u.putRecord(ctx, rec); err != nil {
		return err
	}
	// The progress row has served its purpose; a crash before this leaves
	// a row nobody reads again.
	return u.src.forget(rec.Key)
}

// chunksDealt is how many of the file's first chunks the read bounds
// cover: chunk i is committed when its last row's conversation's bound
// reaches that row (chunks commit in order, each moving the bounds of all
// its conversations).
func chunksDealt(rows []cold.Row, chunk int, bounds map[uint64]uint64) int {
	n := 0
	for i := 0; i*chunk < len(rows); i++ {
		last := rows[min(len(rows), (i+1)*chunk)-1]
		if b, ok := bounds[last.ConvID]; !ok || b < last.Seq {
			break
		}
		n++
	}
	return n
}

// errChunkMoved: another archiver committed a delete chunk of the file
// under this run (see deleteFile, step 0); the next run resumes after it.
var errChunkMoved = errors.New("archive: another archiver committed this delete chunk; the next run resumes after it")

// deleteChunk is steps 0-3 of deleteFile for chunk i (rows of the file).
// assumeDeleted treats missing rows as deleted by an earlier attempt.
func (u *run) deleteChunk(ctx context.Context, rec *Record, i int, rows []cold.Row, assumeDeleted bool) (int, error) {
	keys := make([]key, len(rows))
	for j, r := range rows {
		keys[j] = keyOf(r)
	}
	if _, err := u.src.exec("BEGIN"); err != nil {
		return 0, err
	}
	committed := false
	defer func() {
		if !committed {
			_, _ = u.src.conn.Execute("ROLLBACK")
		}
	}()
	if done, err := u.src.lockProgress(rec.Key); err != nil {
		return 0, err
	} else if done != i {
		return 0, fmt.Errorf("%w: %s has %d delete chunks committed, this run was at %d", errChunkMoved, rec.Key, done, i)
	}
	k := kindNamed(rec.Kind)
	_, cur, err := u.src.fetch(k, keys, true)
	if err != nil {
		return 0, err
	}
	byKey := make(map[key]cold.Row, len(cur))
	for _, r := range cur {
		byKey[keyOf(r)] = r
	}
	var del []cold.Row
	var skip []skipped
	kept, gone := 0, 0
	for _, r := range rows {
		now, ok := byKey[keyOf(r)]
		switch {
		case ok && cold.SameRow(now, r):
			del = append(del, now)
		case ok:
			skip, kept = append(skip, skipped{key: keyOf(r)}), kept+1
		case !assumeDeleted:
			skip, gone = append(skip, skipped{key: keyOf(r), Gone: true}), gone+1
		}
	}
	if k == history {
		if err := u.src.noteChunk(rec.Key, rows, skip); err != nil {
			return 0, err
		}
	}
	if err := u.hook(HookChunkNoted); err != nil {
		return 0, err
	}
	if err := u.src.deleteChunk(k, del, rec.Key, i+1, kept, gone); err != nil {
		return 0, err
	}
	if _, err := u.src.exec("COMMIT"); err != nil {
		return 0, err
	}
	committed = true
	if kept+gone > 0 {
		u.log.Info("archived rows changed before their warm delete: kept out of the cold file's reads",
			zap.String("file", rec.Key), zap.Int("edited_kept_warm", kept), zap.Int("deleted_by_users", gone))
	}
	return len(del), nil
}
