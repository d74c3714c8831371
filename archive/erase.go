package archive

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/convoy-im/convoy/cold"
	"github.com/convoy-im/convoy/rewrite"
)

// Physical erasure. Rows deleted through Convoy after their warm copy was
// gone are hidden at once (tombstones, and the seq ranges a DELETE of a
// conversation's rows erased: ErasureTable, both written by the engine in
// the deleting statement's transaction), as are the stale copies the
// delete step tombstones (rows edited or deleted before it came to them).
// Their bytes stay in the immutable files until this step rewrites the
// files without them: a deleted message must not outlive its delete in
// storage for longer than cold.erase_after (plus a run, and
// supersededGrace).
//
// Each run takes up to eraseBatch tombstones and erasures older than
// EraseAfter whose files are not yet rewritten (erased_at NULL), and per
// file that holds any of their rows (the read bounds say which):
//
//  1. reads the file back (checked against its SHA-256) and drops what is
//     hidden: a row whose conv_msg row is hidden and that has no visible
//     body goes; a hidden body (msg_content) goes from its row. A row
//     whose conv_msg row is hidden but whose body is not stays whole: the
//     body still exists (MariaDB would keep it), and the row goes when it
//     is deleted too;
//  2. writes the rest as the next part of the file's day (create-if-
//     absent, verified, its catalog object), unless nothing is left;
//  3. records the new file (state deleted) with the intent "erase <old>
//     <new>" in the job record;
//  4. in one transaction on the shard's database moves the read bounds
//     from the old file to the new one (nothing for a conversation with no
//     row left), after checking they still name the old file;
//  5. marks the old record superseded and clears the intent; its object
//     and catalog object are deleted supersededGrace later, then its
//     record.
//
// A crash after 3 is resolved by the next run from the database: the
// bounds name the new file (finish 5) or the old one (the new object and
// its record are removed, and the rewrite is done again). Once every file of a tombstone or
// erasure is rewritten, its erased_at is set; SHOW ARCHIVE shows those
// still pending and the oldest. Files of the former layout (read bounds in
// etcd) are not rewritten: the deletes of rows they hold stay pending.

// DefaultEraseAfter is how long a deleted archived row's bytes may stay
// in its file: deletes are batched so a day's file is rewritten once for
// many of them, not once per delete.
const DefaultEraseAfter = 24 * time.Hour

// supersededGrace is how long a rewritten file's predecessor stays in the
// store: a read that took the read bounds just before the swap fetches it
// within its budget (or a write's timeout), far less than this.
const supersededGrace = 10 * time.Minute

// eraseBatch bounds the tombstones and erasures one run handles.
const eraseBatch = 5000

// hiddenSpan is a tombstone (lo = hi) or an erased seq range of one table
// of a conversation.
type hiddenSpan struct {
	conv   uint64
	tbl    string
	lo, hi uint64
	tomb   bool
}

// fileSpan is one conversation's read bounds in one file.
type fileSpan struct {
	file   string
	lo, hi uint64
}

// eraseDue is the erase step (see above), run after the delete step.
func (u *run) eraseDue(ctx context.Context) error {
	if err := u.dropSuperseded(ctx); err != nil {
		return err
	}
	if err := u.rewriteDue(ctx); err != nil {
		return err
	}
	// SHOW ARCHIVE's figures, as of this run.
	n, oldest, err := u.src.pendingCount()
	if err != nil {
		return err
	}
	if n != u.st.PendingErasures || !oldest.Equal(u.st.OldestErasure) {
		u.st.PendingErasures, u.st.OldestErasure = n, oldest
		return u.save(ctx)
	}
	return nil
}

