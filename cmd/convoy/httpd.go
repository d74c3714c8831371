package main

import (
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/convoy-im/convoy/proxy"
	"github.com/convoy-im/convoy/router"
)

// httpListener is Convoy's HTTP side: /metrics and, when enabled,
// /debug/pprof. Bound to loopback it is open, as a local agent expects;
// bound elsewhere it serves TLS only and answers only admin users, so
// neither the metrics (which name datasources and shards) nor pprof (which
// can stall the process) are open to the network.
type httpListener struct {
	srv *http.Server
	ln  net.Listener
}

// pages add further handlers (the shard map) to the listener's mux.
func newHTTPListener(c Config, reg *prometheus.Registry, users []proxy.User, log *zap.Logger, pages ...func(*http.ServeMux)) (*httpListener, error) {
	loopback := router.IsLoopback(c.MetricsListen)
	secure := !loopback && !c.HTTP.InsecureNonLoopback
	var tlsCfg *tls.Config
	if c.HTTP.TLSCert != "" || c.HTTP.TLSKey != "" {
		pair, err := tls.LoadX509KeyPair(c.HTTP.TLSCert, c.HTTP.TLSKey)
		if err != nil {
			return nil, fmt.Errorf("http tls_cert / tls_key: %w", err)
		}
		tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}}
	}
	var admins []proxy.User
	for _, u := range users {
		if u.Admin {
			admins = append(admins, u)
		}
	}
	if secure {
		if tlsCfg == nil {
			return nil, fmt.Errorf("metrics_listen %s is not a loopback address: set http.tls_cert and http.tls_key (clients then authenticate as an admin user), bind it to 127.0.0.1, or set http.insecure_non_loopback on a private network", c.MetricsListen)
		}
		if len(admins) == 0 {
			return nil, fmt.Errorf("metrics_listen %s is not a loopback address and no user has admin: true to authenticate as", c.MetricsListen)
		}
	}
	pprofOn := loopback
	if c.HTTP.Pprof != nil {
		pprofOn = *c.HTTP.Pprof
	}

	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	if pprofOn {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	for _, p := range pages {
		p(mux)
	}
	var h http.Handler = mux
	if secure {
		h = basicAuth(admins, mux)
	}
	ln, err := net.Listen("tcp", c.MetricsListen)
	if err != nil {
		// As a failed registration: serving MySQL must not depend on it.
		log.Error("metrics listener: not serving /metrics", zap.Error(err))
		return nil, nil
	}
	if tlsCfg != nil {
		ln = tls.NewListener(ln, tlsCfg)
	}
	l := &httpListener{ln: ln, srv: &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second,
		ErrorLog: zap.NewStdLog(log.Named("http"))}}
	go func() {
		if err := l.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics listener", zap.Error(err))
		}
	}()
	return l, nil
}

func (l *httpListener) port() string {
	_, port, _ := net.SplitHostPort(l.ln.Addr().String())
	return port
}

// Close stops it; a nil listener (the port was taken) is a no-op.
func (l *httpListener) Close() {
	if l != nil {
		_ = l.srv.Close()
	}
}

// basicAuth admits requests carrying an admin user's name and password.
// Passwords are compared as SHA-256 digests in constant time, so neither
// the length nor a prefix of a password shows in the answer's timing.
func basicAuth(admins []proxy.User, next http.Handler) http.Handler {
	type cred struct{ user, pw [32]byte }
	creds := make([]cred, len(admins))
	for i, u := range admins {
		creds[i] = cred{sha256.Sum256([]byte(u.Name)), sha256.Sum256([]byte(u.Password))}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, pw, ok := r.BasicAuth()
		if ok {
			hu, hp := sha256.Sum256([]byte(user)), sha256.Sum256([]byte(pw))
			match := 0
			for _, c := range creds {
				match |= subtle.ConstantTimeCompare(hu[:], c.user[:]) & subtle.ConstantTimeCompare(hp[:], c.pw[:])
			}
			if match == 1 {
				next.ServeHTTP(w, r)
				return
			}
		}
		w.Header().Set("WWW-Authenticate", `Basic realm="convoy", charset="UTF-8"`)
		http.Error(w, "authentication required: an admin user of Convoy", http.StatusUnauthorized)
	})
}
