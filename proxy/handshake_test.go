package proxy

import (
	"io"
	"net"
	"testing"
	"time"
)

// TestHandshakeTimeout: a client that connects and never answers the
// handshake is disconnected after handshakeTimeout, not kept forever.
func TestHandshakeTimeout(t *testing.T) {
	fs := startFuzzServer(t)
	c, err := net.DialTimeout("tcp", fs.addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	_ = c.SetReadDeadline(time.Now().Add(handshakeTimeout + 5*time.Second))
	_, err = io.Copy(io.Discard, c) // the greeting, then EOF when the server gives up
	if err != nil || time.Since(start) < handshakeTimeout-time.Second || time.Since(start) > handshakeTimeout+3*time.Second {
		t.Fatalf("silent client: connection ended after %s with %v, want EOF after about %s", time.Since(start), err, handshakeTimeout)
	}
}
