package proxy

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/convoy-im/convoy/proxy/engine"
	"github.com/convoy-im/convoy/router"
)

// ---- a tiny fake backend ---------------------------------------------------

type fuzzBackends struct{}

func (fuzzBackends) Acquire(_ context.Context, ds string, _ bool) (engine.Conn, error) {
	return &fuzzConn{ds: ds}, nil
}

type fuzzConn struct{ ds string }

func (c *fuzzConn) Datasource() string { return c.ds }

func rowsFor(sql string, binary bool) (*mysql.Result, error) {
	s := strings.ToUpper(strings.TrimLeft(sql, " \t\r\n("))
	for _, p := range []string{"SELECT", "SHOW", "WITH", "DESC", "EXPLAIN", "VALUES", "TABLE"} {
		if strings.HasPrefix(s, p) {
			rs, err := mysql.BuildSimpleResultset([]string{"1"}, [][]any{{int64(1)}}, binary)
			if err != nil {
				return nil, err
			}
			return &mysql.Result{Resultset: rs}, nil
		}
	}
	return &mysql.Result{AffectedRows: 1}, nil
}

func (c *fuzzConn) Exec(sql string) (*mysql.Result, error) { return rowsFor(sql, false) }

// ExecMulti answers each statement of a batch, cut at the ';' outside
// quotes (backslash escapes as the restorer prints them); a statement that
// sets LAST_INSERT_ID reports a seq allocation.
func (c *fuzzConn) ExecMulti(sql string) ([]*mysql.Result, error) {
	var out []*mysql.Result
	var quote byte
	start := 0
	for i := 0; i <= len(sql); i++ {
		if i < len(sql) {
			switch ch := sql[i]; {
			case quote != 0 && ch == '\\' && quote != '`':
				i++
				continue
			case quote != 0 && ch == quote:
				quote = 0
				continue
			case quote != 0:
				continue
			case ch == '\'' || ch == '"' || ch == '`':
				quote = ch
				continue
			case ch != ';':
				continue
			}
		}
		r, err := rowsFor(sql[start:i], false)
		if err != nil {
			return out, err
		}
		if strings.Contains(sql[start:i], "LAST_INSERT_ID(") {
			r.InsertId = 1 << 32
		}
		out = append(out, r)
		start = i + 1
	}
	return out, nil
}
func (c *fuzzConn) ExecPrepared(sql string, _ []any) (*mysql.Result, error) {
	return rowsFor(sql, true)
}
func (c *fuzzConn) Describe(sql string) (int, []*mysql.Field, error) {
	return strings.Count(sql, "?"), []*mysql.Field{{Name: []byte("1"), Type: mysql.MYSQL_TYPE_LONGLONG}}, nil
}
func (c *fuzzConn) UseDB(string) error               { return nil }
func (c *fuzzConn) SyncVars(map[string]string) error { return nil }
func (c *fuzzConn) Release()                         {}

type fuzzRoutes struct{ s *router.Snapshot }

func (r fuzzRoutes) Current() *router.Snapshot { return r.s }

// fuzzServer is one in-process proxy on a loopback listener, shared by all
// inputs of a fuzz run; recovered panics are counted from the log.
type fuzzServer struct {
	addr string
	logs *observer.ObservedLogs
	srv  *Server
}

var (
	fuzzOnce sync.Once
	fuzzSrv  *fuzzServer
	fuzzErr  error
)

func startFuzzServer(tb testing.TB) *fuzzServer {
	fuzzOnce.Do(func() {
		doc, err := router.DefaultLayout([]router.Datasource{{Name: "ds0", Addr: "127.0.0.1:1"}, {Name: "ds1", Addr: "127.0.0.1:2"}}, 8)
		if err != nil {
			fuzzErr = err
			return
		}
		snap, err := router.NewSnapshot(doc)
		if err != nil {
			fuzzErr = err
			return
		}
		eng := engine.New(fuzzBackends{}, fuzzRoutes{snap}, nil, nil, engine.Options{})
		core, logs := observer.New(zapcore.ErrorLevel)
		// No login throttle: mutated logins (an unknown user gets 1045 like a
		// wrong password) would soon block 127.0.0.1 for the valid login
		// each input is followed by (TestLoginFailures tests the throttle).
		srv, err := New(Config{Users: []User{{Name: "fz", Password: ""}, {Name: "adm", Password: "pw", Admin: true}}, AuthFailures: -1}, eng, zap.New(core), nil)
		if err != nil {
			fuzzErr = err
			return
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fuzzErr = err
			return
		}
		go func() { _ = srv.Serve(ln) }()
		fuzzSrv = &fuzzServer{addr: ln.Addr().String(), logs: logs, srv: srv}
	})
	if fuzzErr != nil {
		tb.Fatal(fuzzErr)
	}
	return fuzzSrv
}

