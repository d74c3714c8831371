package coord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/convoy-im/convoy/internal/etcdtest"
	"github.com/convoy-im/convoy/internal/testsvc"
	"github.com/convoy-im/convoy/routecfg"
	"github.com/convoy-im/convoy/router"
)

// fakeHolder is a recording ShardHolder for one simulated proxy. Hold can be
// slowed (delay, ignoring ctx like a stuck engine), blocked until gate is
// closed (honouring ctx), or made to fail.
type fakeHolder struct {
	name   string
	routes func() int64 // the route version the proxy serves

	mu        sync.Mutex
	delay     time.Duration
	gate      chan struct{}
	fenceGate chan struct{} // Fence waits for it (a fence slow to go up), whatever its context says
	err       error
	log       []holdEvent
	states    map[int]string // shard -> held, failed, released
}

type holdEvent struct {
	kind         string // hold, fail, release
	shard        int
	at           time.Time
	routeVersion int64
	err          error
}

func newFakeHolder(name string) *fakeHolder {
	return &fakeHolder{name: name, states: map[int]string{}}
}

func (h *fakeHolder) Hold(ctx context.Context, shard int) (ShardHold, error) {
	h.mu.Lock()
	delay, gate, err := h.delay, h.gate, h.err
	h.mu.Unlock()
	time.Sleep(delay)
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if err != nil {
		return nil, err
	}
	h.record("hold", shard, nil)
	return &fakeHold{h: h, shard: shard}, nil
}

// fenceShard is the shard number the fake records write fence events
// under (fence, lift): a fence covers every shard.
const fenceShard = -1

// Fence records a write fence; its Lift records the lift.
func (h *fakeHolder) Fence(_ context.Context, err error) WriteFence {
	h.mu.Lock()
	gate := h.fenceGate
	h.mu.Unlock()
	if gate != nil {
		h.record("fencing", fenceShard, err)
		<-gate
	}
	h.record("fence", fenceShard, err)
	return &fakeFence{h: h}
}

type fakeFence struct {
	h    *fakeHolder
	once sync.Once
}

func (f *fakeFence) Lift() { f.once.Do(func() { f.h.record("lift", fenceShard, nil) }) }

func (h *fakeHolder) record(kind string, shard int, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch kind {
	case "hold":
		if s := h.states[shard]; s == "held" || s == "failed" {
			panic(fmt.Sprintf("%s: shard %d held twice", h.name, shard))
		}
		h.states[shard] = "held"
	case "fail":
		h.states[shard] = "failed"
	case "release":
		h.states[shard] = "released"
	case "fencing":
		h.states[shard] = "fencing"
	case "fence":
		if h.states[shard] == "fenced" {
			panic(fmt.Sprintf("%s: fenced twice", h.name))
		}
		h.states[shard] = "fenced"
	case "lift":
		h.states[shard] = "lifted"
	}
	h.log = append(h.log, holdEvent{kind: kind, shard: shard, at: time.Now(), routeVersion: h.routes(), err: err})
}

func (h *fakeHolder) state(shard int) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.states[shard]
}

func (h *fakeHolder) events(shard int) []holdEvent {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []holdEvent
	for _, e := range h.log {
		if e.shard == shard {
			out = append(out, e)
		}
	}
	return out
}

func (h *fakeHolder) kinds(shard int) string {
	var ks []string
	for _, e := range h.events(shard) {
		ks = append(ks, e.kind)
	}
	return strings.Join(ks, ",")
}

type fakeHold struct {
	h     *fakeHolder
	shard int
	once  sync.Once
}

func (f *fakeHold) Release() { f.h.record("release", f.shard, nil) }

func (f *fakeHold) Fail(err error) {
	ok := false
	f.once.Do(func() { ok = true })
	if !ok {
		panic("Fail called twice")
	}
	f.h.record("fail", f.shard, err)
}

// simProxy is one simulated Convoy: its own etcd client, registration,
// route watcher and lock follower with a fake holder.
type simProxy struct {
	id     string
	cli    *clientv3.Client
	reg    *Registration
	routes *routecfg.Watcher
	holder *fakeHolder
	fol    *LockFollower
}

func startProxy(t *testing.T, endpoints []string, cluster, id string, holder *fakeHolder, regTTL time.Duration, folOpts ...FollowerOption) *simProxy {
	t.Helper()
	cli := etcdtest.Client(t, endpoints)
	return startProxyWith(t, cli, cli, cluster, id, holder, regTTL, folOpts...)
}

// startProxyWith starts a proxy whose route watcher uses routesCli.
func startProxyWith(t *testing.T, cli, routesCli *clientv3.Client, cluster, id string, holder *fakeHolder, regTTL time.Duration, folOpts ...FollowerOption) *simProxy {
	t.Helper()
	p := &simProxy{id: id, cli: cli, holder: holder}
	p.reg = register(t, cli, cluster, ProxyInfo{ID: id}, WithTTL(regTTL))
	p.routes = startWatcher(t, routecfg.NewStore(routesCli, cluster), routecfg.WithReadTimeout(time.Second))
	holder.routes = func() int64 { return p.routes.Current().Version() }
	p.fol = NewLockFollower(cli, cluster, p.reg, p.routes, holder,
		append([]FollowerOption{WithFollowerLogger(etcdtest.Logger(t))}, folOpts...)...)
	if err := p.fol.Start(etcdtest.Ctx(t)); err != nil {
		t.Fatalf("proxy %s: follower Start: %v", id, err)
	}
	t.Cleanup(p.fol.Close)
	return p
}

// kill stops the proxy's registration without revoking its lease, then
// revokes the lease from outside: what etcd sees of a SIGKILLed proxy, at
// once instead of after a TTL.
func (p *simProxy) kill(t *testing.T, cli *clientv3.Client) {
	t.Helper()
	lease := p.reg.leaseID()
	p.reg.cancel()
	<-p.reg.done
	if _, err := cli.Revoke(etcdtest.Ctx(t), lease); err != nil {
		t.Fatalf("revoke %s's lease: %v", p.id, err)
	}
}

