package archive

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
)

// objectSweepEvery is how often a shard's objects are swept.
const objectSweepEvery = 24 * time.Hour

// orphanAfter is how long a file no catalog and no read bound names is
// kept before the sweep deletes it (Iceberg's remove_orphan_files waits
// three days too): time for `convoy archive rebuild` after a lost
// catalog.
const orphanAfter = 72 * time.Hour

// sweep removes from the store what the shard's catalog will never read:
// the objects crashed attempts stored that the job record lists as
// orphans (a part whose rows changed before it was catalogued, and its
// catalog object; never one the read bounds name), and catalog manifest versions older than the one
// before the current (a crashed write's, or one putRecords could not
// delete). A file the catalog does not name is counted (SHOW ARCHIVE's
// unnamed_files) and logged: a catalog lost with etcd leaves such files,
// and `convoy archive rebuild` names them again. It is deleted once it has
// been seen unnamed for orphanAfter, unless the shard database's read
// bounds name it (reads use it: never deleted). At most once a day
// per shard, at the end of a run.
func (u *run) sweep(ctx context.Context) error {
	now := u.a.cfg.Now()
	if now.Sub(u.st.SweptAt) < objectSweepEvery {
		return nil
	}
	recs, err := u.records(ctx)
	if err != nil {
		return err
	}
	named := map[string]bool{u.st.Catalog: true}
	for _, r := range recs {
		named[r.Key], named[r.Meta] = true, true
	}
	orphan := map[string]bool{}
	for _, o := range u.st.Orphans {
		orphan[o], orphan[metaKey(o)] = true, true
	}
	prefix := fmt.Sprintf("%04d/", u.shard)
	if u.a.cfg.Prefix != "" {
		prefix = u.a.cfg.Prefix + "/" + prefix
	}
	var drop, stray []string
	sctx, cancel := u.storeCtx(ctx)
	defer cancel()
	err = u.a.cfg.Store.List(sctx, prefix, func(k string) error {
		switch {
		case named[k]:
		case strings.HasPrefix(k, prefix+"catalog/"):
			v, err := strconv.Atoi(strings.TrimSuffix(path.Base(k), ".json"))
			if err == nil && v < u.st.CatalogVersion-1 {
				drop = append(drop, k)
			}
		case orphan[k] && strings.HasSuffix(k, ".json"):
			// (with its Parquet object, below)
		case orphan[k]:
			stray = append(stray, k) // checked against the read bounds below
		case strings.HasSuffix(k, ".parquet"):
			stray = append(stray, k)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("archive: sweep: %w", err)
	}
	// Files the catalog does not name: kept while the read bounds name
	// them (reads use them; `convoy archive rebuild` names them again) or
	// they were first seen less than orphanAfter ago; else deleted with
	// their catalog objects.
	seen := map[string]time.Time{}
	unnamed := 0
	for _, k := range stray {
		inBounds, err := u.src.namesFile(k)
		if err != nil {
			return err
		}
		first, ok := u.st.UnnamedSince[k]
		if !ok {
			first = now
		}
		switch {
		case inBounds:
			unnamed++
		case orphan[k]:
			drop = append(drop, k, metaKey(k)) // a crashed attempt's, nothing reads it
		case now.Sub(first) >= orphanAfter:
			drop = append(drop, k, metaKey(k))
		default:
			seen[k] = first
			unnamed++
		}
	}
	u.st.UnnamedSince = seen
	for _, k := range drop {
		if err := u.a.cfg.Store.Delete(sctx, k); err != nil {
			return fmt.Errorf("archive: sweep: %w", err)
		}
	}
	u.st.Orphans = slices.DeleteFunc(u.st.Orphans, func(o string) bool { return slices.Contains(drop, o) })
	if unnamed > 0 {
		u.log.Warn("cold files the shard's catalog does not name: kept; convoy archive rebuild names them again",
			zap.Int("files", unnamed), zap.String("prefix", prefix))
	}
	if len(drop) > 0 {
		u.log.Info("swept objects the catalog never reads", zap.Int("objects", len(drop)))
	}
	u.st.SweptAt, u.st.Unnamed = now, unnamed
	return u.save(ctx)
}
