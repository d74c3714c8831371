package main

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/convoy-im/convoy/archive"
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
}

var _ engine.MessageSearch = searchIndex{}

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

// startSearch enables msg_search on eng and, unless search.run_indexer is
// off, campaigns for the index feeds of every datasource. The returned
// function stops the feeds and closes the index. cat is the cold tier's
// catalog (nil without one): a backfill indexes the archived messages too.
func startSearch(c Config, cli *clientv3.Client, routes func() *router.Snapshot, eng *engine.Engine, id string,
	cat *archive.Catalog, reg prometheus.Registerer, log *zap.Logger) (func(), error) {
	idx, name, err := openSearch(c)
	if err != nil {
		return nil, err
	}
	eng.SetSearch(searchIndex{idx: idx, x: c.Search.Extraction}, engine.SearchOptions{FreshWindow: c.Search.FreshWindow})
	var runners *search.Runners
	if c.Search.RunIndexer == nil || *c.Search.RunIndexer {
		metrics, err := search.NewMetrics(reg)
		if err != nil {
			idx.Close()
			return nil, err
		}
		rc := search.RunnersConfig{
			Client: cli, Cluster: c.Etcd.Cluster, ID: id, Index: name, TTL: c.Search.RunnerTTL, Routes: routes,
			Connect: search.Connector(migrationConnector), Engine: idx, Extract: c.Search.Extraction, Metrics: metrics, Log: log,
		}
		if cat != nil {
			rc.Archived = archivedMessages(cat)
		}
		runners = search.StartRunners(rc)
	}
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
func archivedMessages(cat *archive.Catalog) func(context.Context, int, func(search.ArchivedMessage) error) error {
	return func(ctx context.Context, shard int, fn func(search.ArchivedMessage) error) error {
		return cat.Messages(ctx, shard, func(m archive.Message) error {
			return fn(search.ArchivedMessage{ConvID: m.ConvID, Seq: m.Seq, MsgID: m.MsgID, SenderUID: m.SenderUID,
				MsgType: m.MsgType, CreatedAt: m.CreatedAt, Body: m.Body})
		})
	}
}