// ---- packet helpers ----------------------------------------------------------

func pkt(seq byte, payload []byte) []byte {
	n := len(payload)
	return append([]byte{byte(n), byte(n >> 8), byte(n >> 16), seq}, payload...)
}

// loginPacket is a HandshakeResponse41 for user fz (empty password, so the
// auth response is empty and independent of the salt), database im.
func loginPacket() []byte {
	caps := uint32(mysql.CLIENT_PROTOCOL_41 | mysql.CLIENT_SECURE_CONNECTION | mysql.CLIENT_PLUGIN_AUTH |
		mysql.CLIENT_CONNECT_WITH_DB | mysql.CLIENT_LONG_PASSWORD | mysql.CLIENT_TRANSACTIONS)
	b := binary.LittleEndian.AppendUint32(nil, caps)
	b = binary.LittleEndian.AppendUint32(b, 1<<24)
	b = append(b, 45)
	b = append(b, make([]byte, 23)...)
	b = append(b, "fz\x00"...)
	b = append(b, 0) // auth response length 0
	b = append(b, "im\x00"...)
	b = append(b, "mysql_native_password\x00"...)
	return pkt(1, b)
}

func cmd(c byte, body ...byte) []byte { return pkt(0, append([]byte{c}, body...)) }

func execPacket(id uint32, nullBitmap byte, bound bool, vals ...int64) []byte {
	b := []byte{mysql.COM_STMT_EXECUTE}
	b = binary.LittleEndian.AppendUint32(b, id)
	b = append(b, 0)
	b = binary.LittleEndian.AppendUint32(b, 1)
	b = append(b, nullBitmap)
	if bound {
		b = append(b, 1)
		for range vals {
			b = append(b, mysql.MYSQL_TYPE_LONGLONG, 0)
		}
		for _, v := range vals {
			b = binary.LittleEndian.AppendUint64(b, uint64(v))
		}
	} else {
		b = append(b, 0)
	}
	return pkt(0, b)
}

func cmds(c byte, body string) []byte { return cmd(c, []byte(body)...) }

func cat(ps ...[]byte) []byte { return bytes.Join(ps, nil) }

func readPacket(c net.Conn) ([]byte, error) {
	var h [4]byte
	if _, err := io.ReadFull(c, h[:]); err != nil {
		return nil, err
	}
	n := int(h[0]) | int(h[1])<<8 | int(h[2])<<16
	b := make([]byte, n)
	_, err := io.ReadFull(c, b)
	return b, err
}

