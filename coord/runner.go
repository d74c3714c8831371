package coord

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Runner election
//
// One process at a time runs a shard's migration job: the one elected under
// /convoy/<cluster>/migrations/runners/<shard>/ (etcd's concurrency.Election,
// one key per candidate under its session lease; the oldest key leads). The
// runner's lease is kept alive by its session; if the process dies or loses
// etcd for a TTL, the lease expires, its election key and any migration lock
// it holds (taken under the same lease) disappear, and the next candidate's
// Campaign returns: it reads the job record and resumes from the last
// persisted step. A runner that lost its lease without noticing yet cannot
// write anyway: every write it makes (job updates, locks, the route flip)
// compares its election key's CreateRevision in the same transaction.

// DefaultRunnerTTL is the runner's lease TTL: how long a dead runner's job
// waits before another process takes over.
const DefaultRunnerTTL = 10 * time.Second

// ErrNotRunner means the caller is no longer the elected runner of the job
// (its lease expired or it resigned): stop working on the job.
var ErrNotRunner = errors.New("not the elected runner of the migration job")

// RunnerOption configures CampaignRunner.
type RunnerOption func(*runnerConfig)

type runnerConfig struct {
	ttl     time.Duration
	log     *zap.Logger
	metrics *LockMetrics
}

// WithRunnerTTL sets the runner's lease TTL (default DefaultRunnerTTL),
// rounded up to whole seconds.
func WithRunnerTTL(d time.Duration) RunnerOption {
	return func(c *runnerConfig) {
		if d > 0 {
			c.ttl = d
		}
	}
}

// WithRunnerLogger sets the logger (default: none).
func WithRunnerLogger(l *zap.Logger) RunnerOption {
	return func(c *runnerConfig) {
		if l != nil {
			c.log = l
		}
	}
}

// WithRunnerMetrics records the runner's migration locks in m.
func WithRunnerMetrics(m *LockMetrics) RunnerOption { return func(c *runnerConfig) { c.metrics = m } }

// Runner is the elected runner of one shard's migration job.
type Runner struct {
	store *JobStore
	shard int
	id    string
	cfg   runnerConfig
	log   *zap.Logger
	lead  *Leader
}

func runnersPrefix(cluster string, shard int) string {
	return runnersUnder(MigrationsPrefix(cluster), shard)
}

func runnersUnder(prefix string, shard int) string { return prefix + "runners/" + shardPart(shard) }

// CampaignRunner blocks until the caller (id: e.g. the proxy id, or
// host:pid of a `convoy migrate` worker) is the elected runner of shard's
// job, or ctx ends. Several processes may campaign for one shard; the others
// wait, and the first of them takes over when the runner's lease is gone.
// The job record need not exist: election is per shard.
func CampaignRunner(ctx context.Context, store *JobStore, shard int, id string, opts ...RunnerOption) (*Runner, error) {
	if store.err != nil {
		return nil, store.err
	}
	if err := validShard(shard); err != nil {
		return nil, err
	}
	if err := validKeyPart("runner id", id); err != nil {
		return nil, err
	}
	cfg := runnerConfig{ttl: DefaultRunnerTTL, log: zap.NewNop()}
	for _, o := range opts {
		o(&cfg)
	}
	t0 := time.Now()
	lead, err := Elect(ctx, store.cli, runnersUnder(store.prefix, shard), id, cfg.ttl)
	if err != nil {
		return nil, fmt.Errorf("coord: runner %s of shard %d: %w", id, shard, err)
	}
	r := &Runner{store: store, shard: shard, id: id, cfg: cfg, lead: lead,
		log: cfg.log.With(zap.String("cluster", store.cluster), zap.Int("shard", shard), zap.String("runner", id),
			zap.String("lease", leaseHex(lead.Lease())))}
	r.log.Info("elected migration runner", zap.Duration("waited", time.Since(t0)))
	return r, nil
}

// ID is the runner's id, as given to CampaignRunner.
func (r *Runner) ID() string { return r.id }

// Shard is the shard whose job the runner runs.
func (r *Runner) Shard() int { return r.shard }

// Lease is the runner's session lease, which also carries its migration
// locks and its switch turn.
func (r *Runner) Lease() clientv3.LeaseID { return r.lead.Lease() }

