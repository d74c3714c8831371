package planner

import (
	"context"
	"fmt"
	"time"

	"github.com/convoy-im/convoy/migrate"
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
// not measured yet (no size history is kept), so disk and table lines are
// reported as reached only if they are.
func Measure(ctx context.Context, snap *router.Snapshot, stats migrate.TableStats, loads [][router.NumShards]Load, capacity map[string]int64) (Inputs, error) {
	in := Inputs{Routes: snap, Datasources: map[string]Datasource{}}
	sizes, err := migrate.ShardSizes(ctx, snap, stats, nil)
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
		d.Used += s.Bytes
		d.Capacity = capacity[t.Datasource]
		in.Datasources[t.Datasource] = d
	}
	return in, nil
}
