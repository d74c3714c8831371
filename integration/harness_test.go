// Package integration runs Convoy as a real process against real MariaDB,
// etcd and Redis servers started on free loopback ports.
package integration

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/convoy-im/convoy/internal/testsvc"
	"github.com/convoy-im/convoy/routecfg"
	"github.com/convoy-im/convoy/router"
)

// convoyBin is built once per test process by TestMain.
var convoyBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "convoy-it-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	convoyBin = filepath.Join(dir, "convoy")
	build := exec.Command("go", "build", "-o", convoyBin, "../cmd/convoy")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building convoy:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// stack is one Convoy deployment: two datasources, etcd, a Convoy process,
// and a reference MariaDB holding every row in plain tables (database im),
// for differential checks.
type stack struct {
	t      testing.TB
	ds     [2]*testsvc.MariaDB
	ref    *testsvc.MariaDB
	etcd   *testsvc.Etcd
	store  *routecfg.Store
	convoy *convoyProc
}

const testCluster = "it"

// testLayout is small on purpose: 2 databases x 4 tables per logical table,
// each physical table shared by 128 shards, so the schema installs in
// seconds while keys still spread over both datasources.
func testLayout(ds ...*testsvc.MariaDB) router.Document {
	var dss []router.Datasource
	for i, m := range ds {
		dss = append(dss, router.Datasource{Name: fmt.Sprintf("ds%d", i), Addr: m.Addr(), User: "root"})
	}
	doc, err := router.SharedLayout(dss, 2, 4)
	if err != nil {
		panic(err)
	}
	return doc
}

func newStack(t testing.TB) *stack {
	t.Helper()
	return newStackLayout(t, testLayout)
}

// newStackLayout is newStack with the route table layout(ds0, ds1).
func newStackLayout(t testing.TB, layout func(ds ...*testsvc.MariaDB) router.Document) *stack {
	t.Helper()
	s := &stack{t: t}
	s.ds[0] = testsvc.StartMariaDB(t, testsvc.WithServerID(1))
	s.ds[1] = testsvc.StartMariaDB(t, testsvc.WithServerID(2))
	s.ref = testsvc.StartMariaDB(t, testsvc.WithServerID(3))
	s.etcd = testsvc.StartEtcd(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: s.etcd.Endpoints(), DialTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	s.store = routecfg.NewStore(cli, testCluster)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.store.Init(ctx, layout(s.ds[0], s.ds[1])); err != nil {
		t.Fatal(err)
	}
	// The unsharded database lives on the default datasource.
	s.ds[0].Exec(t, "CREATE DATABASE im")
	s.ref.Exec(t, "CREATE DATABASE im")
	s.convoy = startConvoy(t, s.etcd.Endpoints())
	schema := readSchema(t)
	db := s.convoy.open(t, "convoy", "convoy", "im")
	ref := s.ref.Open(t, "im")
	for _, stmt := range schema {
		if _, err := db.Exec(stmt); err != nil {
			t.Fatalf("schema through convoy: %v\n%s", err, stmt)
		}
		if _, err := ref.Exec(stmt); err != nil {
			t.Fatalf("schema on reference: %v", err)
		}
	}
	return s
}

// readSchema splits schema/im.sql into statements (it has no ';' inside
// literals).
func readSchema(t testing.TB) []string {
	b, err := os.ReadFile("../schema/im.sql")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "--") {
			lines = append(lines, l)
		}
	}
	var out []string
	for _, part := range strings.Split(strings.Join(lines, "\n"), ";") {
		if s := strings.TrimSpace(part); s != "" {
			out = append(out, s)
		}
	}
	return out
}

type convoyProc struct {
	// worker: the process is `convoy migrate worker` (no MySQL listener),
	// not `convoy serve`.
	worker bool
	// env is added to the process's environment (CONVOY_FAILPOINTS).
	env     []string
	cmd     *exec.Cmd
	addr    string
	metrics string
	logPath string
	cfgPath string
	exited  chan struct{}
	rebinds int // times start gave it new ports (rebind)
}

