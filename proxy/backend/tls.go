package backend

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync/atomic"

	"github.com/convoy-im/convoy/router"
)

// tlsSetup is what a pool needs to secure its connections: the mode, and
// the tls.Config built once from the datasource's files (nil: disabled).
type tlsSetup struct {
	mode string
	// cfg secures a connection; in preferred mode only when the server's
	// greeting offers TLS (handshakeConn.peekGreeting).
	cfg *tls.Config
	// state describes the last established connection for SHOW
	// DATASOURCES: "TLSv1.3 TLS_AES_128_GCM_SHA256" or "off".
	state atomic.Pointer[string]
}

func newTLSSetup(ds router.Datasource) (*tlsSetup, error) {
	t := &tlsSetup{mode: ds.EffectiveMode()}
	if t.mode == router.TLSDisabled {
		return t, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if ds.TLS.CertFile != "" {
		pair, err := tls.LoadX509KeyPair(ds.TLS.CertFile, ds.TLS.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("datasource %s: tls client certificate: %w", ds.Name, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	var roots *x509.CertPool // nil: the system's
	if ds.TLS.CAFile != "" {
		pem, err := os.ReadFile(ds.TLS.CAFile)
		if err != nil {
			return nil, fmt.Errorf("datasource %s: tls ca_file: %w", ds.Name, err)
		}
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("datasource %s: tls ca_file %s holds no PEM certificate", ds.Name, ds.TLS.CAFile)
		}
	}
	switch t.mode {
	case router.TLSPreferred, router.TLSRequired:
		// Encryption without authentication of the server, as the MySQL
		// clients' modes of the same names.
		cfg.InsecureSkipVerify = true
	case router.TLSVerifyCA:
		// The chain must lead to the CA; the name is not checked (servers
		// addressed by IP often carry a certificate for a host name).
		cfg.InsecureSkipVerify = true
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			return verifyChain(cs, roots)
		}
	case router.TLSVerifyIdentity:
		cfg.RootCAs = roots
		cfg.ServerName = ds.TLS.ServerName
		if cfg.ServerName == "" {
			host, _, err := net.SplitHostPort(ds.Addr)
			if err != nil {
				host = ds.Addr
			}
			cfg.ServerName = host
		}
	}
	t.cfg = cfg
	off := "off"
	t.state.Store(&off)
	return t, nil
}

func verifyChain(cs tls.ConnectionState, roots *x509.CertPool) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("tls: the server sent no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter})
	return err
}

// established records how the last connection was secured.
func (t *tlsSetup) established(nc net.Conn) {
	s := "off"
	if tc, ok := nc.(*tls.Conn); ok {
		cs := tc.ConnectionState()
		// Named as the server names it in Ssl_version: TLSv1.3.
		s = strings.Replace(tls.VersionName(cs.Version), "TLS ", "TLSv", 1) + " " + tls.CipherSuiteName(cs.CipherSuite)
	}
	t.state.Store(&s)
}

// State is the datasource's TLS mode and how its last connection was
// secured, e.g. "verify-ca: TLSv1.3 TLS_AES_128_GCM_SHA256".
func (t *tlsSetup) State() string {
	s := "off"
	if p := t.state.Load(); p != nil {
		s = *p
	}
	return t.mode + ": " + s
}
