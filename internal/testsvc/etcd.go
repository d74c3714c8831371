package testsvc

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Etcd is a real single-member etcd server run as a child process. Its
// methods must be called from the test goroutine (they fail the test with
// t.Fatal), never concurrently with each other.
type Etcd struct {
	t          testing.TB
	bin        string
	dataDir    string
	clientPort int
	peerPort   int
	out        *tailBuffer
	// ca, when set, serves clients over TLS with a certificate it issued
	// and requires client certificates it issued (--client-cert-auth).
	ca         *CA
	cert, key  string
	healthCert string
	healthKey  string

	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has been waited for
}

// etcdReadyTimeout bounds how long a start may take before the test fails.
// A healthy etcd on loopback answers in well under a second; 15 s leaves room
// for a loaded 2-core CI machine without hanging a broken run for minutes.
const etcdReadyTimeout = 15 * time.Second

// StartEtcd starts etcd on free 127.0.0.1 client and peer ports with a data
// dir under t.TempDir(), waits until its /health endpoint answers, and
// registers a cleanup that kills it. If the binary is missing the test fails
// (not skips) with the package to install.
func StartEtcd(t testing.TB, opts ...EtcdOption) *Etcd {
	t.Helper()
	NeedsServers(t)
	bin, err := exec.LookPath("etcd")
	if err != nil {
		t.Fatalf("testsvc: the etcd server binary is not installed (%v); run `apt-get install etcd-server` (Debian/Ubuntu)", err)
	}
	e := &Etcd{t: t, bin: bin, out: &tailBuffer{max: 64 << 10}}
	for _, o := range opts {
		o(e)
	}
	if e.ca != nil {
		e.cert, e.key = e.ca.Issue(t, "etcd-server", "127.0.0.1", "localhost")
		// etcd takes a client certificate's common name as the user name
		// once auth is on; "root" may read /health then too.
		e.healthCert, e.healthKey = e.ca.Issue(t, "root")
	}
	// Cleanups run last-in first-out: registering ours after the TempDir
	// calls below would remove the dir under a live process, so register
	// first and let it see whatever cmd is current when the test ends.
	t.Cleanup(e.kill)

	// A free port can be taken by someone else before etcd binds it; retry
	// on fresh ports and a fresh data dir instead of failing the test.
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		e.dataDir = filepath.Join(t.TempDir(), "etcd")
		e.clientPort = freePort(t)
		e.peerPort = freePort(t)
		for e.peerPort == e.clientPort {
			e.peerPort = freePort(t)
		}
		if lastErr = e.start(); lastErr == nil {
			return e
		}
		e.kill()
	}
	t.Fatalf("testsvc: etcd did not start: %v\n--- etcd output (tail) ---\n%s", lastErr, e.out.String())
	return nil
}

// EtcdOption customises StartEtcd.
type EtcdOption func(*Etcd)

// WithEtcdTLS serves clients over TLS only, with a server certificate
// issued by ca for 127.0.0.1, and requires a client certificate issued by
// ca (etcd's --client-cert-auth). Clients use ca.File and a certificate
// from ca.Issue, whose common name is their user name once auth is enabled.
func WithEtcdTLS(ca *CA) EtcdOption { return func(e *Etcd) { e.ca = ca } }

func (e *Etcd) scheme() string {
	if e.ca != nil {
		return "https"
	}
	return "http"
}

// Endpoints returns the client URL, ready for clientv3.Config.Endpoints.
func (e *Etcd) Endpoints() []string {
	return []string{fmt.Sprintf("%s://127.0.0.1:%d", e.scheme(), e.clientPort)}
}

// Start restarts a stopped or killed etcd on the same ports and data dir, so
// clients configured with Endpoints() reconnect to the same data. It is a
// no-op while etcd is running.
func (e *Etcd) Start() {
	e.t.Helper()
	if e.running() {
		return
	}
	if err := e.start(); err != nil {
		e.kill()
		e.t.Fatalf("testsvc: etcd did not restart on 127.0.0.1:%d: %v\n--- etcd output (tail) ---\n%s",
			e.clientPort, err, e.out.String())
	}
}

