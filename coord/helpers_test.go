package coord

import (
	"context"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/convoy-im/convoy/internal/testsvc"
	"github.com/convoy-im/convoy/routecfg"
	"github.com/convoy-im/convoy/router"
)

func newClient(t *testing.T, endpoints []string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 2 * time.Second,
		Logger:      zap.NewNop(), // the client's own reconnect chatter is noise here
	})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func startEtcd(t *testing.T) (*testsvc.Etcd, *clientv3.Client) {
	t.Helper()
	e := testsvc.StartEtcd(t)
	return e, newClient(t, e.Endpoints())
}

// deadEndpoint is a loopback address nothing listens on.
func deadEndpoint(t *testing.T) []string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return []string{"http://" + addr}
}

func twoDatasources() []router.Datasource {
	return []router.Datasource{
		{Name: "ds0", Addr: "127.0.0.1:3306", User: "convoy", PasswordEnv: "DS0_PW"},
		{Name: "ds1", Addr: "127.0.0.1:3307", User: "convoy", PasswordFile: "/etc/convoy/ds1.pw"},
	}
}

func testDoc(t *testing.T) router.Document {
	t.Helper()
	doc, err := router.DefaultLayout(twoDatasources(), 8)
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// startWatcher starts a route watcher (the one a proxy's lock follower
// waits on) and closes it when the test ends.
func startWatcher(t *testing.T, s *routecfg.Store, opts ...routecfg.Option) *routecfg.Watcher {
	t.Helper()
	w := routecfg.NewWatcher(s, append([]routecfg.Option{routecfg.WithLogger(testLogger(t))}, opts...)...)
	if err := w.Start(ctxT(t)); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(w.Close)
	return w
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func testLogger(t *testing.T) *zap.Logger {
	return zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
}

// metric returns the value of a gauge or counter gathered from reg.
func metric(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		m := mf.GetMetric()[0]
		if g := m.GetGauge(); g != nil {
			return g.GetValue()
		}
		return m.GetCounter().GetValue()
	}
	t.Fatalf("metric %s not registered", name)
	return 0
}

// eventually polls cond every 20ms until it holds or the deadline passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			n := runtime.Stack(buf, true)
			for _, g := range strings.Split(string(buf[:n]), "\n\n") {
				if strings.Contains(g, "routecfg.(*Watcher)") {
					t.Log(g)
				}
			}
			t.Fatalf("after %s: %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
