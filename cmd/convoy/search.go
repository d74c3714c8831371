package main

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/convoy-im/convoy/archive"
	"github.com/convoy-im/convoy/proxy/admin"
	"github.com/convoy-im/convoy/proxy/engine"
	"github.com/convoy-im/convoy/router"
	"github.com/convoy-im/convoy/search"
)

// searchIndex is the search engine as the proxy engine consumes it
// (engine.MessageSearch): index queries, and the brute-force matcher with
// the same extraction for the fresh window.
type searchIndex struct {
	idx search.Engine
	x   search.Extraction
	// For Status and Unready: the feeds' elections and this process's
	// feed metrics (nil when it runs none).
	cli     *clientv3.Client
	cluster string
	name    string
	routes  func() *router.Snapshot
	metrics *search.Metrics
	ready   *readyCache
}

var _ engine.MessageSearch = searchIndex{}

// readyCache keeps Unready's answer briefly: every search asks, and with
// SphinxQL each check is a query per datasource. An index, once built,
// stays built (a rebuild happens at a start), so a ready answer is kept
// longer than an unready one.
type readyCache struct {
	mu      sync.Mutex
	at      time.Time
	unready []string
}

const (
	unreadyTTL = 2 * time.Second
	readyTTL   = 30 * time.Second
)

func (s searchIndex) Unready(ctx context.Context) ([]string, error) {
	s.ready.mu.Lock()
	defer s.ready.mu.Unlock()
	ttl := readyTTL
	if len(s.ready.unready) > 0 {
		ttl = unreadyTTL
	}
	if !s.ready.at.IsZero() && time.Since(s.ready.at) < ttl {
		return s.ready.unready, nil
	}
	st, err := search.Status(ctx, nil, s.cluster, s.name, s.idx, s.routes(), nil)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, f := range st {
		if !f.Ready {
			out = append(out, f.Datasource)
		}
	}
	s.ready.at, s.ready.unready = time.Now(), out
	return out, nil
}

func (s searchIndex) Status(ctx context.Context) ([]string, [][]any, error) {
	st, err := search.Status(ctx, s.cli, s.cluster, s.name, s.idx, s.routes(), s.metrics)
	if err != nil {
		return nil, nil, err
	}
	cols := []string{"datasource", "index", "ready", "checkpoint", "feeder", "behind_seconds"}
	rows := make([][]any, len(st))
	for i, f := range st {
		ready := "no"
		if f.Ready {
			ready = "yes"
		}
		var behind any // NULL: another process feeds it
		if f.HasBehind {
			behind = strconv.FormatFloat(f.Behind, 'f', 1, 64)
		}
		rows[i] = []any{f.Datasource, s.name, ready, f.Checkpoint, f.Feeder, behind}
	}
	return cols, rows, nil
}

func (s searchIndex) Search(ctx context.Context, q engine.SearchQuery) ([]engine.SearchHit, error) {
	hits, err := s.idx.Search(ctx, search.Query(q))
	if err != nil {
		return nil, err
	}
	out := make([]engine.SearchHit, len(hits))
	for i, h := range hits {
		out[i] = engine.SearchHit(h)
	}
	return out, nil
}

func (s searchIndex) Counts(ctx context.Context, q engine.SearchQuery) (map[uint64]int64, error) {
	return s.idx.Counts(ctx, search.Query(q))
}

func (s searchIndex) Matcher(text string) (func(uint8, []byte) bool, error) {
	m, err := search.NewMatcher(text)
	if errors.Is(err, search.ErrEmptyQuery) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return func(msgType uint8, body []byte) bool {
		t, ok := s.x.Text(msgType, body)
		return ok && m.Match(t)
	}, nil
}

// openSearch opens the configured engine and names the index it is: the
// shared SphinxQL partitions are one index for the cluster (one feed per
// datasource), an embedded bleve directory is this host's own.
func openSearch(c Config) (search.Engine, string, error) {
	if err := c.Search.Extraction.Check(); err != nil {
		return nil, "", err
	}
	switch c.Search.Engine {
	case "", "bleve":
		if c.Search.Dir == "" {
			return nil, "", errors.New("search.dir: the bleve index directory is required")
		}
		dir, err := filepath.Abs(c.Search.Dir)
		if err != nil {
			return nil, "", err
		}
		eng, err := search.OpenBleve(dir)
		if err != nil {
			return nil, "", err
		}
		host, _ := os.Hostname()
		return eng, fmt.Sprintf("bleve-%s-%08x", host, crc32.ChecksumIEEE([]byte(dir))), nil
	case "sphinx":
		s := c.Search.Sphinx
		eng, err := search.OpenSphinx(search.SphinxConfig{Partitions: s.Partitions, Index: s.Index, Distributed: s.Distributed, Checkpoints: s.Checkpoints})
		return eng, "sphinx", err
	}
	return nil, "", fmt.Errorf("search.engine %q: want bleve or sphinx", c.Search.Engine)
}

// startSearch enables msg_search on eng (and SHOW SEARCH STATUS on
// directives) and, unless search.run_indexer is off, campaigns for the
// index feeds of every datasource. The returned function stops the feeds
// and closes the index. cat is the cold tier's catalog (nil without one):
// a backfill indexes the archived messages too.
func startSearch(c Config, cli *clientv3.Client, routes func() *router.Snapshot, eng *engine.Engine, directives *admin.Admin, id string,
	cat *archive.Catalog, reg prometheus.Registerer, log *zap.Logger) (func(), error) {
	idx, name, err := openSearch(c)
	if err != nil {
		return nil, err
	}
	si := searchIndex{idx: idx, x: c.Search.Extraction, cli: cli, cluster: c.Etcd.Cluster, name: name, routes: routes, ready: &readyCache{}}
	var runners *search.Runners
	if c.Search.RunIndexer == nil || *c.Search.RunIndexer {
		metrics, err := search.NewMetrics(reg)
		if err != nil {
			idx.Close()
			return nil, err
		}
		si.metrics = metrics
		rc := search.RunnersConfig{
			Client: cli, Cluster: c.Etcd.Cluster, ID: id, Index: name, TTL: c.Search.RunnerTTL, Routes: routes,
			Connect: migrationConnector, Engine: idx, Extract: c.Search.Extraction, Metrics: metrics, Log: log,
		}
		if cat != nil {
			rc.Archived = archivedMessages(cat)
		}
		runners = search.StartRunners(rc)
	}
	eng.SetSearch(si, engine.SearchOptions{FreshWindow: c.Search.FreshWindow})
	directives.SetSearch(si)
	log.Info("message search enabled", zap.String("engine", name), zap.Bool("indexer", runners != nil),
		zap.Duration("fresh_window", c.Search.FreshWindow))
	return func() {
		if runners != nil {
			runners.Close()
		}
		if err := idx.Close(); err != nil {
			log.Warn("closing the search index", zap.Error(err))
		}
	}, nil
}

// archivedMessages feeds a search backfill the cold tier's messages.
func archivedMessages(cat *archive.Catalog) search.ArchivedFunc {
	return func(ctx context.Context, shard int, bounds search.ReadBounds, fn func(search.ArchivedMessage) error) error {
		return cat.Messages(ctx, shard, bounds, func(m archive.Message) error {
			return fn(search.ArchivedMessage{ConvID: m.ConvID, Seq: m.Seq, MsgID: m.MsgID, SenderUID: m.SenderUID,
				MsgType: m.MsgType, CreatedAt: m.CreatedAt, Body: m.Body})
		})
	}
}
