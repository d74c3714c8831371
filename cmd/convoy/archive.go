package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/convoy-im/convoy/archive"
	"github.com/convoy-im/convoy/cold"
	"github.com/convoy-im/convoy/proxy/admin"
	"github.com/convoy-im/convoy/proxy/backend"
	"github.com/convoy-im/convoy/proxy/engine"
	"github.com/convoy-im/convoy/router"
)

var _ admin.ArchiveAdmin = (*archive.Admin)(nil)

// coldStoreURL is cold.store, or a file:// store under the working
// directory's .state/ (where make run keeps its data), so the archiver
// needs nothing set up.
func coldStoreURL(c Config) (string, error) {
	if c.Cold.Store != "" {
		return c.Cold.Store, nil
	}
	dir, err := filepath.Abs(filepath.Join(".state", "cold"))
	if err != nil {
		return "", err
	}
	return "file://" + dir, nil
}

// archiveConnector opens an archiver run's connection to a datasource:
// its account and password, its TLS mode (preferred is clear text here,
// as for the binlog stream: this client cannot read the greeting first)
// and the collation the pools use.
func archiveConnector(ctx context.Context, ds router.Datasource) (*client.Conn, error) {
	pw, err := backend.ResolvePassword(ds)
	if err != nil {
		return nil, err
	}
	tc, err := backend.TLSConfig(ds)
	if err != nil {
		return nil, err
	}
	return client.ConnectWithContext(ctx, ds.Addr, ds.User, pw, "", 5*time.Second, func(c *client.Conn) error {
		if tc != nil {
			c.SetTLSConfig(tc)
		}
		return c.SetCollation(backend.Collation)
	})
}

// coldTier is what convoy serve runs of the cold tier: the store, the
// catalog the engine's cold reads use (watched), and this process's
// archiver manager (nil with cold.run_jobs false).
type coldTier struct {
	store   cold.Store
	catalog *archive.Catalog
	stop    context.CancelFunc
	manager *archive.Manager
}

// startColdTier opens the store, hands the engine its cold read path and
// starts this process's archiver manager (c.Cold.Enabled is set). The
// engine must get it before serving: plans record whether a statement is
// one the cold tier continues.
func startColdTier(ctx context.Context, cli *clientv3.Client, c Config, id string, log *zap.Logger, reg prometheus.Registerer, eng *engine.Engine) (*coldTier, error) {
	url, err := coldStoreURL(c)
	if err != nil {
		return nil, err
	}
	store, err := cold.OpenStore(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("cold.store: %w", err) // OpenStore's errors hide the secret key
	}
	metrics, err := archive.NewMetrics(reg)
	if err != nil {
		store.Close()
		return nil, err
	}
	cat := archive.NewCatalog(cli, c.Etcd.Cluster, store)
	wctx, stop := context.WithCancel(context.Background())
	go cat.Watch(wctx)
	eng.SetColdTier(coldReads{cat: cat, r: cold.NewReader(store, cat, cold.ReaderOptions{})},
		engine.ColdOptions{Budget: c.Cold.Budget, PartialError: c.Cold.Partial == "error"})
	t := &coldTier{store: store, catalog: cat, stop: stop}
	if c.Cold.RunJobs != nil && !*c.Cold.RunJobs {
		return t, nil
	}
	local := strings.HasPrefix(url, "file://") && !c.Cold.StoreShared
	if local {
		log.Warn("cold.store is a directory on this host: archiving runs only while this is the only registered Convoy process "+
			"(set cold.store to an object store, or cold.store_shared: true if every process mounts the same directory)",
			zap.String("store", url))
	}
	a, err := archive.New(archive.Config{Client: cli, Cluster: c.Etcd.Cluster, ID: id, Store: store, LocalStore: local, Connect: archiveConnector,
		Prefix: c.Cold.Prefix, After: c.Cold.After, DeleteAfter: c.Cold.DeleteAfter, EraseAfter: c.Cold.EraseAfter, Retention: c.Cold.Retention, Rate: c.Cold.Rate, KeepNewest: c.Cold.KeepNewest,
		InboxAfter: c.Cold.InboxAfter, Log: log, Metrics: metrics})
	if err != nil {
		t.Close()
		return nil, err
	}
	t.manager = archive.NewManager(a, 0, 0)
	return t, nil
}

