package integration

import (
	"crypto/tls"
	"database/sql"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"

	"github.com/convoy-im/convoy/internal/testsvc"
)

// TestAuthTLSAndLimits: caching_sha2_password over TLS and over the RSA key
// exchange, the mariadb CLI over TLS, wrong passwords, and the client
// connection limit (errno 1040 at once, existing sessions unaffected).
func TestAuthTLSAndLimits(t *testing.T) {
	s := newStack(t)
	cert, key := testsvc.SelfSigned(t)
	p := startConvoy(t, s.etcd.Endpoints(),
		"auth_method: caching_sha2_password",
		"tls_cert: "+cert, "tls_key: "+key,
		"max_connections: 5")

	ping := func(dsn string) error {
		db, err := sql.Open("mysql", dsn)
		if err != nil {
			return err
		}
		defer db.Close()
		var n int
		return db.QueryRow("SELECT COUNT(*) FROM conv_msg WHERE conv_id = 1").Scan(&n)
	}
	for name, params := range map[string]string{
		"caching_sha2 over TLS":         "&tls=skip-verify",
		"caching_sha2 over RSA, no TLS": "&tls=false",
	} {
		if err := ping(p.dsn("app", "app secret", "im") + params); err != nil {
			t.Errorf("%s: %v\n%s", name, err, p.logTail())
		}
		// A second login of the same user takes the fast (cached) path.
		if err := ping(p.dsn("app", "app secret", "im") + params); err != nil {
			t.Errorf("%s, second login: %v", name, err)
		}
		if err := ping(p.dsn("app", "nope", "im") + params); errno(err) != 1045 {
			t.Errorf("%s, wrong password: %v", name, err)
		}
	}
	out := runCLI(t, p.addr, "convoy", "convoy", "SHOW SESSION STATUS LIKE 'Ssl_cipher';\nSELECT COUNT(*) FROM conv_msg WHERE conv_id = 1;\n", "--ssl", "--ssl-verify-server-cert=0")
	if !strings.Contains(out, "COUNT(*)\n0") {
		t.Errorf("mariadb CLI over TLS with caching_sha2_password:\n%s", out)
	}

	// max_connections: 5. Hold 5, the 6th gets 1040 at once, the 5 still work.
	var held []*client.Conn
	for i := 0; i < 5; i++ {
		c, err := client.Connect(p.addr, "convoy", "convoy", "im", func(c *client.Conn) error {
			c.SetTLSConfig(nil)
			return c.SetCollation("utf8mb4_general_ci")
		})
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		held = append(held, c)
	}
	// max_connections + 100: all 100 extra clients at once get 1040 at once.
	start := time.Now()
	var wg sync.WaitGroup
	var refused, other atomic.Int32
	for range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := ping(p.dsn("convoy", "convoy", "im") + "&tls=false"); errno(err) == 1040 {
				refused.Add(1)
			} else {
				other.Add(1)
				t.Logf("extra connection: %v", err)
			}
		}()
	}
	wg.Wait()
	if refused.Load() != 100 || time.Since(start) > 5*time.Second {
		t.Errorf("100 extra connections: %d got 1040, %d something else, in %s; want all 1040 at once", refused.Load(), other.Load(), time.Since(start))
	}
	for _, c := range held {
		wg.Add(1)
		go func(c *client.Conn) {
			defer wg.Done()
			if _, err := c.Execute("SELECT seq FROM conv_msg WHERE conv_id = 2"); err != nil {
				t.Errorf("held connection after the limit: %v", err)
			}
		}(c)
	}
	wg.Wait()
	for _, c := range held {
		c.Close()
	}
}

// TestTLSHandshakeStatus: over TLS the handshake's OK says autocommit is on,
// as MariaDB's does. Clients keep that status as the session's: Python
// mysqlclient (libmariadb) with its default autocommit=False sends SET
// autocommit=0 only when it believes autocommit is on, so with 0x0000 there
// every statement of a "transaction" committed on its own and rollback()
// undid nothing. The same script runs against a MariaDB with the same
// certificate; go-mysql's client reads the status the same way.
func TestTLSHandshakeStatus(t *testing.T) {
	s := newStack(t)
	cert, key := testsvc.SelfSigned(t)
	p := startConvoy(t, s.etcd.Endpoints(), "tls_cert: "+cert, "tls_key: "+key)
	base := testsvc.StartMariaDB(t, testsvc.WithMariaDBArgs("--ssl-cert="+cert, "--ssl-key="+key))
	// tlsat is an unsharded database: behind Convoy it lives on the default
	// datasource.
	schema := []string{"CREATE DATABASE tlsat", "CREATE TABLE tlsat.t (id INT PRIMARY KEY) ENGINE=InnoDB"}
	s.ds[0].Exec(t, schema...)
	base.Exec(t, append(schema, "CREATE USER convoy@'%' IDENTIFIED BY 'convoy'", "GRANT ALL ON *.* TO convoy@'%'")...)

	for name, addr := range map[string]string{"mariadb": base.Addr(), "convoy": p.addr} {
		c, err := client.ConnectWithTimeout(addr, "convoy", "convoy", "tlsat", 5*time.Second, func(c *client.Conn) error {
			c.SetTLSConfig(&tls.Config{InsecureSkipVerify: true})
			return nil
		})
		if err != nil {
			t.Fatalf("%s: go-mysql client over TLS: %v", name, err)
		}
		if !c.IsAutoCommit() {
			t.Errorf("%s: the handshake's OK over TLS has status %q, want autocommit", name, c.StatusString())
		}
		c.Close()
	}

	py := `
import sys, json, MySQLdb
host, port, user, pw, ca = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
def connect():
    return MySQLdb.connect(host=host, port=port, user=user, passwd=pw, db="tlsat", ssl={"ca": ca})
c = connect()
cur = c.cursor()
cur.execute("SHOW SESSION STATUS LIKE 'Ssl_version'")
out = [cur.fetchone()[1].startswith("TLS"), c.get_autocommit()]
cur.execute("INSERT INTO t VALUES (1)")
c.commit()
cur.execute("INSERT INTO t VALUES (2)")
cur.execute("SELECT @@autocommit")
out.append(cur.fetchone()[0])
c.rollback()
other = connect()
oc = other.cursor()
oc.execute("SELECT id FROM t ORDER BY id")
out.append([r[0] for r in oc.fetchall()])
print(json.dumps(out))
`
	run := func(addr string) string {
		h, port := hostPort(t, addr)
		return runClient(t, exec.Command("/usr/bin/python3", "-c", py, h, port, "convoy", "convoy", cert), "python3-mysqldb")
	}
	want, got := run(base.Addr()), run(p.addr)
	if want != "[true, false, 0, [1]]" {
		t.Fatalf("mysqlclient over TLS on MariaDB itself: %s", want)
	}
	if got != want {
		t.Errorf("mysqlclient over TLS, autocommit=False, rollback:\nmariadb: %s\nconvoy:  %s", want, got)
	}
}
