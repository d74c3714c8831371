package archive

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/convoy-im/convoy/cold"
	"github.com/convoy-im/convoy/coord"
	"github.com/convoy-im/convoy/router"
)

// Catalog is what a proxy reads of the catalog in etcd: which shards have
// archived history (Archived, from the shards' marker keys), and the files
// whose read bounds etcd still holds (records of the former layout, see
// Record.legacy): their seq ranges, the rows to skip and the read bound,
// as a cold.Catalog. A file of the current layout is found through the
// shard database's read bounds (FilesTable), which the engine reads beside
// MySQL's rows and passes with each cold read; this catalog answers
// nothing for it.
//
// Loading is lazy, per shard: nothing at start; a shard's first lookup
// reads its file records from etcd (one range read) and the catalog
// objects of its former-layout readable files from the store (in
// parallel, each object once per process: they never change), then
// answers from memory. One watch on the records of all shards notes the
// revision of every change of a shard's records, and the next lookup of
// the shard reloads them: one load per shard at a time, which every
// reader needing it waits for, so no reader takes an older table for a
// current one (it would miss the rows a delete chunk just moved from MySQL
// to a file, and return a short page as complete).
//
// Archived answers "may shard s have archived rows" from memory (one
// atomic load): the engine asks it before anything else, so shards never
// archived cost nothing. Fresh makes a shard's loaded records current
// with etcd (one linearizable read) before a cold read: the watch may lag
// a delete that the read just saw in MySQL (an archiver of the former
// layout, during a rolling upgrade, still writes its bounds there).
type Catalog struct {
	cli     *clientv3.Client
	cluster string
	store   cold.Store

	mu      sync.Mutex
	shards  map[int]*shardCatalog
	objects map[string]*cold.FileInfo // catalog objects read, by key
	// need is, per shard, the etcd revision its loaded records must have
	// reached: the newest change the watch or Fresh saw. A lookup whose
	// shard is older waits for a load that reaches it.
	need map[int]int64
	// loading is the one load in flight per shard: every lookup that
	// needs the shard waits for it (and then for another one if it read
	// too early), so no reader answers from an older table while a newer
	// one is being built, and no older load replaces a newer one.
	loading map[int]chan struct{}
	// epoch counts broken watches: a load that began before one may have
	// read records whose later changes the broken watch missed, so it is
	// not kept.
	epoch uint64

	// marked: the shard's cold/ key exists; markersOK: marked is current
	// (listed, and the watch since then unbroken). Until then every shard
	// counts as archived.
	marked    [router.NumShards]atomic.Bool
	markersOK atomic.Bool
}

type shardCatalog struct {
	convs map[uint64][]cold.FileRange
	rev   int64 // the etcd revision the records were read at
}

var _ cold.Catalog = (*Catalog)(nil)

// NewCatalog returns a catalog reading cluster's records and store's
// catalog objects. Watch keeps it current.
func NewCatalog(cli *clientv3.Client, cluster string, store cold.Store) *Catalog {
	return &Catalog{cli: cli, cluster: cluster, store: store, shards: map[int]*shardCatalog{},
		objects: map[string]*cold.FileInfo{}, need: map[int]int64{}, loading: map[int]chan struct{}{}}
}

