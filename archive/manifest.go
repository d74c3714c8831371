package archive

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/convoy-im/convoy/cold"
	"github.com/convoy-im/convoy/coord"
)

// manifest is a shard's file records, as one immutable object in the
// store: <prefix>/<shard>/catalog/<version>.json. Each change of a record
// (a file catalogued, its delete begun or finished) writes the next
// version, create-if-absent, and then moves the shard's pointer to it
// (state.Catalog, in the job record, in the same etcd transaction as the
// checkpoint). So etcd holds one small record per shard however many
// files it has (Iceberg's and Thanos's layout: manifests in the bucket, a
// pointer in the metastore), and the bucket alone describes the archive:
// RebuildCatalog makes a manifest from the files' catalog objects.
//
// Records written by the version before live in etcd (files/<shard>/...):
// they stay there, updated in place, until their files are deleted, and
// the shard's list is both (records).
type manifest struct {
	Shard   int      `json:"shard"`
	Version int      `json:"version"`
	Files   []Record `json:"files"`
}

// manifestKey names version v of shard's manifest.
func manifestKey(prefix string, shard, v int) string {
	k := fmt.Sprintf("%04d/catalog/%08d.json", shard, v)
	if prefix != "" {
		k = prefix + "/" + k
	}
	return k
}

func readManifest(ctx context.Context, store cold.Store, key string) (manifest, error) {
	var m manifest
	size, err := store.Size(ctx, key)
	if err != nil {
		return m, fmt.Errorf("archive: catalog manifest: %w", err)
	}
	b, err := store.ReadRange(ctx, key, 0, size)
	if err != nil {
		return m, fmt.Errorf("archive: catalog manifest: %w", err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("archive: catalog manifest %s: %w", key, err)
	}
	return m, nil
}

// shardRecords returns a shard's file records: those of its manifest (the
// job state's pointer) and those etcd still holds, by day and part.
func shardRecords(ctx context.Context, cli *clientv3.Client, cluster string, store cold.Store, shard int) ([]Record, error) {
	recs, _, err := listRecords(ctx, cli, cluster, shard)
	if err != nil {
		return nil, err
	}
	job, err := coord.NewArchiveJobStore(cli, cluster).Get(ctx, shard)
	if errors.Is(err, coord.ErrJobNotFound) {
		return recs, nil
	}
	if err != nil {
		return nil, err
	}
	st, err := decodeState(job)
	if err != nil || st.Catalog == "" {
		return recs, err
	}
	m, err := readManifest(ctx, store, st.Catalog)
	if err != nil {
		return nil, err
	}
	return sortRecords(append(recs, m.Files...)), nil
}

// sortRecords orders records as etcd lists them: by kind, day and part.
func sortRecords(recs []Record) []Record {
	slices.SortFunc(recs, func(a, b Record) int {
		ka := recordKey("", a.Kind, a.Shard, a.Day, a.Part)
		kb := recordKey("", b.Kind, b.Shard, b.Day, b.Part)
		switch {
		case ka < kb:
			return -1
		case ka > kb:
			return 1
		}
		return 0
	})
	return recs
}

// records is the run's view of the shard's file records (shardRecords),
// read once per run and kept current by putRecord.
func (u *run) records(ctx context.Context) ([]Record, error) {
	if u.files == nil {
		legacy, _, err := listRecords(ctx, u.a.cfg.Client, u.a.cfg.Cluster, u.shard)
		if err != nil {
			return nil, err
		}
		u.inEtcd = map[string]bool{}
		for _, r := range legacy {
			u.inEtcd[r.Key] = true
		}
		u.files = legacy
		if u.st.Catalog != "" {
			sctx, cancel := u.storeCtx(ctx)
			m, err := readManifest(sctx, u.a.cfg.Store, u.st.Catalog)
			cancel()
			if err != nil {
				u.files = nil
				return nil, err
			}
			u.files = append(u.files, m.Files...)
		}
		u.files = sortRecords(u.files)
	}
	return slices.Clone(u.files), nil
}

// putRecord records rec (new, or a change of a file's record) with the
// job record and ops in one etcd transaction (putRecords).
func (u *run) putRecord(ctx context.Context, rec Record, ops ...clientv3.Op) error {
	return u.putRecords(ctx, []Record{rec}, ops...)
}

// putRecords records recs with the job record and ops in one etcd
// transaction, fenced by the election: a record etcd holds is updated
// there; the others go into the next manifest version, which is written
// first (a crash before the etcd transaction leaves a version nothing
// points to, which the next write passes over). The version before the
// previous one is deleted once the pointer has moved (a reader that has
// just read the previous pointer still finds its object).
func (u *run) putRecords(ctx context.Context, recs []Record, ops ...clientv3.Op) error {
	return u.writeRecords(ctx, recs, nil, ops...)
}

// writeRecords is putRecords that also removes the records of the files
// drop names (files of this layout: superseded ones whose objects are
// gone, a rewrite's that never took effect).
func (u *run) writeRecords(ctx context.Context, recs []Record, drop []string, ops ...clientv3.Op) error {
	all, err := u.records(ctx)
	if err != nil {
		return err
	}
	inManifest := len(drop) > 0
	all = slices.DeleteFunc(all, func(r Record) bool { return slices.Contains(drop, r.Key) && !u.inEtcd[r.Key] })
	for _, rec := range recs {
		if i := slices.IndexFunc(all, func(r Record) bool { return r.Key == rec.Key }); i >= 0 {
			all[i] = rec
		} else {
			all = append(all, rec)
		}
		if u.inEtcd[rec.Key] {
			ops = append(ops, rec.put(u.a.cfg.Cluster))
		} else {
			inManifest = true
		}
	}
	all = sortRecords(all)
	if !inManifest {
		if err := u.save(ctx, ops...); err != nil {
			return err
		}
		u.files = all
		return nil
	}
	m := manifest{Shard: u.shard}
	for _, r := range all {
		if !u.inEtcd[r.Key] {
			m.Files = append(m.Files, r)
		}
	}
	prev, prevVersion := u.st.Catalog, u.st.CatalogVersion
	sctx, cancel := u.storeCtx(ctx)
	defer cancel()
	for m.Version = prevVersion + 1; ; m.Version++ {
		b, err := json.Marshal(m)
		if err != nil {
			return fmt.Errorf("[BUG] archive: marshal manifest: %w", err)
		}
		key := manifestKey(u.a.cfg.Prefix, u.shard, m.Version)
		err = u.a.cfg.Store.PutIfAbsent(sctx, key, b)
		if errors.Is(err, cold.ErrConflict) {
			continue // a crashed attempt's version, never pointed to
		}
		if err != nil {
			return fmt.Errorf("archive: store the catalog manifest: %w", err)
		}
		u.st.Catalog, u.st.CatalogVersion = key, m.Version
		break
	}
	if err := u.save(ctx, ops...); err != nil {
		u.st.Catalog, u.st.CatalogVersion = prev, prevVersion
		return err
	}
	u.files = all
	if prevVersion > 1 {
		// Best effort: a version left behind is garbage, never read.
		_ = u.a.cfg.Store.Delete(sctx, manifestKey(u.a.cfg.Prefix, u.shard, prevVersion-1))
	}
	return nil
}
