package outbox

import (
	"context"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/convoy-im/convoy/coord"
)

// One delivery worker per datasource in the whole cluster: the process
// elected under /convoy/<cluster>/outbox/workers/<datasource>/ (coord.Elect)
// delivers that datasource's entries; when it dies or loses etcd for a TTL
// the next candidate takes over where the table says. Two workers at once
// (a leader paused past its lease) would not apply an entry twice (the
// applied marker) but could deliver a home's entries for one shard out of
// order, so a worker checks its election before each pass.

// WorkersPrefix is where a datasource's delivery workers campaign.
func WorkersPrefix(cluster, ds string) string {
	return "/convoy/" + cluster + "/outbox/workers/" + ds + "/"
}

// RunnersConfig configures the delivery workers of one process.
type RunnersConfig struct {
	Client  *clientv3.Client
	Cluster string
	ID      string        // this process in the elections
	TTL     time.Duration // the leader lease (coord.DefaultRunnerTTL if 0)
	// Datasources lists the datasources to deliver for (the routes').
	Datasources func() []string
	// Deliver applies the due entries of one datasource, at most one
	// batch, and says how many it applied (engine.DeliverOutbox).
	Deliver func(ctx context.Context, ds string) (int, error)
	// Purge, if set, is called about every PurgeEvery while this process
	// delivers ds: it deletes the old applied markers.
	Purge      func(ctx context.Context, ds string) error
	PurgeEvery time.Duration // default 1h
	// Stopped, if set, is called when this process stops delivering ds
	// (it lost or left the election): its gauges of ds must go.
	Stopped func(ds string)
	// Poll is the wait between two passes that found nothing to do
	// (default 200 ms); Kick cuts it short.
	Poll time.Duration
	Log  *zap.Logger
}

// Runners campaigns for and runs the delivery of every datasource.
type Runners struct {
	cfg    RunnersConfig
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	ds     map[string]chan struct{} // kick channels of started workers
}

// rescan is how often the datasources are listed again.
const rescan = 5 * time.Second

// StartRunners starts the campaigns; Close stops them.
func StartRunners(cfg RunnersConfig) *Runners {
	if cfg.TTL <= 0 {
		cfg.TTL = coord.DefaultRunnerTTL
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 200 * time.Millisecond
	}
	if cfg.PurgeEvery <= 0 {
		cfg.PurgeEvery = time.Hour
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Runners{cfg: cfg, cancel: cancel, ds: map[string]chan struct{}{}}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		t := time.NewTicker(rescan)
		defer t.Stop()
		for {
			for _, ds := range cfg.Datasources() {
				r.mu.Lock()
				kick, started := r.ds[ds]
				if !started {
					kick = make(chan struct{}, 1)
					r.ds[ds] = kick
				}
				r.mu.Unlock()
				if !started {
					r.wg.Add(1)
					go func() { defer r.wg.Done(); r.work(ctx, ds, kick) }()
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

// Kick asks ds's worker, if this process runs it, for a pass now: a
// transaction just committed entries there.
func (r *Runners) Kick(ds string) {
	r.mu.Lock()
	kick := r.ds[ds]
	r.mu.Unlock()
	if kick != nil {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
}

// Close stops every worker and resigns its elections.
func (r *Runners) Close() {
	r.cancel()
	r.wg.Wait()
}

// work campaigns for ds's delivery and delivers while elected.
func (r *Runners) work(ctx context.Context, ds string, kick chan struct{}) {
	coord.Campaign(ctx, r.cfg.Client, WorkersPrefix(r.cfg.Cluster, ds), r.cfg.ID, r.cfg.TTL, r.cfg.Log.With(zap.String("datasource", ds)),
		"outbox delivery worker", func(ctx context.Context, lead *coord.Leader) error {
			if r.cfg.Stopped != nil {
				defer r.cfg.Stopped(ds)
			}
			return r.deliver(ctx, lead, ds, kick)
		})
}

// deliver runs passes until the lease is lost or ctx ends. A pass that
// fails (the datasource down) is retried after a poll; entries keep their
// own back-off in the table.
func (r *Runners) deliver(ctx context.Context, lead *coord.Leader, ds string, kick chan struct{}) error {
	backoff := r.cfg.Poll
	purged := time.Now() // the first purge an interval after taking over
	for {
		if r.cfg.Purge != nil && time.Since(purged) > r.cfg.PurgeEvery {
			purged = time.Now()
			if err := r.cfg.Purge(ctx, ds); err != nil && ctx.Err() == nil {
				r.cfg.Log.Warn("purging old outbox markers failed", zap.String("datasource", ds), zap.Error(err))
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-lead.Done():
			return fmt.Errorf("%w: the lease was lost", coord.ErrNotRunner)
		default:
		}
		// Still the leader? A process paused past its lease must not
		// deliver beside its successor.
		cctx, cancel := context.WithTimeout(ctx, r.cfg.TTL)
		resp, err := r.cfg.Client.Txn(cctx).If(lead.Owns()).Commit()
		cancel()
		if err != nil {
			return fmt.Errorf("check the election: %w", err)
		}
		if !resp.Succeeded {
			return fmt.Errorf("%w: the election key is gone", coord.ErrNotRunner)
		}
		n, err := r.cfg.Deliver(ctx, ds)
		switch {
		case err != nil && ctx.Err() == nil:
			r.cfg.Log.Warn("outbox delivery pass failed", zap.String("datasource", ds), zap.Error(err))
			backoff = min(2*backoff, 30*time.Second)
		case n > 0:
			backoff = r.cfg.Poll
			continue // more may be due at once
		default:
			backoff = r.cfg.Poll
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-lead.Done():
			t.Stop()
		case <-kick:
			t.Stop()
		case <-t.C:
		}
	}
}
