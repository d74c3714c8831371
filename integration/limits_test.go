package integration

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/convoy-im/convoy/internal/testsvc"
)

// TestClientLimits: the bounds a client cannot inflate — connections per
// user, prepared statements per session, packet size — and the login
// throttle and require_secure_transport, each with its real errno.
func TestClientLimits(t *testing.T) {
	s := newStack(t)
	cert, key := testsvc.SelfSigned(t)
	p := startConvoy(t, s.etcd.Endpoints(),
		"max_user_connections: 2", "max_prepared_per_session: 3", "max_packet: 1048576",
		"auth_failures: 3", "tls_cert: "+cert, "tls_key: "+key)

	t.Run("max_user_connections", func(t *testing.T) {
		db := p.open(t, "app", "app secret", "im")
		db.SetMaxIdleConns(5)
		var held []*sql.Conn
		for i := 0; i < 2; i++ {
			c, err := db.Conn(bg())
			if err != nil {
				t.Fatal(err)
			}
			if err := c.PingContext(bg()); err != nil {
				t.Fatal(err)
			}
			held = append(held, c)
		}
		third := openDSN(t, p.dsn("app", "app secret", "im"))
		var n int
		if err := third.QueryRow("SELECT 1").Scan(&n); errno(err) != 1203 {
			t.Errorf("third connection of one user: %v, want 1203", err)
		}
		for _, c := range held {
			c.Close()
		}
	})

	t.Run("max_prepared_per_session", func(t *testing.T) {
		db := p.open(t, "convoy", "convoy", "im")
		c, err := db.Conn(bg())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var stmts []*sql.Stmt
		for i := 0; i < 3; i++ {
			st, err := c.PrepareContext(bg(), "SELECT seq FROM conv_msg WHERE conv_id = ?")
			if err != nil {
				t.Fatal(err)
			}
			stmts = append(stmts, st)
		}
		if _, err := c.PrepareContext(bg(), "SELECT msg_id FROM conv_msg WHERE conv_id = ?"); errno(err) != 1461 {
			t.Errorf("4th prepared statement: %v, want 1461", err)
		}
		stmts[0].Close() // closing one frees a slot
		if _, err := c.PrepareContext(bg(), "SELECT msg_id FROM conv_msg WHERE conv_id = ?"); err != nil {
			t.Errorf("prepare after a close: %v", err)
		}

		// COM_RESET_CONNECTION (and COM_CHANGE_USER, the same path) ends
		// every prepared statement, as in MariaDB: an old id gets 1243 and the slots are
		// free again (a pool resetting its connections never reaches the
		// bound).
		raw := rawConnect(t, p.addr, "convoy", "convoy", "im")
		prepare := func(round string) []uint32 {
			var ids []uint32
			for i := 0; i < 3; i++ {
				r := rawCommand(raw, comPrepare("SELECT seq FROM conv_msg WHERE conv_id = ?"), true)
				if !r.ok {
					t.Fatalf("%s: prepare %d: %v", round, i+1, r)
				}
				ids = append(ids, r.stmtID)
			}
			return ids
		}
		ids := prepare("before any reset")
		if r := rawCommand(raw, []byte{0x1f}, false); !r.ok { // COM_RESET_CONNECTION
			t.Fatalf("reset: %v", r)
		}
		if r := rawCommand(raw, comExecute(ids[0], int64(42)), false); r.errno != 1243 {
			t.Errorf("EXECUTE of a statement prepared before the reset: %v, want 1243", r)
		}
		ids = prepare("after the reset")
		if err := raw.Ping(); err != nil {
			t.Fatal(err)
		}
		if r := rawCommand(raw, []byte{0x1f}, false); !r.ok {
			t.Fatalf("second reset: %v", r)
		}
		prepare("after a second reset")
		if r := rawCommand(raw, comExecute(ids[2], int64(42)), false); r.errno != 1243 {
			t.Errorf("EXECUTE of a statement prepared before the second reset: %v, want 1243", r)
		}
		if r := rawCommand(raw, comPrepare("SELECT 1"), true); r.errno != 1461 {
			t.Errorf("4th prepared statement after the reset: %v, want 1461", r)
		}
	})

	t.Run("max_packet", func(t *testing.T) {
		db := p.open(t, "convoy", "convoy", "im")
		db.SetMaxIdleConns(0)
		big := "SELECT '" + strings.Repeat("x", 2<<20) + "'"
		if _, err := db.Exec(big); errno(err) != 1153 {
			t.Errorf("2 MiB query with max_packet 1 MiB: %v, want 1153", err)
		}
		var got string
		if err := db.QueryRow("SELECT '" + strings.Repeat("y", 500<<10) + "'").Scan(&got); err != nil || len(got) != 500<<10 {
			t.Errorf("500 KiB query: %d bytes, %v", len(got), err)
		}
	})

	t.Run("require_secure_transport", func(t *testing.T) {
		q := startConvoy(t, s.etcd.Endpoints(), "require_secure_transport: true", "tls_cert: "+cert, "tls_key: "+key)
		plain := openDSN(t, q.dsn("convoy", "convoy", "im")+"&tls=false")
		var n int
		if err := plain.QueryRow("SELECT 1").Scan(&n); errno(err) != 3159 {
			t.Errorf("plain connection with require_secure_transport: %v, want 3159", err)
		}
		secure := openDSN(t, q.dsn("convoy", "convoy", "im")+"&tls=skip-verify")
		if err := secure.QueryRow("SELECT 1").Scan(&n); err != nil {
			t.Errorf("TLS connection with require_secure_transport: %v", err)
		}
	})

	// Last: it blocks 127.0.0.1 on this proxy.
	t.Run("auth throttle", func(t *testing.T) {
		for i := 0; i < 3; i++ {
			if err := openDSN(t, p.dsn("convoy", "wrong", "im")).Ping(); errno(err) != 1045 {
				t.Fatalf("wrong password %d: %v", i, err)
			}
		}
		if err := openDSN(t, p.dsn("convoy", "convoy", "im")).Ping(); errno(err) != 1129 {
			t.Errorf("after 3 failures, the right password: %v, want 1129 (host blocked)", err)
		}
	})
}

func bg() context.Context { return context.Background() }