// Watch lists the shards with archived files, then follows them and the
// file records until ctx ends, raising a shard's needed revision on every
// change of its records; after a broken watch every shard counts as
// archived and every loaded shard is dropped (reloaded on its next lookup)
// until the list and the watch are made again.
func (c *Catalog) Watch(ctx context.Context) {
	files, marks := FilesPrefix(c.cluster), coldPrefix(c.cluster)
	for ctx.Err() == nil {
		resp, err := c.cli.Get(ctx, marks, clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		for _, kv := range resp.Kvs {
			c.mark(string(kv.Key[len(marks):]))
		}
		c.markersOK.Store(true)
		wch := c.cli.Watch(clientv3.WithRequireLeader(ctx), coord.ArchivePrefix(c.cluster), clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
		for resp := range wch {
			if resp.Err() != nil {
				break
			}
			c.mu.Lock()
			for _, ev := range resp.Events {
				k := string(ev.Kv.Key)
				var sh int
				switch {
				case strings.HasPrefix(k, marks):
					c.mark(k[len(marks):])
				case strings.HasPrefix(k, files):
					if _, err := fmt.Sscanf(k[len(files):], "%04d/", &sh); err == nil {
						c.needLocked(sh, ev.Kv.ModRevision)
					}
				}
			}
			c.mu.Unlock()
		}
		c.markersOK.Store(false)
		c.mu.Lock()
		c.shards = map[int]*shardCatalog{}
		c.epoch++
		c.mu.Unlock()
	}
}

func (c *Catalog) mark(shard string) {
	if sh, err := strconv.Atoi(shard); err == nil && sh >= 0 && sh < router.NumShards {
		c.marked[sh].Store(true)
	}
}

// Archived reports whether shard may have archived history rows: false
// only when the shard has never had a catalogued file and this catalog is
// sure of it (see coldPrefix).
func (c *Catalog) Archived(shard int) bool {
	return !c.markersOK.Load() || shard < 0 || shard >= router.NumShards || c.marked[shard].Load()
}

// Fresh makes the records of conv's shard as current as a linearizable
// etcd read: a reader that has just seen warm rows gone from MySQL then
// finds the read bound written before their delete committed, whatever the
// watch has delivered so far. One etcd read (the newest record's revision)
// when nothing changed.
func (c *Catalog) Fresh(ctx context.Context, conv uint64) error {
	sh := int(router.ShardOf(conv))
	resp, err := c.cli.Get(ctx, shardFilesPrefix(c.cluster, sh), clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByModRevision, clientv3.SortDescend), clientv3.WithLimit(1))
	if err != nil {
		return fmt.Errorf("archive: the file records of shard %04d: %w", sh, err)
	}
	var newest int64
	if len(resp.Kvs) > 0 {
		newest = resp.Kvs[0].ModRevision
	}
	c.mu.Lock()
	c.needLocked(sh, newest)
	c.mu.Unlock()
	return nil
}

func (c *Catalog) needLocked(shard int, rev int64) { c.need[shard] = max(c.need[shard], rev) }

// Files implements cold.Catalog. It answers from the shard's table once
// that has reached the revision the watch or Fresh last saw; otherwise it
// waits for the shard's load in flight, or runs one.
func (c *Catalog) Files(ctx context.Context, conv uint64) ([]cold.FileRange, error) {
	sh := int(router.ShardOf(conv))
	c.mu.Lock()
	for {
		if s, ok := c.shards[sh]; ok && s.rev >= c.need[sh] {
			out := slices.Clone(s.convs[conv])
			c.mu.Unlock()
			return out, nil
		}
		if done, ok := c.loading[sh]; ok {
			c.mu.Unlock()
			select {
			case <-done:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			c.mu.Lock()
			continue
		}
		done, epoch := make(chan struct{}), c.epoch
		c.loading[sh] = done
		c.mu.Unlock()
		s, err := c.load(ctx, sh)
		c.mu.Lock()
		delete(c.loading, sh)
		close(done)
		if err != nil {
			c.mu.Unlock()
			return nil, err
		}
		if old, ok := c.shards[sh]; epoch == c.epoch && (!ok || old.rev < s.rev) {
			c.shards[sh] = s
		}
		// A change the watch or Fresh saw after the read began needs
		// another load: the loop runs it (or waits for another reader's).
	}
}

// load builds a shard's lookup table from its readable files.
func (c *Catalog) load(ctx context.Context, shard int) (*shardCatalog, error) {
	all, rev, err := listRecords(ctx, c.cli, c.cluster, shard)
	if err != nil {
		return nil, err
	}
	recs := slices.DeleteFunc(slices.Clone(all), func(r Record) bool { return !r.readable() || r.Kind != kindHistory || !r.legacy() })
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
	s := &shardCatalog{convs: map[uint64][]cold.FileRange{}, rev: rev}
	for i, r := range recs {
		skip := map[uint64][]uint64{}
		for _, k := range r.skippedKeys() {
			skip[k.Conv] = append(skip[k.Conv], k.Seq)
		}
		for _, cr := range infos[i].Convs {
			fr := cr.Range(r.Key)
			fr.Skip = skip[cr.ConvID]
			if b := r.Bound; b != nil {
				// Rows after the bound were still in MySQL when the
				// record's layout changed: MySQL's read bounds, which the
				// engine passes with each read, say what is deleted since.
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

// MergeRanges joins the files a read found through the shard database's
// read bounds (current) with the former layout's (legacy, Catalog.Files):
// a file in both, partly deleted before the layout changed, serves the
// union of its two ranges, which are adjacent in the file (the legacy
// bound ends where the first chunk of the current layout begins), and
// keeps the legacy skips. The result is in MinSeq order.
func MergeRanges(current, legacy []cold.FileRange) []cold.FileRange {
	all := slices.Clone(current)
	for _, l := range legacy {
		i := slices.IndexFunc(all, func(f cold.FileRange) bool { return f.Key == l.Key })
		if i < 0 {
			all = append(all, l)
			continue
		}
		f := &all[i]
		f.MinSeq, f.MaxSeq = min(f.MinSeq, l.MinSeq), max(f.MaxSeq, l.MaxSeq)
		if l.MinMsgID != 0 || l.MaxMsgID != 0 {
			f.MinMsgID, f.MaxMsgID = min(f.MinMsgID, l.MinMsgID), max(f.MaxMsgID, l.MaxMsgID)
		}
		f.Rows = max(f.Rows, l.Rows)
		f.Skip = slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(f.Skip), l.Skip...))))
	}
	slices.SortFunc(all, func(a, b cold.FileRange) int {
		return cmp.Or(cmp.Compare(a.MinSeq, b.MinSeq), cmp.Compare(a.Key, b.Key))
	})
	return all
}
