package testsvc

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"
)

// spawn starts a service process that dies with the test binary (a panic or
// -timeout must not leave servers behind) and returns a channel closed once
// the process has been waited for.
func spawn(cmd *exec.Cmd) (chan struct{}, error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	return done, nil
}

// Blackhole listens on a loopback port, accepts every connection and never
// writes a byte: a server that is hung, SIGSTOPped or black-holed. The
// connections are closed at the end of the test.
func Blackhole(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return ln.Addr().String()
}

// waitStopped returns once process pid is stopped (SIGSTOP is delivered
// asynchronously: a request sent right after kill(2) could still be
// answered), or an error after 2 s.
func waitStopped(pid int) error {
	stat := fmt.Sprintf("/proc/%d/stat", pid)
	for deadline := time.Now().Add(2 * time.Second); ; {
		b, err := os.ReadFile(stat)
		// The state follows the command name, which is in parentheses.
		if i := bytes.LastIndexByte(b, ')'); err == nil && i >= 0 && i+2 < len(b) && (b[i+2] == 'T' || b[i+2] == 't') {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not stopped 2s after SIGSTOP (%v)", err)
		}
		time.Sleep(time.Millisecond)
	}
}
