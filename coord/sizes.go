package coord

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/convoy-im/convoy/router"
)

// Size samples: one JSON document a day per cluster at
// /convoy/<cluster>/sizes/<yyyymmdd> with every shard's rows and bytes, so
// the capacity planner can measure growth. Any proxy may write the day's
// sample; the first wins (create-if-absent), the others keep it. A sample is
// about 25 KB: 1024 pairs of numbers.

// SizesPrefix is the etcd prefix of a cluster's size samples.
func SizesPrefix(cluster string) string { return "/convoy/" + cluster + "/sizes/" }

// KeepSamples is how many daily samples are kept: a month of growth.
const KeepSamples = 31

// SizeSample is the shards' sizes on one day.
type SizeSample struct {
	Day   string    `json:"day"` // yyyymmdd, UTC
	Taken time.Time `json:"taken"`
	// Shards holds [rows, bytes] per shard: each shard's share of its five
	// physical tables. LargestRows / LargestBytes hold its largest physical
	// table whole, what the per-table line applies to.
	Shards       [router.NumShards][2]int64 `json:"shards"`
	LargestRows  [router.NumShards]int64    `json:"largest_rows"`
	LargestBytes [router.NumShards]int64    `json:"largest_bytes"`
}

// PutDailySample stores s as its day's sample unless one exists, and
// deletes samples beyond KeepSamples. It reports whether it stored s.
func PutDailySample(ctx context.Context, cli *clientv3.Client, cluster string, s SizeSample) (bool, error) {
	if err := validKeyPart("cluster name", cluster); err != nil {
		return false, err
	}
	if len(s.Day) != 8 {
		return false, fmt.Errorf("coord: size sample day %q is not yyyymmdd", s.Day)
	}
	b, err := json.Marshal(s)
	if err != nil {
		return false, err
	}
	key := SizesPrefix(cluster) + s.Day
	resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(b))).Commit()
	if err != nil {
		return false, fmt.Errorf("coord: store size sample %s: %w", key, err)
	}
	if !resp.Succeeded {
		return false, nil
	}
	old, err := cli.Get(ctx, SizesPrefix(cluster), clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend))
	if err != nil {
		return true, nil // pruning waits for the next sample
	}
	for i, kv := range old.Kvs {
		if i >= KeepSamples {
			_, _ = cli.Delete(ctx, string(kv.Key))
		}
	}
	return true, nil
}

// SizeSamples returns the stored samples, oldest first.
func SizeSamples(ctx context.Context, cli *clientv3.Client, cluster string) ([]SizeSample, error) {
	if err := validKeyPart("cluster name", cluster); err != nil {
		return nil, err
	}
	resp, err := cli.Get(ctx, SizesPrefix(cluster), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, fmt.Errorf("coord: read size samples: %w", err)
	}
	out := make([]SizeSample, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var s SizeSample
		if err := json.Unmarshal(kv.Value, &s); err != nil {
			continue // a sample of another version: skipped, not fatal
		}
		out = append(out, s)
	}
	return out, nil
}
