package testsvc

import (
	"net"
	"sync"
	"testing"
)

// Relay forwards loopback TCP connections to a target address and can hold
// their bytes back: a client behind it is cut off from the target (nothing
// arrives either way) without its connections closing, as a network
// partition looks to the process. Connections accepted while paused are
// opened and stall too.
type Relay struct {
	addr   string
	mu     sync.Mutex
	cond   *sync.Cond
	paused bool
	conns  []net.Conn
}

// StartRelay starts a relay to target (host:port) that lives until the end
// of the test.
func StartRelay(t testing.TB, target string) *Relay {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &Relay{addr: l.Addr().String()}
	r.cond = sync.NewCond(&r.mu)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			r.mu.Lock()
			r.conns = append(r.conns, c, u)
			r.mu.Unlock()
			go r.pipe(c, u)
			go r.pipe(u, c)
		}
	}()
	t.Cleanup(func() {
		l.Close()
		r.Pause(false)
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, c := range r.conns {
			c.Close()
		}
	})
	return r
}

// Addr is the relay's listen address (host:port).
func (r *Relay) Addr() string { return r.addr }

// Pause holds every byte back (true) or lets them through again (false).
func (r *Relay) Pause(p bool) {
	r.mu.Lock()
	r.paused = p
	r.mu.Unlock()
	r.cond.Broadcast()
}

func (r *Relay) pipe(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			r.mu.Lock()
			for r.paused {
				r.cond.Wait()
			}
			r.mu.Unlock()
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
