package inproxy

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/convoy-im/convoy/coord"
)

// JobView is what WatchJobs keeps current: a proxy's view of the jobs.
type JobView interface {
	Update(shard int, job *coord.Job)
	Shards() []int // the shards the view holds state for
}

// WatchJobs keeps the views current from the cluster's job records until
// ctx ends, listing again after a broken watch. listed (if not nil) is
// closed once the views hold the first listing: a proxy serves writes only
// after it, so that none escapes a read ramp's mirror (dualwrite.go). The
// views are updated in order, each record in all of them before the next:
// put the DualWrites before the Ramps, so that a proxy mirrors a share
// before it announces it.
func WatchJobs(ctx context.Context, store *coord.JobStore, log *zap.Logger, listed chan<- struct{}, views ...JobView) {
	for ctx.Err() == nil {
		jobs, rev, err := store.List(ctx)
		if err != nil {
			log.Debug("listing migration jobs", zap.Error(err))
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		seen := map[int]bool{}
		for i := range jobs {
			seen[jobs[i].Shard] = true
			for _, v := range views {
				v.Update(jobs[i].Shard, &jobs[i])
			}
		}
		for _, v := range views {
			for _, sh := range v.Shards() {
				if !seen[sh] {
					v.Update(sh, nil)
				}
			}
		}
		if listed != nil {
			close(listed)
			listed = nil
		}
		for ev := range store.Watch(ctx, rev) {
			if ev.Err != nil {
				log.Debug("migration job watch broken; listing again", zap.Error(ev.Err))
				break
			}
			for _, v := range views {
				v.Update(ev.Shard, ev.Job)
			}
		}
	}
}
