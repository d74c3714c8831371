package archive

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/convoy-im/convoy/cold"
)

const dayLayout = "20060102"

// dayOf is the UTC day of a DATETIME text ("2025-03-04 10:11:12.345").
func dayOf(at string) (string, bool) {
	if len(at) < 10 {
		return "", false
	}
	t, err := time.Parse("2006-01-02", at[:10])
	if err != nil {
		return "", false
	}
	return t.Format(dayLayout), true
}

func nextDay(day string) string { return addDays(day, 1) }

func prevDay(day string) string { return addDays(day, -1) }

func addDays(day string, n int) string {
	t, _ := time.Parse(dayLayout, day)
	return t.AddDate(0, 0, n).Format(dayLayout)
}

// cutoff is the first day not wholly older than k's age (cold.after,
// cold.inbox_after): days before it are archived.
func (u *run) cutoff(k *kind) string {
	return u.a.cfg.Now().UTC().Add(-k.after(u.a.cfg)).Truncate(24 * time.Hour).Format(dayLayout)
}

// archiveDays archives k's rows of every day before the cutoff, from where
// its checkpoint stands (or the oldest warm row), skipping days a whole
// scan found empty.
func (u *run) archiveDays(ctx context.Context, k *kind) error {
	pr := u.progress(k)
	day := pr.Day
	if day == "" {
		oldest, ok := dayOf(pr.Oldest)
		if !ok {
			return nil // no warm rows
		}
		day = oldest
		if pr.Through != "" && nextDay(pr.Through) > day {
			day = nextDay(pr.Through)
		}
	}
	cut := u.cutoff(k)
	for day < cut {
		next, err := u.archivePass(ctx, k, day, cut)
		if err != nil {
			return err
		}
		// The pass saw no rows of the shard on the days before next (or
		// the cutoff): they count as archived too, so the next run does
		// not scan the table again for empty days (a quiet shard would
		// be scanned every hour).
		upTo := next
		if upTo == "" || upTo > cut {
			upTo = cut
		}
		if d := prevDay(upTo); d > pr.Through {
			pr.Through = d
			if err := u.save(ctx); err != nil {
				return err
			}
		}
		day = upTo
	}
	return nil
}

// dayDone records day as wholly archived.
func (u *run) dayDone(ctx context.Context, k *kind, day string) error {
	pr := u.progress(k)
	pr.Through, pr.Day, pr.Part, pr.After = day, "", 0, nil
	u.job.Step, u.job.Intent = StepIdle, ""
	return u.save(ctx)
}