func (t *coldTier) Close() {
	if t.manager != nil {
		t.manager.Close()
	}
	t.stop()
	t.store.Close()
}

// coldReads is the engine's ColdTier: the files the engine's lookup found
// through the shard database's read bounds, with the files whose bounds
// etcd holds (the archive's former layout: the catalog made current with
// etcd first, Catalog.Fresh), then the reader.
type coldReads struct {
	cat *archive.Catalog
	r   *cold.Reader
}

var _ engine.ColdTier = coldReads{}

func (c coldReads) Archived(sh router.Shard) bool { return c.cat.Archived(int(sh)) }

func (c coldReads) Before(ctx context.Context, conv, before uint64, limit int, files []engine.ColdFile, skip engine.ColdSkip) (engine.ColdPage, error) {
	r, err := c.reader(ctx, conv, files, skip)
	if err != nil {
		// Nothing read: with the budget spent that is a partial page with
		// nothing final, else the archive's failure.
		return engine.ColdPage{More: true, Frontier: before - 1}, budgetOr(ctx, err)
	}
	return pageOf(r.Before(ctx, conv, before, limit, skip.Seqs...))
}

func (c coldReads) After(ctx context.Context, conv, after uint64, limit int, files []engine.ColdFile, skip engine.ColdSkip) (engine.ColdPage, error) {
	r, err := c.reader(ctx, conv, files, skip)
	if err != nil {
		return engine.ColdPage{More: true, Frontier: after + 1}, budgetOr(ctx, err)
	}
	return pageOf(r.After(ctx, conv, after, limit, skip.Seqs...))
}

func (c coldReads) ByKeys(ctx context.Context, conv uint64, seqs, msgIDs []uint64, files []engine.ColdFile, skip engine.ColdSkip) (engine.ColdPage, error) {
	r, err := c.reader(ctx, conv, files, skip)
	if err != nil {
		return engine.ColdPage{More: true}, budgetOr(ctx, err)
	}
	return pageOf(r.ByKeys(ctx, conv, seqs, msgIDs, skip.Seqs...))
}

func (c coldReads) Keys(ctx context.Context, conv, lo, hi uint64, files []engine.ColdFile, skip engine.ColdSkip) ([]engine.ColdKey, error) {
	r, err := c.reader(ctx, conv, files, skip)
	if err != nil {
		return nil, err
	}
	keys, err := r.Keys(ctx, conv, lo, hi, skip.Seqs...)
	if err != nil {
		return nil, err
	}
	out := make([]engine.ColdKey, len(keys))
	for i, k := range keys {
		out[i] = engine.ColdKey{Seq: k.Seq, MsgID: k.MsgID, Sender: k.Sender, Body: k.Body}
	}
	return out, nil
}

// reader is c.r over conv's files: the engine's, and the former layout's
// from etcd (archive.MergeRanges), with the erased ranges as gaps (a file
// they cover wholly is not read at all).
func (c coldReads) reader(ctx context.Context, conv uint64, files []engine.ColdFile, skip engine.ColdSkip) (*cold.Reader, error) {
	if err := c.cat.Fresh(ctx, conv); err != nil {
		return nil, err
	}
	legacy, err := c.cat.Files(ctx, conv)
	if err != nil {
		return nil, err
	}
	current := make([]cold.FileRange, len(files))
	for i, f := range files {
		current[i] = cold.FileRange{Key: f.Key, MinSeq: f.MinSeq, MaxSeq: f.MaxSeq, MinMsgID: f.MinMsgID, MaxMsgID: f.MaxMsgID, Rows: f.Rows}
	}
	all := archive.MergeRanges(current, legacy)
	if len(skip.Erased) > 0 {
		all = slices.DeleteFunc(all, func(f cold.FileRange) bool {
			return slices.ContainsFunc(skip.Erased, func(g [2]uint64) bool { return g[0] <= f.MinSeq && f.MaxSeq <= g[1] })
		})
		for i := range all {
			all[i].Gaps = skip.Erased
		}
	}
	return c.r.With(fixedFiles(all)), nil
}

// fixedFiles is a cold.Catalog of one read: its conversation's files.
type fixedFiles []cold.FileRange

func (f fixedFiles) Files(context.Context, uint64) ([]cold.FileRange, error) {
	return slices.Clone(f), nil
}

