package archive

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/convoy-im/convoy/cold"
	"github.com/convoy-im/convoy/router"
)

// Catalog is the persistent catalog as a proxy reads it (cold.Catalog):
// which readable files hold conversation c, with their seq ranges, the
// rows to skip, and the read bound of a file whose warm rows are being
// deleted.
//
// Loading is lazy, per shard: nothing at start; a shard's first lookup
// reads its file records from etcd (one range read) and the catalog
// objects of its readable files from the store (in parallel, each object
// once per process: they never change), then answers from memory. One
// watch on the records of all shards marks a loaded shard stale when one
// of its records changes (a new readable file, a delete chunk), and the
// next lookup reloads its records. The trade-off: a proxy start reads
// nothing however many files exist, and a shard nobody reads costs
// nothing; the first cold read of a shard pays one object read per
// archived part of that shard (a year of daily parts: about 365 small
// reads, 16 at a time), and memory grows with the conversation ranges of
// the shards read. A per-shard directory (one object mapping conversation
// to files, merged as days are added) would bound that first read; it is
// not built.
type Catalog struct {
	cli     *clientv3.Client
	cluster string
	store   cold.Store

	mu      sync.Mutex
	shards  map[int]*shardCatalog
	objects map[string]*cold.FileInfo // catalog objects read, by key
	stale   map[int]bool
}

type shardCatalog struct {
	convs map[uint64][]cold.FileRange
}

var _ cold.Catalog = (*Catalog)(nil)

// NewCatalog returns a catalog reading cluster's records and store's
// catalog objects. Watch keeps it current.
func NewCatalog(cli *clientv3.Client, cluster string, store cold.Store) *Catalog {
	return &Catalog{cli: cli, cluster: cluster, store: store, shards: map[int]*shardCatalog{},
		objects: map[string]*cold.FileInfo{}, stale: map[int]bool{}}
}

// Watch follows the file records until ctx ends, marking loaded shards
// stale on every change; after a broken watch every loaded shard is
// dropped (reloaded on its next lookup) and the watch starts again.
func (c *Catalog) Watch(ctx context.Context) {
	for ctx.Err() == nil {
		wch := c.cli.Watch(clientv3.WithRequireLeader(ctx), FilesPrefix(c.cluster), clientv3.WithPrefix())
		for resp := range wch {
			if resp.Err() != nil {
				break
			}
			c.mu.Lock()
			for _, ev := range resp.Events {
				var sh int
				if _, err := fmt.Sscanf(string(ev.Kv.Key[len(FilesPrefix(c.cluster)):]), "%04d/", &sh); err == nil {
					c.stale[sh] = true
				}
			}
			c.mu.Unlock()
		}
		c.mu.Lock()
		c.shards = map[int]*shardCatalog{}
		c.mu.Unlock()
	}
}

// Files implements cold.Catalog.
func (c *Catalog) Files(ctx context.Context, conv uint64) ([]cold.FileRange, error) {
	sh := int(router.ShardOf(conv))
	c.mu.Lock()
	s, ok := c.shards[sh]
	if ok && !c.stale[sh] {
		out := slices.Clone(s.convs[conv])
		c.mu.Unlock()
		return out, nil
	}
	delete(c.stale, sh)
	c.mu.Unlock()
	s, err := c.load(ctx, sh)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.shards[sh] = s
	c.mu.Unlock()
	return slices.Clone(s.convs[conv]), nil
}

// load builds a shard's lookup table from its readable files.
func (c *Catalog) load(ctx context.Context, shard int) (*shardCatalog, error) {
	recs, _, err := listRecords(ctx, c.cli, c.cluster, shard)
	if err != nil {
		return nil, err
	}
	recs = slices.DeleteFunc(recs, func(r Record) bool { return !r.readable() || r.Kind != kindHistory })
	infos := make([]*cold.FileInfo, len(recs))
	errs := make([]error, len(recs))
	sem := make(chan struct{}, 16) // object reads in flight
	var wg sync.WaitGroup
	for i, r := range recs {
		c.mu.Lock()
		infos[i] = c.objects[r.Meta]
		c.mu.Unlock()
		if infos[i] != nil {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			m, err := readMeta(ctx, c.store, r.Meta)
			if err == nil && m.Info.Key != r.Key {
				err = fmt.Errorf("archive: catalog object %s describes %s, not %s", r.Meta, m.Info.Key, r.Key)
			}
			if err != nil {
				errs[i] = err
				return
			}
			infos[i] = &m.Info
			c.mu.Lock()
			c.objects[r.Meta] = &m.Info
			c.mu.Unlock()
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	s := &shardCatalog{convs: map[uint64][]cold.FileRange{}}
	for i, r := range recs {
		skip := map[uint64][]uint64{}
		for _, k := range r.skippedKeys() {
			skip[k.Conv] = append(skip[k.Conv], k.Seq)
		}
		for _, cr := range infos[i].Convs {
			fr := cold.FileRange{Key: r.Key, MinSeq: cr.MinSeq, MaxSeq: cr.MaxSeq, Skip: skip[cr.ConvID]}
			if b := r.Bound; r.State == StateDeleting && b != nil {
				// Rows after the bound are still in MySQL, which alone
				// answers for them.
				if cr.ConvID > b.Conv || cr.ConvID == b.Conv && cr.MinSeq > b.Seq {
					continue
				}
				if cr.ConvID == b.Conv {
					fr.MaxSeq = min(fr.MaxSeq, b.Seq)
				}
			}
			s.convs[cr.ConvID] = append(s.convs[cr.ConvID], fr)
		}
	}
	for conv, list := range s.convs {
		slices.SortFunc(list, func(a, b cold.FileRange) int {
			return cmp.Or(cmp.Compare(a.MinSeq, b.MinSeq), cmp.Compare(a.Key, b.Key))
		})
		s.convs[conv] = list
	}
	return s, nil
}
