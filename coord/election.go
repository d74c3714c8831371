package coord

import (
	"context"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
)

// Leader is one process elected under an etcd prefix: etcd's
// concurrency.Election, one key per candidate under its session lease, the
// oldest key leading. The lease is kept alive by the session; if the
// process dies or loses etcd for a TTL, the lease expires, the key goes and
// the next candidate's Elect returns. Migration job runners (runner.go) and
// the search indexers (one per datasource, package search) are elected
// this way.
type Leader struct {
	cli      *clientv3.Client
	session  *concurrency.Session
	election *concurrency.Election
	// The election key and its CreateRevision, fixed once elected (the
	// Election clears its own copy on Resign).
	key string
	rev int64

	closeOnce sync.Once
	closeErr  error
}

// Elect blocks until id leads the election under prefix, or ctx ends.
// ttl is the lease (rounded up to whole seconds): how long a dead leader
// holds the election before the next candidate takes over.
func Elect(ctx context.Context, cli *clientv3.Client, prefix, id string, ttl time.Duration) (*Leader, error) {
	secs := int((ttl + time.Second - 1) / time.Second)
	// Grant the lease here, bounded: a session given a context would tie
	// its keepalive to it, and one without would grant unboundedly.
	gctx, cancel := context.WithTimeout(ctx, registerTimeout)
	grant, err := cli.Grant(gctx, int64(secs))
	cancel()
	if err != nil {
		return nil, fmt.Errorf("grant lease: %w", err)
	}
	session, err := concurrency.NewSession(cli, concurrency.WithTTL(secs), concurrency.WithLease(grant.ID))
	if err != nil {
		return nil, fmt.Errorf("keep the lease alive: %w", err)
	}
	l := &Leader{cli: cli, session: session, election: concurrency.NewElection(session, prefix)}
	if err := l.election.Campaign(ctx, id); err != nil {
		l.abandon()
		return nil, fmt.Errorf("campaign: %w", err)
	}
	select {
	case <-session.Done():
		l.abandon()
		return nil, fmt.Errorf("%w: the lease expired during the campaign", ErrNotRunner)
	default:
	}
	l.key, l.rev = l.election.Key(), l.election.Rev()
	return l, nil
}

// abandon drops a failed candidate's session and revokes its lease,
// briefly bounded.
func (l *Leader) abandon() {
	l.session.Orphan()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, _ = l.cli.Revoke(ctx, l.session.Lease())
}

// Lease is the leader's session lease.
func (l *Leader) Lease() clientv3.LeaseID { return l.session.Lease() }

// Done is closed when the lease is no longer kept alive (expired, etcd
// unreachable for a TTL, or Close): stop leading.
func (l *Leader) Done() <-chan struct{} { return l.session.Done() }

// Key is the leader's election key and Rev its CreateRevision.
func (l *Leader) Key() string { return l.key }
func (l *Leader) Rev() int64  { return l.rev }

// Owns is the compare that fences a leader's writes: it fails once the
// election key is gone, even if the process has not noticed yet.
func (l *Leader) Owns() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(l.key), "=", l.rev)
}

// Close resigns and revokes the lease, which removes the election key (and
// anything else under the lease) at once, so a waiting candidate takes
// over now rather than after a TTL. Idempotent.
func (l *Leader) Close() error {
	l.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = l.election.Resign(ctx)
		cancel()
		l.session.Orphan()
		ctx, cancel = context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if _, err := l.cli.Revoke(ctx, l.session.Lease()); err != nil {
			l.closeErr = fmt.Errorf("revoke lease: %w", err)
		}
	})
	return l.closeErr
}

// Campaign runs work for as long as id leads the election under prefix,
// and campaigns again whenever work returns (the lease lost, a failure),
// until ctx ends: one process at a time does the work, and another takes
// over when it dies. A work that keeps failing at once is campaigned for
// at most every maxBackoff (30 s), doubling from a second; one that ran
// for a minute starts over from a second. what names the work in logs.
func Campaign(ctx context.Context, cli *clientv3.Client, prefix, id string, ttl time.Duration, log *zap.Logger, what string,
	work func(ctx context.Context, lead *Leader) error) {
	const maxBackoff = 30 * time.Second
	backoff := time.Second
	for ctx.Err() == nil {
		lead, err := Elect(ctx, cli, prefix, id, ttl)
		if err != nil {
			if ctx.Err() == nil {
				log.Warn(what+" campaign failed; retrying", zap.Error(err))
				sleepCtx(ctx, time.Second)
			}
			continue
		}
		log.Info("elected " + what)
		began := time.Now()
		err = work(ctx, lead)
		if cerr := lead.Close(); cerr != nil {
			log.Warn(what+" resign", zap.Error(cerr))
		}
		if ctx.Err() != nil {
			return
		}
		if time.Since(began) > time.Minute {
			backoff = time.Second
		}
		log.Warn(what+" stopped; campaigning again", zap.Error(err), zap.Duration("backoff", backoff))
		sleepCtx(ctx, backoff)
		backoff = min(2*backoff, maxBackoff)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