// archivePass archives k's rows of day and of as many later days before
// cut as one pass over the table's keys can gather: neither table's key
// starts with the day, so a day costs a scan of every key of the shard's
// table, and a shard with years of history behind the warm window (a
// fleet that turns the archiver on) would take a scan per day. The first
// day's rows are written while the scan goes, as they come (in key
// order, the order of its parts and checkpoint); the eligible keys of
// the later days are kept, up to ScanKeys of them (the latest days are
// dropped, whole, to stay under it), and their days written one after
// the other once the scan is over, each with its own checkpoint, so a
// crash resumes like a crash in the first day. It returns the first day
// after those it archived that held rows of the shard as the scan saw
// them ("" none), or nextDay(day) for a resumed day: its scan starts at
// its checkpoint and sees only part of the table, so it gathers nothing
// more and no day is skipped on a partial view.
//
// A later day's keys are those of the scan, fetched again when their day
// is written: a row deleted or moved to another day meanwhile is left
// out (fetch), as in the first day; a row inserted with an old time
// after the scan passed its key is left to a later pass (archiveLate), as
// are the rows of days before the first: a whole pass gathers those that
// have become eligible since their day was archived.
func (u *run) archivePass(ctx context.Context, k *kind, day, cut string) (string, error) {
	pr := u.progress(k)
	if pr.Day != day {
		pr.Day, pr.Part, pr.After = day, 0, nil
	}
	whole := pr.After == nil
	horizon := cut // days in (day, horizon) are gathered
	if !whole {
		horizon = nextDay(day)
	}
	later := map[string][]key{}
	kept := 0
	// late: rows of days already archived that may be archived now (see
	// archiveLate), gathered by a whole pass of history.
	late := map[string][]key{}
	nlate := 0
	next := "" // the first day at or after horizon the scan saw
	seen := func(d string) {
		if next == "" || d < next {
			next = d
		}
	}
	p := &partBuilder{u: u, k: k, day: day}
	after := pr.After
	for {
		if err := u.check(ctx); err != nil {
			return "", err
		}
		if err := u.a.scan.Wait(ctx, u.a.cfg.ScanRows); err != nil {
			return "", err
		}
		batch, err := u.src.scan(k, after, u.a.cfg.ScanRows)
		if err != nil {
			return "", err
		}
		u.a.cfg.Metrics.scanned(k, len(batch))
		var keys []key
		for _, s := range batch {
			d, ok := dayOf(s.at)
			if !ok || !u.src.mine(k, s.key) {
				continue
			}
			if d < day {
				if whole && k == history && nlate < u.a.cfg.ScanKeys {
					if ok, err := u.eligible(k, s); err != nil {
						return "", err
					} else if ok {
						late[d] = append(late[d], s.key)
						nlate++
					}
				}
				continue
			}
			if d >= horizon {
				seen(d)
				continue
			}
			ok, err := u.eligible(k, s)
			if err != nil {
				return "", err
			}
			switch {
			case !ok:
			case d == day:
				keys = append(keys, s.key)
			default:
				later[d] = append(later[d], s.key)
				kept++
				for kept > u.a.cfg.ScanKeys && len(later) > 0 {
					last := slices.Max(slices.Collect(maps.Keys(later)))
					kept -= len(later[last])
					delete(later, last)
					horizon = last
					seen(last)
				}
			}
		}
		for len(keys) > 0 {
			n := min(len(keys), u.a.cfg.ChunkRows)
			if err := p.add(ctx, keys[:n]); err != nil {
				return "", err
			}
			keys = keys[n:]
		}
		if len(batch) < u.a.cfg.ScanRows {
			break
		}
		after = &batch[len(batch)-1].key
	}
	if err := p.flush(ctx); err != nil {
		return "", err
	}
	if err := u.dayDone(ctx, k, day); err != nil {
		return "", err
	}
	if !whole {
		return nextDay(day), nil
	}
	for _, d := range slices.Sorted(maps.Keys(later)) {
		if err := u.archiveGathered(ctx, k, d, later[d]); err != nil {
			return "", err
		}
		delete(later, d)
	}
	if err := u.archiveLate(ctx, k, late); err != nil {
		return "", err
	}
	return next, nil
}

// archiveLate archives history rows of days the checkpoint has passed
// that have become eligible since (late[day], in key order): rows a day's
// archive kept among their conversation's newest KeepNewest, which the
// conversation has outgrown since, and rows written later with an old
// time (an import). Without it such rows would stay warm for good, and a
// small conversation's oldest messages would never leave MySQL.
//
// They go into new parts of their day, numbered after the day's parts in
// the catalog, and then through the delete step like any file. Left out:
// rows a file not yet deleted holds (within its conversation's seq range:
// warm until its delete step reaches them), and rows with a tombstone (a
// file's stale copy of an edited row, kept warm by a delete step: a new
// copy would be hidden by that tombstone once its warm row is deleted).
// No checkpoint is needed: a run that crashed after cataloguing a late
// part finds its rows in a file not yet deleted and leaves them out.
func (u *run) archiveLate(ctx context.Context, k *kind, late map[string][]key) error {
	if len(late) == 0 {
		return nil
	}
	recs, err := u.records(ctx)
	if err != nil {
		return err
	}
	pending := map[uint64][][2]uint64{} // conversation -> seq ranges of files not yet deleted
	nextPart := map[string]int{}
	for _, r := range recs {
		if r.Kind != k.name {
			continue
		}
		nextPart[r.Day] = max(nextPart[r.Day], r.Part+1)
		if r.State == StateDeleted || r.State == StateSuperseded {
			continue
		}
		sctx, cancel := u.storeCtx(ctx)
		m, err := readMeta(sctx, u.a.cfg.Store, r.Meta)
		cancel()
		if err != nil {
			return err
		}
		for _, c := range m.Info.Convs {
			pending[c.ConvID] = append(pending[c.ConvID], [2]uint64{c.MinSeq, c.MaxSeq})
		}
	}
	for _, d := range slices.Sorted(maps.Keys(late)) {
		keys := slices.DeleteFunc(late[d], func(k key) bool {
			return slices.ContainsFunc(pending[k.Conv], func(r [2]uint64) bool { return k.Seq >= r[0] && k.Seq <= r[1] })
		})
		if keys, err = u.src.untombstoned(keys, u.a.cfg.ChunkRows); err != nil {
			return err
		}
		if len(keys) == 0 {
			continue
		}
		p := &partBuilder{u: u, k: k, day: d, ck: &progress{Day: d, Part: nextPart[d]}}
		if err := p.addGathered(ctx, keys); err != nil {
			return err
		}
	}
	return nil
}

