package testsvc

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// S3 is an S3-compatible server (internal/cmd/s3fake, objects in memory) in
// its own process on a loopback port, the way MinIO or Ceph RGW would run
// beside Convoy.
type S3 struct {
	// Addr is host:port of the HTTP listener.
	Addr string
	proc *exec.Cmd
	done chan struct{}
}

const s3Ready = 10 * time.Second

var s3Build struct {
	once sync.Once
	bin  string
	err  error
}

// s3fakeBinary builds internal/cmd/s3fake once per test process with the go
// command that runs the tests (the build cache makes reruns cheap), so a
// clean machine needs nothing installed beyond Go.
func s3fakeBinary() (string, error) {
	s3Build.once.Do(func() {
		dir, err := os.MkdirTemp("", "convoy-s3fake-")
		if err != nil {
			s3Build.err = err
			return
		}
		bin := filepath.Join(dir, "s3fake")
		gobin, err := exec.LookPath("go")
		if err != nil {
			// go test runs without go on PATH in some CI images.
			gobin = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
		out, err := exec.Command(gobin, "build", "-o", bin, "github.com/convoy-im/convoy/internal/cmd/s3fake").CombinedOutput()
		if err != nil {
			s3Build.err = fmt.Errorf("go build s3fake: %v\n%s", err, out)
			return
		}
		s3Build.bin = bin
	})
	return s3Build.bin, s3Build.err
}

// StartS3 starts s3fake and waits until it listens. It is killed when the
// test ends; its objects go with it.
func StartS3(t testing.TB) *S3 {
	t.Helper()
	bin, err := s3fakeBinary()
	if err != nil {
		t.Fatalf("testsvc: %v", err)
	}
	cmd := exec.Command(bin)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("testsvc: %v", err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	done, err := spawn(cmd)
	if err != nil {
		t.Fatalf("testsvc: exec %s: %v", bin, err)
	}
	s := &S3{proc: cmd, done: done}
	t.Cleanup(s.Kill)
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			line <- sc.Text()
		}
		close(line)
	}()
	select {
	case l, ok := <-line:
		addr, found := strings.CutPrefix(l, "listening ")
		if !ok || !found {
			<-done
			t.Fatalf("testsvc: s3fake did not start (first line %q): %s", l, stderr.String())
		}
		s.Addr = addr
	case <-time.After(s3Ready):
		t.Fatalf("testsvc: s3fake not listening after %s: %s", s3Ready, stderr.String())
	}
	return s
}

// URL is a cold.OpenStore URL for bucket on this server (path-style, plain
// HTTP, static test credentials).
func (s *S3) URL(bucket string) string {
	return fmt.Sprintf("s3://%s?endpoint=http://%s&use_path_style=true&disable_https=true&region=us-east-1&access_key_id=test&secret_access_key=test", bucket, s.Addr)
}

// Pause stops the server process (SIGSTOP): connections are accepted by
// the kernel and never answered, as a hung object store does. Resume
// continues it with its objects.
func (s *S3) Pause(t testing.TB) {
	t.Helper()
	if err := s.proc.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("testsvc: s3: %v", err)
	}
	if err := waitStopped(s.proc.Process.Pid); err != nil {
		t.Fatalf("testsvc: s3: %v", err)
	}
}

// SetLatency makes every later read of the server wait d before it is
// answered (0: none), a slow store that keeps its objects.
func (s *S3) SetLatency(t testing.TB, d time.Duration) {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://%s/_fault/latency?d=%s", s.Addr, d))
	if err != nil {
		t.Fatalf("testsvc: s3: set latency: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("testsvc: s3: set latency: %s", resp.Status)
	}
}

// Resume continues a paused server.
func (s *S3) Resume(t testing.TB) {
	t.Helper()
	if err := s.proc.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatalf("testsvc: s3: %v", err)
	}
}

// Kill sends SIGKILL and waits for exit.
func (s *S3) Kill() {
	if s.proc == nil {
		return
	}
	_ = s.proc.Process.Kill()
	<-s.done
	s.proc = nil
}
