package proxy

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// errPacketTooLarge ends a connection whose client sent a packet above the
// limit (after the client got errno 1153).
var errPacketTooLarge = errors.New("client packet larger than max_allowed_packet")

// clientConn sits below go-mysql's packet layer once the handshake is done
// (so it sees plaintext even under TLS) and does two things go-mysql does
// not:
//
//   - Read watches the packet headers a client sends and stops a packet
//     bigger than max before go-mysql buffers it whole: without it one
//     client could make the proxy allocate gigabytes.
//   - Write buffers: go-mysql writes every packet (each column definition,
//     each row, each EOF) with its own syscall, which cost ~40% of the
//     proxy's CPU on point selects. The connection loop calls Flush once per
//     command; large results flush every writeChunk bytes.
type clientConn struct {
	net.Conn
	wbuf    []byte
	max     int
	hdr     [4]byte
	hdrN    int // header bytes seen of the current physical packet
	left    int // payload bytes still to come in the current physical packet
	logical int // payload bytes of the current logical packet (chunks of 0xFFFFFF join)
	tripped bool
}

// writeChunk bounds the buffered bytes of one command's response.
const writeChunk = 64 << 10

func (l *clientConn) Write(p []byte) (int, error) {
	l.wbuf = append(l.wbuf, p...)
	if len(l.wbuf) >= writeChunk {
		if err := l.Flush(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// Flush sends the buffered response bytes.
func (l *clientConn) Flush() error {
	if len(l.wbuf) == 0 {
		return nil
	}
	_, err := l.Conn.Write(l.wbuf)
	if cap(l.wbuf) > 4*writeChunk {
		l.wbuf = nil // one huge result must not pin its buffer for the session's life
	} else {
		l.wbuf = l.wbuf[:0]
	}
	return err
}

func (l *clientConn) Read(p []byte) (int, error) {
	if l.tripped {
		return 0, errPacketTooLarge
	}
	n, err := l.Conn.Read(p)
	b := p[:n]
	for len(b) > 0 {
		if l.left > 0 {
			k := min(l.left, len(b))
			l.left -= k
			b = b[k:]
			continue
		}
		l.hdr[l.hdrN] = b[0]
		l.hdrN++
		b = b[1:]
		if l.hdrN < 4 {
			continue
		}
		l.hdrN = 0
		size := int(l.hdr[0]) | int(l.hdr[1])<<8 | int(l.hdr[2])<<16
		l.logical += size
		if l.logical > l.max {
			l.tripped = true
			_ = l.Flush()
			writeRawError(l.Conn, l.hdr[3]+1, mysql.ER_NET_PACKET_TOO_LARGE, "08S01", "Got a packet bigger than 'max_allowed_packet' bytes")
			l.drain(size - len(b))
			return 0, errPacketTooLarge
		}
		l.left = size
		if size < 0xffffff { // the last chunk of this logical packet
			l.logical = 0
		}
	}
	return n, err
}

// drain reads and drops what the client is still sending of the refused
// packet (bounded in bytes and time), so that its write completes and it
// reads the 1153 instead of a connection reset.
func (l *clientConn) drain(left int) {
	if left <= 0 {
		return
	}
	_ = l.Conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, _ = io.CopyN(io.Discard, l.Conn, int64(min(left, 4*l.max)))
}

// authThrottle blocks a host for a while after repeated failed logins, so a
// password cannot be guessed at network speed.
type authThrottle struct {
	mu       sync.Mutex
	limit    int
	window   time.Duration
	failures map[string][]time.Time
}

func newAuthThrottle(limit int, window time.Duration) *authThrottle {
	return &authThrottle{limit: limit, window: window, failures: map[string][]time.Time{}}
}

func (a *authThrottle) recent(host string, now time.Time) []time.Time {
	fs := a.failures[host]
	i := 0
	for i < len(fs) && now.Sub(fs[i]) > a.window {
		i++
	}
	fs = fs[i:]
	if len(fs) == 0 {
		delete(a.failures, host)
	} else {
		a.failures[host] = fs
	}
	return fs
}

// blocked reports whether host has failed limit times within the window.
func (a *authThrottle) blocked(host string) bool {
	if a.limit <= 0 {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.recent(host, time.Now())) >= a.limit
}

func (a *authThrottle) fail(host string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := time.Now()
	a.failures[host] = append(a.recent(host, now), now)
}

func hostOf(addr net.Addr) string {
	h, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		return addr.String()
	}
	return h
}