// rewriteDue rewrites the files of the tombstones and erasures due.
func (u *run) rewriteDue(ctx context.Context) error {
	due, err := u.src.pendingErasures(u.a.cfg.EraseAfter, eraseBatch)
	if err != nil || len(due) == 0 {
		return err
	}
	recs, err := u.records(ctx)
	if err != nil {
		return err
	}
	var convs []uint64
	for _, h := range due {
		convs = append(convs, h.conv)
	}
	spans, err := u.src.fileSpans(convs)
	if err != nil {
		return err
	}
	// Files of the former catalog layout (read bounds in etcd) are not
	// rewritten: what they hold of a conversation (their catalog object)
	// keeps its deletes pending.
	blocked := map[string]bool{}
	wanted := make(map[uint64]bool, len(convs))
	for _, c := range convs {
		wanted[c] = true
	}
	for _, r := range recs {
		if r.Kind != kindHistory || !r.legacy() || !r.readable() {
			continue
		}
		sctx, cancel := u.storeCtx(ctx)
		m, err := readMeta(sctx, u.a.cfg.Store, r.Meta)
		cancel()
		if err != nil {
			return err
		}
		for _, c := range m.Info.Convs {
			if wanted[c.ConvID] {
				spans[c.ConvID] = append(spans[c.ConvID], fileSpan{file: r.Key, lo: c.MinSeq, hi: c.MaxSeq})
				blocked[r.Key] = true
			}
		}
	}
	if len(blocked) > 0 {
		u.log.Warn("cold files of the former catalog layout are not rewritten: deleted archived rows stay pending in them",
			zap.Int("files", len(blocked)))
	}
	need := map[string]bool{}
	for _, h := range due {
		for _, f := range spans[h.conv] {
			if f.hi >= h.lo && f.lo <= h.hi {
				need[f.file] = true
			}
		}
	}
	byKey := map[string]Record{}
	for _, r := range recs {
		byKey[r.Key] = r
	}
	files := make([]string, 0, len(need))
	for f := range need {
		if !blocked[f] {
			files = append(files, f)
		}
	}
	slices.Sort(files)
	for _, f := range files {
		rec, ok := byKey[f]
		if !ok || rec.Kind != kindHistory || rec.State != StateDeleted {
			// Not deleted yet (a rebuilt catalog's file being resumed) or
			// not recorded: the next run.
			blocked[f] = true
			continue
		}
		if err := u.check(ctx); err != nil {
			return err
		}
		if err := u.rewriteFiles(ctx, []Record{rec}); err != nil {
			return err
		}
	}
	done := slices.DeleteFunc(due, func(h hiddenSpan) bool {
		return slices.ContainsFunc(spans[h.conv], func(f fileSpan) bool { return blocked[f.file] && f.hi >= h.lo && f.lo <= h.hi })
	})
	return u.src.markErased(done)
}

// errMixedColumns: files to merge hold rows of other column definitions
// (an ALTER between their days); they are left as they are.
var errMixedColumns = errors.New("archive: the files have different column definitions")

// rewriteFiles is steps 1-5 for olds (one file being erased from, or a
// compaction group: small files of the shard, in day order): their rows,
// merged in key order, less what is hidden, as one new part of the newest
// day. A single file with nothing hidden is left alone.
func (u *run) rewriteFiles(ctx context.Context, olds []Record) error {
	var tables cold.Tables
	var rows []cold.Row
	keys := make([]string, len(olds))
	for i, rec := range olds {
		keys[i] = rec.Key
		sctx, cancel := u.storeCtx(ctx)
		err := cold.ScanFile(sctx, u.a.cfg.Store, cold.FileInfo{Key: rec.Key, SHA256: rec.SHA256}, func(t cold.Tables, r cold.Row) error {
			if i > 0 && len(rows) > 0 && !reflect.DeepEqual(t, tables) {
				return errMixedColumns
			}
			tables = t
			rows = append(rows, r)
			return nil
		})
		cancel()
		if err != nil {
			return fmt.Errorf("archive: read %s back to rewrite it: %w", rec.Key, err)
		}
	}
	slices.SortFunc(rows, func(a, b cold.Row) int { return cmp.Or(cmp.Compare(a.ConvID, b.ConvID), cmp.Compare(a.Seq, b.Seq)) })
	var convs []uint64
	for i, r := range rows {
		if i > 0 && rows[i-1].ConvID == r.ConvID && rows[i-1].Seq == r.Seq {
			return fmt.Errorf("archive: [BUG] conversation %d seq %d is in two of %v", r.ConvID, r.Seq, keys)
		}
		if n := len(convs); n == 0 || convs[n-1] != r.ConvID {
			convs = append(convs, r.ConvID)
		}
	}
	hidden, err := u.src.hiddenOf(convs)
	if err != nil {
		return err
	}
	is := func(r cold.Row, tbl string) bool {
		return slices.ContainsFunc(hidden[r.ConvID], func(h hiddenSpan) bool { return h.tbl == tbl && h.lo <= r.Seq && r.Seq <= h.hi })
	}
	keep := rows[:0:0]
	erased := 0 // rows dropped, and bodies dropped from rows kept
	for _, r := range rows {
		body := r.Content != nil && is(r, "msg_content")
		if body {
			r.Content = nil
		}
		if r.Content == nil && is(r, "conv_msg") {
			erased++
			continue
		}
		if body {
			erased++
		}
		keep = append(keep, r)
	}
	if erased == 0 && len(olds) == 1 {
		return nil // its hidden rows are gone already (a run that crashed after the swap)
	}
	last := olds[len(olds)-1]
	day, err := time.Parse(dayLayout, last.Day)
	if err != nil {
		return fmt.Errorf("archive: record of %s: day %q: %w", last.Key, last.Day, err)
	}
	newKey := "-"
	if len(keep) > 0 {
		next, err := u.storeRewrite(ctx, last, tables, day, keep)
		if err != nil {
			return err
		}
		next.FirstDay = cmp.Or(olds[0].FirstDay, olds[0].Day)
		newKey = next.Key
		u.job.Intent = "rewrite " + newKey + " " + strings.Join(keys, " ")
		err = u.putRecord(ctx, *next)
		if err != nil {
			return err
		}
	} else {
		u.job.Intent = "rewrite - " + strings.Join(keys, " ")
		if err := u.save(ctx); err != nil {
			return err
		}
	}
	if err := u.hook(HookRewritten); err != nil {
		return err
	}
	if err := u.src.swapBounds(keys, strings.TrimPrefix(newKey, "-"), keep); err != nil {
		return err
	}
	u.log.Info("cold files rewritten", zap.Strings("files", keys), zap.String("now", newKey),
		zap.Int("rows_erased", erased), zap.Int("rows_kept", len(keep)))
	u.st.Erased += int64(erased)
	if len(olds) > 1 {
		u.st.Compacted += int64(len(olds))
	}
	return u.supersede(ctx, keys...)
}

