package testsvc

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	redisPkg   = "redis-server"
	redisReady = 10 * time.Second
)

// Redis is one redis-server process, no persistence, its own directory.
type Redis struct {
	t    testing.TB
	dir  string
	port int
	// tlsPort, when set, serves TLS with a certificate of ca (tls-port),
	// beside the clear-text port the helpers here use.
	ca      *CA
	tlsPort int
	extra   []string

	mu   sync.Mutex
	proc *exec.Cmd
	done chan struct{}
}

// StartRedis starts redis-server on a free loopback port and waits until it
// answers PING. It is killed and its directory removed when the test ends.
func StartRedis(t testing.TB, opts ...RedisOption) *Redis {
	t.Helper()
	NeedsServers(t)
	dir, err := os.MkdirTemp("", "convoy-redis-")
	if err != nil {
		t.Fatalf("testsvc: %v", err)
	}
	r := &Redis{t: t, dir: dir}
	for _, o := range opts {
		o(r)
	}
	t.Cleanup(func() {
		r.Kill()
		os.RemoveAll(dir)
	})
	// See StartMariaDB: retry if someone took the port between freePort
	// and the bind.
	for attempt := 0; ; attempt++ {
		r.port = freePort(t)
		if r.ca != nil {
			r.tlsPort = freePort(t)
		}
		err := r.start()
		if err == nil {
			return r
		}
		if attempt == 2 || !errors.Is(err, errAddrInUse) {
			t.Fatalf("testsvc: start Redis: %v", err)
		}
	}
}

// RedisOption customises StartRedis.
type RedisOption func(*Redis)

// WithRedisTLS adds a TLS port (TLSAddr) with a server certificate issued
// by ca; clients need no certificate (tls-auth-clients no).
func WithRedisTLS(ca *CA) RedisOption { return func(r *Redis) { r.ca = ca } }

// WithRedisArgs appends redis-server arguments, e.g. an ACL user:
// "--user", "convoy", "on", ">secret", "~*", "&*", "+@all".
func WithRedisArgs(args ...string) RedisOption {
	return func(r *Redis) { r.extra = append(r.extra, args...) }
}

// TLSAddr is the TLS port's host:port (WithRedisTLS).
func (r *Redis) TLSAddr() string { return "127.0.0.1:" + strconv.Itoa(r.tlsPort) }

// Addr is host:port, ready for redis.Options{Addr: r.Addr()}.
func (r *Redis) Addr() string { return "127.0.0.1:" + strconv.Itoa(r.port) }

// Port is the TCP port.
func (r *Redis) Port() int { return r.port }

// Kill sends SIGKILL and waits for exit. With persistence off, a restart
// comes back empty, which is exactly the "Redis restarted" case the hot
// tier must survive.
func (r *Redis) Kill() {
	r.mu.Lock()
	p, done := r.proc, r.done
	r.proc = nil
	r.mu.Unlock()
	if p == nil {
		return
	}
	_ = p.Process.Kill()
	<-done
}

// Pause stops the server with SIGSTOP: it keeps its port and accepts TCP
// connections (the kernel does) but answers nothing, like a hung Redis.
// Resume continues it; Kill also ends a paused server.
func (r *Redis) Pause() { r.signal(syscall.SIGSTOP) }

// Resume continues a paused server with SIGCONT.
func (r *Redis) Resume() { r.signal(syscall.SIGCONT) }

func (r *Redis) signal(sig syscall.Signal) {
	r.t.Helper()
	r.mu.Lock()
	p := r.proc
	r.mu.Unlock()
	if p == nil {
		r.t.Fatalf("testsvc: Redis %s: %v while not running", r.Addr(), sig)
	}
	if err := p.Process.Signal(sig); err != nil {
		r.t.Fatalf("testsvc: Redis %s: %v: %v", r.Addr(), sig, err)
	}
}

// Start restarts a killed server on the same port (empty dataset).
func (r *Redis) Start() {
	r.t.Helper()
	r.mu.Lock()
	running := r.proc != nil
	r.mu.Unlock()
	if running {
		r.t.Fatalf("testsvc: Redis %s: Start while running", r.Addr())
	}
	if err := r.start(); err != nil {
		r.t.Fatalf("testsvc: restart Redis: %v", err)
	}
}

// FlushAll empties every database.
func (r *Redis) FlushAll(t testing.TB) {
	t.Helper()
	reply, err := redisCommand(r.Addr(), "FLUSHALL")
	if err != nil || reply != "+OK" {
		t.Fatalf("testsvc: Redis %s FLUSHALL: %q %v", r.Addr(), reply, err)
	}
}

func (r *Redis) start() error {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return fmt.Errorf("redis-server not found: apt-get install %s", redisPkg)
	}
	logFile := filepath.Join(r.dir, "redis.log")
	cmd := exec.Command(bin,
		"--port", strconv.Itoa(r.port),
		"--bind", "127.0.0.1",
		"--dir", r.dir,
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--logfile", logFile,
		"--protected-mode", "no",
	)
	if r.ca != nil {
		cert, key := r.ca.Issue(r.t, "redis", "127.0.0.1")
		cmd.Args = append(cmd.Args, "--tls-port", strconv.Itoa(r.tlsPort), "--tls-cert-file", cert, "--tls-key-file", key,
			"--tls-ca-cert-file", r.ca.File, "--tls-auth-clients", "no")
	}
	cmd.Args = append(cmd.Args, r.extra...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	done, err := spawn(cmd)
	if err != nil {
		return fmt.Errorf("exec %s: %v", bin, err)
	}
	r.mu.Lock()
	r.proc, r.done = cmd, done
	r.mu.Unlock()

	deadline := time.Now().Add(redisReady)
	for {
		select {
		case <-done:
			r.mu.Lock()
			r.proc = nil
			r.mu.Unlock()
			tail := mariadbLogTail(logFile, 0) + out.String()
			if strings.Contains(tail, "Address already in use") {
				return fmt.Errorf("redis-server on %s: %w\n%s", r.Addr(), errAddrInUse, tail)
			}
			return fmt.Errorf("redis-server on %s exited (%v); %s tail:\n%s", r.Addr(), cmd.ProcessState, logFile, tail)
		default:
		}
		reply, err := redisCommand(r.Addr(), "PING")
		if err == nil && reply == "+PONG" {
			return nil
		}
		if time.Now().After(deadline) {
			r.Kill()
			return fmt.Errorf("redis-server on %s: no PONG after %s (%q, %v); %s tail:\n%s",
				r.Addr(), redisReady, reply, err, logFile, mariadbLogTail(logFile, 0))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// redisCommand sends one inline-free RESP command and returns the first
// reply line. Enough for PING/FLUSHALL; tests use go-redis for real work.
func redisCommand(addr string, args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimRight(line, "\r\n"), err
}
