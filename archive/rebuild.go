package archive

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/convoy-im/convoy/cold"
	"github.com/convoy-im/convoy/coord"
)

// RebuildReport is what RebuildCatalog did for one shard.
type RebuildReport struct {
	Shard int
	// Files is how many files the shard's catalog names now; Added are
	// the ones the bucket holds that it did not name before (catalogued,
	// their warm delete due cold.delete_after from now).
	Files int
	Added []string
	// Skipped are objects left out: orphans the job record names (stored
	// by a crashed attempt, never catalogued) and catalog objects whose
	// Parquet object is missing.
	Skipped []string
	// Version is the manifest version written (0: nothing to write).
	Version int
}

// RebuildCatalog makes shard's catalog whole again from the bucket: every
// file under <prefix>/<shard>/ with its catalog object that the current
// catalog does not name (its manifest lost or deleted, the job record
// gone with etcd) is catalogued again, as a file whose warm delete has not
// begun. Its delete step then finds, from the shard database's read
// bounds, which chunks were already deleted and goes on from there; the
// rows it has not dealt with are compared again. Records the catalog
// still holds are kept as they are. It runs as the shard's archiver (the
// election), so no run changes the catalog meanwhile.
//
// A kind without a checkpoint (the job record lost with etcd) gets one
// past the newest day of its files, so no archived day is archived again
// into a second file (a row in two files would be compared twice, and
// taken for deleted the second time); rows of that day not archived stay
// warm.
//
// Two files of one day whose conversations' seq ranges overlap are
// refused (ErrCatalogOverlap), naming both: the orphan of a crashed
// attempt the job record no longer lists; the operator removes it.
// Limit: files deleted by an archiver of the version before keep their
// read bounds in their etcd records; with etcd lost they are gone, and
// such files must not be rebuilt (their rows would be taken for deleted
// by users).
func (a *Archiver) RebuildCatalog(ctx context.Context, shard int) (RebuildReport, error) {
	rep := RebuildReport{Shard: shard}
	r, err := a.campaign(ctx, shard, 5*time.Second)
	if err != nil {
		return rep, err
	}
	defer r.Close()
	job, err := r.Job(ctx)
	if errors.Is(err, coord.ErrJobNotFound) {
		job, err = a.jobs.Create(ctx, coord.Job{ID: jobID(shard), Shard: shard, Step: StepIdle})
	}
	if err != nil {
		return rep, err
	}
	st, err := decodeState(job)
	if err != nil {
		return rep, err
	}
	u := &run{a: a, r: r, job: job, st: st, shard: shard, log: a.log.With(zap.Int("shard", shard)), start: a.cfg.Now()}
	have, err := u.records(ctx)
	if errors.Is(err, cold.ErrNotFound) {
		// The manifest the job points to is gone: start from etcd's.
		u.st.Catalog = ""
		have, err = u.records(ctx)
	}
	if err != nil {
		return rep, err
	}
	named := map[string]bool{}
	for _, rec := range have {
		named[rec.Key] = true
	}
	orphans := map[string]bool{}
	for _, o := range u.st.Orphans {
		orphans[o] = true
	}
	prefix := fmt.Sprintf("%04d/", shard)
	if a.cfg.Prefix != "" {
		prefix = a.cfg.Prefix + "/" + prefix
	}
	objects := map[string]bool{}
	var metas []string
	if err := a.cfg.Store.List(ctx, prefix, func(k string) error {
		objects[k] = true
		if strings.HasSuffix(k, ".json") && !strings.Contains(k, "/catalog/") {
			metas = append(metas, k)
		}
		return nil
	}); err != nil {
		return rep, err
	}
	infos := map[string]cold.FileInfo{}
	var added []Record
	for _, mk := range metas {
		pq := strings.TrimSuffix(mk, ".json") + ".parquet"
		switch {
		case orphans[pq]:
			rep.Skipped = append(rep.Skipped, pq+" (an orphan of a crashed attempt)")
			continue
		case !objects[pq]:
			rep.Skipped = append(rep.Skipped, mk+" (its Parquet object is missing)")
			continue
		}
		m, err := readMeta(ctx, a.cfg.Store, mk)
		if err != nil {
			return rep, err
		}
		if m.Info.Key != pq {
			return rep, fmt.Errorf("archive: catalog object %s describes %s", mk, m.Info.Key)
		}
		infos[pq] = m.Info
		if named[pq] {
			continue
		}
		part, err := partOf(pq)
		if err != nil {
			return rep, err
		}
		added = append(added, Record{Kind: m.Kind, Key: pq, Meta: mk, Shard: shard, Day: m.Info.Day.UTC().Format(dayLayout), Part: part,
			Rows: m.Info.Digest.Rows, Bytes: m.Info.Bytes, SHA256: m.Info.SHA256, CataloguedAt: a.cfg.Now().UTC(),
			State: StateCatalogued, Bounds: BoundsMySQL})
	}
	if err := overlaps(append(slices.Clone(have), added...), infos); err != nil {
		return rep, err
	}
	// A kind with files and no checkpoint lost it with its job record
	// (the archive step saves a file's record and the checkpoint past it
	// together).
	restored := false
	for _, k := range kinds {
		pr := u.progress(k)
		if pr.Through != "" || pr.Day != "" {
			continue
		}
		for _, rec := range append(slices.Clone(have), added...) {
			if rec.Kind == k.name && rec.Day > pr.Through {
				pr.Through, restored = rec.Day, true
			}
		}
	}
	rep.Files = len(have) + len(added)
	for _, rec := range added {
		rep.Added = append(rep.Added, rec.Key)
	}
	switch {
	case len(added) > 0 || u.st.Catalog != st.Catalog:
		u.job.Intent = ""
		if err := u.putRecords(ctx, added); err != nil {
			return rep, err
		}
		rep.Version = u.st.CatalogVersion
	case restored:
		if err := u.save(ctx); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// ErrCatalogOverlap: two files of a shard's day hold the same rows.
var ErrCatalogOverlap = errors.New("archive: two cold files hold the same rows")

// overlaps refuses two history files of one day holding seqs of one
// conversation in common.
func overlaps(recs []Record, infos map[string]cold.FileInfo) error {
	type span struct {
		file   string
		lo, hi uint64
	}
	byDay := map[string]map[uint64][]span{}
	for _, rec := range recs {
		info, ok := infos[rec.Key]
		if rec.Kind != kindHistory || !ok {
			continue
		}
		if byDay[rec.Day] == nil {
			byDay[rec.Day] = map[uint64][]span{}
		}
		for _, c := range info.Convs {
			for _, o := range byDay[rec.Day][c.ConvID] {
				if c.MinSeq <= o.hi && o.lo <= c.MaxSeq {
					return fmt.Errorf("%w: %s and %s both hold seqs of conversation %d; remove the one no longer wanted (an orphan of a crashed attempt) and rebuild again",
						ErrCatalogOverlap, o.file, rec.Key, c.ConvID)
				}
			}
			byDay[rec.Day][c.ConvID] = append(byDay[rec.Day][c.ConvID], span{rec.Key, c.MinSeq, c.MaxSeq})
		}
	}
	return nil
}

// partOf reads the part number of a file's key (.../part-0003.parquet,
// .../inbox-0003.parquet, .../part-0003-1f2e3d4c5b6a.parquet: contentKey).
func partOf(key string) (int, error) {
	fields := strings.Split(strings.TrimSuffix(path.Base(key), ".parquet"), "-")
	if len(fields) < 2 || len(fields) > 3 {
		return 0, fmt.Errorf("archive: %s is not a cold file's name", key)
	}
	n, err := strconv.Atoi(fields[1])
	if err != nil {
		return 0, fmt.Errorf("archive: %s is not a cold file's name", key)
	}
	return n, nil
}
