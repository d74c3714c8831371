package coord

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/convoy-im/convoy/internal/etcdtest"
)

func listProxies(t *testing.T, cli *clientv3.Client, cluster string) []ProxyInfo {
	t.Helper()
	ps, err := ListProxies(etcdtest.Ctx(t), cli, cluster)
	if err != nil {
		t.Fatalf("ListProxies: %v", err)
	}
	return ps
}

func proxyIDs(ps []ProxyInfo) string {
	ids := make([]string, len(ps))
	for i, p := range ps {
		ids[i] = p.ID
	}
	return strings.Join(ids, ",")
}

func register(t *testing.T, cli *clientv3.Client, cluster string, info ProxyInfo, opts ...RegistryOption) *Registration {
	t.Helper()
	r, err := Register(etcdtest.Ctx(t), cli, cluster, info, append([]RegistryOption{WithRegistryLogger(etcdtest.Logger(t))}, opts...)...)
	if err != nil {
		t.Fatalf("Register(%s): %v", info.ID, err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func TestRegistry(t *testing.T) {
	_, cli := etcdtest.Start(t)
	const cluster = "reg"
	started := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	b := register(t, cli, cluster, ProxyInfo{ID: "proxy-b:3307", Listen: "10.0.0.2:3307", Metrics: "10.0.0.2:9104",
		Version: "v0.3.0", StartedAt: started, RouteVersion: 4})
	a := register(t, cli, cluster, ProxyInfo{ID: "proxy-a:3307", Listen: "10.0.0.1:3307", Metrics: "10.0.0.1:9104", Version: "v0.3.0"})
	// Another cluster's proxies are not listed.
	register(t, cli, "other", ProxyInfo{ID: "proxy-a:3307"})

	ps := listProxies(t, cli, cluster)
	if proxyIDs(ps) != "proxy-a:3307,proxy-b:3307" {
		t.Fatalf("ListProxies = %+v, want proxy-a and proxy-b sorted", ps)
	}
	if got := ps[1]; got.Listen != "10.0.0.2:3307" || got.Metrics != "10.0.0.2:9104" || got.Version != "v0.3.0" ||
		!got.StartedAt.Equal(started) || got.RouteVersion != 4 {
		t.Errorf("proxy-b listed as %+v", got)
	}
	if st := ps[0].StartedAt; time.Since(st) > time.Minute || time.Since(st) < -time.Second {
		t.Errorf("proxy-a StartedAt = %v, want about now (zero means now)", st)
	}

	// The stored value is the documented JSON.
	resp, err := cli.Get(etcdtest.Ctx(t), "/convoy/reg/proxies/proxy-b:3307")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("get key: %v %v", resp, err)
	}
	var raw map[string]any
	if err := json.Unmarshal(resp.Kvs[0].Value, &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"id", "listen", "metrics", "version", "started_at", "route_version"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("stored value %s lacks %q", resp.Kvs[0].Value, k)
		}
	}
	if raw["started_at"] != "2026-11-29T10:00:00Z" {
		t.Errorf("started_at = %v, want RFC3339 2026-11-29T10:00:00Z", raw["started_at"])
	}
	if resp.Kvs[0].Lease == 0 {
		t.Error("the registration key has no lease")
	}

	// Route version changes are written (coalesced, at most once a second).
	for v := int64(5); v <= 9; v++ {
		a.SetRouteVersion(v)
	}
	etcdtest.Eventually(t, 3*time.Second, "route version 9 not visible in the registry", func() bool {
		ps := listProxies(t, cli, cluster)
		return len(ps) == 2 && ps[0].RouteVersion == 9
	})
	a.SetRouteVersion(10)
	etcdtest.Eventually(t, 3*time.Second, "route version 10 not visible in the registry", func() bool {
		return listProxies(t, cli, cluster)[0].RouteVersion == 10
	})

	// Close removes the key at once and is idempotent.
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if ps := listProxies(t, cli, cluster); proxyIDs(ps) != "proxy-a:3307" {
		t.Fatalf("after Close of proxy-b: %+v, want only proxy-a", ps)
	}
	b.SetRouteVersion(99) // after Close: no effect, no panic

	// A hand-written broken entry does not hide the others.
	if _, err := cli.Put(etcdtest.Ctx(t), ProxyKey(cluster, "junk"), "{not json"); err != nil {
		t.Fatal(err)
	}
	if ps := listProxies(t, cli, cluster); proxyIDs(ps) != "proxy-a:3307" {
		t.Errorf("with a broken entry: %+v, want only proxy-a", ps)
	}

	for _, tc := range []struct{ cluster, id string }{{"", "x"}, {"a/b", "x"}, {cluster, ""}, {cluster, "a/b"}} {
		if _, err := Register(etcdtest.Ctx(t), cli, tc.cluster, ProxyInfo{ID: tc.id}); err == nil {
			t.Errorf("Register(cluster %q, id %q) succeeded, want an invalid-name error", tc.cluster, tc.id)
		}
	}
}

func TestRegistryEtcdDown(t *testing.T) {
	cli := etcdtest.Client(t, etcdtest.DeadEndpoint(t))
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	r, err := Register(ctx, cli, "down", ProxyInfo{ID: "p1"})
	if err == nil {
		r.Close()
		t.Fatal("Register succeeded with etcd unreachable")
	}
	if el := time.Since(t0); el > 2*time.Second {
		t.Errorf("Register took %s with a 500ms context, want it bounded by ctx", el)
	}
	if !strings.Contains(err.Error(), `cannot register proxy "p1"`) {
		t.Errorf("error %q does not name the proxy", err)
	}
}

// TestRegistrySurvivesEtcdOutage stops etcd for longer than the TTL: the
// client gives up on the lease, and the registration must come back by
// itself, with a new lease, once etcd is back.
func TestRegistrySurvivesEtcdOutage(t *testing.T) {
	e, cli := etcdtest.Start(t)
	const cluster = "outage"
	r := register(t, cli, cluster, ProxyInfo{ID: "p1", Listen: "127.0.0.1:3307"}, WithTTL(2*time.Second))
	r.SetRouteVersion(3)
	etcdtest.Eventually(t, 3*time.Second, "route version 3 not written", func() bool {
		ps := listProxies(t, cli, cluster)
		return len(ps) == 1 && ps[0].RouteVersion == 3
	})
	oldLease := r.leaseID()

	e.Stop()
	// After a TTL without an answer the client gives the lease up (its
	// keepalive deadline passes; checked once a second).
	t0 := time.Now()
	etcdtest.Eventually(t, 6*time.Second, "the registration did not notice the lease loss with etcd down", func() bool {
		return r.losses.Load() == 1
	})
	t.Logf("lease given up %s after etcd stopped", time.Since(t0).Round(10*time.Millisecond))
	r.SetRouteVersion(4) // changed while etcd is down
	t0 = time.Now()
	e.Start()

	etcdtest.Eventually(t, 10*time.Second, "the registration did not come back with a new lease after etcd restarted", func() bool {
		resp, err := cli.Get(etcdtest.Ctx(t), ProxyKey(cluster, "p1"))
		return err == nil && len(resp.Kvs) == 1 && resp.Kvs[0].Lease != 0 && resp.Kvs[0].Lease != int64(oldLease)
	})
	t.Logf("re-registered %s after etcd restarted", time.Since(t0).Round(10*time.Millisecond))
	etcdtest.Eventually(t, 3*time.Second, "route version 4 not written after the re-registration", func() bool {
		ps := listProxies(t, cli, cluster)
		return len(ps) == 1 && ps[0].RouteVersion == 4 && ps[0].Listen == "127.0.0.1:3307"
	})
	// The new lease is kept alive: the key outlives several TTLs... and the
	// old lease (revoked or expired) takes nothing with it.
	ttl, err := cli.TimeToLive(etcdtest.Ctx(t), r.leaseID())
	if err != nil || ttl.TTL <= 0 {
		t.Fatalf("new lease TimeToLive = %+v, %v; want alive", ttl, err)
	}
	time.Sleep(2500 * time.Millisecond)
	if ps := listProxies(t, cli, cluster); len(ps) != 1 {
		t.Fatalf("the registration vanished %s after re-registering: %+v", 2500*time.Millisecond, ps)
	}

	if err := r.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if ps := listProxies(t, cli, cluster); len(ps) != 0 {
		t.Fatalf("after Close: %+v", ps)
	}
}

// A proxy restarted at its address removes the registration its dead
// predecessor left on this host (same host name, same listen address, a
// pid no longer running), and nothing else: not a live process's, not one
// at another address, not another host's.
func TestRemovePredecessors(t *testing.T) {
	_, cli := etcdtest.Start(t)
	const cluster = "pred"
	dead := map[int]bool{900001: true, 900002: true, 900003: true}
	running := func(pid int) bool { return !dead[pid] }
	register(t, cli, cluster, ProxyInfo{ID: "hostA-900001", Listen: "127.0.0.1:3307"}) // the predecessor
	register(t, cli, cluster, ProxyInfo{ID: "hostA-900002", Listen: "127.0.0.1:3308"}) // dead, another address
	register(t, cli, cluster, ProxyInfo{ID: "hostB-900003", Listen: "127.0.0.1:3307"}) // another host
	register(t, cli, cluster, ProxyInfo{ID: "hostA-12", Listen: "127.0.0.1:3307"})     // running (as running says)
	self := ProxyInfo{ID: "hostA-4242", Listen: "127.0.0.1:3307"}
	register(t, cli, cluster, self)
	removed, err := RemovePredecessors(context.Background(), cli, cluster, self, "hostA", running)
	if err != nil || strings.Join(removed, ",") != "hostA-900001" {
		t.Fatalf("removed %v, %v; want the predecessor only", removed, err)
	}
	if got := proxyIDs(listProxies(t, cli, cluster)); got != "hostA-12,hostA-4242,hostA-900002,hostB-900003" {
		t.Fatalf("left %s", got)
	}
}
