package testsvc

import (
	"net"
	"os/exec"
	"sync"
	"syscall"
	"testing"
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