func freeAddr(t testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// defaultUsers are the accounts every test Convoy knows.
const defaultUsers = `  - {name: convoy, password: convoy, admin: true}
  - {name: app, password: "app secret", admin: false}`

// startConvoy starts the convoy binary with a generated config and waits
// until a client can log in.
func startConvoy(t testing.TB, etcd []string, extraYAML ...string) *convoyProc {
	t.Helper()
	return startConvoyUsers(t, etcd, defaultUsers, extraYAML...)
}

// startConvoyUsers is startConvoy with its own users section (YAML list
// items, indented two spaces).
func startConvoyUsers(t testing.TB, etcd []string, users string, extraYAML ...string) *convoyProc {
	t.Helper()
	p := newConvoyProc(t, etcd, users, extraYAML...)
	p.start(t)
	t.Cleanup(p.kill)
	return p
}

// startWorker starts `convoy migrate worker` with startConvoy's config and
// waits until it runs.
func startWorker(t testing.TB, etcd []string, extraYAML ...string) *convoyProc {
	t.Helper()
	p := newConvoyProc(t, etcd, defaultUsers, extraYAML...)
	p.worker = true
	p.start(t)
	t.Cleanup(p.kill)
	return p
}

// newConvoyProc writes a process's config (free ports, its own directory).
// An extraYAML item "etcd.key: value" goes into the etcd section, and an
// item "env:NAME=value" into the process's environment.
func newConvoyProc(t testing.TB, etcd []string, users string, extraYAML ...string) *convoyProc {
	t.Helper()
	dir := t.TempDir()
	p := &convoyProc{addr: freeAddr(t), metrics: freeAddr(t), logPath: filepath.Join(dir, "convoy.log"), cfgPath: filepath.Join(dir, "convoy.yaml")}
	var etcdExtra string
	var rest []string
	for _, y := range extraYAML {
		if kv, ok := strings.CutPrefix(y, "etcd."); ok {
			etcdExtra += "  " + kv + "\n"
		} else if kv, ok := strings.CutPrefix(y, "env:"); ok {
			p.env = append(p.env, kv)
		} else {
			rest = append(rest, y)
		}
	}
	extraYAML = rest
	cfg := fmt.Sprintf(`listen: %s
metrics_listen: %s
log_level: debug
etcd:
  endpoints: [%s]
  cluster: %s
`+etcdExtra+`routes:
  resync: 1s
  cache_file: %s
users:
%s
%s
`, p.addr, p.metrics, strings.Join(etcd, ","), testCluster, filepath.Join(dir, "routes-cache.json"), users, strings.Join(extraYAML, "\n"))
	if err := os.WriteFile(p.cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *convoyProc) start(t testing.TB) {
	t.Helper()
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"serve", "--config", p.cfgPath}
	if p.worker {
		args = []string{"migrate", "--config", p.cfgPath, "worker"}
	}
	p.cmd = exec.Command(convoyBin, args...)
	if p.env != nil {
		p.cmd.Env = append(os.Environ(), p.env...)
	}
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.exited = make(chan struct{})
	go func() { _ = p.cmd.Wait(); logf.Close(); close(p.exited) }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var err error
		if p.worker {
			if b, _ := os.ReadFile(p.logPath); strings.Contains(string(b), "migration worker running") {
				return
			}
			err = fmt.Errorf("no \"migration worker running\" in its log")
		} else {
			var db *sql.DB
			db, err = sql.Open("mysql", p.dsn("convoy", "convoy", ""))
			if err == nil {
				err = db.Ping()
				db.Close()
			}
			if err == nil || errno(err) != 0 { // a MySQL error packet: the server is up
				return
			}
		}
		select {
		case <-p.exited:
			if strings.Contains(p.logTail(), "address already in use") && p.rebind(t) {
				// freeAddr's port was taken by another process between
				// its check and convoy's bind (tests of other packages
				// run beside this one): new ports, start again.
				p.start(t)
				return
			}
			t.Fatalf("convoy exited during start-up:\n%s", p.logTail())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("convoy did not start within 20s: %v\n%s", err, p.logTail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// rebind gives the process new listen addresses in its config, at most
// twice in its life; false once it has.
func (p *convoyProc) rebind(t testing.TB) bool {
	t.Helper()
	if p.rebinds >= 2 {
		return false
	}
	p.rebinds++
	b, err := os.ReadFile(p.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	addr, metrics := freeAddr(t), freeAddr(t)
	cfg := strings.Replace(strings.Replace(string(b), "listen: "+p.addr+"\n", "listen: "+addr+"\n", 1),
		"metrics_listen: "+p.metrics+"\n", "metrics_listen: "+metrics+"\n", 1)
	if err := os.WriteFile(p.cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	p.addr, p.metrics = addr, metrics
	return true
}

// restartWith kills the process and starts it again with extraYAML
// appended to its config (same ports, same log).
func (p *convoyProc) restartWith(t testing.TB, extraYAML string) {
	t.Helper()
	p.kill()
	f, err := os.OpenFile(p.cfgPath, os.O_WRONLY|os.O_APPEND, 0)
	if err == nil {
		_, err = f.WriteString("\n" + extraYAML + "\n")
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	p.start(t)
}

// pause stops the process (SIGSTOP: a long GC pause, a frozen VM) until
// resume; it returns once the kernel says it is stopped.
func (p *convoyProc) pause(t testing.TB) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stat := fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid)
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if b, err := os.ReadFile(stat); err == nil {
			if f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:])); len(f) > 0 && f[0] == "T" {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("convoy did not stop on SIGSTOP")
		}
	}
}

func (p *convoyProc) resume() { _ = p.cmd.Process.Signal(syscall.SIGCONT) }

func (p *convoyProc) kill() {
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

func (p *convoyProc) logTail() string {
	b, _ := os.ReadFile(p.logPath)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

func (p *convoyProc) dsn(user, pass, db string) string {
	return fmt.Sprintf("%s:%s@tcp(%s)/%s?collation=utf8mb4_general_ci&timeout=5s&readTimeout=30s", user, pass, p.addr, db)
}

func (p *convoyProc) open(t testing.TB, user, pass, db string) *sql.DB {
	t.Helper()
	h, err := sql.Open("mysql", p.dsn(user, pass, db))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}
