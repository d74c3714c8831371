package proxy

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"
	"go.uber.org/zap"

	"github.com/convoy-im/convoy/internal/testsvc"
	"github.com/convoy-im/convoy/proxy/engine"
	"github.com/convoy-im/convoy/router"
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

// serveProxy runs an in-process proxy over fake backends with cfg and
// returns its address.
func serveProxy(t *testing.T, cfg Config, backends engine.Backends, log *zap.Logger) string {
	t.Helper()
	doc, err := router.DefaultLayout([]router.Datasource{{Name: "ds0", Addr: "127.0.0.1:1"}, {Name: "ds1", Addr: "127.0.0.1:2"}}, 8)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := router.NewSnapshot(doc)
	if err != nil {
		t.Fatal(err)
	}
	// No shard's write-P99 trigger may fire from how fast the fakes answer
	// (under -race a statement over all shards takes over 50 ms): what a
	// test reads back must not depend on the machine's speed.
	opts := engine.Options{HealthWriteP99: time.Hour}
	srv, err := New(cfg, engine.New(backends, fuzzRoutes{snap}, nil, nil, opts), log, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// startTestServer serves cfg over the fuzz tests' backends, with users u/pw
// and the empty-password fz unless cfg names some.
func startTestServer(t *testing.T, cfg Config) string {
	t.Helper()
	if cfg.Users == nil {
		cfg.Users = []User{{Name: "u", Password: "pw"}, {Name: "fz"}}
	}
	return serveProxy(t, cfg, fuzzBackends{}, zap.NewNop())
}

// dialGreeting connects to addr and reads the server's greeting.
func dialGreeting(t *testing.T, addr string) (net.Conn, []byte) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	p, err := readPacket(c)
	if err != nil {
		t.Fatal(err)
	}
	return c, p
}

func tlsOption(c *client.Conn) error {
	c.SetTLSConfig(&tls.Config{InsecureSkipVerify: true})
	return nil
}

// TestHandshakeOKStatus: the handshake's OK carries SERVER_STATUS_AUTOCOMMIT
// with and without TLS, for both auth methods. go-mysql's client, like
// libmariadb (so Python mysqlclient) and MariaDB Connector/J, keeps the
// status of the handshake's OK as the session's: with 0x0000 a client whose
// default is autocommit=0 skips its SET autocommit=0 and a "transaction"
// commits statement by statement.
func TestHandshakeOKStatus(t *testing.T) {
	cert, key := testsvc.SelfSigned(t)
	for _, method := range []string{mysql.AUTH_NATIVE_PASSWORD, mysql.AUTH_CACHING_SHA2_PASSWORD} {
		addr := startTestServer(t, Config{AuthMethod: method, TLSCert: cert, TLSKey: key})
		for _, tc := range []struct {
			name string
			opts []client.Option
		}{{"plain", nil}, {"TLS", []client.Option{tlsOption}}} {
			// Twice: caching_sha2's second login takes the fast path.
			for range 2 {
				c, err := client.ConnectWithTimeout(addr, "u", "pw", "", 5*time.Second, tc.opts...)
				if err != nil {
					t.Fatalf("%s over %s: %v", method, tc.name, err)
				}
				if !c.IsAutoCommit() {
					t.Errorf("%s over %s: the handshake's OK has status %q, want SERVER_STATUS_AUTOCOMMIT", method, tc.name, c.StatusString())
				}
				c.Close()
			}
		}
	}
}

// loginErrno is the errno a login with user / password gets (0: none).
func loginErrno(t *testing.T, addr, user, password string, opts ...client.Option) int {
	t.Helper()
	c, err := client.ConnectWithTimeout(addr, user, password, "", 5*time.Second, opts...)
	if err == nil {
		c.Close()
		return 0
	}
	var me *mysql.MyError
	if !errors.As(err, &me) {
		t.Fatalf("login as %s: %v: not a MySQL error", user, err)
	}
	return int(me.Code)
}

// TestLoginFailures: a wrong password and an unknown user both get 1045 (as
// MariaDB answers: which users exist is not told), and each counts for the
// login throttle before the client can try again, over TLS too.
func TestLoginFailures(t *testing.T) {
	cert, key := testsvc.SelfSigned(t)
	for _, tc := range []struct {
		name string
		opts []client.Option
	}{{"plain", nil}, {"TLS", []client.Option{tlsOption}}} {
		addr := startTestServer(t, Config{TLSCert: cert, TLSKey: key, AuthFailures: 2})
		if got := loginErrno(t, addr, "u", "wrong", tc.opts...); got != mysql.ER_ACCESS_DENIED_ERROR {
			t.Errorf("%s, wrong password: errno %d, want 1045", tc.name, got)
		}
		if got := loginErrno(t, addr, "nosuch", "pw", tc.opts...); got != mysql.ER_ACCESS_DENIED_ERROR {
			t.Errorf("%s, unknown user: errno %d, want 1045", tc.name, got)
		}
		// At once: the second failure was counted before its error went out.
		if got := loginErrno(t, addr, "u", "pw", tc.opts...); got != mysql.ER_HOST_IS_BLOCKED {
			t.Errorf("%s, right password after 2 failures: errno %d, want 1129", tc.name, got)
		}
	}
}

// TestMalformedHandshake: a handshake response whose user name has no NUL
// terminator gets MariaDB's 1043 / 08S01, and the server goes on serving.
func TestMalformedHandshake(t *testing.T) {
	addr := startTestServer(t, Config{})
	c, _ := dialGreeting(t, addr)
	body := binary.LittleEndian.AppendUint32(nil, uint32(mysql.CLIENT_PROTOCOL_41|mysql.CLIENT_SECURE_CONNECTION|mysql.CLIENT_PLUGIN_AUTH))
	body = binary.LittleEndian.AppendUint32(body, 1<<24)
	body = append(body, 45)
	body = append(body, make([]byte, 23)...)
	body = append(body, "no-terminator"...)
	if _, err := c.Write(pkt(1, body)); err != nil {
		t.Fatal(err)
	}
	p, err := readPacket(c)
	if err != nil {
		t.Fatal(err)
	}
	if len(p) < 9 || p[0] != mysql.ERR_HEADER || binary.LittleEndian.Uint16(p[1:]) != mysql.ER_HANDSHAKE_ERROR || string(p[3:9]) != "#08S01" {
		t.Fatalf("malformed handshake answered % x, want error 1043 / 08S01", p)
	}
	if got := loginErrno(t, addr, "u", "pw"); got != 0 {
		t.Fatalf("a valid login afterwards: errno %d", got)
	}
}

// TestGreeting: the greeting announces autocommit (PyMySQL reads it there),
// the capabilities Convoy adds, and not session tracking, which Convoy does
// not do (go-mysql announces it since v1.15).
func TestGreeting(t *testing.T) {
	_, p := dialGreeting(t, startTestServer(t, Config{}))
	end := bytes.IndexByte(p, 0)
	low := end + 1 + 4 + 8 + 1
	if p[0] != 10 || end < 0 || len(p) < low+7 {
		t.Fatalf("greeting % x", p)
	}
	caps := uint32(binary.LittleEndian.Uint16(p[low:])) | uint32(binary.LittleEndian.Uint16(p[low+5:]))<<16
	if caps&extraCapabilities != extraCapabilities || caps&mysql.CLIENT_SESSION_TRACK != 0 {
		t.Errorf("greeting capabilities %#x: want %#x in, CLIENT_SESSION_TRACK out", caps, uint32(extraCapabilities))
	}
	if st := binary.LittleEndian.Uint16(p[low+3:]); st != mysql.SERVER_STATUS_AUTOCOMMIT {
		t.Errorf("greeting status %#04x, want SERVER_STATUS_AUTOCOMMIT only", st)
	}
}
