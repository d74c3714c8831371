package planner

import (
	"context"
	"fmt"
	"time"

	"github.com/convoy-im/convoy/coord"
	"github.com/convoy-im/convoy/router"
)

// Load is one proxy's view of a shard's load (its shard map's statistics).
type Load struct {
	QPS      float64
	WriteP99 time.Duration
}

// Measure builds the model's inputs from the fleet as it is: sizes from the
// datasources' statistics (stats), load summed over the proxies (loads:
// one array per proxy; QPS adds up, the worst write P99 counts) and the
// servers' disk capacities (bytes; missing: no disk trigger). Growth is
// measured against the oldest of samples (the daily size samples the
// proxies keep in etcd) at least half a day old; without one the disk and
// table lines show only when already reached.
func Measure(ctx context.Context, snap *router.Snapshot, stats TableStats, loads [][router.NumShards]Load, capacity map[string]int64, samples []coord.SizeSample) (Inputs, error) {
	in := Inputs{Routes: snap, Datasources: map[string]Datasource{}}
	sizes, err := ShardSizes(ctx, snap, stats, nil)
	if err != nil {
		return in, fmt.Errorf("planner: %w", err)
	}
	for sh := range router.Shard(router.NumShards) {
		t := snap.Target(sh)
		s := &in.Shards[sh]
		sz := sizes[sh]
		s.Rows, s.Bytes, s.TableRows, s.TableBytes = sz.Rows, sz.Bytes, sz.Largest.Rows, sz.Largest.Bytes
		for _, l := range loads {
			s.QPS += l[sh].QPS
			s.WriteP99 = max(s.WriteP99, l[sh].WriteP99)
		}
		d := in.Datasources[t.Datasource]
		d.Capacity = capacity[t.Datasource]
		d.Used += s.Bytes
		in.Datasources[t.Datasource] = d
	}
	if len(samples) > 0 {
		old := samples[0]
		if days := time.Since(old.Taken).Hours() / 24; days >= 0.5 {
			for i := range in.Shards {
				s := &in.Shards[i]
				s.BytesPerDay = float64(s.Bytes-old.Shards[i][1]) / days
				s.TableRowsPerDay = float64(s.TableRows-old.LargestRows[i]) / days
				s.TableBytesPerDay = float64(s.TableBytes-old.LargestBytes[i]) / days
			}
		}
	}
	return in, nil
}