// storeRewrite is step 2: rows as the next part of rec's day, stored,
// verified and catalogued in the store; its record (state deleted) is
// returned, not yet written.
func (u *run) storeRewrite(ctx context.Context, rec Record, t cold.Tables, day time.Time, rows []cold.Row) (*Record, error) {
	w, err := cold.NewWriter(t, u.shard, day, cold.WriterOptions{})
	if err != nil {
		return nil, err
	}
	for _, r := range rows {
		if err := w.Add(r); err != nil {
			return nil, err
		}
	}
	data, info, err := w.Finish()
	if err != nil {
		return nil, err
	}
	recs, err := u.records(ctx)
	if err != nil {
		return nil, err
	}
	part := 0
	for _, r := range recs {
		if r.Kind == rec.Kind && r.Day == rec.Day {
			part = max(part, r.Part+1)
		}
	}
	sctx, cancel := u.storeCtx(ctx)
	defer cancel()
	// The part number may be one a dropped file had: the name carries the
	// content's digest so it is never a name a proxy has cached.
	info.Key = contentKey(history.objectKey(u.a.cfg.Prefix, u.shard, info.Day, part), info.SHA256)
	if err := u.a.cfg.Store.PutIfAbsent(sctx, info.Key, data); err != nil {
		return nil, fmt.Errorf("archive: store %s: %w", info.Key, err)
	}
	if err := cold.Verify(sctx, u.a.cfg.Store, info.Key, info); err != nil {
		return nil, err
	}
	mk := metaKey(info.Key)
	if err := u.a.cfg.Store.PutIfAbsent(sctx, mk, encodeMeta(rec.Kind, info)); err != nil {
		return nil, fmt.Errorf("archive: store %s: %w", mk, err)
	}
	now := u.a.cfg.Now().UTC()
	return &Record{Kind: rec.Kind, Key: info.Key, Meta: mk, Shard: u.shard, Day: rec.Day, Part: part,
		Rows: info.Digest.Rows, Bytes: info.Bytes, SHA256: info.SHA256, CataloguedAt: now, State: StateDeleted,
		Chunks: (len(rows) + u.a.cfg.ChunkRows - 1) / u.a.cfg.ChunkRows, Location: u.location(), Bounds: BoundsMySQL, DeletedAt: now}, nil
}

