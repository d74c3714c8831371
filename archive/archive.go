package archive

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

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

func nextDay(day string) string {
	t, _ := time.Parse(dayLayout, day)
	return t.AddDate(0, 0, 1).Format(dayLayout)
}

// cutoff is the first day not wholly older than After: days before it are
// archived.
func (u *run) cutoff() string {
	return u.a.cfg.Now().UTC().Add(-u.a.cfg.After).Truncate(24 * time.Hour).Format(dayLayout)
}

// archiveDays archives every day before the cutoff, from where the
// checkpoint stands (or the oldest warm row), skipping days a whole scan
// found empty.
func (u *run) archiveDays(ctx context.Context) error {
	day := u.st.Day
	if day == "" {
		oldest, ok := dayOf(u.st.Oldest)
		if !ok {
			return nil // no warm rows
		}
		day = oldest
		if u.st.Through != "" && nextDay(u.st.Through) > day {
			day = nextDay(u.st.Through)
		}
	}
	cut := u.cutoff()
	for day < cut {
		next, err := u.archiveDay(ctx, day)
		if err != nil {
			return err
		}
		u.st.Through, u.st.Day, u.st.Part, u.st.After = day, "", 0, nil
		u.job.Step, u.job.Intent = StepIdle, ""
		if err := u.save(ctx); err != nil {
			return err
		}
		if next == "" {
			return nil
		}
		day = max(nextDay(day), next)
	}
	return nil
}

// archiveDay writes the shard's rows of day into parts, from the
// checkpoint on. It returns the next day holding rows of the shard as the
// scan saw them ("" none), or nextDay(day) when the scan did not cover the
// whole table (a resumed day), so no day is skipped on a partial view.
func (u *run) archiveDay(ctx context.Context, day string) (string, error) {
	if u.st.Day != day {
		u.st.Day, u.st.Part, u.st.After = day, 0, nil
	}
	whole := u.st.After == nil
	next := ""
	p := &partBuilder{u: u, day: day}
	after := u.st.After
	for {
		if err := u.check(ctx); err != nil {
			return "", err
		}
		if err := u.a.scan.Wait(ctx, u.a.cfg.ScanRows); err != nil {
			return "", err
		}
		batch, err := u.src.scan(after, u.a.cfg.ScanRows)
		if err != nil {
			return "", err
		}
		var keys []key
		for _, s := range batch {
			d, ok := dayOf(s.at)
			if !ok || !u.src.mine(s.Conv) {
				continue
			}
			switch {
			case d == day:
				old, err := u.outsideNewest(s.key)
				if err != nil {
					return "", err
				}
				if old {
					keys = append(keys, s.key)
				}
			case d > day && (next == "" || d < next):
				next = d
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
	if !whole {
		return nextDay(day), nil
	}
	return next, nil
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

// partBuilder accumulates one day's rows into parts of PartRows.
type partBuilder struct {
	u      *run
	day    string
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
	t, rows, err := u.src.fetch(keys, false)
	if err != nil {
		return err
	}
	for _, r := range rows {
		at := r.Msg[columnIndex(t.Msg, "created_at")]
		if d, ok := dayOf(string(at)); !ok || d != p.day || !u.src.mine(r.ConvID) {
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
	data, info, err := p.w.Finish()
	p.w = nil
	if err != nil {
		return err
	}
	for {
		info.Key = cold.ObjectKey(u.a.cfg.Prefix, u.shard, info.Day, u.st.Part)
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
		u.st.Part++
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
	if err := u.a.cfg.Store.PutIfAbsent(sctx, mk, encodeMeta(kindHistory, info)); err != nil {
		return fmt.Errorf("archive: store %s: %w", mk, err)
	}
	rec := Record{Kind: kindHistory, Key: info.Key, Meta: mk, Shard: u.shard, Day: p.day, Part: u.st.Part,
		Rows: info.Digest.Rows, Bytes: info.Bytes, SHA256: info.SHA256, CataloguedAt: u.a.cfg.Now().UTC(), State: StateCatalogued}
	u.st.Part++
	last := p.last // p.last moves on with the next part's rows
	u.st.After = &last
	u.st.Files++
	u.st.Bytes += info.Bytes
	u.st.Rows += info.Digest.Rows
	u.job.Intent = ""
	if err := u.save(ctx, rec.put(u.a.cfg.Cluster), markShard(u.a.cfg.Cluster, u.shard)); err != nil {
		return err
	}
	u.rows += info.Digest.Rows
	u.a.cfg.Metrics.archived(info.Digest.Rows, info.Bytes)
	p.n = 0
	return u.hook(HookCatalogued)
}