// budgetOr is nil when ctx's deadline (the budget) is what failed.
func budgetOr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

func pageOf(p cold.Page, err error) (engine.ColdPage, error) {
	if err != nil {
		return engine.ColdPage{}, err
	}
	cols := func(cs []cold.Column) []engine.ColdColumn {
		out := make([]engine.ColdColumn, len(cs))
		for i, c := range cs {
			out[i] = engine.ColdColumn{Name: c.Name, Type: c.Type, Flags: c.Flags, Decimals: c.Decimals}
		}
		return out
	}
	out := engine.ColdPage{Msg: cols(p.Tables.Msg), Content: cols(p.Tables.Content), More: p.More, Frontier: p.Frontier,
		Rows: make([]engine.ColdRow, len(p.Rows))}
	for i, r := range p.Rows {
		out.Rows[i] = engine.ColdRow{Seq: r.Seq, MsgID: r.MsgID, Msg: r.Msg, Content: r.Content}
	}
	return out, nil
}

// archiveAdmin answers the archive directives when the cold tier is on
// (nil otherwise: the directives then say it is off).
func archiveAdmin(cli *clientv3.Client, c Config) admin.ArchiveAdmin {
	if !c.Cold.Enabled {
		return nil
	}
	return archive.NewAdmin(cli, c.Etcd.Cluster)
}

const archiveUsage = `usage: convoy archive [--config FILE] [--etcd HOST:PORT,...] [--cluster NAME] rebuild [SHARD|FROM-TO]

rebuild  names again, in each shard's catalog, the cold files the store
         holds that the catalog lost (its manifest deleted, the archive job
         records lost with etcd): they are catalogued as files whose warm
         delete has not begun, which the archiver then resumes from the read
         bounds in the shard's database. Every shard (0-1023) by default.
         The store and prefix are the config's cold.store and cold.prefix.
`

// archiveCmd runs the archive maintenance commands.
func archiveCmd(args []string) error {
	c, rest, err := subcommand("archive", archiveUsage, args)
	if err != nil {
		return err
	}
	if len(rest) == 0 || len(rest) > 2 || strings.ToLower(rest[0]) != "rebuild" {
		return errors.New(archiveUsage)
	}
	from, to := 0, router.NumShards-1
	if len(rest) == 2 {
		if from, to, err = shardSpan(rest[1]); err != nil {
			return fmt.Errorf("%w\n%s", err, archiveUsage)
		}
	}
	log := zap.NewNop()
	cli, err := etcdClient(c, log)
	if err != nil {
		return err
	}
	defer cli.Close()
	url, err := coldStoreURL(c)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	store, err := cold.OpenStore(ctx, url)
	if err != nil {
		return fmt.Errorf("cold.store: %w", err)
	}
	defer store.Close()
	host, _ := os.Hostname()
	a, err := archive.New(archive.Config{Client: cli, Cluster: c.Etcd.Cluster, ID: "rebuild@" + host, Store: store,
		Connect: archiveConnector, Prefix: c.Cold.Prefix, Log: log})
	if err != nil {
		return err
	}
	total, added := 0, 0
	for sh := from; sh <= to; sh++ {
		rep, err := a.RebuildCatalog(ctx, sh)
		if err != nil {
			return fmt.Errorf("shard %04d: %w", sh, err)
		}
		total, added = total+rep.Files, added+len(rep.Added)
		if len(rep.Added) > 0 || len(rep.Skipped) > 0 {
			fmt.Printf("shard %04d: %d files, %d named again (manifest version %d)\n", sh, rep.Files, len(rep.Added), rep.Version)
			for _, k := range rep.Skipped {
				fmt.Printf("  skipped %s\n", k)
			}
		}
	}
	fmt.Printf("%d shards: %d files catalogued, %d of them named again\n", to-from+1, total, added)
	return nil
}

// shardSpan reads SHARD or FROM-TO.
func shardSpan(s string) (int, int, error) {
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		b = a
	}
	from, err1 := strconv.Atoi(a)
	to, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil || from < 0 || to >= router.NumShards || from > to {
		return 0, 0, fmt.Errorf("%q: want a shard or a range of shards within 0-%d", s, router.NumShards-1)
	}
	return from, to, nil
}