// supersede marks olds' records superseded (their objects leave the
// store supersededGrace later) and clears the intent: a rewrite's step 5,
// and retention's end.
func (u *run) supersede(ctx context.Context, olds ...string) error {
	recs, err := u.records(ctx)
	if err != nil {
		return err
	}
	u.job.Intent = ""
	var changed []Record
	for _, r := range recs {
		if slices.Contains(olds, r.Key) && r.State != StateSuperseded {
			r.State, r.SupersededAt = StateSuperseded, u.a.cfg.Now().UTC()
			changed = append(changed, r)
		}
	}
	if len(changed) == 0 {
		return u.save(ctx)
	}
	return u.putRecords(ctx, changed)
}

// resolveRewrite finishes or undoes a rewrite a crashed run left between
// steps 3 and 5 (the job record's intent "rewrite <new|-> <old>..."), from
// what the shard's database says: the read bounds name the new file, or
// no longer the old ones when nothing was left (finish), or still the old
// ones (undo: the new object and its record are removed, and the rewrite
// is done again). Called before anything else of a run touches the
// intent.
func (u *run) resolveRewrite(ctx context.Context) error {
	rest, ok := strings.CutPrefix(u.job.Intent, "rewrite ")
	if !ok {
		return nil
	}
	fields := strings.Fields(rest)
	if len(fields) < 2 {
		return fmt.Errorf("archive: [BUG] job record intent %q", u.job.Intent)
	}
	newKey, olds := fields[0], fields[1:]
	var swapped bool
	var err error
	if newKey == "-" {
		swapped, err = u.src.namesFile(olds[0])
		swapped = !swapped
	} else {
		swapped, err = u.src.namesFile(newKey)
	}
	if err != nil {
		return err
	}
	if swapped {
		u.log.Info("finishing an interrupted rewrite of cold files", zap.Strings("files", olds), zap.String("now", newKey))
		return u.supersede(ctx, olds...)
	}
	u.log.Info("undoing an interrupted rewrite of cold files: their read bounds never moved", zap.Strings("files", olds), zap.String("new", newKey))
	u.job.Intent = ""
	if newKey == "-" {
		return u.save(ctx)
	}
	// Nothing reads the new file (no read bound names it): it goes now;
	// a redo writes the same bytes again.
	sctx, cancel := u.storeCtx(ctx)
	err = errors.Join(u.a.cfg.Store.Delete(sctx, newKey), u.a.cfg.Store.Delete(sctx, metaKey(newKey)))
	cancel()
	if err != nil {
		return fmt.Errorf("archive: delete %s of an undone rewrite: %w", newKey, err)
	}
	return u.writeRecords(ctx, nil, []string{newKey})
}

// dropSuperseded deletes superseded files supersededGrace after their
// rewrite (object, catalog object, then the record), never one the read
// bounds still name.
func (u *run) dropSuperseded(ctx context.Context) error {
	recs, err := u.records(ctx)
	if err != nil {
		return err
	}
	now := u.a.cfg.Now()
	var drop []string
	for _, r := range recs {
		if r.State != StateSuperseded || now.Sub(r.SupersededAt) < supersededGrace {
			continue
		}
		if named, err := u.src.namesFile(r.Key); err != nil {
			return err
		} else if named {
			u.log.Error("[BUG] a superseded cold file is still named by the read bounds: kept", zap.String("file", r.Key))
			continue
		}
		sctx, cancel := u.storeCtx(ctx)
		err := errors.Join(u.a.cfg.Store.Delete(sctx, r.Key), u.a.cfg.Store.Delete(sctx, r.Meta))
		cancel()
		if err != nil {
			return fmt.Errorf("archive: delete superseded %s: %w", r.Key, err)
		}
		drop = append(drop, r.Key)
	}
	if len(drop) == 0 {
		return nil
	}
	u.log.Info("superseded cold files deleted", zap.Int("files", len(drop)))
	return u.writeRecords(ctx, nil, drop)
}

// shardOfConv is the condition keeping companion-table rows of this
// shard: those tables hold every shard of their database.
func (s *source) shardOfConv() string { return fmt.Sprintf("CRC32(conv_id) %% 1024 = %d", s.shard) }