// Stop sends SIGTERM and waits for etcd to exit (SIGKILL after 10 s).
func (e *Etcd) Stop() {
	e.t.Helper()
	if !e.running() {
		return
	}
	_ = e.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-e.exited:
	case <-time.After(10 * time.Second):
		e.t.Logf("testsvc: etcd ignored SIGTERM for 10s; killing it")
		e.kill()
	}
}

// Kill sends SIGKILL and waits for etcd to exit: a crash, not a shutdown.
func (e *Etcd) Kill() { e.kill() }

func (e *Etcd) running() bool {
	if e.cmd == nil {
		return false
	}
	select {
	case <-e.exited:
		return false
	default:
		return true
	}
}

func (e *Etcd) kill() {
	if !e.running() {
		return
	}
	_ = e.cmd.Process.Kill()
	<-e.exited
}

func (e *Etcd) start() error {
	clientURL := fmt.Sprintf("%s://127.0.0.1:%d", e.scheme(), e.clientPort)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", e.peerPort)
	var tlsArgs []string
	if e.ca != nil {
		tlsArgs = []string{"--cert-file", e.cert, "--key-file", e.key, "--client-cert-auth", "--trusted-ca-file", e.ca.File}
	}
	cmd := exec.Command(e.bin, append(tlsArgs,
		"--name", "convoy-test",
		"--data-dir", e.dataDir,
		"--listen-client-urls", clientURL,
		"--advertise-client-urls", clientURL,
		"--listen-peer-urls", peerURL,
		"--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "convoy-test="+peerURL,
		"--initial-cluster-state", "new",
		"--initial-cluster-token", "convoy-test",
		"--logger", "zap",
		"--log-outputs", "stderr",
		"--log-level", "warn",
		// As dev-up.sh and docker compose start it: a long test run keeps
		// etcd's history bounded, and the code meets compaction.
		"--auto-compaction-mode", "periodic",
		"--auto-compaction-retention", "1h",
		"--quota-backend-bytes", "2147483648",
	)...)
	cmd.Env = withoutEtcdEnv(os.Environ())
	cmd.Stdout = e.out
	cmd.Stderr = e.out
	exited, err := spawn(cmd)
	if err != nil {
		return fmt.Errorf("exec %s: %w", e.bin, err)
	}
	e.cmd, e.exited = cmd, exited
	return e.waitReady(clientURL+"/health", exited)
}

// waitReady polls /health until etcd reports healthy (it has a leader and
// serves reads), the process exits, or etcdReadyTimeout passes.
func (e *Etcd) waitReady(healthURL string, exited <-chan struct{}) error {
	hc := &http.Client{Timeout: time.Second}
	if e.ca != nil {
		pair, err := tls.LoadX509KeyPair(e.healthCert, e.healthKey)
		if err != nil {
			return err
		}
		roots := x509.NewCertPool()
		pem, err := os.ReadFile(e.ca.File)
		if err != nil {
			return err
		}
		roots.AppendCertsFromPEM(pem)
		hc.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}}}
	}
	deadline := time.Now().Add(etcdReadyTimeout)
	lastErr := errors.New("no answer yet")
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return fmt.Errorf("etcd exited during startup (port taken or bad data dir?): %s", e.cmd.ProcessState)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, healthURL, nil)
		resp, err := hc.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && strings.Contains(string(body), `"health":"true"`) {
				cancel()
				return nil
			}
			err = fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
		}
		cancel()
		lastErr = err
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("etcd not healthy at %s after %s: %v", healthURL, etcdReadyTimeout, lastErr)
}

// withoutEtcdEnv drops ETCD_* variables: etcd reads its flags from them too,
// and a developer's shell setting would silently change the test server.
func withoutEtcdEnv(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, "ETCD_") {
			out = append(out, kv)
		}
	}
	return out
}

// tailBuffer keeps the last max bytes written, for failure messages.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
