package backend

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/convoy-im/convoy/internal/testsvc"
	"github.com/convoy-im/convoy/router"
)

// managerFor is a Manager with the one datasource ds0 as given.
func managerFor(t *testing.T, ds router.Datasource) (*Manager, error) {
	t.Helper()
	doc, err := router.DefaultLayout([]router.Datasource{ds}, 8)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := router.NewSnapshot(doc)
	if err != nil {
		return nil, err
	}
	mgr := NewManager(Options{ConnectTimeout: 3 * time.Second, HealthInterval: -1})
	t.Cleanup(mgr.Close)
	return mgr, mgr.Update(snap)
}

// sslVersion acquires a connection of ds0 and returns the server's view
// of its TLS version ("" for clear text), or the acquire error.
func sslVersion(t *testing.T, ds router.Datasource) (string, error) {
	t.Helper()
	mgr, err := managerFor(t, ds)
	if err != nil {
		return "", err
	}
	c, err := mgr.Acquire(context.Background(), "ds0", false)
	if err != nil {
		return "", err
	}
	defer c.Release()
	return scalar(t, c, "SELECT VARIABLE_VALUE FROM information_schema.SESSION_STATUS WHERE VARIABLE_NAME = 'Ssl_version'"), nil
}

// TestDatasourceTLS connects to a MariaDB that requires secure transport
// and has its own CA, in every mode, and to one without TLS.
func TestDatasourceTLS(t *testing.T) {
	ca := testsvc.NewCA(t)
	cert, key := ca.Issue(t, "db", "127.0.0.1")
	m := testsvc.StartMariaDB(t, testsvc.WithMariaDBArgs("--ssl-ca="+ca.File, "--ssl-cert="+cert, "--ssl-key="+key))
	m.Exec(t,
		"CREATE USER x509user@'%' REQUIRE X509",
		"GRANT SELECT ON *.* TO x509user@'%'",
		"SET GLOBAL max_allowed_packet = 64 << 20",
		// Set last: the test helper's own connection is clear text.
		"SET GLOBAL require_secure_transport = ON")
	base := router.Datasource{Name: "ds0", Addr: m.Addr(), User: "root"}
	with := func(tc router.DatasourceTLS) router.Datasource { d := base; d.TLS = tc; return d }

	for _, tc := range []struct {
		name string
		tls  router.DatasourceTLS
	}{
		{"default on loopback (preferred)", router.DatasourceTLS{}},
		{"required", router.DatasourceTLS{Mode: router.TLSRequired}},
		{"verify-ca", router.DatasourceTLS{Mode: router.TLSVerifyCA, CAFile: ca.File}},
		{"verify-identity", router.DatasourceTLS{Mode: router.TLSVerifyIdentity, CAFile: ca.File}},
	} {
		v, err := sslVersion(t, with(tc.tls))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !strings.HasPrefix(v, "TLSv1.") {
			t.Fatalf("%s: the server sees Ssl_version %q, want TLS", tc.name, v)
		}
	}

	// Convoy's own wire code runs on the TLS session after the handshake:
	// a result larger than a TLS record and than a packet's 16 MiB.
	vca, err := managerFor(t, with(router.DatasourceTLS{Mode: router.TLSVerifyCA, CAFile: ca.File}))
	if err != nil {
		t.Fatal(err)
	}
	vc, err := vca.Acquire(context.Background(), "ds0", false)
	if err != nil {
		t.Fatal(err)
	}
	if got := scalar(t, vc, "SELECT REPEAT('x', 20 << 20)"); got != strings.Repeat("x", 20<<20) {
		t.Fatalf("a 20 MiB value came back as %d bytes", len(got))
	}
	vc.Release()
	if st := vca.Stats()[0].TLS; !strings.HasPrefix(st, "verify-ca: TLSv1.") {
		t.Fatalf("TLS state = %q", st)
	}

	// The database/sql handle for migration work secures itself the same way.
	for _, mode := range []string{router.TLSPreferred, router.TLSVerifyCA} {
		h, err := OpenSQL(with(router.DatasourceTLS{Mode: mode, CAFile: ca.File}), "")
		if err != nil {
			t.Fatal(err)
		}
		var name, v string
		err = h.QueryRow("SHOW SESSION STATUS LIKE 'Ssl_version'").Scan(&name, &v)
		h.Close()
		if err != nil || !strings.HasPrefix(v, "TLSv1.") {
			t.Fatalf("OpenSQL %s: Ssl_version %q, %v", mode, v, err)
		}
	}
	if h, err := OpenSQL(with(router.DatasourceTLS{Mode: router.TLSVerifyCA, CAFile: testsvc.NewCA(t).File}), ""); err != nil {
		t.Fatal(err)
	} else if err := h.Ping(); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("OpenSQL with another CA: %v", err)
	}

	refused := func(name string, ds router.Datasource, want string) {
		t.Helper()
		_, err := sslVersion(t, ds)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("%s: err = %v, want one containing %q", name, err, want)
		}
		if !strings.Contains(err.Error(), "ds0") {
			t.Fatalf("%s: the error does not name the datasource: %v", name, err)
		}
	}
	other := testsvc.NewCA(t)
	refused("verify-ca, another CA", with(router.DatasourceTLS{Mode: router.TLSVerifyCA, CAFile: other.File}), "certificate signed by unknown authority")
	refused("verify-identity, another name", with(router.DatasourceTLS{Mode: router.TLSVerifyIdentity, CAFile: ca.File, ServerName: "db.example"}), "db.example")
	refused("disabled against require_secure_transport", with(router.DatasourceTLS{Mode: router.TLSDisabled}), "Access denied") // MariaDB answers 1045

	// An account created REQUIRE X509 needs the client certificate.
	x := with(router.DatasourceTLS{Mode: router.TLSVerifyCA, CAFile: ca.File})
	x.User = "x509user"
	refused("X509 account without a client certificate", x, "Access denied")
	x.TLS.CertFile, x.TLS.KeyFile = ca.Issue(t, "convoy", "convoy")
	if _, err := sslVersion(t, x); err != nil {
		t.Fatalf("X509 account with a client certificate: %v", err)
	}

	// A missing CA file fails the route update with its path, at once.
	if _, err := managerFor(t, with(router.DatasourceTLS{Mode: router.TLSVerifyCA, CAFile: "/nonexistent/ca.pem"})); err == nil || !strings.Contains(err.Error(), "/nonexistent/ca.pem") {
		t.Fatalf("missing ca_file: err = %v", err)
	}

	// A server without TLS: preferred goes clear, required refuses.
	plain := testsvc.StartMariaDB(t)
	pds := router.Datasource{Name: "ds0", Addr: plain.Addr(), User: "root"}
	mgr, err := managerFor(t, pds)
	if err != nil {
		t.Fatal(err)
	}
	c, err := mgr.Acquire(context.Background(), "ds0", false)
	if err != nil {
		t.Fatalf("preferred against a server without TLS: %v", err)
	}
	c.Release()
	if st := mgr.Stats()[0].TLS; st != "preferred: off" {
		t.Fatalf("TLS state = %q, want preferred: off", st)
	}
	pds.TLS.Mode = router.TLSRequired
	refused("required against a server without TLS", pds, "does not support TLS")
}