// pendingErasures returns up to limit tombstones and erasures of the
// shard older than after whose files are not rewritten yet.
func (s *source) pendingErasures(after time.Duration, limit int) ([]hiddenSpan, error) {
	cutoff := fmt.Sprintf("UTC_TIMESTAMP(3) - INTERVAL %d MICROSECOND", after.Microseconds())
	out, err := s.spans(fmt.Sprintf("SELECT conv_id, tbl, min_seq, max_seq, 0 FROM %s WHERE erased_at IS NULL AND requested_at < %s AND %s LIMIT %d",
		s.erasures, cutoff, s.shardOfConv(), limit))
	if err != nil {
		return nil, err
	}
	tombs, err := s.spans(fmt.Sprintf("SELECT conv_id, tbl, seq, seq, 1 FROM %s WHERE erased_at IS NULL AND deleted_at < %s AND %s LIMIT %d",
		s.tombstones, cutoff, s.shardOfConv(), limit))
	return append(out, tombs...), err
}

// pendingCount is how many tombstones and erasures of the shard wait for
// their files' rewrite, and the oldest one's time.
func (s *source) pendingCount() (int64, time.Time, error) {
	_, rows, err := s.query(fmt.Sprintf("SELECT COUNT(*), MIN(t) FROM (SELECT requested_at AS t FROM %s WHERE erased_at IS NULL AND %s UNION ALL SELECT deleted_at FROM %s WHERE erased_at IS NULL AND %s) p",
		s.erasures, s.shardOfConv(), s.tombstones, s.shardOfConv()))
	if err != nil || len(rows) != 1 {
		return 0, time.Time{}, errors.Join(err, errors.New("archive: pending erasures: no answer"))
	}
	n, err := strconv.ParseInt(string(rows[0][0]), 10, 64)
	if err != nil || rows[0][1] == nil {
		return n, time.Time{}, err
	}
	t, err := time.Parse("2006-01-02 15:04:05.000", string(rows[0][1]))
	return n, t, err
}

// hiddenOf returns every tombstone and erasure of convs (pending or not):
// what a rewrite of a file holding their rows leaves out.
func (s *source) hiddenOf(convs []uint64) (map[uint64][]hiddenSpan, error) {
	out := map[uint64][]hiddenSpan{}
	for len(convs) > 0 {
		batch := convs[:min(len(convs), 500)]
		convs = convs[len(batch):]
		in := joinConvs(batch)
		spans, err := s.spans(fmt.Sprintf("SELECT conv_id, tbl, min_seq, max_seq, 0 FROM %s WHERE conv_id IN (%s) UNION ALL SELECT conv_id, tbl, seq, seq, 1 FROM %s WHERE conv_id IN (%s)",
			s.erasures, in, s.tombstones, in))
		if err != nil {
			return nil, err
		}
		for _, h := range spans {
			out[h.conv] = append(out[h.conv], h)
		}
	}
	return out, nil
}

func (s *source) spans(sql string) ([]hiddenSpan, error) {
	_, rows, err := s.query(sql)
	if err != nil {
		return nil, err
	}
	out := make([]hiddenSpan, 0, len(rows))
	for _, v := range rows {
		var h hiddenSpan
		var errs [3]error
		h.conv, errs[0] = strconv.ParseUint(string(v[0]), 10, 64)
		h.lo, errs[1] = strconv.ParseUint(string(v[2]), 10, 64)
		h.hi, errs[2] = strconv.ParseUint(string(v[3]), 10, 64)
		if err := errors.Join(errs[:]...); err != nil {
			return nil, fmt.Errorf("archive: erasure row %q: %w", v, err)
		}
		h.tbl, h.tomb = string(v[1]), string(v[4]) == "1"
		out = append(out, h)
	}
	return out, nil
}

// fileSpans returns the read bounds of convs, per conversation.
func (s *source) fileSpans(convs []uint64) (map[uint64][]fileSpan, error) {
	slices.Sort(convs)
	convs = slices.Compact(convs)
	out := map[uint64][]fileSpan{}
	for len(convs) > 0 {
		batch := convs[:min(len(convs), 500)]
		convs = convs[len(batch):]
		_, rows, err := s.query(fmt.Sprintf("SELECT conv_id, file, min_seq, max_seq FROM %s WHERE conv_id IN (%s)", s.files, joinConvs(batch)))
		if err != nil {
			return nil, err
		}
		for _, v := range rows {
			c, err1 := strconv.ParseUint(string(v[0]), 10, 64)
			lo, err2 := strconv.ParseUint(string(v[2]), 10, 64)
			hi, err3 := strconv.ParseUint(string(v[3]), 10, 64)
			if err := errors.Join(err1, err2, err3); err != nil {
				return nil, fmt.Errorf("archive: %s row %q: %w", s.files, v, err)
			}
			out[c] = append(out[c], fileSpan{file: string(v[1]), lo: lo, hi: hi})
		}
	}
	return out, nil
}