type lockEnv struct {
	e       *testsvc.Etcd
	cli     *clientv3.Client
	cluster string
	store   *routecfg.Store
	jobs    *JobStore
}

func newLockEnv(t *testing.T, cluster string, shards ...int) *lockEnv {
	t.Helper()
	e, cli := etcdtest.Start(t)
	env := &lockEnv{e: e, cli: cli, cluster: cluster, store: routecfg.NewStore(cli, cluster), jobs: NewJobStore(cli, cluster)}
	if err := env.store.Init(etcdtest.Ctx(t), etcdtest.Doc(t)); err != nil {
		t.Fatal(err)
	}
	for _, s := range shards {
		j := testJob(s)
		j.ID = fmt.Sprintf("mig-%04d", s)
		if _, err := env.jobs.Create(etcdtest.Ctx(t), j); err != nil {
			t.Fatal(err)
		}
	}
	return env
}

func (env *lockEnv) proxies(t *testing.T, regTTL time.Duration, holders ...*fakeHolder) []*simProxy {
	var ps []*simProxy
	for _, h := range holders {
		ps = append(ps, startProxy(t, env.e.Endpoints(), env.cluster, h.name, h, regTTL))
	}
	return ps
}

func (env *lockEnv) routesVersion(t *testing.T) int64 {
	t.Helper()
	doc, err := env.store.Get(etcdtest.Ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	return doc.Version
}

// flipTo moves shard to ds1/im_9 through the switch.
func flipTo(shard int) func(context.Context, *SwitchTx) error {
	return func(ctx context.Context, tx *SwitchTx) error {
		return tx.FlipRoutes(ctx, router.MoveShard(tx.Routes(), shard, "ds1", "im_9", nil))
	}
}

// checkReleases asserts every proxy released shard exactly once, last, with
// at least route version need, and returns the longest hold.
func checkReleases(t *testing.T, shard int, need int64, ps ...*simProxy) time.Duration {
	t.Helper()
	var longest time.Duration
	for _, p := range ps {
		evs := p.holder.events(shard)
		if len(evs) < 2 || evs[0].kind != "hold" || evs[len(evs)-1].kind != "release" {
			t.Errorf("%s: shard %d events %s, want hold first and release last", p.id, shard, p.holder.kinds(shard))
			continue
		}
		rel := evs[len(evs)-1]
		if rel.routeVersion < need {
			t.Errorf("%s released shard %d serving route version %d, want >= %d", p.id, shard, rel.routeVersion, need)
		}
		longest = max(longest, rel.at.Sub(evs[0].at))
	}
	return longest
}

// waitReleased waits until every proxy of ps released shard.
func waitReleased(t *testing.T, shard int, within time.Duration, what string, ps ...*simProxy) {
	t.Helper()
	etcdtest.Eventually(t, within, what, func() bool {
		for _, p := range ps {
			if p.holder.state(shard) != "released" {
				return false
			}
		}
		return true
	})
}

func lockMetrics(t *testing.T, reg *prometheus.Registry) *LockMetrics {
	t.Helper()
	m, err := NewLockMetrics(reg, "test")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// histCount returns the sample count of a histogram (first series whose
// labels contain label, if given).
func histCount(t *testing.T, reg *prometheus.Registry, name, label string) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label == "" || strings.Contains(m.String(), label) {
				return m.GetHistogram().GetSampleCount()
			}
		}
	}
	return 0
}

