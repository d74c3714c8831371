package search

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/convoy-im/convoy/router"
)

// FeedStatus is one datasource's index feed, as SHOW SEARCH STATUS shows
// it and as a search asks whether its answer can be complete.
type FeedStatus struct {
	Datasource string
	// Ready: the index holds a checkpoint of this AnalysisVersion for the
	// datasource, so every message stored there before it is indexed; a
	// new or rebuilt index is not ready until its backfill is done.
	Ready bool
	// Checkpoint is the binlog position indexed up to ("" none).
	Checkpoint string
	// Feeder is the process elected to feed it ("" none).
	Feeder string
	// Behind is how far behind the feed is, when this process runs it
	// (HasBehind); another process's feed shows no figure here (its own
	// convoy_search_feed_behind_seconds does).
	Behind    float64
	HasBehind bool
}

// electionPrefix is where a datasource's feed of index is elected.
func electionPrefix(cluster, index, ds string) string {
	return "/convoy/" + cluster + "/search/indexers/" + index + "/" + ds
}

// Status reads the state of every datasource's feed into the index named
// index (Runners' Index) in eng: one checkpoint read per datasource and
// one etcd read per datasource for its feeder. m is this process's feed
// metrics (nil: none).
func Status(ctx context.Context, cli *clientv3.Client, cluster, index string, eng Engine, routes *router.Snapshot, m *Metrics) ([]FeedStatus, error) {
	behind := m.Behind()
	var out []FeedStatus
	for _, ds := range routes.Datasources() {
		cp, err := eng.Checkpoint(ctx, ds.Name)
		if err != nil {
			return nil, fmt.Errorf("search: the checkpoint of %s: %w", ds.Name, err)
		}
		pos, ready := positionOf(cp)
		st := FeedStatus{Datasource: ds.Name, Ready: ready, Checkpoint: pos}
		if !ready {
			st.Checkpoint = cp
		}
		if cli != nil {
			resp, err := cli.Get(ctx, electionPrefix(cluster, index, ds.Name)+"/", clientv3.WithPrefix(),
				clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(1))
			if err != nil {
				return nil, fmt.Errorf("search: the feeder of %s: %w", ds.Name, err)
			}
			if len(resp.Kvs) > 0 {
				st.Feeder = string(resp.Kvs[0].Value)
			}
		}
		st.Behind, st.HasBehind = behind[ds.Name]
		out = append(out, st)
	}
	return out, nil
}
