package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/convoy-im/convoy/coord"
	"github.com/convoy-im/convoy/internal/testsvc"
	"github.com/convoy-im/convoy/planner"
	"github.com/convoy-im/convoy/proxy"
	"github.com/convoy-im/convoy/routecfg"
	"github.com/convoy-im/convoy/router"
)

// etcdConfig is a Config reaching e with the CA and, if cn is set, a
// client certificate of that common name.
func etcdConfig(t *testing.T, e *testsvc.Etcd, ca *testsvc.CA, cn string) Config {
	c := defaultConfig()
	c.Etcd.Endpoints = e.Endpoints()
	c.Etcd.Cluster = "dev"
	c.Etcd.DialTimeout = 2 * time.Second
	c.Etcd.TLS.CAFile = ca.File
	if cn != "" {
		c.Etcd.TLS.CertFile, c.Etcd.TLS.KeyFile = ca.Issue(t, cn)
	}
	return c
}

func mustEtcd(t *testing.T, c Config) *clientv3.Client {
	t.Helper()
	cli, err := etcdClient(c, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// TestEtcdTLSAndRoles runs the README's etcd hardening against a real etcd
// with client-certificate authentication and auth enabled: a proxy's role
// reads the routes and writes its registration but cannot change routes;
// the admin role can, and the change names it; a client without a
// certificate or with an unknown one gets nothing.
func TestEtcdTLSAndRoles(t *testing.T) {
	ca := testsvc.NewCA(t)
	e := testsvc.StartEtcd(t, testsvc.WithEtcdTLS(ca))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	root := mustEtcd(t, etcdConfig(t, e, ca, "root"))
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// The roles of README "Hardening", for cluster dev.
	must(root.RoleAdd(ctx, "root"))
	must(root.UserAddWithOptions(ctx, "root", "", &clientv3.UserAddOptions{NoPassword: true}))
	must(root.UserGrantRole(ctx, "root", "root"))
	must(root.RoleAdd(ctx, "convoy-proxy"))
	must(root.RoleGrantPermission(ctx, "convoy-proxy", "/convoy/dev/", clientv3.GetPrefixRangeEnd("/convoy/dev/"), clientv3.PermissionType(clientv3.PermRead)))
	for _, p := range []string{coord.ProxiesPrefix("dev"), coord.MigrationsPrefix("dev") + "acks/", coord.RampStatsPrefix("dev"), coord.SizesPrefix("dev")} {
		must(root.RoleGrantPermission(ctx, "convoy-proxy", p, clientv3.GetPrefixRangeEnd(p), clientv3.PermissionType(clientv3.PermReadWrite)))
	}
	must(root.RoleAdd(ctx, "convoy-admin"))
	must(root.RoleGrantPermission(ctx, "convoy-admin", "/convoy/dev/", clientv3.GetPrefixRangeEnd("/convoy/dev/"), clientv3.PermissionType(clientv3.PermReadWrite)))
	for _, u := range []string{"convoy-proxy", "convoy-admin"} {
		must(root.UserAddWithOptions(ctx, u, "", &clientv3.UserAddOptions{NoPassword: true}))
		must(root.UserGrantRole(ctx, u, u))
	}
	must(root.UserAdd(ctx, "convoy-proxy-pw", "proxy-s3cret"))
	must(root.UserGrantRole(ctx, "convoy-proxy-pw", "convoy-proxy"))
	must(root.AuthEnable(ctx))

	admin := routecfg.NewStore(mustEtcd(t, etcdConfig(t, e, ca, "convoy-admin")), "dev")
	doc, err := router.DefaultLayout([]router.Datasource{{Name: "ds0", Addr: "127.0.0.1:3306", User: "root"}}, 8)
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.Init(ctx, doc); err != nil {
		t.Fatalf("the admin role cannot write routes: %v", err)
	}

	// A proxy by certificate, and one by user name and password (its
	// certificate's name is no user: the password decides).
	byPassword := etcdConfig(t, e, ca, "some-host")
	byPassword.Etcd.Username = "convoy-proxy-pw"
	byPassword.Etcd.PasswordEnv = "TEST_ETCD_PW"
	t.Setenv("TEST_ETCD_PW", "proxy-s3cret")
	for name, c := range map[string]Config{"certificate": etcdConfig(t, e, ca, "convoy-proxy"), "password": byPassword} {
		cli := mustEtcd(t, c)
		store := routecfg.NewStore(cli, "dev")
		got, err := store.Get(ctx)
		if err != nil || got.Version != 1 {
			t.Fatalf("proxy (%s): reading routes: %v", name, err)
		}
		if !strings.HasPrefix(got.ChangedBy, "convoy-admin@") {
			t.Fatalf("the route document says it was changed by %q, want convoy-admin@<host>", got.ChangedBy)
		}
		reg, err := coord.Register(ctx, cli, "dev", coord.ProxyInfo{ID: "p-" + name, Listen: "127.0.0.1:1"})
		if err != nil {
			t.Fatalf("proxy (%s): registering: %v", name, err)
		}
		if err := reg.Put(ctx, coord.RampStatsKey("dev", "p-"+name), "{}"); err != nil {
			t.Fatalf("proxy (%s): publishing read-ramp figures: %v", name, err)
		}
		reg.Close()
		got.Shards[7].Datasource = "ds0"
		if _, err := store.Apply(ctx, got); err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Fatalf("proxy (%s): writing routes: err = %v, want permission denied", name, err)
		}
	}

	// Unknown certificate name: authenticated TLS, no etcd user.
	if _, err := routecfg.NewStore(mustEtcd(t, etcdConfig(t, e, ca, "mallory")), "dev").Get(ctx); err == nil {
		t.Fatal("a certificate of no etcd user read the routes")
	}
	// No client certificate: the TLS handshake fails.
	short, cancelShort := context.WithTimeout(ctx, 3*time.Second)
	defer cancelShort()
	if _, err := routecfg.NewStore(mustEtcd(t, etcdConfig(t, e, ca, "")), "dev").Get(short); err == nil {
		t.Fatal("a client without a certificate read the routes")
	}
	// Another CA's server is not trusted.
	wrong := etcdConfig(t, e, ca, "convoy-proxy")
	wrong.Etcd.TLS.CAFile = testsvc.NewCA(t).File
	short2, cancelShort2 := context.WithTimeout(ctx, 3*time.Second)
	defer cancelShort2()
	if _, err := routecfg.NewStore(mustEtcd(t, wrong), "dev").Get(short2); err == nil {
		t.Fatal("a server certificate of another CA was accepted")
	}

	// Config mistakes are refused before dialling.
	bad := etcdConfig(t, e, ca, "convoy-proxy")
	bad.Etcd.Endpoints = []string{strings.Replace(e.Endpoints()[0], "https://", "http://", 1)}
	if _, err := etcdClient(bad, zap.NewNop()); err == nil || !strings.Contains(err.Error(), "use https://") {
		t.Fatalf("http:// endpoint with tls: err = %v", err)
	}
	bad = etcdConfig(t, e, ca, "convoy-proxy")
	bad.Etcd.Username = "convoy-proxy-pw"
	if _, err := etcdClient(bad, zap.NewNop()); err == nil || !strings.Contains(err.Error(), "set both username and password") {
		t.Fatalf("username without password: err = %v", err)
	}
}

// TestRedisTLSAndACL: the hot tier's client reaches Redis over TLS as an
// ACL user; a wrong password and a clear-text client are refused.
func TestRedisTLSAndACL(t *testing.T) {
	ca := testsvc.NewCA(t)
	r := testsvc.StartRedis(t, testsvc.WithRedisTLS(ca),
		testsvc.WithRedisArgs("--user", "convoy", "on", ">redis-s3cret", "~*", "&*", "+@all"))
	t.Setenv("TEST_REDIS_PW", "redis-s3cret")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	c := defaultConfig()
	c.HotTier.Addrs = []string{r.TLSAddr()}
	c.HotTier.Username = "convoy"
	c.HotTier.PasswordEnv = "TEST_REDIS_PW"
	c.HotTier.TLS.CAFile = ca.File
	rdb, err := redisClient(c)
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	who, err := rdb.Do(ctx, "ACL", "WHOAMI").Text()
	if err != nil || who != "convoy" {
		t.Fatalf("ACL WHOAMI over TLS = %q, %v; want convoy", who, err)
	}

	t.Setenv("TEST_REDIS_PW", "wrong")
	wrongPw, err := redisClient(c)
	if err != nil {
		t.Fatal(err)
	}
	defer wrongPw.Close()
	if err := wrongPw.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Fatalf("wrong password: err = %v, want WRONGPASS", err)
	}

	t.Setenv("TEST_REDIS_PW", "redis-s3cret")
	clear := c
	clear.HotTier.TLS = TLSFiles{}
	plain, err := redisClient(clear)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if err := plain.Ping(ctx).Err(); err == nil {
		t.Fatal("a clear-text client was answered on the TLS port")
	}
	otherCA := c
	otherCA.HotTier.TLS.CAFile = testsvc.NewCA(t).File
	untrusted, err := redisClient(otherCA)
	if err != nil {
		t.Fatal(err)
	}
	defer untrusted.Close()
	if err := untrusted.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("server certificate of another CA: err = %v", err)
	}
}

