package coord

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// One switch at a time per cluster
//
// Every switch flips the one route document by compare-and-swap on the
// version it read when it took its shard's lock. Two shards switching at
// once would both hold their shard's writes, then race on that key: the
// loser's flip fails and it aborts, having paused its shard's writes for
// nothing. So a runner first takes the cluster's switch turn, before its
// shard's lock, and gives it back after the lock is removed. The turn is
// etcd's mutex recipe (concurrency.Mutex): a key switching/<lease> under
// the runner's lease, the oldest key's runner switches, the others watch
// the key just ahead of theirs. It is written here rather than taken from
// concurrency.Mutex because its waits must end with the caller's context or
// the runner's lease (Mutex cleans up with the client's context, unbounded
// while etcd is down), its value names the shard ahead for the waiters'
// logs, and its key is compared in the transactions that take the shard's
// lock and flip the routes. A runner waiting for its turn holds nothing; a
// dead runner's turn goes with its lease, after the runner TTL at most.

// SwitchTurnPrefix is the etcd prefix of the runners queued for a
// cluster's switch turn.
func SwitchTurnPrefix(cluster string) string { return MigrationsPrefix(cluster) + "switching/" }

// turnRecord is the value of a runner's switch turn key.
type turnRecord struct {
	Shard  int       `json:"shard"`
	Runner string    `json:"runner"`
	Since  time.Time `json:"since"`
}

// switchTurn is a runner's place in the queue for the switch turn.
type switchTurn struct {
	key string
	rev int64 // the key's CreateRevision
}

// owns is the compare that the runner still has its turn.
func (t *switchTurn) owns() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(t.key), "=", t.rev)
}

// takeTurn queues the runner for the switch turn and waits until every
// runner queued before it is gone, or ctx ends, or the runner loses its
// lease (its key is then removed). A key of this runner's lease left by an
// earlier attempt keeps its place.
func (r *Runner) takeTurn(ctx context.Context) (*switchTurn, error) {
	cli, prefix := r.store.cli, SwitchTurnPrefix(r.store.cluster)
	key := prefix + leaseHex(r.Lease())
	val, _ := json.Marshal(turnRecord{Shard: r.shard, Runner: r.id, Since: time.Now().UTC()})
	resp, err := cli.Txn(ctx).
		If(r.guard().cmps(clientv3.Compare(clientv3.CreateRevision(key), "=", 0))...).
		Then(clientv3.OpPut(key, string(val), clientv3.WithLease(r.Lease()))).
		Else(clientv3.OpGet(key, clientv3.WithKeysOnly()), clientv3.OpGet(r.lead.Key(), clientv3.WithKeysOnly())).
		Commit()
	if err != nil {
		// Unanswered: the key may exist, and it would stall every other
		// shard's switch for as long as this runner lives.
		_ = r.releaseTurn(&switchTurn{key: key})
		return nil, fmt.Errorf("coord: shard %d: queue for the switch turn: %w", r.shard, err)
	}
	turn := &switchTurn{key: key, rev: resp.Header.Revision}
	if !resp.Succeeded {
		own, elected := resp.Responses[0].GetResponseRange().GetKvs(), resp.Responses[1].GetResponseRange().GetKvs()
		if len(elected) == 0 || elected[0].CreateRevision != r.lead.Rev() || len(own) == 0 {
			return nil, r.guard().lost()
		}
		turn.rev = own[0].CreateRevision
	}
	if err := r.waitTurn(ctx, turn); err != nil {
		if rerr := r.releaseTurn(turn); rerr != nil {
			err = fmt.Errorf("%w; %w", err, rerr)
		}
		return nil, err
	}
	return turn, nil
}

// waitTurn waits until no key older than the turn's is left under the
// prefix: each time for the youngest of them, as concurrency.Mutex does,
// so that one deletion wakes one waiter.
func (r *Runner) waitTurn(ctx context.Context, turn *switchTurn) error {
	cli, prefix := r.store.cli, SwitchTurnPrefix(r.store.cluster)
	t0 := time.Now()
	logged := ""
	for {
		resp, err := cli.Get(ctx, prefix, append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(turn.rev-1))...)
		if err != nil {
			return fmt.Errorf("coord: shard %d: wait for the switch turn: %w", r.shard, err)
		}
		if len(resp.Kvs) == 0 {
			if logged != "" {
				r.log.Info("switch turn taken", zap.Duration("waited", time.Since(t0)))
			}
			return nil
		}
		ahead := resp.Kvs[0]
		if string(ahead.Key) != logged {
			var rec turnRecord
			_ = json.Unmarshal(ahead.Value, &rec)
			r.log.Info("waiting for another shard's switch to end (one switch at a time per cluster); nothing is held meanwhile",
				zap.Int("ahead_shard", rec.Shard), zap.String("ahead_runner", rec.Runner), zap.Time("ahead_since", rec.Since))
			logged = string(ahead.Key)
		}
		if err := r.waitDeleted(ctx, string(ahead.Key), resp.Header.Revision); err != nil {
			return err
		}
	}
}

// waitDeleted waits until key is deleted after revision rev. A broken
// watch returns nil: the caller reads again.
func (r *Runner) waitDeleted(ctx context.Context, key string, rev int64) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pending := startWatch(wctx, r.store.cli, key, clientv3.WithRev(rev+1), clientv3.WithFilterPut())
	var wch clientv3.WatchChan
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("coord: shard %d: wait for the switch turn: %w", r.shard, ctx.Err())
		case <-r.Done():
			return r.guard().lost()
		case ch := <-pending:
			pending, wch = nil, ch
		case resp, ok := <-wch:
			if !ok || resp.Canceled || resp.Err() != nil || len(resp.Events) > 0 {
				return nil
			}
		}
	}
}

// releaseTurn removes the runner's turn key. It retries while etcd does not
// answer, until the runner's lease is lost (the key goes with it): a turn
// left behind would stall every other shard's switch.
func (r *Runner) releaseTurn(turn *switchTurn) error {
	err := r.untilAnswered("give back the switch turn", func(ctx context.Context) error {
		_, err := r.store.cli.Delete(ctx, turn.key)
		return err
	})
	if err != nil {
		return fmt.Errorf("coord: shard %d: the switch turn could not be given back before the runner's lease was lost; it expires with it: %w", r.shard, err)
	}
	return nil
}

// untilAnswered runs op, each attempt bounded, until etcd answers it or the
// runner's lease is lost (whatever op removes then goes with the lease). It
// is for the removals others wait for (the shard's lock, the switch turn),
// which must not be given up while the lease keeps their keys alive.
func (r *Runner) untilAnswered(what string, op func(context.Context) error) error {
	backoff := 50 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := op(ctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-r.Done():
			return err
		case <-time.After(backoff):
		}
		if backoff == 50*time.Millisecond {
			r.log.Warn("cannot "+what+" yet; retrying until etcd answers or the runner's lease is lost", zap.Error(err))
		}
		backoff = min(2*backoff, time.Second)
		if conn := r.store.cli.ActiveConnection(); conn != nil {
			conn.ResetConnectBackoff()
		}
	}
}
