package router

import (
	"fmt"
	"net"
	"strings"
)

// TLS modes of a datasource connection, named and meant as the MySQL
// clients' --ssl-mode values.
const (
	TLSDisabled       = "disabled"        // clear text
	TLSPreferred      = "preferred"       // TLS when the server offers it, unverified
	TLSRequired       = "required"        // TLS or no connection, unverified
	TLSVerifyCA       = "verify-ca"       // TLS, server certificate signed by the CA
	TLSVerifyIdentity = "verify-identity" // verify-ca and the certificate names the host
)

// DatasourceTLS configures TLS to one datasource. Every field is a string
// so that Datasource stays comparable (the pool manager replaces a pool
// when its datasource changed).
type DatasourceTLS struct {
	// Mode is one of the TLS* constants; empty means the default of
	// EffectiveMode.
	Mode string `json:"mode,omitempty" yaml:"mode,omitempty"`
	// CAFile holds the PEM certificates that verify the server (verify-ca,
	// verify-identity); empty: the system's roots.
	CAFile string `json:"ca_file,omitempty" yaml:"ca_file,omitempty"`
	// CertFile and KeyFile are a client certificate and its key, for
	// accounts created REQUIRE X509 / SUBJECT.
	CertFile string `json:"cert_file,omitempty" yaml:"cert_file,omitempty"`
	KeyFile  string `json:"key_file,omitempty" yaml:"key_file,omitempty"`
	// ServerName overrides the host name verify-identity checks (default:
	// the host part of Addr).
	ServerName string `json:"server_name,omitempty" yaml:"server_name,omitempty"`
}

func (t DatasourceTLS) validate() error {
	switch t.Mode {
	case "", TLSDisabled, TLSPreferred, TLSRequired, TLSVerifyCA, TLSVerifyIdentity:
	default:
		return fmt.Errorf("tls mode %q is not one of disabled, preferred, required, verify-ca, verify-identity", t.Mode)
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		return fmt.Errorf("tls needs both cert_file and key_file, or neither")
	}
	for _, f := range []string{t.CAFile, t.CertFile, t.KeyFile} {
		if strings.Contains(f, "-----BEGIN") {
			return fmt.Errorf("tls files are paths each proxy reads, never certificates or keys pasted into the route document")
		}
	}
	if t.Mode == TLSDisabled && (t.CAFile != "" || t.CertFile != "" || t.ServerName != "") {
		return fmt.Errorf("tls mode disabled with ca_file, cert_file or server_name set: say which you mean")
	}
	return nil
}

// EffectiveMode is the mode the proxy uses for ds: the configured one, or
// by default preferred for a loopback address (a local development server
// usually has no certificate, and the traffic never leaves the machine) and
// required for any other, so that credentials and rows never cross a
// network in clear text unless the document says so.
func (ds Datasource) EffectiveMode() string {
	if ds.TLS.Mode != "" {
		return ds.TLS.Mode
	}
	if IsLoopback(ds.Addr) {
		return TLSPreferred
	}
	return TLSRequired
}

// IsLoopback reports whether addr (host:port or a bare host) names this
// machine: localhost, 127.0.0.0/8 or ::1.
func IsLoopback(addr string) bool {
	host := addr
	if h, _, err := net.SplitHostPort(addr); err == nil {
		host = h
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
