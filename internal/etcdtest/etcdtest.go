// Package etcdtest holds the helpers of the tests that run against a real
// etcd (packages routecfg and coord): a server and a client, a document of
// routes, bounded contexts, metric reads and polling. One copy, so the two
// packages' tests cannot drift apart.
package etcdtest

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
	"github.com/convoy-im/convoy/router"
)

// Client returns an etcd client of endpoints, closed when the test ends.
func Client(t testing.TB, endpoints []string) *clientv3.Client {
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

// Start starts an etcd of the test's own and returns it with a client.
func Start(t testing.TB) (*testsvc.Etcd, *clientv3.Client) {
	t.Helper()
	e := testsvc.StartEtcd(t)
	return e, Client(t, e.Endpoints())
}

// DeadEndpoint is a loopback address nothing listens on.
func DeadEndpoint(t testing.TB) []string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return []string{"http://" + addr}
}

// TwoDatasources are the datasources of Doc: passwords by environment and
// by file, never inline.
func TwoDatasources() []router.Datasource {
	return []router.Datasource{
		{Name: "ds0", Addr: "127.0.0.1:3306", User: "convoy", PasswordEnv: "DS0_PW"},
		{Name: "ds1", Addr: "127.0.0.1:3307", User: "convoy", PasswordFile: "/etc/convoy/ds1.pw"},
	}
}

// Doc is a valid route document: TwoDatasources, 8 databases.
func Doc(t testing.TB) router.Document {
	t.Helper()
	doc, err := router.DefaultLayout(TwoDatasources(), 8)
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// Ctx is a context bounded at 10 s, canceled when the test ends.
func Ctx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Logger logs warnings and errors to the test's log.
func Logger(t testing.TB) *zap.Logger {
	return zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
}

// Metric returns the value of a gauge or counter gathered from reg.
func Metric(t testing.TB, reg *prometheus.Registry, name string) float64 {
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

// Eventually polls cond every 20ms until it holds or within has passed;
// then it logs the goroutines of route watchers (the usual suspects) and
// fails.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
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