// archiveGathered writes a later day of a pass from the keys its scan
// gathered (in key order), then records the day archived.
func (u *run) archiveGathered(ctx context.Context, k *kind, day string, keys []key) error {
	pr := u.progress(k)
	pr.Day, pr.Part, pr.After = day, 0, nil
	p := &partBuilder{u: u, k: k, day: day}
	if err := p.addGathered(ctx, keys); err != nil {
		return err
	}
	return u.dayDone(ctx, k, day)
}

// addGathered adds keys a scan gathered (in key order) and stores the
// last part.
func (p *partBuilder) addGathered(ctx context.Context, keys []key) error {
	u := p.u
	for len(keys) > 0 {
		// As often as the scan looks: every ScanRows keys.
		if err := u.check(ctx); err != nil {
			return err
		}
		batch := keys[:min(len(keys), u.a.cfg.ScanRows)]
		keys = keys[len(batch):]
		for len(batch) > 0 {
			n := min(len(batch), u.a.cfg.ChunkRows)
			if err := p.add(ctx, batch[:n]); err != nil {
				return err
			}
			batch = batch[n:]
		}
	}
	return p.flush(ctx)
}

// eligible reports whether a row of the day may be archived: a history
// row outside its conversation's newest (outsideNewest), an inbox row that
// its member has read (seq <= last_read_seq: unread ones stay).
func (u *run) eligible(k *kind, s scanned) (bool, error) {
	if k == inbox {
		return s.read, nil
	}
	return u.outsideNewest(s.key)
}

// outsideNewest reports whether k may be archived: not among its
// conversation's KeepNewest newest rows (always, with KeepNewest < 0), and
// not seq 0. A row the day's
// scan skips for it stays warm for good: the checkpoint moves past its day.
func (u *run) outsideNewest(k key) (bool, error) {
	if k.Seq == 0 {
		// Convoy allocates seqs from 1; a row a client stored with seq 0
		// stays warm, so the engine may take seq 1 as the lowest an
		// archived row can have (proxy/engine/cold.go, window).
		return false, nil
	}
	n := u.a.cfg.KeepNewest
	if n < 0 {
		return true, nil
	}
	floor, ok := u.floors[k.Conv]
	if !ok {
		var err error
		if floor, err = u.src.floor(k.Conv, n); err != nil {
			return false, err
		}
		if u.floors == nil {
			u.floors = map[uint64]uint64{}
		}
		u.floors[k.Conv] = floor
	}
	return floor > 0 && k.Seq < floor, nil
}

// partBuilder accumulates one day's rows of a kind into parts of PartRows.
type partBuilder struct {
	u   *run
	k   *kind
	day string
	// ck numbers the parts and records the last key of each: the kind's
	// checkpoint (nil), or a late part's own (archiveLate).
	ck     *progress
	w      *cold.Writer
	tables cold.Tables
	last   key
	n      int
}

