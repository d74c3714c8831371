package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// TLSFiles is the client side of a TLS connection Convoy opens to etcd or
// Redis. Files are read at start; a change needs a restart.
type TLSFiles struct {
	// Enabled turns TLS on with the system's roots when no file is given;
	// any file given turns it on too.
	Enabled    bool   `yaml:"enabled"`
	CAFile     string `yaml:"ca_file"`   // PEM roots that verify the server; empty: the system's
	CertFile   string `yaml:"cert_file"` // client certificate (PEM), with key_file
	KeyFile    string `yaml:"key_file"`
	ServerName string `yaml:"server_name"` // the name to verify; default: the host dialled
}

func (f TLSFiles) on() bool {
	return f.Enabled || f.CAFile != "" || f.CertFile != "" || f.KeyFile != ""
}

// config builds the tls.Config, or nil when TLS is off. The server is
// always verified: a TLS connection that does not authenticate its peer
// protects nothing against the attacker it is there for.
func (f TLSFiles) config(what string) (*tls.Config, error) {
	if !f.on() {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.ServerName}
	if f.CAFile != "" {
		pem, err := os.ReadFile(f.CAFile)
		if err != nil {
			return nil, fmt.Errorf("%s tls ca_file: %w", what, err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s tls ca_file %s holds no PEM certificate", what, f.CAFile)
		}
	}
	if (f.CertFile == "") != (f.KeyFile == "") {
		return nil, fmt.Errorf("%s tls: set both cert_file and key_file, or neither", what)
	}
	if f.CertFile != "" {
		pair, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("%s tls client certificate: %w", what, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// commonName is the subject CN of the configured client certificate ("" if
// none): etcd's user name for a client authenticated by certificate.
func (f TLSFiles) commonName() string {
	if f.CertFile == "" {
		return ""
	}
	pair, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil || len(pair.Certificate) == 0 {
		return ""
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return ""
	}
	return leaf.Subject.CommonName
}