// Done is closed when the runner's lease is no longer kept alive (expired,
// etcd unreachable for a TTL, or Close): stop working on the job.
func (r *Runner) Done() <-chan struct{} { return r.lead.Done() }

// Close resigns and revokes the lease, which removes the election key (and
// any lock left under it) at once, so a waiting candidate takes over now
// rather than after a TTL. Idempotent.
func (r *Runner) Close() error {
	if err := r.lead.Close(); err != nil {
		return fmt.Errorf("coord: runner %s of shard %d: %w (it expires within %s)", r.id, r.shard, err, r.cfg.ttl)
	}
	r.log.Info("migration runner resigned")
	return nil
}

// runnerGuard is the ownership condition added to a runner's writes.
type runnerGuard struct {
	key   string
	rev   int64
	id    string
	shard int
}

func (r *Runner) guard() *runnerGuard {
	return &runnerGuard{key: r.lead.Key(), rev: r.lead.Rev(), id: r.id, shard: r.shard}
}

// cmps returns base plus the ownership compare; a nil guard adds nothing.
func (g *runnerGuard) cmps(base ...clientv3.Cmp) []clientv3.Cmp {
	if g == nil {
		return base
	}
	return append(base, clientv3.Compare(clientv3.CreateRevision(g.key), "=", g.rev))
}

func (g *runnerGuard) lost() error {
	return fmt.Errorf("coord: %w: runner %s of shard %d (its election key %s is gone)", ErrNotRunner, g.id, g.shard, g.key)
}

// Elected asks etcd whether the runner still holds its election, by a
// linearizable read of its election key: ErrNotRunner once the key is gone,
// even if the runner's session has not noticed yet. A runner's writes
// outside etcd (the dual-write queue's replay) call it just before they
// commit, so one whose lease expired stops there instead of racing its
// successor.
func (r *Runner) Elected(ctx context.Context) error {
	select {
	case <-r.Done():
		return r.guard().lost()
	default:
	}
	resp, err := r.store.cli.Txn(ctx).If(r.guard().cmps()...).Commit()
	if err != nil {
		return fmt.Errorf("coord: runner %s of shard %d: read its election key: %w", r.id, r.shard, err)
	}
	if !resp.Succeeded {
		return r.guard().lost()
	}
	return nil
}

// Job reads the job record of the runner's shard.
func (r *Runner) Job(ctx context.Context) (Job, error) { return r.store.Get(ctx, r.shard) }

// SaveJob is JobStore.Update fenced by the election: it fails with
// ErrNotRunner once the runner's election key is gone, even if the process
// has not noticed yet.
func (r *Runner) SaveJob(ctx context.Context, job Job) (Job, error) { return r.SaveJobWith(ctx, job) }

// SaveJobWith is SaveJob with more writes in the same transaction (the
// archiver records a catalogued file and its checkpoint at once, so no
// crash leaves one without the other).
func (r *Runner) SaveJobWith(ctx context.Context, job Job, also ...clientv3.Op) (Job, error) {
	if job.Shard != r.shard {
		return Job{}, fmt.Errorf("coord: runner of shard %d cannot write the job of shard %d", r.shard, job.Shard)
	}
	return r.store.update(ctx, job, r.guard(), also...)
}

// DeleteJob is JobStore.Delete fenced by the election.
func (r *Runner) DeleteJob(ctx context.Context, job Job) error {
	if job.Shard != r.shard {
		return fmt.Errorf("coord: runner of shard %d cannot delete the job of shard %d", r.shard, job.Shard)
	}
	return r.store.delete(ctx, job, r.guard())
}

// RunnerOf returns the id of the elected runner of shard's job, and false
// when nobody campaigns for it (for SHOW MIGRATIONS).
func RunnerOf(ctx context.Context, cli *clientv3.Client, cluster string, shard int) (string, bool, error) {
	if err := validKeyPart("cluster name", cluster); err != nil {
		return "", false, err
	}
	if err := validShard(shard); err != nil {
		return "", false, err
	}
	prefix := runnersPrefix(cluster, shard) + "/"
	resp, err := cli.Get(ctx, prefix, clientv3.WithFirstCreate()...)
	if err != nil {
		return "", false, fmt.Errorf("coord: read the runner of shard %d: %w", shard, err)
	}
	if len(resp.Kvs) == 0 {
		return "", false, nil
	}
	return strings.TrimSpace(string(resp.Kvs[0].Value)), true, nil
}