// TestHTTPListener: on loopback /metrics and pprof are open; bound to every
// interface the listener refuses to start without TLS, then serves TLS
// only, to admin users only, without pprof unless asked for.
func TestHTTPListener(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "convoy_test_total", Help: "x"}))
	users := []proxy.User{{Name: "ops", Password: "ops-s3cret", Admin: true}, {Name: "app", Password: "app-pw"}}
	get := func(cl *http.Client, url, user, pw string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if user != "" {
			req.SetBasicAuth(user, pw)
		}
		resp, err := cl.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	c := defaultConfig()
	c.MetricsListen = "127.0.0.1:0"
	l, err := newHTTPListener(c, reg, users, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	base := "http://127.0.0.1:" + l.port()
	if code, body := get(http.DefaultClient, base+"/metrics", "", ""); code != 200 || !strings.Contains(body, "convoy_test_total") {
		t.Fatalf("loopback /metrics = %d %.100s", code, body)
	}
	if code, _ := get(http.DefaultClient, base+"/debug/pprof/", "", ""); code != 200 {
		t.Fatalf("loopback pprof = %d, want 200", code)
	}

	c.MetricsListen = "0.0.0.0:0"
	if _, err := newHTTPListener(c, reg, users, zap.NewNop()); err == nil || !strings.Contains(err.Error(), "http.tls_cert") {
		t.Fatalf("non-loopback without TLS: err = %v", err)
	}
	ca := testsvc.NewCA(t)
	c.HTTP.TLSCert, c.HTTP.TLSKey = ca.Issue(t, "convoy", "127.0.0.1")
	l, err = newHTTPListener(c, reg, users, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	pem, _ := os.ReadFile(ca.File)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	tlsClient := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	secure := "https://127.0.0.1:" + l.port()
	for _, tc := range []struct {
		url, user, pw string
		want          int
	}{
		{"/metrics", "", "", 401},
		{"/metrics", "ops", "wrong", 401},
		{"/metrics", "app", "app-pw", 401}, // not an admin
		{"/metrics", "ops", "ops-s3cret", 200},
		{"/debug/pprof/", "ops", "ops-s3cret", 404}, // off unless asked for
	} {
		if code, body := get(tlsClient, secure+tc.url, tc.user, tc.pw); code != tc.want {
			t.Errorf("GET %s as %q = %d (%.80s), want %d", tc.url, tc.user, code, body, tc.want)
		}
	}
	if code, _ := get(http.DefaultClient, "http://127.0.0.1:"+l.port()+"/metrics", "ops", "ops-s3cret"); code == 200 {
		t.Error("the non-loopback listener answered clear-text HTTP")
	}
	on := true
	c.HTTP.Pprof = &on
	l2, err := newHTTPListener(c, reg, users, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if code, _ := get(tlsClient, "https://127.0.0.1:"+l2.port()+"/debug/pprof/", "ops", "ops-s3cret"); code != 200 {
		t.Errorf("pprof asked for: %d", code)
	}
}

// TestPlanSimulateCLI: `convoy plan --simulate` at the seed's scale prints
// the triggers soonest first and writes a valid proposed route document.
func TestPlanSimulateCLI(t *testing.T) {
	out := filepath.Join(t.TempDir(), "next.json")
	var buf bytes.Buffer
	w := planner.SeedWorkload()
	in, err := w.Inputs(planner.SeedLimits(), 2000, 8)
	if err != nil {
		t.Fatal(err)
	}
	if err := report(&buf, in, out); err != nil {
		t.Fatal(err)
	}
	text := buf.String()
	for _, want := range []string{"table_rows   shard 0000", "FIRED", "disk_percent datasource ds0", "in 31.7 days", "Proposal: split", "512 shards move", "(8.5 days)"} {
		if !strings.Contains(text, want) {
			t.Fatalf("plan output lacks %q:\n%s", want, text)
		}
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var doc router.Document
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if _, err := router.NewSnapshot(doc); err != nil || len(doc.Datasources) != 16 {
		t.Fatalf("proposed document: %v, %d datasources", err, len(doc.Datasources))
	}
}
