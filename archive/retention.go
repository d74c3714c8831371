package archive

import (
	"context"
	"fmt"
	"strings"

	"go.uber.org/zap"

	"github.com/convoy-im/convoy/cold"
)

// Retention (cold.retention): a cold file whose day is older than
// Retention is deleted, and its rows with it, as if their users had
// deleted them: in one transaction on the shard's database its read
// bounds go and its rows are recorded as erased (per conversation one
// erased range of both tables when no other file of the conversation
// reaches into the file's seqs, else a tombstone per row), already
// marked erased_at, so cold reads, lookups by msg_id and the search index
// (which follows those rows) forget them at once; then the file is marked
// superseded and leaves the store with the rewritten files' predecessors
// (dropSuperseded). Inbox files, which nothing reads back, are marked
// superseded directly. Files whose warm rows are not deleted yet, and
// files of the former layout, wait.

// expireDue is the retention step, run before the erase step.
func (u *run) expireDue(ctx context.Context) error {
	if u.a.cfg.Retention <= 0 {
		return nil
	}
	cutoff := u.a.cfg.Now().UTC().Add(-u.a.cfg.Retention).Format(dayLayout)
	recs, err := u.records(ctx)
	if err != nil {
		return err
	}
	for _, rec := range recs {
		if rec.Day >= cutoff || rec.State != StateDeleted || rec.legacy() {
			continue
		}
		if err := u.check(ctx); err != nil {
			return err
		}
		if rec.Kind == kindHistory {
			if err := u.expireFile(ctx, rec); err != nil {
				return err
			}
		}
		u.log.Info("cold file past its retention deleted", zap.String("file", rec.Key), zap.String("day", rec.Day))
		u.st.Expired += rec.Rows
		if err := u.supersede(ctx, rec.Key); err != nil {
			return err
		}
	}
	return nil
}

// expireFile erases rec's rows and removes its read bounds (see above).
func (u *run) expireFile(ctx context.Context, rec Record) error {
	seqs := map[uint64][][2]uint64{} // conv -> (seq, msg_id) of its rows in the file
	var convs []uint64
	sctx, cancel := u.storeCtx(ctx)
	err := cold.ScanFile(sctx, u.a.cfg.Store, cold.FileInfo{Key: rec.Key, SHA256: rec.SHA256}, func(_ cold.Tables, r cold.Row) error {
		if seqs[r.ConvID] == nil {
			convs = append(convs, r.ConvID)
		}
		seqs[r.ConvID] = append(seqs[r.ConvID], [2]uint64{r.Seq, r.MsgID})
		return nil
	})
	cancel()
	if err != nil {
		return fmt.Errorf("archive: read %s back to expire it: %w", rec.Key, err)
	}
	spans, err := u.src.fileSpans(convs)
	if err != nil {
		return err
	}
	var erase, tomb []string
	for _, c := range convs {
		rows := seqs[c]
		lo, hi := rows[0][0], rows[len(rows)-1][0]
		shared := false
		for _, f := range spans[c] {
			if f.file != rec.Key && f.hi >= lo && f.lo <= hi {
				shared = true
			}
		}
		for _, tbl := range []string{"conv_msg", "msg_content"} {
			if !shared {
				erase = append(erase, fmt.Sprintf("(%d,'%s',%d,%d,UTC_TIMESTAMP(3),UTC_TIMESTAMP(3))", c, tbl, lo, hi))
				continue
			}
			for _, r := range rows {
				tomb = append(tomb, fmt.Sprintf("(%d,'%s',%d,%d,UTC_TIMESTAMP(3),UTC_TIMESTAMP(3))", c, tbl, r[0], r[1]))
			}
		}
	}
	return u.src.expireBounds(rec.Key, erase, tomb)
}

// expireBounds removes file's read bounds and records the erased ranges
// and tombstones (value tuples) in one transaction, if the bounds still
// name the file (else an earlier attempt did).
func (s *source) expireBounds(file string, erase, tomb []string) error {
	_, err := s.dropBounds([]string{file}, func() error {
		for _, w := range []struct {
			into string
			rows []string
		}{
			{s.erasures + " (conv_id, tbl, min_seq, max_seq, requested_at, erased_at)", erase},
			{s.tombstones + " (conv_id, tbl, seq, msg_id, deleted_at, erased_at)", tomb},
		} {
			for rows := w.rows; len(rows) > 0; {
				n := min(len(rows), 500)
				if _, err := s.exec("INSERT IGNORE INTO " + w.into + " VALUES " + strings.Join(rows[:n], ",")); err != nil {
					return err
				}
				rows = rows[n:]
			}
		}
		return nil
	})
	return err
}
