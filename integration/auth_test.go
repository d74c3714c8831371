package integration

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"database/sql"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
)

// selfSigned writes a throwaway RSA certificate for 127.0.0.1.
func selfSigned(t *testing.T) (certFile, keyFile string) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "convoy-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	_ = os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	_ = os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600)
	return certFile, keyFile
}

// TestAuthTLSAndLimits: caching_sha2_password over TLS and over the RSA key
// exchange, the mariadb CLI over TLS, wrong passwords, and the client
// connection limit (errno 1040 at once, existing sessions unaffected).
func TestAuthTLSAndLimits(t *testing.T) {
	s := newStack(t)
	cert, key := selfSigned(t)
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
