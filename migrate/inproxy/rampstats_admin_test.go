package inproxy_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/convoy-im/convoy/coord"
	"github.com/convoy-im/convoy/internal/testsvc"
	"github.com/convoy-im/convoy/migrate"
	"github.com/convoy-im/convoy/migrate/inproxy"
	"github.com/convoy-im/convoy/migrate/internal/jobrec"
)

// TestRampStatsPublished: proxies publish their figures under their
// registration leases; Status sums the live ones; a proxy that goes takes
// its figures along, and one whose ramps ended deletes them (real etcd).
func TestRampStatsPublished(t *testing.T) {
	e := testsvc.StartEtcd(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx := testCtx(t)
	const cluster = "rs"
	store := coord.NewJobStore(cli, cluster)
	if _, err := store.Create(ctx, *inproxy.RampJob(jobrec.StepReady, 50, 0)); err != nil {
		t.Fatal(err)
	}
	snap := inproxy.RampSnapshot(t)
	keys := inproxy.KeysOfShard(5, 100, 1)
	type proxy struct {
		reg      *coord.Registration
		ramps    *inproxy.Ramps
		old, new int
	}
	var proxies []*proxy
	for i, id := range []string{"p1", "p2"} {
		reg, err := coord.Register(ctx, cli, cluster, coord.ProxyInfo{ID: id, Listen: "127.0.0.1:1"}, coord.WithTTL(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer reg.Close()
		r, err := inproxy.NewRamps(nil)
		if err != nil {
			t.Fatal(err)
		}
		r.Update(5, inproxy.RampJob(jobrec.StepReady, 50, 0))
		inproxy.AnnounceAll(r)
		p := &proxy{reg: reg, ramps: r}
		p.old, p.new = inproxy.RampReads(t, r, snap, keys[:50*(i+1)], i) // p2: one failed read of the target
		pctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go r.PublishStats(pctx, reg, coord.RampStatsKey(cluster, id), 50*time.Millisecond, zap.NewNop())
		proxies = append(proxies, p)
	}
	admin := migrate.NewAdmin(cli, cluster)
	status := func() map[string]string {
		t.Helper()
		cols, rows, err := admin.Status(ctx)
		if err != nil || len(rows) != 1 {
			t.Fatalf("status: %v, %v", rows, err)
		}
		m := map[string]string{}
		for i, c := range cols {
			m[c] = rows[0][i]
		}
		return m
	}
	waitFor := func(what string, cond func(map[string]string) bool) map[string]string {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			s := status()
			if cond(s) {
				return s
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: SHOW MIGRATIONS says %v", what, s)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	p1, p2 := proxies[0], proxies[1]
	s := waitFor("both proxies' reads", func(s map[string]string) bool {
		return s["old_reads"] == inproxy.Itoa(p1.old+p2.old) && s["new_reads"] == inproxy.Itoa(p1.new+p2.new)
	})
	if s["old_err_pct"] != "0.00" || s["new_err_pct"] != inproxy.FormatPct(1, p1.new+p2.new) || s["new_p99_ms"] == "" || s["read_share"] != "50%" {
		t.Fatalf("SHOW MIGRATIONS %v", s)
	}
	// The job's runner is the proxy p1 (convoy serve campaigns under its
	// proxy id): named by its registered address, not its id.
	r, err := coord.CampaignRunner(ctx, store, 5, "p1")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if s := status(); s["runner"] != "127.0.0.1:1" {
		t.Errorf("SHOW MIGRATIONS names the runner %q, want p1's address 127.0.0.1:1", s["runner"])
	}
	// p2 dies: its lease ends, its figures with it.
	if err := p2.reg.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor("p1's reads alone", func(s map[string]string) bool {
		return s["old_reads"] == inproxy.Itoa(p1.old) && s["new_reads"] == inproxy.Itoa(p1.new) && s["new_err_pct"] == "0.00"
	})
	// p1's ramp ends: it deletes its figures, the columns empty.
	p1.ramps.Update(5, nil)
	waitFor("no figures", func(s map[string]string) bool { return s["old_reads"] == "" && s["new_reads"] == "" })
	resp, err := cli.Get(ctx, coord.RampStatsPrefix(cluster), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Fatalf("%d figure keys left (%v)", resp.Count, err)
	}
}