// markErased sets erased_at of the tombstones and erasures done.
func (s *source) markErased(done []hiddenSpan) error {
	for len(done) > 0 {
		batch := done[:min(len(done), 500)]
		done = done[len(batch):]
		var er, tb []string
		for _, h := range batch {
			if h.tomb {
				tb = append(tb, fmt.Sprintf("(%d,%s,%d)", h.conv, rewrite.QuoteString(h.tbl), h.lo))
			} else {
				er = append(er, fmt.Sprintf("(%d,%s,%d,%d)", h.conv, rewrite.QuoteString(h.tbl), h.lo, h.hi))
			}
		}
		if len(er) > 0 {
			if _, err := s.exec(fmt.Sprintf("UPDATE %s SET erased_at = UTC_TIMESTAMP(3) WHERE (conv_id, tbl, min_seq, max_seq) IN (%s)", s.erasures, strings.Join(er, ","))); err != nil {
				return err
			}
		}
		if len(tb) > 0 {
			if _, err := s.exec(fmt.Sprintf("UPDATE %s SET erased_at = UTC_TIMESTAMP(3) WHERE (conv_id, tbl, seq) IN (%s)", s.tombstones, strings.Join(tb, ","))); err != nil {
				return err
			}
		}
	}
	return nil
}

// namesFile reports whether any read bound names file.
func (s *source) namesFile(file string) (bool, error) {
	_, rows, err := s.query("SELECT 1 FROM " + s.files + " WHERE file = " + rewrite.QuoteString(file) + " LIMIT 1")
	return len(rows) > 0, err
}

// errRewritten: another archiver moved the read bounds off the file first.
var errRewritten = errors.New("archive: the cold file's read bounds were moved by another archiver")

// swapBounds is step 4: in one transaction, the read bounds of olds are
// replaced by newKey's (per conversation of rows, the seqs and msg_ids it
// holds; none when newKey is ""), if they still name every one of olds.
func (s *source) swapBounds(olds []string, newKey string, rows []cold.Row) error {
	named, err := s.dropBounds(olds, func() error {
		if newKey == "" {
			return nil
		}
		return s.insertBounds(newKey, rows)
	})
	if err == nil && !named {
		err = errRewritten
	}
	return err
}

// dropBounds deletes the read bounds of files and runs then, in one
// transaction, if bounds name every one of them (named false: some file
// has none, nothing was done).
func (s *source) dropBounds(files []string, then func() error) (named bool, err error) {
	if _, err := s.exec("BEGIN"); err != nil {
		return false, err
	}
	committed := false
	defer func() {
		if !committed {
			_, _ = s.conn.Execute("ROLLBACK")
		}
	}()
	quoted := make([]string, len(files))
	for i, f := range files {
		quoted[i] = rewrite.QuoteString(f)
	}
	in := strings.Join(quoted, ",")
	_, rows, err := s.query("SELECT file FROM " + s.files + " WHERE file IN (" + in + ") FOR UPDATE")
	if err != nil {
		return false, err
	}
	seen := map[string]bool{}
	for _, r := range rows {
		seen[string(r[0])] = true
	}
	if len(seen) != len(files) {
		return false, nil
	}
	if _, err := s.exec("DELETE FROM " + s.files + " WHERE file IN (" + in + ")"); err != nil {
		return false, err
	}
	if err := then(); err != nil {
		return false, err
	}
	if _, err := s.exec("COMMIT"); err != nil {
		return false, err
	}
	committed = true
	return true, nil
}

func joinConvs(convs []uint64) string {
	parts := make([]string, len(convs))
	for i, c := range convs {
		parts[i] = strconv.FormatUint(c, 10)
	}
	return strings.Join(parts, ",")
}

// contentKey is key with the first 12 hex digits of its content's SHA-256
// before ".parquet" (part-0003-1f2e3d4c5b6a.parquet): the name of a file
// whose part number an earlier file of the day may have had (a rewrite, a
// late part after a superseded file was dropped). Readers keep files'
// footers by name, so a name must never stand for two contents.
func contentKey(key, sha string) string {
	return strings.TrimSuffix(key, ".parquet") + "-" + sha[:min(len(sha), 12)] + ".parquet"
}