func TestMigrationLockAllAck(t *testing.T) {
	const shard = 5
	env := newLockEnv(t, "lock", shard)
	mreg := prometheus.NewRegistry()
	m := lockMetrics(t, mreg)
	var holders []*fakeHolder
	for _, n := range []string{"pa", "pb", "pc"} {
		holders = append(holders, newFakeHolder(n))
	}
	ps := env.proxies(t, 3*time.Second, holders...)
	r := campaign(t, env.jobs, shard, "migrator", WithRunnerMetrics(m))
	v0 := env.routesVersion(t)

	ran := false
	res, err := r.Switch(etcdtest.Ctx(t), SwitchOptions{}, func(ctx context.Context, tx *SwitchTx) error {
		ran = true
		for _, p := range ps {
			if s := p.holder.state(shard); s != "held" {
				t.Errorf("during the flip %s's shard %d is %q, want held", p.id, shard, s)
			}
			if s := p.holder.state(shard + 1); s != "" {
				t.Errorf("during the flip %s's shard %d is %q: other shards must not be touched", p.id, shard+1, s)
			}
		}
		locks, err := ListLocks(ctx, env.cli, "lock")
		if err != nil || len(locks) != 1 || locks[0].Shard != shard || locks[0].State != LockHolding || locks[0].RouteVersion != v0+1 {
			t.Errorf("ListLocks during the switch = %+v %v", locks, err)
		}
		if tx.RouteVersion() != v0+1 {
			t.Errorf("RouteVersion() = %d, want %d", tx.RouteVersion(), v0+1)
		}
		return flipTo(shard)(ctx, tx)
	})
	if err != nil || !ran {
		t.Fatalf("Switch: %v (callback ran: %v)", err, ran)
	}
	if !res.Flipped || res.RouteVersion != v0+1 || strings.Join(res.Acked, ",") != "pa,pb,pc" || len(res.Missing)+len(res.Vanished) != 0 {
		t.Fatalf("Switch result %+v", res)
	}
	if v := env.routesVersion(t); v != v0+1 {
		t.Fatalf("routes at version %d after the switch, want %d", v, v0+1)
	}
	doc, _ := env.store.Get(etcdtest.Ctx(t))
	snap, err := router.NewSnapshot(doc)
	if err != nil {
		t.Fatal(err)
	}
	if tg := snap.Target(shard); tg.Datasource != "ds1" || tg.Database != "im_9" {
		t.Fatalf("shard %d routed to %+v after the switch", shard, tg)
	}
	waitReleased(t, shard, 3*time.Second, "not every proxy released the shard", ps...)
	pause := checkReleases(t, shard, v0+1, ps...)
	t.Logf("switch: ack wait %s, lock held %s, longest proxy hold %s", res.AckWait.Round(time.Millisecond),
		res.Held.Round(time.Millisecond), pause.Round(time.Millisecond))
	if locks, _ := ListLocks(etcdtest.Ctx(t), env.cli, "lock"); len(locks) != 0 {
		t.Errorf("locks left: %+v", locks)
	}
	etcdtest.Eventually(t, 3*time.Second, "acknowledgements not removed after the release", func() bool {
		resp, err := env.cli.Get(etcdtest.Ctx(t), AcksPrefix("lock", shard), clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err == nil && resp.Count == 0
	})
	if n := histCount(t, mreg, MetricLockSeconds, "switched"); n != 1 {
		t.Errorf("%s{outcome=switched} count = %d, want 1", MetricLockSeconds, n)
	}
	if got := etcdtest.Metric(t, mreg, MetricLockAcks); got != 3 {
		t.Errorf("%s = %v, want 3", MetricLockAcks, got)
	}

	// A second switch of the shard (a rollback) works the same way.
	res, err = r.Switch(etcdtest.Ctx(t), SwitchOptions{}, func(ctx context.Context, tx *SwitchTx) error {
		return tx.FlipRoutes(ctx, router.MoveShard(tx.Routes(), shard, "ds0", "im_0", nil))
	})
	if err != nil || !res.Flipped || res.RouteVersion != v0+2 {
		t.Fatalf("second Switch: %+v %v", res, err)
	}
	etcdtest.Eventually(t, 3*time.Second, "not every proxy released the shard after the second switch", func() bool {
		for _, p := range ps {
			if evs := p.holder.events(shard); len(evs) != 4 || evs[3].kind != "release" {
				return false
			}
		}
		return true
	})
	for _, p := range ps {
		if rel := p.holder.events(shard)[3]; rel.routeVersion < v0+2 {
			t.Errorf("%s released after the second switch at route version %d, want >= %d", p.id, rel.routeVersion, v0+2)
		}
	}
}

func TestMigrationLockSlowHolderAborts(t *testing.T) {
	const shard = 5
	env := newLockEnv(t, "slow", shard)
	mreg := prometheus.NewRegistry()
	m := lockMetrics(t, mreg)
	slow := newFakeHolder("pc")
	slow.delay = 1500 * time.Millisecond // a stuck transaction, deaf to ctx
	ps := env.proxies(t, 3*time.Second, newFakeHolder("pa"), newFakeHolder("pb"), slow)
	r := campaign(t, env.jobs, shard, "migrator", WithRunnerMetrics(m))
	v0 := env.routesVersion(t)
	// An acknowledgement of another lock (an earlier one) written during
	// the wait must not count for pc.
	go func() {
		for {
			if locks, err := ListLocks(context.Background(), env.cli, "slow"); err == nil && len(locks) == 1 {
				stale := fmt.Sprintf(`{"proxy":"pc","lock_revision":%d}`, locks[0].Revision-1)
				if _, err := env.cli.Put(context.Background(), AckKey("slow", shard, "pc"), stale); err != nil {
					t.Error(err)
				}
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()

	ran := false
	t0 := time.Now()
	res, err := r.Switch(etcdtest.Ctx(t), SwitchOptions{AckTimeout: 500 * time.Millisecond}, func(context.Context, *SwitchTx) error {
		ran = true
		return nil
	})
	took := time.Since(t0)
	if !errors.Is(err, ErrSwitchAborted) || ran || res.Flipped {
		t.Fatalf("Switch = %+v, %v (callback ran: %v), want ErrSwitchAborted without the callback", res, err, ran)
	}
	if strings.Join(res.Missing, ",") != "pc" || strings.Join(res.Acked, ",") != "pa,pb" {
		t.Errorf("acked %v missing %v, want pa,pb / pc", res.Acked, res.Missing)
	}
	// The lock went at the ack timeout; Switch returned later, once pc's
	// renewed registration showed it alive (no new attempt).
	if res.Held > 1200*time.Millisecond {
		t.Errorf("the lock was held %s with a 500 ms ack timeout", res.Held)
	}
	if res.Attempts != 1 {
		t.Errorf("%d attempts with a live proxy missing, want 1", res.Attempts)
	}
	t.Logf("lock held %s, Switch returned after %s", res.Held.Round(time.Millisecond), took.Round(time.Millisecond))
	if !strings.Contains(err.Error(), "pc") {
		t.Errorf("abort error %q does not name the missing proxy", err)
	}
	if v := env.routesVersion(t); v != v0 {
		t.Fatalf("routes at version %d after an abort, want %d", v, v0)
	}
	// Everyone is released, the slow proxy too once its Hold returns, with
	// the routes unchanged: no need to wait for any version.
	waitReleased(t, shard, 3*time.Second, "not every proxy released after the abort", ps...)
	checkReleases(t, shard, v0, ps...)
	for _, p := range ps[:2] {
		evs := p.holder.events(shard)
		if d := evs[1].at.Sub(t0.Add(res.Held)); d > 500*time.Millisecond {
			t.Errorf("%s released %s after the abort", p.id, d)
		}
	}
	if got := etcdtest.Metric(t, mreg, MetricLockAborts); got != 1 {
		t.Errorf("%s = %v, want 1", MetricLockAborts, got)
	}
	if locks, _ := ListLocks(etcdtest.Ctx(t), env.cli, "slow"); len(locks) != 0 {
		t.Errorf("locks left after the abort: %+v", locks)
	}
}

func TestMigrationLockProxyVanishes(t *testing.T) {
	const shard = 5
	env := newLockEnv(t, "vanish", shard)
	stuck := newFakeHolder("pc")
	stuck.gate = make(chan struct{})
	t.Cleanup(func() { close(stuck.gate) })
	ps := env.proxies(t, 3*time.Second, newFakeHolder("pa"), newFakeHolder("pb"), stuck)
	r := campaign(t, env.jobs, shard, "migrator")
	v0 := env.routesVersion(t)

	type result struct {
		res SwitchResult
		err error
	}
	done := make(chan result, 1)
	t0 := time.Now()
	go func() {
		res, err := r.Switch(context.Background(), SwitchOptions{AckTimeout: 4 * time.Second, MaxHold: 6 * time.Second}, flipTo(shard))
		done <- result{res, err}
	}()
	etcdtest.Eventually(t, 3*time.Second, "pa and pb did not acknowledge", func() bool {
		resp, err := env.cli.Get(etcdtest.Ctx(t), AcksPrefix("vanish", shard), clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err == nil && resp.Count == 2
	})
	ps[2].kill(t, env.cli) // SIGKILL: its registration lease goes away
	var got result
	select {
	case got = <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Switch did not return after the unacknowledged proxy vanished")
	}
	took := time.Since(t0)
	if got.err != nil || !got.res.Flipped || strings.Join(got.res.Vanished, ",") != "pc" {
		t.Fatalf("Switch = %+v, %v; want flipped without pc", got.res, got.err)
	}
	if took > 3*time.Second {
		t.Errorf("the switch took %s: it waited for the dead proxy instead of dropping it", took)
	}
	etcdtest.Eventually(t, 3*time.Second, "the live proxies did not release", func() bool {
		return ps[0].holder.state(shard) == "released" && ps[1].holder.state(shard) == "released"
	})
	checkReleases(t, shard, v0+1, ps[:2]...)
}

// TestMigrationLockLostBeforeFlip: the lock disappears while every proxy
// holds and before the flip, either with the migrator's lease (revoked) or
// deleted by hand (an operator cancelling): the proxies release at once
// under the unchanged routes, and the flip can no longer be written.
func TestMigrationLockLostBeforeFlip(t *testing.T) {
	const shard = 5
	env := newLockEnv(t, "lost", shard)
	ps := env.proxies(t, 3*time.Second, newFakeHolder("pa"), newFakeHolder("pb"), newFakeHolder("pc"))
	v0 := env.routesVersion(t)

	for i, tc := range []struct {
		name string
		lose func(context.Context, *Runner) error
		want error
	}{
		{"lease revoked", func(ctx context.Context, r *Runner) error { _, err := env.cli.Revoke(ctx, r.Lease()); return err }, ErrLockLost},
		{"lock deleted", func(ctx context.Context, r *Runner) error {
			_, err := env.cli.Delete(ctx, LockKey("lost", shard))
			return err
		}, ErrLockLost},
	} {
		r := campaign(t, env.jobs, shard, "migrator")
		var flipErr error
		res, err := r.Switch(etcdtest.Ctx(t), SwitchOptions{MaxHold: 10 * time.Second}, func(ctx context.Context, tx *SwitchTx) error {
			if err := tc.lose(ctx, r); err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			// The proxies release without waiting for the 10 s deadline.
			etcdtest.Eventually(t, 2*time.Second, tc.name+": proxies did not release after the lock vanished", func() bool {
				for _, p := range ps {
					if evs := p.holder.events(shard); len(evs) != 2*(i+1) || evs[len(evs)-1].kind != "release" {
						return false
					}
				}
				return true
			})
			flipErr = flipTo(shard)(ctx, tx)
			return flipErr
		})
		if !errors.Is(flipErr, tc.want) {
			t.Errorf("%s: FlipRoutes after the lock vanished: %v, want %v", tc.name, flipErr, tc.want)
		}
		if !errors.Is(err, ErrSwitchAborted) || res.Flipped {
			t.Errorf("%s: Switch = %+v, %v; want ErrSwitchAborted, not flipped", tc.name, res, err)
		}
		if v := env.routesVersion(t); v != v0 {
			t.Errorf("%s: routes at version %d, want %d", tc.name, v, v0)
		}
		r.Close()
	}
	checkReleases(t, shard, v0, ps...)
	for _, p := range ps {
		if k := p.holder.kinds(shard); k != "hold,release,hold,release" {
			t.Errorf("%s: %s, want hold,release twice", p.id, k)
		}
	}
}

// TestMigrationLockRunnerDiesAfterFlip: the migrator flips the routes and
// dies (its etcd client is closed) before removing the lock. The proxies
// keep the shard held until the lock's deadline, then fail its writes, and
// release only once the lock expired with the runner's lease and they serve
// the flipped routes.
func TestMigrationLockRunnerDiesAfterFlip(t *testing.T) {
	const shard = 5
	env := newLockEnv(t, "dies", shard)
	ps := env.proxies(t, 3*time.Second, newFakeHolder("pa"), newFakeHolder("pb"), newFakeHolder("pc"))
	mcli, err := clientv3.New(clientv3.Config{Endpoints: env.e.Endpoints(), DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer mcli.Close()
	r := campaign(t, NewJobStore(mcli, "dies"), shard, "migrator", WithRunnerTTL(2*time.Second))
	v0 := env.routesVersion(t)

	t0 := time.Now()
	res, err := r.Switch(etcdtest.Ctx(t), SwitchOptions{AckTimeout: time.Second, MaxHold: time.Second}, func(ctx context.Context, tx *SwitchTx) error {
		if err := flipTo(shard)(ctx, tx); err != nil {
			return err
		}
		mcli.Close() // the migrator is gone
		return nil
	})
	if err == nil || !res.Flipped {
		t.Fatalf("Switch = %+v, %v; want flipped with an error (lock not removed)", res, err)
	}
	t.Logf("Switch returned after %s: %v", time.Since(t0).Round(time.Millisecond), err)
	waitReleased(t, shard, 6*time.Second, "proxies did not release after the dead migrator's lock expired", ps...)
	checkReleases(t, shard, v0+1, ps...)
	for _, p := range ps {
		evs := p.holder.events(shard)
		if k := p.holder.kinds(shard); k != "hold,fail,release" {
			t.Errorf("%s: %s, want hold,fail,release (held writes failed at the 1 s deadline)", p.id, k)
			continue
		}
		if d := evs[1].at.Sub(evs[0].at); d < 700*time.Millisecond || d > 2*time.Second {
			t.Errorf("%s failed its held writes %s after holding, want about the 1 s deadline", p.id, d)
		}
		if !errors.Is(evs[1].err, ErrShardUnavailable) || !strings.Contains(evs[1].err.Error(), "deadline") {
			t.Errorf("%s: Fail(%v), want ErrShardUnavailable naming the deadline", p.id, evs[1].err)
		}
		t.Logf("%s: held %s, failed after %s, released after %s", p.id, evs[0].at.Sub(t0).Round(time.Millisecond),
			evs[1].at.Sub(evs[0].at).Round(time.Millisecond), evs[2].at.Sub(evs[0].at).Round(time.Millisecond))
	}
}

// TestMigrationLockEtcdRestart restarts etcd in the middle of two switches:
// before the flip (the flip is retried and lands) and after it (the lock
// removal waits for etcd). No proxy releases while etcd is down, and every
// release serves the flipped routes.
func TestMigrationLockEtcdRestart(t *testing.T) {
	env := newLockEnv(t, "restart", 5, 6)
	ps := env.proxies(t, 5*time.Second, newFakeHolder("pa"), newFakeHolder("pb"), newFakeHolder("pc"))
	v0 := env.routesVersion(t)

	type result struct {
		res SwitchResult
		err error
	}
	for i, shard := range []int{5, 6} {
		afterFlip := i == 1
		r := campaign(t, env.jobs, shard, "migrator", WithRunnerTTL(5*time.Second))
		stopReq, resumed := make(chan struct{}), make(chan struct{})
		done := make(chan result, 1)
		go func() {
			res, err := r.Switch(context.Background(), SwitchOptions{MaxHold: 15 * time.Second}, func(ctx context.Context, tx *SwitchTx) error {
				doc := router.MoveShard(tx.Routes(), shard, "ds1", "im_9", nil)
				if afterFlip {
					if err := tx.FlipRoutes(ctx, doc); err != nil {
						return err
					}
				}
				stopReq <- struct{}{}
				<-resumed
				if afterFlip {
					return nil
				}
				// etcd is back; the client may need a moment to reconnect.
				for {
					actx, cancel := context.WithTimeout(ctx, time.Second)
					err := tx.FlipRoutes(actx, doc)
					cancel()
					if err == nil || ctx.Err() != nil {
						return err
					}
					time.Sleep(100 * time.Millisecond)
				}
			})
			done <- result{res, err}
		}()
		select {
		case <-stopReq:
		case <-time.After(5 * time.Second):
			t.Fatal("the switch did not reach its callback")
		}
		env.e.Stop()
		if afterFlip {
			close(resumed) // the migrator now tries to remove the lock while etcd is down
		}
		time.Sleep(500 * time.Millisecond)
		for _, p := range ps {
			if s := p.holder.state(shard); s != "held" {
				t.Errorf("shard %d, etcd down: %s's shard is %q, want held", shard, p.id, s)
			}
		}
		t1 := time.Now()
		env.e.Start()
		t.Logf("shard %d: etcd restarted in %s", shard, time.Since(t1).Round(time.Millisecond))
		if !afterFlip {
			close(resumed)
		}
		var got result
		select {
		case got = <-done:
		case <-time.After(15 * time.Second):
			t.Fatal("Switch did not return after etcd restarted")
		}
		if got.err != nil || !got.res.Flipped {
			t.Fatalf("shard %d: Switch = %+v, %v; want flipped", shard, got.res, got.err)
		}
		need := v0 + int64(i) + 1
		waitReleased(t, shard, 10*time.Second, "proxies did not release after etcd restarted", ps...)
		checkReleases(t, shard, need, ps...)
		for _, p := range ps {
			evs := p.holder.events(shard)
			t.Logf("shard %d: %s %s, held %s", shard, p.id, p.holder.kinds(shard), evs[len(evs)-1].at.Sub(evs[0].at).Round(time.Millisecond))
		}
	}
}

// TestLockFollowerStartsUnderLock starts a proxy while a shard is locked:
// its Start holds the shard before returning (before it could serve a
// write), it acknowledges, and it releases with the others.
func TestLockFollowerStartsUnderLock(t *testing.T) {
	const shard = 5
	env := newLockEnv(t, "late", shard)
	ps := env.proxies(t, 3*time.Second, newFakeHolder("pa"), newFakeHolder("pb"))
	r := campaign(t, env.jobs, shard, "migrator")
	v0 := env.routesVersion(t)

	inFlip, proceed := make(chan struct{}), make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		_, err := r.Switch(context.Background(), SwitchOptions{MaxHold: 10 * time.Second}, func(ctx context.Context, tx *SwitchTx) error {
			close(inFlip)
			<-proceed
			return flipTo(shard)(ctx, tx)
		})
		errc <- err
	}()
	<-inFlip
	late := newFakeHolder("pz")
	pz := startProxy(t, env.e.Endpoints(), "late", "pz", late, 3*time.Second)
	if s := late.state(shard); s != "held" {
		t.Fatalf("after Start under a lock, the new proxy's shard %d is %q, want held", shard, s)
	}
	etcdtest.Eventually(t, 3*time.Second, "the new proxy did not acknowledge", func() bool {
		resp, err := env.cli.Get(etcdtest.Ctx(t), AckKey("late", shard, "pz"))
		return err == nil && len(resp.Kvs) == 1
	})
	close(proceed)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	ps = append(ps, pz)
	waitReleased(t, shard, 3*time.Second, "not every proxy released", ps...)
	checkReleases(t, shard, v0+1, ps...)
}

// TestLockFollowerFencesWhenRegistrationLapses: etcd goes away for longer
// than the registration TTL. A migrator could then switch any shard without
// this proxy (one whose job it knows or not), so the proxy refuses every
// sharded write (a write fence, not per-shard holds) until etcd answers
// again and its routes are re-read; then the fence lifts.
func TestLockFollowerFencesWhenRegistrationLapses(t *testing.T) {
	const shard = 5
	env := newLockEnv(t, "fence", shard)
	mreg := prometheus.NewRegistry()
	m := lockMetrics(t, mreg)
	h := newFakeHolder("pa")
	p := startProxy(t, env.e.Endpoints(), "fence", "pa", h, 2*time.Second, WithFollowerMetrics(m))
	v0 := env.routesVersion(t)

	t0 := time.Now()
	env.e.Stop()
	etcdtest.Eventually(t, 4*time.Second, "the writes were not fenced with etcd down", func() bool {
		return h.state(fenceShard) == "fenced"
	})
	t.Logf("fenced %s after etcd stopped (TTL 2 s)", time.Since(t0).Round(time.Millisecond))
	if evs := h.events(fenceShard); !errors.Is(evs[0].err, ErrShardUnavailable) || !strings.Contains(evs[0].err.Error(), "registration may have expired") {
		t.Errorf("fence error %v, want ErrShardUnavailable naming the registration", evs[0].err)
	}
	if s := h.state(shard); s != "" {
		t.Errorf("shard %d (a job, no lock) is %q: the fence covers it, no hold", shard, s)
	}
	if got := etcdtest.Metric(t, mreg, MetricWriteFenced); got != 1 {
		t.Errorf("%s = %v while fenced, want 1", MetricWriteFenced, got)
	}
	env.e.Start()
	etcdtest.Eventually(t, 10*time.Second, "the fence was not lifted after etcd came back", func() bool {
		return h.state(fenceShard) == "lifted"
	})
	if evs := h.events(fenceShard); len(evs) != 2 || evs[1].routeVersion < v0 {
		t.Errorf("fence events %s, the lift at route version %d, want fence,lift at >= %d", h.kinds(fenceShard), evs[len(evs)-1].routeVersion, v0)
	}
	if got := etcdtest.Metric(t, mreg, MetricWriteFenced); got != 0 {
		t.Errorf("%s = %v after the lift, want 0", MetricWriteFenced, got)
	}
	_ = p
}

// TestLockFollowerFenceUpAfterRenewal: the write fence goes up only after
// the registration was renewed and the locks and routes re-read (a fence
// waits for the transactions that wrote; on a loaded machine, or in a
// proxy resumed from SIGSTOP whose etcd answers at once, that is later
// than the renewal). The fence must still be lifted: it once stayed up
// for good, since the re-read that lifts it had come and gone before it
// was up (TestMigrationFailClosedProxies, paused drill, in CI).
func TestLockFollowerFenceUpAfterRenewal(t *testing.T) {
	env := newLockEnv(t, "fencelate")
	h := newFakeHolder("pa")
	gate := make(chan struct{})
	h.fenceGate = gate
	p := startProxy(t, env.e.Endpoints(), "fencelate", "pa", h, 2*time.Second)

	env.e.Stop()
	etcdtest.Eventually(t, 4*time.Second, "the fence did not start with etcd down", func() bool {
		return h.state(fenceShard) == "fencing"
	})
	env.e.Start()
	etcdtest.Eventually(t, 10*time.Second, "the registration was not renewed after etcd came back", func() bool {
		return time.Now().Before(p.reg.validUntil())
	})
	time.Sleep(500 * time.Millisecond) // the follower re-reads the locks and routes meanwhile (every 20 ms it looks)
	close(gate)
	etcdtest.Eventually(t, 10*time.Second, "the fence that went up after the renewal was never lifted", func() bool {
		return h.state(fenceShard) == "lifted"
	})
}

// TestLockFollowerCutOffProxy: one proxy alone is cut off from etcd (its
// connection stalls; etcd and the other proxy go on). A job is created and
// switched meanwhile, which the cut-off proxy cannot know of: its
// registration expires, the migrator no longer waits for it and flips the
// routes. The proxy must have refused every sharded write before the flip
// (its write fence is up before etcd can have expired it), and lifts the
// fence only once it serves the flipped routes.
func TestLockFollowerCutOffProxy(t *testing.T) {
	const shard = 7 // no job until the proxy is cut off
	env := newLockEnv(t, "cutoff")
	st := testsvc.StartRelay(t, strings.TrimPrefix(env.e.Endpoints()[0], "http://"))
	ha, hb := newFakeHolder("pa"), newFakeHolder("pb")
	relayed := etcdtest.Client(t, []string{"http://" + st.Addr()})
	// A 4 s TTL: the proxy fences 1 s before etcd can expire it, a margin
	// a loaded machine's scheduling keeps.
	pa := startProxyWith(t, relayed, relayed, "cutoff", "pa", ha, 4*time.Second)
	pb := startProxy(t, env.e.Endpoints(), "cutoff", "pb", hb, 4*time.Second)
	v0 := env.routesVersion(t)

	st.Pause(true)
	cut := time.Now()
	j := testJob(shard)
	j.ID = "mig-cutoff"
	if _, err := env.jobs.Create(etcdtest.Ctx(t), j); err != nil {
		t.Fatal(err)
	}
	r := campaign(t, env.jobs, shard, "migrator")
	var res SwitchResult
	var err error
	var flippedAt time.Time
	for attempt := 0; attempt < 20; attempt++ { // aborts until pa's registration expires
		res, err = r.Switch(etcdtest.Ctx(t), SwitchOptions{AckTimeout: time.Second}, func(ctx context.Context, tx *SwitchTx) error {
			flippedAt = time.Now()
			return flipTo(shard)(ctx, tx)
		})
		if err == nil {
			break
		}
	}
	if err != nil || !res.Flipped || slices.Contains(res.Acked, "pa") {
		t.Fatalf("Switch without the cut-off proxy: %+v, %v", res, err)
	}
	evs := ha.events(fenceShard)
	if len(evs) == 0 || !evs[0].at.Before(flippedAt) {
		t.Fatalf("the cut-off proxy's write fence: events %s (first at %v), the flip at %v (cut off at %v): it must be up before the flip",
			ha.kinds(fenceShard), evs, flippedAt.Sub(cut), cut)
	}
	t.Logf("cut off at 0, fenced at %v, flipped at %v", evs[0].at.Sub(cut).Round(time.Millisecond), flippedAt.Sub(cut).Round(time.Millisecond))
	waitReleased(t, shard, 5*time.Second, "the connected proxy did not release", pb)
	st.Pause(false)
	etcdtest.Eventually(t, 15*time.Second, "the cut-off proxy did not lift its fence once reconnected", func() bool {
		return ha.state(fenceShard) == "lifted"
	})
	if evs := ha.events(fenceShard); evs[len(evs)-1].routeVersion < v0+1 {
		t.Fatalf("the cut-off proxy lifted its fence serving route version %d, want the flipped %d", evs[len(evs)-1].routeVersion, v0+1)
	}
	_ = pa
}

// TestLockFollowerWaitsForTheRoutes: one proxy's route watcher lags (its
// etcd connection is stalled) while its follower sees the lock removed: it
// must keep the shard held until its watcher serves the flipped routes,
// while the other proxy releases at once.
func TestLockFollowerWaitsForTheRoutes(t *testing.T) {
	const shard = 5
	env := newLockEnv(t, "lag", shard)
	target := strings.TrimPrefix(env.e.Endpoints()[0], "http://")
	st := testsvc.StartRelay(t, target)
	lagging := newFakeHolder("pa")
	pa := startProxyWith(t, etcdtest.Client(t, env.e.Endpoints()), etcdtest.Client(t, []string{"http://" + st.Addr()}), "lag", "pa", lagging, 3*time.Second)
	pb := startProxy(t, env.e.Endpoints(), "lag", "pb", newFakeHolder("pb"), 3*time.Second)
	r := campaign(t, env.jobs, shard, "migrator")
	v0 := env.routesVersion(t)

	st.Pause(true)
	res, err := r.Switch(etcdtest.Ctx(t), SwitchOptions{MaxHold: 10 * time.Second}, flipTo(shard))
	if err != nil || !res.Flipped {
		t.Fatalf("Switch = %+v, %v", res, err)
	}
	etcdtest.Eventually(t, 3*time.Second, "the up-to-date proxy did not release", func() bool { return pb.holder.state(shard) == "released" })
	time.Sleep(700 * time.Millisecond)
	if s := lagging.state(shard); s != "held" {
		t.Fatalf("the proxy whose routes lag is %q (serving version %d), want still held until it serves %d",
			s, pa.routes.Current().Version(), v0+1)
	}
	st.Pause(false)
	etcdtest.Eventually(t, 5*time.Second, "the lagging proxy did not release once its routes caught up", func() bool {
		return lagging.state(shard) == "released"
	})
	checkReleases(t, shard, v0+1, pa, pb)
}

// TestMigrationLockLeftover: a lock of this runner's own job left by an
// attempt whose creation went unanswered (etcd restarting; the removal
// then failed too) would never expire under the runner's live lease and
// made every later attempt fail with ErrLockHeld: the next switch removes
// it and goes through. Another runner's lock still refuses.
func TestMigrationLockLeftover(t *testing.T) {
	const shard = 5
	env := newLockEnv(t, "leftover", shard)
	ps := env.proxies(t, 3*time.Second, newFakeHolder("pa"))
	r := campaign(t, env.jobs, shard, "migrator")
	job, err := r.Job(etcdtest.Ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	put := func(runner string) {
		t.Helper()
		now := time.Now().UTC()
		val, _ := json.Marshal(LockInfo{Shard: shard, JobID: job.ID, Runner: runner, State: LockHolding, CreatedAt: now, Deadline: now.Add(time.Minute)})
		if _, err := env.cli.Put(etcdtest.Ctx(t), LockKey("leftover", shard), string(val), clientv3.WithLease(r.Lease())); err != nil {
			t.Fatal(err)
		}
	}
	put("someone else")
	if _, err := r.Switch(etcdtest.Ctx(t), SwitchOptions{}, flipTo(shard)); !errors.Is(err, ErrLockHeld) {
		t.Fatalf("Switch with another runner's lock: %v, want ErrLockHeld", err)
	}
	put(r.id)
	res, err := r.Switch(etcdtest.Ctx(t), SwitchOptions{}, flipTo(shard))
	if err != nil || !res.Flipped {
		t.Fatalf("Switch with this runner's leftover lock: %+v, %v; want flipped", res, err)
	}
	waitReleased(t, shard, 10*time.Second, "the proxy did not release", ps...)
}

// TestLockFollowerStartRouteBarrier: a proxy starting while a switch
// flips the routes and ends (no lock left to see) must not serve the old
// routes: its route watcher has not delivered the flip yet (its etcd
// connection stalls), so LockFollower.Start does not return before the
// watcher serves the version etcd held with the locks it read.
func TestLockFollowerStartRouteBarrier(t *testing.T) {
	env := newLockEnv(t, "barrier")
	st := testsvc.StartRelay(t, strings.TrimPrefix(env.e.Endpoints()[0], "http://"))
	cli := etcdtest.Client(t, env.e.Endpoints())
	h := newFakeHolder("pa")
	reg := register(t, cli, "barrier", ProxyInfo{ID: "pa"}, WithTTL(3*time.Second))
	routes := startWatcher(t, routecfg.NewStore(etcdtest.Client(t, []string{"http://" + st.Addr()}), "barrier"), routecfg.WithReadTimeout(time.Second))
	h.routes = func() int64 { return routes.Current().Version() }
	v0 := routes.Current().Version()

	st.Pause(true)
	doc, err := env.store.Get(etcdtest.Ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.store.Apply(etcdtest.Ctx(t), router.MoveShard(doc, 9, "ds1", "im_9", nil)); err != nil {
		t.Fatal(err)
	}
	fol := NewLockFollower(cli, "barrier", reg, routes, h, WithFollowerLogger(etcdtest.Logger(t)))
	t.Cleanup(fol.Close)
	started := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		started <- fol.Start(ctx)
	}()
	select {
	case err := <-started:
		t.Fatalf("Start returned (%v) while the watcher serves version %d and etcd holds %d", err, routes.Current().Version(), v0+1)
	case <-time.After(500 * time.Millisecond):
	}
	st.Pause(false)
	if err := <-started; err != nil {
		t.Fatalf("Start once the watcher can read etcd: %v", err)
	}
	if v := routes.Current().Version(); v < v0+1 {
		t.Fatalf("Start returned with the watcher serving version %d, want >= %d", v, v0+1)
	}
}

// closedAddr is a loopback host:port nothing listens on: a connection to it
// is refused, as to the port of a killed process.
func closedAddr(t *testing.T) string {
	t.Helper()
	return strings.TrimPrefix(etcdtest.DeadEndpoint(t)[0], "http://")
}

// registerUnrenewed writes a proxy registration under a lease of ttl that
// nobody keeps alive: what etcd holds of a proxy killed a moment ago.
func registerUnrenewed(t *testing.T, cli *clientv3.Client, cluster string, p ProxyInfo, ttl time.Duration) clientv3.LeaseID {
	t.Helper()
	lease, err := cli.Grant(etcdtest.Ctx(t), int64(ttl/time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(etcdtest.Ctx(t), ProxyKey(cluster, p.ID), encodeProxy(p), clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = cli.Revoke(context.Background(), lease.ID) })
	return lease.ID
}

// TestMigrationLockDeadProxy: proxies registered and never acknowledging.
// One whose listen address refuses connections (SIGKILLed, its lease not
// expired yet) no longer makes the switch abort. One that cannot be probed
// (a wildcard address) and whose lease is not renewed makes the first
// attempt abort, and Switch tries again by itself once its registration
// expired. One alive but silent (its address accepts connections, its
// lease is renewed) still makes the switch abort, named by its address.
func TestMigrationLockDeadProxy(t *testing.T) {
	const cluster, shard = "deadproxy", 5
	env := newLockEnv(t, cluster, shard)
	ps := env.proxies(t, 3*time.Second, newFakeHolder("pa"), newFakeHolder("pb"))
	r := campaign(t, env.jobs, shard, "migrator")
	v := env.routesVersion(t)
	released := func(what string) {
		t.Helper()
		etcdtest.Eventually(t, 3*time.Second, what+": the live proxies did not release", func() bool {
			for _, p := range ps {
				if evs := p.holder.events(shard); len(evs) == 0 || evs[len(evs)-1].kind != "release" {
					return false
				}
			}
			return true
		})
	}

	dead := closedAddr(t)
	deadLease := registerUnrenewed(t, env.cli, cluster, ProxyInfo{ID: "host-a-1234", Listen: dead}, time.Minute)
	res, err := r.Switch(etcdtest.Ctx(t), SwitchOptions{}, flipTo(shard))
	if err != nil || !res.Flipped || res.Attempts != 1 || strings.Join(res.Refused, ",") != dead || len(res.Missing) != 0 {
		t.Fatalf("Switch with a killed proxy still registered = %+v, %v; want flipped at once without %s", res, err, dead)
	}
	t.Logf("killed proxy: lock held %s", res.Held.Round(time.Millisecond))
	v++
	released("killed proxy")
	if _, err := env.cli.Revoke(etcdtest.Ctx(t), deadLease); err != nil {
		t.Fatal(err)
	}

	// Not probeable: the registration's expiry (5 s) is waited for after
	// the first abort, holding nothing, then the switch runs again.
	registerUnrenewed(t, env.cli, cluster, ProxyInfo{ID: "host-b-99", Listen: "0.0.0.0:3307"}, 5*time.Second)
	res, err = r.Switch(etcdtest.Ctx(t), SwitchOptions{AckTimeout: 500 * time.Millisecond}, flipTo(shard))
	if err != nil || !res.Flipped || res.Attempts != 2 {
		t.Fatalf("Switch with a proxy whose registration runs out = %+v, %v; want flipped at the second attempt", res, err)
	}
	v++
	released("expiring proxy")
	if got := env.routesVersion(t); got != v {
		t.Fatalf("routes at version %d, want %d", got, v)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	silent := l.Addr().String()
	register(t, env.cli, cluster, ProxyInfo{ID: "host-c-7", Listen: silent}, WithTTL(2*time.Second))
	res, err = r.Switch(etcdtest.Ctx(t), SwitchOptions{AckTimeout: 500 * time.Millisecond}, flipTo(shard))
	if !errors.Is(err, ErrSwitchAborted) || res.Flipped || res.Attempts != 1 || strings.Join(res.Missing, ",") != silent {
		t.Fatalf("Switch with a live silent proxy = %+v, %v; want aborted once, %s missing", res, err, silent)
	}
	if !strings.Contains(err.Error(), silent) || strings.Contains(err.Error(), "host-c-7") {
		t.Errorf("abort error %q: want the proxy named by its address %s, not its id", err, silent)
	}
	if got := env.routesVersion(t); got != v {
		t.Fatalf("routes at version %d after an abort, want %d", got, v)
	}
	released("silent proxy")
}
