package coord

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/convoy-im/convoy/internal/etcdtest"
)

// waitFor polls cond every 10 ms until it holds (true) or within passes
// (false); for goroutines other than the test's, where eventually's Fatal
// is not allowed.
func waitFor(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// history returns the events under prefix from revision from to the
// current one, read back from etcd's history.
func history(t *testing.T, cli *clientv3.Client, prefix string, from int64) []*clientv3.Event {
	t.Helper()
	now, err := cli.Get(etcdtest.Ctx(t), prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	var out []*clientv3.Event
	if now.Header.Revision < from {
		return nil
	}
	for resp := range cli.Watch(etcdtest.Ctx(t), prefix, clientv3.WithPrefix(), clientv3.WithRev(from)) {
		if err := resp.Err(); err != nil {
			t.Fatalf("history of %s: %v", prefix, err)
		}
		out = append(out, resp.Events...)
		if resp.Header.Revision >= now.Header.Revision {
			break
		}
	}
	return out
}

// revisionOf is the revision of the first put (or deletion) of key in evs
// (0 if none).
func revisionOf(evs []*clientv3.Event, deleted bool, key string) int64 {
	for _, ev := range evs {
		if (ev.Type == clientv3.EventTypeDelete) == deleted && string(ev.Kv.Key) == key {
			return ev.Kv.ModRevision
		}
	}
	return 0
}

func currentRevision(t *testing.T, cli *clientv3.Client) int64 {
	t.Helper()
	resp, err := cli.Get(etcdtest.Ctx(t), "/", clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// TestSwitchTurnSerializes: two shards' switches started together run one
// after the other. The second waits for its turn holding nothing (no lock,
// so no proxy holds its shard while the first switch runs), then flips the
// routes the first left; neither aborts. Without the turn the second took
// its lock during the first's switch and its flip lost the race on the
// route document.
func TestSwitchTurnSerializes(t *testing.T) {
	const cluster, a, b = "turn", 5, 6
	env := newLockEnv(t, cluster, a, b)
	ps := env.proxies(t, 3*time.Second, newFakeHolder("pa"), newFakeHolder("pb"))
	runners := map[int]*Runner{a: campaign(t, env.jobs, a, "ma"), b: campaign(t, env.jobs, b, "mb")}
	v0 := env.routesVersion(t)
	from := currentRevision(t, env.cli) + 1

	count := func(prefix string) int64 {
		resp, err := env.cli.Get(context.Background(), prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return -1
		}
		return resp.Count
	}
	locked := func(shard int) bool { return count(LockKey(cluster, shard)) == 1 }
	var first atomic.Int32
	flip := func(shard, other int) func(context.Context, *SwitchTx) error {
		return func(ctx context.Context, tx *SwitchTx) error {
			if first.CompareAndSwap(0, int32(shard)) {
				// Both Switch calls started together: let the other one
				// get as far as it can while this one holds its shard.
				if !waitFor(3*time.Second, func() bool { return count(SwitchTurnPrefix(cluster)) == 2 || locked(other) }) {
					t.Errorf("shard %d's switch neither queued for its turn nor locked its shard", other)
				}
			}
			if locked(other) {
				t.Errorf("during shard %d's switch, shard %d is locked too", shard, other)
			}
			for _, p := range ps {
				if s := p.holder.state(other); s == "held" {
					t.Errorf("during shard %d's switch, %s holds shard %d", shard, p.id, other)
				}
			}
			return flipTo(shard)(ctx, tx)
		}
	}
	type result struct {
		res SwitchResult
		err error
	}
	results := map[int]result{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, sh := range []int{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := runners[sh].Switch(etcdtest.Ctx(t), SwitchOptions{}, flip(sh, a+b-sh))
			mu.Lock()
			results[sh] = result{res, err}
			mu.Unlock()
		}()
	}
	wg.Wait()
	for _, sh := range []int{a, b} {
		if r := results[sh]; r.err != nil || !r.res.Flipped || r.res.Attempts != 1 {
			t.Errorf("shard %d: Switch = %+v, %v; want flipped at the first attempt", sh, r.res, r.err)
		}
	}
	if v := env.routesVersion(t); v != v0+2 {
		t.Errorf("routes at version %d, want %d (both flips)", v, v0+2)
	}
	// The second lock was taken after the first was removed.
	one := int(first.Load())
	two := a + b - one
	evs := history(t, env.cli, LocksPrefix(cluster), from)
	removed, taken := revisionOf(evs, true, LockKey(cluster, one)), revisionOf(evs, false, LockKey(cluster, two))
	if removed == 0 || taken <= removed {
		t.Errorf("shard %d's lock taken at revision %d, shard %d's removed at %d: want one after the other", two, taken, one, removed)
	}
	if n := count(SwitchTurnPrefix(cluster)); n != 0 {
		t.Errorf("%d switch turn keys left", n)
	}
	waitReleased(t, a, 3*time.Second, "shard a not released", ps...)
	waitReleased(t, b, 3*time.Second, "shard b not released", ps...)
}

// TestSwitchTurnHolderDies: a runner that dies holding the switch turn
// stalls the others for its lease TTL at most; a runner waiting for its
// turn holds nothing and gives up when its context ends.
func TestSwitchTurnHolderDies(t *testing.T) {
	const cluster, a, b = "turndies", 5, 6
	env := newLockEnv(t, cluster, a, b)
	ps := env.proxies(t, 3*time.Second, newFakeHolder("pa"))
	mcli := etcdtest.Client(t, env.e.Endpoints())
	ra := campaign(t, NewJobStore(mcli, cluster), a, "ma", WithRunnerTTL(2*time.Second))
	rb := campaign(t, env.jobs, b, "mb")

	turn, err := ra.takeTurn(etcdtest.Ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	// Waiting for the turn ends with the context, with no lock taken and
	// no place left in the queue.
	short, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err = rb.Switch(short, SwitchOptions{}, flipTo(b))
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Switch while another runner has the turn, 300 ms context: %v, want the deadline", err)
	}
	if locks, _ := ListLocks(etcdtest.Ctx(t), env.cli, cluster); len(locks) != 0 {
		t.Fatalf("locks after a switch that never had its turn: %+v", locks)
	}
	if resp, err := env.cli.Get(etcdtest.Ctx(t), SwitchTurnPrefix(cluster), clientv3.WithPrefix(), clientv3.WithKeysOnly()); err != nil ||
		len(resp.Kvs) != 1 || string(resp.Kvs[0].Key) != turn.key {
		t.Fatalf("switch turn keys after the wait gave up: %v, %v; want only the holder's", resp.Kvs, err)
	}
	if s := ps[0].holder.state(b); s != "" {
		t.Fatalf("the proxy's shard %d is %q after a switch that never had its turn", b, s)
	}

	// The holder dies: its turn goes with its lease.
	from := currentRevision(t, env.cli) + 1
	mcli.Close()
	res, err := rb.Switch(etcdtest.Ctx(t), SwitchOptions{}, flipTo(b))
	if err != nil || !res.Flipped {
		t.Fatalf("Switch after the turn's holder died: %+v, %v", res, err)
	}
	evs := history(t, env.cli, MigrationsPrefix(cluster), from)
	expired, taken := revisionOf(evs, true, turn.key), revisionOf(evs, false, LockKey(cluster, b))
	if expired == 0 || taken <= expired {
		t.Errorf("shard %d's lock taken at revision %d, the dead runner's turn expired at %d: want after", b, taken, expired)
	}
	waitReleased(t, b, 3*time.Second, "the proxy did not release", ps...)
}
