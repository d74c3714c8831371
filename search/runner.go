package search

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/convoy-im/convoy/binlog"
	"github.com/convoy-im/convoy/coord"
	"github.com/convoy-im/convoy/router"
)

// One indexer per datasource and index: the process elected under
// /convoy/<cluster>/search/indexers/<index>/<datasource>/ runs it
// (coord.Elect), and when it dies or loses etcd for a TTL the next
// candidate resumes from the index's checkpoint. <index> names the index
// being fed: "sphinx" for the shared SphinxQL partitions (one feed per
// datasource in the whole cluster), or a bleve index's own id (each
// process's embedded index has its own feed).

// RunnersConfig configures the feeds of one process.
type RunnersConfig struct {
	Client  *clientv3.Client
	Cluster string
	// ID names this process in the elections; Index the index fed.
	ID, Index string
	// TTL is the leader lease (coord.DefaultRunnerTTL if 0).
	TTL     time.Duration
	Routes  func() *router.Snapshot
	Connect binlog.Connector
	Engine  Engine
	Extract Extraction
	Metrics *Metrics
	// Archived is IndexerConfig.Archived (nil: no cold tier).
	Archived ArchivedFunc
	Log      *zap.Logger
	// Flush is the indexer's batch wait (IndexerConfig.Flush).
	Flush time.Duration
}

// Runners campaigns for and runs the feed of every datasource of the
// routes, picking up datasources added later.
type Runners struct {
	cfg    RunnersConfig
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	ds     map[string]bool
}

// rescan is how often the routes are read for new datasources.
const rescan = 5 * time.Second

// StartRunners starts the campaigns; Close stops them.
func StartRunners(cfg RunnersConfig) *Runners {
	if cfg.TTL <= 0 {
		cfg.TTL = coord.DefaultRunnerTTL
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Runners{cfg: cfg, cancel: cancel, ds: map[string]bool{}}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		t := time.NewTicker(rescan)
		defer t.Stop()
		for {
			for _, ds := range cfg.Routes().Datasources() {
				r.mu.Lock()
				started := r.ds[ds.Name]
				r.ds[ds.Name] = true
				r.mu.Unlock()
				if !started {
					r.wg.Add(1)
					go func() { defer r.wg.Done(); r.feed(ctx, ds.Name) }()
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return r
}

// Close stops every feed and resigns its elections.
func (r *Runners) Close() {
	r.cancel()
	r.wg.Wait()
}

// readerID is the binlog replica id of a feed: stable per index and
// datasource, in a range of its own (migration readers use 2^30..2^31).
func readerID(name string) uint32 { return 1<<29 + crc32.ChecksumIEEE([]byte(name))%(1<<29) }

// feed campaigns for one datasource's feed and runs it while elected,
// until ctx ends. A feed that keeps failing at once (binlogs purged past
// the checkpoint: binlog.ErrPositionUnavailable, until an operator resets
// the index) is retried with coord.Campaign's back-off, not in a loop.
func (r *Runners) feed(ctx context.Context, ds string) {
	log := r.cfg.Log.With(zap.String("datasource", ds), zap.String("index", r.cfg.Index))
	coord.Campaign(ctx, r.cfg.Client, electionPrefix(r.cfg.Cluster, r.cfg.Index, ds), r.cfg.ID, r.cfg.TTL, log, "search indexer",
		func(ctx context.Context, lead *coord.Leader) error { return r.run(ctx, lead, ds) })
}

// run runs the indexer until it fails, the lease is lost or ctx ends.
func (r *Runners) run(ctx context.Context, lead *coord.Leader, name string) error {
	ds, ok := r.cfg.Routes().Datasource(name)
	if !ok {
		return errors.New("the datasource is no longer in the routes")
	}
	db, bl, err := r.cfg.Connect(ctx, ds)
	if err != nil {
		return err
	}
	defer db.Close()
	bl.ServerID = readerID(r.cfg.Index + "/" + name)
	fenced := &fencedEngine{Engine: r.cfg.Engine, cli: r.cfg.Client, lead: lead}
	ix, err := NewIndexer(IndexerConfig{Source: name, DB: db, Binlog: bl, Engine: fenced, Routes: r.cfg.Routes,
		Extract: r.cfg.Extract, Metrics: r.cfg.Metrics, Log: r.cfg.Log, Flush: r.cfg.Flush, Archived: r.cfg.Archived})
	if err != nil {
		return err
	}
	r.cfg.Metrics.started(name)
	defer r.cfg.Metrics.stopped(name)
	ictx, cancel := context.WithCancel(ctx)
	defer cancel()
	// A lost lease stops the feed at once: another process takes over
	// from the checkpoint.
	go func() {
		select {
		case <-lead.Done():
			cancel()
		case <-ictx.Done():
		}
	}()
	return ix.Run(ictx)
}

// fencedEngine checks, before each Apply, that the feed's leader still
// holds its election key: a leader whose lease expired without it noticing
// yet (a long GC pause, a partition) stops at its next batch instead of
// writing an older batch after its successor's. It narrows that window to
// one etcd round trip; it does not close it (the index is no etcd
// transaction).
type fencedEngine struct {
	Engine
	cli  *clientv3.Client
	lead *coord.Leader
}

func (f *fencedEngine) Apply(ctx context.Context, source string, b Batch, pos string) error {
	resp, err := f.cli.Txn(ctx).If(f.lead.Owns()).Commit()
	if err != nil {
		return fmt.Errorf("search: check the indexer election of %s: %w", source, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("search: %w: the indexer of %s lost its election", coord.ErrNotRunner, source)
	}
	return f.Engine.Apply(ctx, source, b, pos)
}