// FuzzServer writes arbitrary bytes after the server's handshake (the
// client's side of the conversation: handshake response, then commands) and
// requires that no panic is recovered, and that the server still accepts a
// valid login and answers SELECT 1 afterwards.
func FuzzServer(f *testing.F) {
	login := loginPacket()
	const prep = "SELECT * FROM conv_msg WHERE conv_id = ? AND seq = ?"
	seeds := [][]byte{
		login,
		cat(login, cmds(mysql.COM_QUERY, "SELECT 1")),
		cat(login, cmds(mysql.COM_QUERY, "SELECT * FROM conv_msg WHERE conv_id = 42")),
		cat(login, cmds(mysql.COM_QUERY, "SELECT * FROM conv_msg WHERE conv_id IN (1, 2, 3)")),
		cat(login, cmds(mysql.COM_QUERY, "BEGIN"), cmds(mysql.COM_QUERY, "INSERT INTO conv_msg (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES (1, 1, 1, 1, 1, NOW())"), cmds(mysql.COM_QUERY, "COMMIT")),
		cat(login, cmds(mysql.COM_STMT_PREPARE, prep), execPacket(1, 0, true, 42, 1)),
		cat(login, cmds(mysql.COM_STMT_PREPARE, prep), execPacket(1, 0x01, true, 0, 1)),
		cat(login, cmds(mysql.COM_STMT_PREPARE, prep), execPacket(1, 0x03, true)),
		cat(login, cmds(mysql.COM_STMT_PREPARE, prep), execPacket(1, 0, true, 42, 1), execPacket(1, 0, false)),
		cat(login, cmds(mysql.COM_STMT_PREPARE, prep), execPacket(1, 0, true, 42)),
		cat(login, cmds(mysql.COM_STMT_PREPARE, prep), execPacket(7, 0, true, 42, 1)),
		cat(login, cmds(mysql.COM_STMT_PREPARE, prep), cmd(mysql.COM_STMT_SEND_LONG_DATA, 1, 0, 0, 0, 0, 0, 'x'), execPacket(1, 0, true, 42, 1)),
		cat(login, cmds(mysql.COM_STMT_PREPARE, prep), cmd(mysql.COM_STMT_RESET, 1, 0, 0, 0), cmd(mysql.COM_STMT_CLOSE, 1, 0, 0, 0), execPacket(1, 0, true, 42, 1)),
		cat(login, cmds(mysql.COM_FIELD_LIST, "conv_msg\x00")),
		cat(login, cmds(mysql.COM_FIELD_LIST, "app\x00%")),
		cat(login, cmds(mysql.COM_INIT_DB, "im")),
		cat(login, cmd(mysql.COM_SET_OPTION, 0, 0), cmd(mysql.COM_SET_OPTION, 1, 0)),
		cat(login, cmd(mysql.COM_PING), cmd(0x1f), cmds(mysql.COM_QUERY, "SELECT 1"), cmd(mysql.COM_QUIT)),
		cat(login, cmd(mysql.COM_STATISTICS), cmd(mysql.COM_PROCESS_INFO), cmd(0xfe)),
		// Known-hostile shapes: an empty command packet, COM_FIELD_LIST without
		// its NUL, a length-encoded value claiming 2^63 bytes.
		cat(login, pkt(0, nil)),
		cat(login, cmds(mysql.COM_FIELD_LIST, "conv_msg")),
		cat(login, cmds(mysql.COM_STMT_PREPARE, "SELECT ?"), pkt(0, []byte{mysql.COM_STMT_EXECUTE, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, mysql.MYSQL_TYPE_VAR_STRING, 0, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 'x'})),
		// Broken handshakes.
		pkt(1, []byte{0x0d, 0xa2}),
		pkt(1, append(binary.LittleEndian.AppendUint32(nil, uint32(mysql.CLIENT_PROTOCOL_41|mysql.CLIENT_SECURE_CONNECTION|mysql.CLIENT_PLUGIN_AUTH)), make([]byte, 28)...)),
		pkt(1, append(append(binary.LittleEndian.AppendUint32(nil, uint32(mysql.CLIENT_PROTOCOL_41|mysql.CLIENT_SECURE_CONNECTION|mysql.CLIENT_CONNECT_ATTRS)), make([]byte, 28)...), "fz\x00\x00\xfc\xff\xff"...)),
		[]byte{0xff, 0xff, 0xff, 0x01},
	}
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fs := startFuzzServer(t)
		before := fs.logs.FilterMessageSnippet("[BUG]").Len()
		c, err := net.DialTimeout("tcp", fs.addr, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(time.Second))
		if _, err := readPacket(c); err != nil {
			c.Close()
			t.Fatalf("reading the handshake: %v", err)
		}
		_, _ = c.Write(data)
		// Read whatever comes back until the server goes quiet.
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
		_, _ = io.Copy(io.Discard, c)
		c.Close()

		// The server must still serve a fresh, valid client.
		cc, err := client.ConnectWithTimeout(fs.addr, "fz", "", "im", 2*time.Second)
		if err != nil {
			t.Fatalf("after input %q: a valid login fails: %v", data, err)
		}
		r, err := cc.Execute("SELECT 1")
		cc.Close()
		if err != nil || r == nil || r.Resultset == nil || len(r.Values) != 1 {
			t.Fatalf("after input %q: SELECT 1: %v", data, err)
		}
		// Give the session goroutine a moment to log a recovered panic.
		deadline := time.Now().Add(20 * time.Millisecond)
		for time.Now().Before(deadline) && fs.logs.FilterMessageSnippet("[BUG]").Len() == before {
			time.Sleep(2 * time.Millisecond)
		}
		if after := fs.logs.FilterMessageSnippet("[BUG]").All(); len(after) > before {
			e := after[len(after)-1]
			t.Fatalf("input %q: the server recovered a panic (one session killed): %v\n%s", data, e.ContextMap()["panic"], e.ContextMap()["stack"])
		}
	})
}