// add fetches keys' rows (those still of this day and shard) and adds
// them, cutting a part whenever it is full.
func (p *partBuilder) add(ctx context.Context, keys []key) error {
	u := p.u
	if err := u.a.rows.Wait(ctx, len(keys)); err != nil {
		return err
	}
	t, rows, err := u.src.fetch(p.k, keys, false)
	if err != nil {
		return err
	}
	cols := t.Msg
	if p.k == inbox {
		cols = t.Inbox
	}
	for _, r := range rows {
		at := r.Msg[columnIndex(cols, p.k.dayColumn)]
		if d, ok := dayOf(string(at)); !ok || d != p.day || !u.src.mine(p.k, keyOf(r)) {
			continue // changed since the scan
		}
		if p.w != nil && !reflect.DeepEqual(t, p.tables) {
			// An ALTER between two fetches: a file holds one set of
			// column definitions.
			if err := p.flush(ctx); err != nil {
				return err
			}
		}
		if p.w == nil {
			day, _ := time.Parse(dayLayout, p.day)
			if p.w, err = cold.NewWriter(t, u.shard, day, cold.WriterOptions{}); err != nil {
				return err
			}
			p.tables = t
		}
		if err := p.w.Add(r); err != nil {
			return err
		}
		p.last, p.n = keyOf(r), p.n+1
		if p.n >= u.a.cfg.PartRows {
			if err := p.flush(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

// flush stores the part being built: write (create-if-absent), verify
// from storage, write its catalog object, then record the file and the
// checkpoint in one etcd transaction. A crash before that transaction
// redoes the part from the previous checkpoint: the same rows give the
// same bytes and every write finds its object already there.
func (p *partBuilder) flush(ctx context.Context) error {
	if p.w == nil {
		return nil
	}
	u := p.u
	pr := u.progress(p.k)
	ck := pr
	if p.ck != nil {
		ck = p.ck
	}
	data, info, err := p.w.Finish()
	p.w = nil
	if err != nil {
		return err
	}
	for {
		info.Key = p.k.objectKey(u.a.cfg.Prefix, u.shard, info.Day, ck.Part)
		if p.ck != nil {
			// A late part's number may be one a dropped file had.
			info.Key = contentKey(info.Key, info.SHA256)
		}
		u.job.Step, u.job.Intent = StepArchiving, "write "+info.Key
		if err := u.save(ctx); err != nil {
			return err
		}
		sctx, cancel := u.storeCtx(ctx)
		err := u.a.cfg.Store.PutIfAbsent(sctx, info.Key, data)
		cancel()
		if !errors.Is(err, cold.ErrConflict) {
			if err != nil {
				return fmt.Errorf("archive: store %s: %w", info.Key, err)
			}
			break
		}
		// A crashed attempt stored other rows under this part (they
		// changed since): leave that object, never catalogued, and take
		// the next part number.
		u.st.Orphans = append(u.st.Orphans, info.Key)
		ck.Part++
		u.log.Warn("archive part taken by an uncatalogued earlier attempt; writing the next part number")
	}
	if err := u.hook(HookWritten); err != nil {
		return err
	}
	sctx, cancel := u.storeCtx(ctx)
	defer cancel()
	if err := cold.Verify(sctx, u.a.cfg.Store, info.Key, info); err != nil {
		return err
	}
	if err := u.hook(HookVerified); err != nil {
		return err
	}
	mk := metaKey(info.Key)
	if err := u.a.cfg.Store.PutIfAbsent(sctx, mk, encodeMeta(p.k.name, info)); err != nil {
		return fmt.Errorf("archive: store %s: %w", mk, err)
	}
	rec := Record{Kind: p.k.name, Key: info.Key, Meta: mk, Shard: u.shard, Day: p.day, Part: ck.Part,
		Rows: info.Digest.Rows, Bytes: info.Bytes, SHA256: info.SHA256, CataloguedAt: u.a.cfg.Now().UTC(), State: StateCatalogued}
	ck.Part++
	last := p.last // p.last moves on with the next part's rows
	ck.After = &last
	pr.Files++
	pr.Bytes += info.Bytes
	pr.Rows += info.Digest.Rows
	u.job.Intent = ""
	var ops []clientv3.Op
	if p.k == history {
		// (Inbox rows are not read back: a shard with inbox files alone
		// has nothing for a history read to check.)
		ops = append(ops, markShard(u.a.cfg.Cluster, u.shard))
	}
	if err := u.putRecord(ctx, rec, ops...); err != nil {
		return err
	}
	u.rows += info.Digest.Rows
	u.a.cfg.Metrics.archived(p.k, info.Digest.Rows, info.Bytes)
	p.n = 0
	return u.hook(HookCatalogued)
}
