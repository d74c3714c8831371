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
	recs, _, err := listRecords(ctx, u.a.cfg.Client, u.a.cfg.Cluster, u.shard)
	if err != nil {
		return err
	}
	now := u.a.cfg.Now()
	for _, rec := range recs {
		switch {
		case rec.State == StateDeleted:
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
// else, in chunks of ChunkRows in the file's key order. Each chunk is one
// transaction on the shard's database:
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
//     by a user) stays deleted; both go to the chunk's skip list, so the
//     file's stale copy is never read;
//  2. write the skip list and the chunk's last key as the file's read
//     bound to etcd (fenced by the election), before anything is deleted:
//     a proxy then knows, for every row missing from MySQL, whether the
//     file may stand in for it;
//  3. delete the equal rows and advance the progress row, commit.
//
// A crash before the commit rolls the chunk back (its locks end with the
// connection) and the chunk is redone, its skip list recomputed; after it,
// the progress row says the chunk is done. The rows are locked from the
// comparison to the delete, so a user's edit either happens before the
// comparison (the row is kept) or waits for the delete (and finds the row
// gone, as it would have after 180 days anyway).
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
	done, err := u.src.chunksDone(rec.Key)
	if err != nil {
		return err
	}
	// A shard moved (by a finished migration) while a delete was under
	// way: the progress row stayed behind on the old server. etcd's Done
	// is then where to resume, and chunk Done may have committed there
	// before the move: its missing rows are taken as deleted by us, not
	// by a user (the other guess would hide archived rows from reads).
	ambiguous := -1
	if rec.Location != "" && rec.Location != u.location() && done == 0 {
		done, ambiguous = rec.Done, rec.Done
	}
	rec.Location = u.location()
	if err := u.src.startProgress(rec.Key, done); err != nil {
		return err
	}
	chunk := u.a.cfg.ChunkRows
	rec.Chunks = (len(rows) + chunk - 1) / chunk
	if rec.Skips == nil {
		rec.Skips = map[int][]skipped{}
	}
	u.job.Step = StepDeleting
	for i := done; i < rec.Chunks; i++ {
		if err := u.check(ctx); err != nil {
			return err
		}
		part := rows[i*chunk : min(len(rows), (i+1)*chunk)]
		if err := u.a.rows.Wait(ctx, len(part)); err != nil {
			return err
		}
		n, err := u.deleteChunk(ctx, &rec, i, part, i == ambiguous)
		if err != nil {
			return err
		}
		u.progress(kindNamed(rec.Kind)).Deleted += int64(n)
		u.a.cfg.Metrics.deleted(kindNamed(rec.Kind), n)
		if err := u.hook(HookDeleted); err != nil {
			return err
		}
	}
	rec.State, rec.Done, rec.Bound, rec.DeletedAt = StateDeleted, rec.Chunks, nil, u.a.cfg.Now().UTC()
	rec.Kept, rec.Gone = 0, 0
	for _, ss := range rec.Skips {
		for _, sk := range ss {
			if sk.Gone {
				rec.Gone++
			} else {
				rec.Kept++
			}
		}
	}
	pr := u.progress(kindNamed(rec.Kind))
	pr.Kept += rec.Kept
	pr.Gone += rec.Gone
	u.job.Intent = ""
	if err := u.save(ctx, rec.put(u.a.cfg.Cluster)); err != nil {
		return err
	}
	// The progress row has served its purpose; a crash before this leaves
	// a row nobody reads again.
	return u.src.forget(rec.Key)
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
	if len(skip) > 0 {
		rec.Skips[i] = skip
	} else {
		delete(rec.Skips, i)
	}
	rec.State, rec.Done, rec.Bound = StateDeleting, i, &keys[len(keys)-1]
	u.job.Intent = fmt.Sprintf("delete chunk %d/%d of %s", i+1, rec.Chunks, rec.Key)
	ops := []clientv3.Op{rec.put(u.a.cfg.Cluster)}
	if k == history {
		ops = append(ops, markShard(u.a.cfg.Cluster, u.shard))
	}
	if err := u.save(ctx, ops...); err != nil {
		return 0, err
	}
	if err := u.hook(HookChunkNoted); err != nil {
		return 0, err
	}
	if err := u.src.deleteChunk(k, del, rec.Key, i+1); err != nil {
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
