package testsvc

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// S3 is versitygw, a real S3 gateway (every request's SigV4 signature
// checked, objects as files of a posix directory), in its own process on a
// loopback port, the way MinIO or Ceph RGW would run beside Convoy. Clients
// reach it through a small proxy in the test process that can delay reads
// (SetLatency): a slow store that keeps its objects. The proxy forwards
// requests unchanged, Host header included, so signatures still verify.
type S3 struct {
	// Addr is host:port of the endpoint clients use (the proxy).
	Addr string

	dir     string // the posix backend: a directory per bucket
	proc    *exec.Cmd
	done    chan struct{}
	srv     *http.Server
	latency atomic.Int64
}

const (
	s3Ready = 20 * time.Second
	// The test credentials (root account of the gateway).
	s3Access = "convoy-test"
	s3Secret = "convoy-test-secret"
)

// versitygwBinary finds versitygw on PATH or in $(go env GOPATH)/bin, where
// scripts/ensure-tools.sh installs it.
func versitygwBinary() (string, error) {
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p, nil
	}
	gopath := os.Getenv("GOPATH")
	if gopath == "" {
		if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
			gopath = strings.TrimSpace(string(out))
		}
	}
	for _, dir := range filepath.SplitList(gopath) {
		p := filepath.Join(dir, "bin", "versitygw")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("versitygw is not installed (run scripts/ensure-tools.sh: go install github.com/versity/versitygw/cmd/versitygw@v1.8.0)")
}

// StartS3 starts versitygw on a free loopback port with an empty posix
// directory and the proxy in front of it, and waits until it answers. Both
// stop when the test ends; the objects go with the directory.
func StartS3(t testing.TB) *S3 {
	t.Helper()
	NeedsServers(t)
	bin, err := versitygwBinary()
	if err != nil {
		t.Fatalf("testsvc: %v", err)
	}
	s := &S3{dir: t.TempDir()}
	// versitygw takes no port 0: a port free a moment ago.
	backend := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cmd := exec.Command(bin, "--access", s3Access, "--secret", s3Secret, "--port", backend, "--quiet", "posix", s.dir)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	s.done, err = spawn(cmd)
	if err != nil {
		t.Fatalf("testsvc: exec %s: %v", bin, err)
	}
	s.proc = cmd
	t.Cleanup(s.Kill)
	deadline := time.Now().Add(s3Ready)
	for {
		c, err := net.DialTimeout("tcp", backend, time.Second)
		if err == nil {
			c.Close()
			break
		}
		select {
		case <-s.done:
			t.Fatalf("testsvc: versitygw exited during start-up: %s", out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("testsvc: versitygw not listening on %s after %s: %s", backend, s3Ready, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	target := &url.URL{Scheme: "http", Host: backend}
	proxy := httputil.NewSingleHostReverseProxy(target)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.Addr = ln.Addr().String()
	s.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d := time.Duration(s.latency.Load()); d > 0 && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
			select {
			case <-time.After(d):
			case <-r.Context().Done():
				return
			}
		}
		proxy.ServeHTTP(w, r)
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s
}

// URL is a cold.OpenStore URL for bucket on this server (path-style, plain
// HTTP, the test credentials); the bucket is created if it is missing.
func (s *S3) URL(bucket string) string {
	// The posix backend's buckets are the directories of its root.
	if err := os.MkdirAll(filepath.Join(s.dir, bucket), 0o755); err != nil {
		panic(fmt.Sprintf("testsvc: s3 bucket %s: %v", bucket, err))
	}
	return fmt.Sprintf("s3://%s?endpoint=http://%s&use_path_style=true&disable_https=true&region=us-east-1&access_key_id=%s&secret_access_key=%s",
		bucket, s.Addr, s3Access, s3Secret)
}

// SetLatency makes every later read (GET, HEAD) wait d before it reaches
// the server (0: none).
func (s *S3) SetLatency(t testing.TB, d time.Duration) {
	t.Helper()
	s.latency.Store(int64(d))
}

// Pause stops the server process (SIGSTOP): requests are accepted and
// never answered, as a hung object store does. Resume continues it with
// its objects.
func (s *S3) Pause(t testing.TB) {
	t.Helper()
	if err := s.proc.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("testsvc: s3: %v", err)
	}
	if err := waitStopped(s.proc.Process.Pid); err != nil {
		t.Fatalf("testsvc: s3: %v", err)
	}
}

// Resume continues a paused server.
func (s *S3) Resume(t testing.TB) {
	t.Helper()
	if err := s.proc.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatalf("testsvc: s3: %v", err)
	}
}

// Kill stops the server (SIGKILL, waited for) and the proxy.
func (s *S3) Kill() {
	if s.proc == nil {
		return
	}
	_ = s.proc.Process.Kill()
	<-s.done
	s.proc = nil
	if s.srv != nil {
		_ = s.srv.Close()
	}
}
