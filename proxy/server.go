// Package proxy is Convoy's MySQL wire front: it accepts client connections,
// authenticates them, and hands each command to an engine.Session. It knows
// nothing about shards; errors become MySQL error packets here and only here.
package proxy

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/server"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/convoy-im/convoy/proxy/admin"
	"github.com/convoy-im/convoy/proxy/engine"
	"github.com/convoy-im/convoy/proxy/sqlerr"
)

// User is an account clients log in with. Admin users may send admin
// directives.
type User struct {
	Name     string
	Password string
	Admin    bool
	// Privileges, when set, says what the account may run (Admin is then
	// its Admin); nil: read, write and ddl, as engine.ParsePrivileges.
	Privileges *engine.Privileges
	// Outbox makes the account's transactions outbox transactions by
	// default (engine.TxnModeVar).
	Outbox bool
}

// privileges is what the account may do.
func (u User) privileges() engine.Privileges {
	if u.Privileges != nil {
		p := *u.Privileges
		p.Admin = p.Admin || u.Admin
		return p
	}
	return engine.Privileges{Read: true, Write: true, DDL: true, Admin: u.Admin}
}

// Config is the front end's configuration.
type Config struct {
	Users []User
	// ServerVersion is announced in the handshake. The 5.5.5- prefix is what
	// MariaDB sends so that old clients parse a 5.x major version.
	ServerVersion string
	// AuthMethod is mysql_native_password (default) or caching_sha2_password;
	// clients asking for the other one are switched.
	AuthMethod string
	// TLSCert and TLSKey enable TLS (and the RSA exchange of caching_sha2).
	TLSCert, TLSKey string
	// MaxConnections bounds client connections; the next one gets errno 1040.
	MaxConnections int
	// MaxUserConnections bounds connections per user (errno 1203); 0 = no bound.
	MaxUserConnections int
	// MaxPacket is the largest packet a client may send (errno 1153 and the
	// connection is closed). Default 64 MiB.
	MaxPacket int
	// MaxPreparedPerSession bounds open prepared statements of one client
	// (errno 1461). Default 1024.
	MaxPreparedPerSession int
	// AuthFailures failed logins from one host within AuthWindow block the
	// host for the rest of the window (errno 1129). Default 10 per minute;
	// negative disables.
	AuthFailures int
	AuthWindow   time.Duration
	// RequireSecureTransport refuses clients that did not negotiate TLS.
	RequireSecureTransport bool
	// StatementLogRate bounds the log lines about failed client statements,
	// per errno and second (stmtlog.go). Default 5; negative: no lines.
	StatementLogRate int
	// Admin answers Convoy's directives (/*+ convoy ... */, package
	// proxy/admin). Nil: directives over the engine without hooks (one
	// that needs a hook says it is not available in this process).
	Admin *admin.Admin
}

// Server accepts client connections.
type Server struct {
	cfg   Config
	eng   *engine.Engine
	admin *admin.Admin // the directives (handler.go)
	log   *zap.Logger
	wire  *server.Server
	users map[string]User
	// decoy is the password of every user name no account has (auth.go).
	decoy  string
	active atomic.Int64
	auth   *authThrottle
	// started and commands answer COM_STATISTICS (uptime, questions).
	started  time.Time
	commands atomic.Int64

	perUserMu sync.Mutex
	perUser   map[string]int

	mu     sync.Mutex
	ln     net.Listener
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup

	connGauge prometheus.Gauge
	rejected  prometheus.Counter
	errs      *prometheus.CounterVec
	stmtLog   *stmtLog
}

// New builds a server; call Serve with a listener.
func New(cfg Config, eng *engine.Engine, log *zap.Logger, reg prometheus.Registerer) (*Server, error) {
	if log == nil {
		log = zap.NewNop()
	}
	if cfg.ServerVersion == "" {
		cfg.ServerVersion = "5.5.5-10.11.19-MariaDB-Convoy"
	}
	if cfg.AuthMethod == "" {
		cfg.AuthMethod = mysql.AUTH_NATIVE_PASSWORD
	}
	if cfg.AuthMethod != mysql.AUTH_NATIVE_PASSWORD && cfg.AuthMethod != mysql.AUTH_CACHING_SHA2_PASSWORD {
		return nil, fmt.Errorf("auth method %q is not supported (use %s or %s)", cfg.AuthMethod, mysql.AUTH_NATIVE_PASSWORD, mysql.AUTH_CACHING_SHA2_PASSWORD)
	}
	if cfg.MaxConnections <= 0 {
		cfg.MaxConnections = 4096
	}
	if cfg.MaxPacket <= 0 {
		cfg.MaxPacket = 64 << 20
	}
	if cfg.MaxPreparedPerSession <= 0 {
		cfg.MaxPreparedPerSession = 1024
	}
	if cfg.AuthFailures == 0 {
		cfg.AuthFailures = 10
	}
	if cfg.StatementLogRate == 0 {
		cfg.StatementLogRate = defaultStatementLogRate
	}
	if cfg.AuthWindow <= 0 {
		cfg.AuthWindow = time.Minute
	}
	if cfg.RequireSecureTransport && cfg.TLSCert == "" {
		return nil, errors.New("require_secure_transport needs tls_cert and tls_key")
	}
	if len(cfg.Users) == 0 {
		return nil, errors.New("no users configured: clients could not log in")
	}
	var tlsConf *tls.Config
	var rsaKey *rsa.PrivateKey
	if cfg.TLSCert != "" || cfg.TLSKey != "" {
		var err error
		if tlsConf, rsaKey, err = loadTLS(cfg.TLSCert, cfg.TLSKey); err != nil {
			return nil, err
		}
	}
	if rsaKey == nil && cfg.AuthMethod == mysql.AUTH_CACHING_SHA2_PASSWORD {
		// caching_sha2_password's full authentication of a client without
		// TLS sends the password encrypted with the server's RSA key: without
		// a TLS certificate with an RSA key, one made at start does (as
		// MySQL makes its own), and go-mysql refuses to start without one.
		var err error
		if rsaKey, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
			return nil, fmt.Errorf("RSA key for caching_sha2_password: %w", err)
		}
	}
	if cfg.Admin == nil && eng != nil {
		cfg.Admin = admin.New(eng, admin.Config{})
	}
	s := &Server{
		cfg:     cfg,
		eng:     eng,
		admin:   cfg.Admin,
		log:     log,
		started: time.Now(),
		users:   map[string]User{},
		decoy:   rand.Text(),
		stmtLog: newStmtLog(log.Named("client"), cfg.StatementLogRate),
		conns:   map[net.Conn]struct{}{},
		auth:    newAuthThrottle(cfg.AuthFailures, cfg.AuthWindow),
		perUser: map[string]int{},
		// utf8mb4_general_ci (45) is the collation announced to clients.
		wire: server.NewServer(cfg.ServerVersion, 45, cfg.AuthMethod, rsaKey, tlsConf),
		connGauge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "convoy_client_connections", Help: "Open client connections."}),
		rejected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "convoy_client_connections_rejected_total", Help: "Client connections refused because max_connections was reached."}),
		errs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "convoy_client_errors_total", Help: "Error packets sent to clients, by errno."}, []string{"errno"}),
	}
	for _, u := range cfg.Users {
		s.users[u.Name] = u
	}
	if eng != nil { // (tests build a server without an engine to list its metrics)
		eng.SetAccounts(func(name string) (engine.Privileges, bool) {
			u, ok := s.users[name]
			return u.privileges(), ok
		})
	}
	if reg != nil {
		reg.MustRegister(s.connGauge, s.rejected, s.errs)
	}
	return s, nil
}

// loadTLS reads the certificate and key; the key is also returned when it
// is an RSA key (caching_sha2_password's RSA exchange uses it).
func loadTLS(certFile, keyFile string) (*tls.Config, *rsa.PrivateKey, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("loading TLS certificate: %w", err)
	}
	rsaKey, _ := cert.PrivateKey.(*rsa.PrivateKey)
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, rsaKey, nil
}

// Serve accepts connections on ln until Close.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errors.New("server closed")
	}
	s.ln = ln
	s.mu.Unlock()
	for {
		nc, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		if !s.track(nc) {
			_ = nc.Close()
			continue
		}
		s.wg.Add(1)
		go s.handle(nc)
	}
}

func (s *Server) track(nc net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[nc] = struct{}{}
	return true
}

func (s *Server) untrack(nc net.Conn) {
	s.mu.Lock()
	delete(s.conns, nc)
	s.mu.Unlock()
}

// Close stops accepting, closes every client connection and waits for their
// goroutines; open transactions are rolled back.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	if s.ln != nil {
		_ = s.ln.Close()
	}
	for nc := range s.conns {
		_ = nc.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

// handle owns one client connection. A panic anywhere below ends this
// session only, never the process.
func (s *Server) handle(nc net.Conn) {
	defer s.wg.Done()
	defer s.untrack(nc)
	defer nc.Close()
	n := s.active.Add(1)
	s.connGauge.Inc()
	defer func() {
		s.active.Add(-1)
		s.connGauge.Dec()
	}()
	if n > int64(s.cfg.MaxConnections) {
		s.rejected.Inc()
		writeRawError(nc, 0, mysql.ER_CON_COUNT_ERROR, "08004", "Too many connections")
		return
	}
	host := hostOf(nc.RemoteAddr())
	if s.auth.blocked(host) {
		s.rejected.Inc()
		writeRawError(nc, 0, mysql.ER_HOST_IS_BLOCKED, "HY000", "Host '"+host+"' is blocked because of many failed logins; retry later")
		return
	}
	h := &handler{s: s, sess: s.eng.NewSession("")}
	defer func() {
		if r := recover(); r != nil {
			stack := debug.Stack()
			if h.conn == nil && bytes.Contains(stack, []byte("go-mysql/server.(*Conn).readHandshakeResponse")) {
				// go-mysql's handshake decoder indexes by what the client
				// sent (a missing NUL terminator panics): a bad handshake,
				// answered as MariaDB does, not a bug of ours.
				s.log.Warn("malformed handshake refused", zap.Any("panic", r), zap.String("remote", nc.RemoteAddr().String()))
				writeRawError(nc, 2, mysql.ER_HANDSHAKE_ERROR, "08S01", "Bad handshake")
			} else {
				s.log.Error("[BUG] panic in client session; closing it", zap.Any("panic", r), zap.ByteString("stack", stack))
			}
		}
		h.sess.Close()
	}()
	// A client that connects and never finishes the handshake must not hold
	// a goroutine and a descriptor forever.
	_ = nc.SetDeadline(time.Now().Add(handshakeTimeout))
	add := uint32(extraCapabilities)
	if s.eng.LocalInfileEnabled() {
		add |= mysql.CLIENT_LOCAL_FILES // the file is read by Convoy (engine/loaddata.go)
	}
	gc := &greetingConn{Conn: nc, add: add, drop: hiddenCapabilities, status: initialStatus}
	conn, err := s.wire.NewCustomizedConn(gc, authHandler{s}, h)
	_ = nc.SetDeadline(time.Time{})
	if err != nil {
		s.log.Debug("handshake failed", zap.String("remote", nc.RemoteAddr().String()), zap.Error(err))
		return
	}
	h.conn = conn
	h.salt = gc.salt
	h.user = s.users[conn.GetUser()]
	reason := s.admit(conn)
	if db := h.sess.DB(); reason == nil && db != "" && !h.user.privileges().MayUseDatabase(db) {
		// The handshake named a database the account may not use: MariaDB
		// refuses the login (1044).
		s.leave(h.user.Name)
		reason = &mysql.MyError{Code: mysql.ER_DBACCESS_DENIED_ERROR, State: "42000",
			Message: fmt.Sprintf("Access denied for user '%s'@'%s' to database '%s'", h.user.Name, host, db)}
	}
	if reason == nil {
		if err := h.sess.SetClientCollation(conn.Charset()); err != nil {
			s.leave(h.user.Name)
			reason = sqlerr.ToMySQL(err)
		}
		h.sess.SetFoundRows(conn.HasCapability(mysql.CLIENT_FOUND_ROWS))
		h.setMultiResults()
		h.multi = conn.HasCapability(mysql.CLIENT_MULTI_STATEMENTS)
	}
	if reason != nil {
		// The handshake's OK is out: answer the client's first command with
		// the refusal, in sequence, then close.
		_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := conn.ReadPacket(); err == nil {
			_ = conn.WriteValue(reason)
		}
		return
	}
	defer func() { s.leave(h.user.Name) }() // (COM_CHANGE_USER may change the account)
	if tc, ok := conn.Conn.Conn.(*tls.Conn); ok {
		h.tlsVersion, h.tlsCipher = tlsNames(tc.ConnectionState())
	}
	// From here on: bounded packet size, one write per response (clientConn).
	cc := newClientConn(conn.Conn.Conn, s.packetLimit())
	conn.Conn.Conn = cc
	h.cc = cc
	h.host = host
	h.startSession()
	for !conn.Closed() {
		err := h.command(conn)
		if ferr := cc.endCommand(); err == nil {
			err = ferr
		}
		if err != nil {
			return
		}
	}
}

// packetLimit is the max_allowed_packet of a new session: the smaller of
// Convoy's own bound and the datasources' (what `SELECT
// @@max_allowed_packet` answers, and what drivers size their packets from).
// Like MariaDB, which copies the global value into a session when it
// connects, the session keeps it: a client packet at or above it is refused
// exactly where MariaDB would refuse it, and one below it fits every
// backend.
func (s *Server) packetLimit() int {
	limit := s.cfg.MaxPacket
	if v := s.eng.MaxAllowedPacket(); v > 0 && v < int64(limit) {
		limit = int(v)
	}
	return limit
}

// admit applies the checks that need the authenticated user and transport:
// per-user connection bound and require_secure_transport. The handshake's OK
// is already sent, so the client sees the error on its first command.
func (s *Server) admit(conn *server.Conn) *mysql.MyError {
	if s.cfg.RequireSecureTransport {
		if _, ok := conn.Conn.Conn.(*tls.Conn); !ok {
			return &mysql.MyError{Code: 3159, State: "HY000", Message: "Connections using insecure transport are prohibited while require_secure_transport is on"}
		}
	}
	return s.admitUser(conn.GetUser())
}

// admitUser counts one more connection of user, unless it has
// max_user_connections already.
func (s *Server) admitUser(user string) *mysql.MyError {
	s.perUserMu.Lock()
	defer s.perUserMu.Unlock()
	if s.cfg.MaxUserConnections > 0 && s.perUser[user] >= s.cfg.MaxUserConnections {
		return &mysql.MyError{Code: mysql.ER_TOO_MANY_USER_CONNECTIONS, State: "42000", Message: "User '" + user + "' has exceeded the 'max_user_connections' resource"}
	}
	s.perUser[user]++
	return nil
}

func (s *Server) leave(user string) {
	s.perUserMu.Lock()
	defer s.perUserMu.Unlock()
	if s.perUser[user]--; s.perUser[user] <= 0 {
		delete(s.perUser, user)
	}
}

// initialStatus is the status of a new session: autocommit on, as MariaDB
// starts one (autocommit=1 is its default and Convoy's).
const initialStatus = mysql.SERVER_STATUS_AUTOCOMMIT

// handshakeTimeout bounds the whole connection phase (TLS included).
const handshakeTimeout = 10 * time.Second

// errPanicInTxn ends a session whose command panicked inside a transaction:
// its state on the pinned backend connection is no longer known.
var errPanicInTxn = errors.New("[BUG] panic inside a transaction")

// command runs one client command. A panic while decoding a hostile packet
// (go-mysql's decoders trust lengths in COM_STMT_EXECUTE, COM_FIELD_LIST and
// empty packets) answers that command with errno 1835 and keeps the session;
// inside a transaction the session ends instead.
func (h *handler) command(conn *server.Conn) (err error) {
	h.s.commands.Add(1)
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		stack := debug.Stack()
		if bytes.Contains(stack, []byte("convoy/proxy/engine")) || bytes.Contains(stack, []byte("convoy/proxy.(*handler).Handle")) {
			h.s.log.Error("[BUG] panic while handling a client command", zap.Any("panic", r), zap.ByteString("stack", stack))
		} else {
			// go-mysql's packet decoders index by lengths the client sent.
			h.s.log.Warn("malformed client packet refused", zap.Any("panic", r), zap.String("remote", conn.RemoteAddr().String()))
		}
		if h.sess.InTransaction() {
			err = errPanicInTxn
			return
		}
		err = conn.WriteValue(&mysql.MyError{Code: 1835, State: "HY000", Message: "Malformed communication packet"})
		conn.ResetSequence()
	}()
	return conn.HandleCommand()
}

// writeRawError sends one error packet straight to the socket: in place of
// the handshake (as MySQL does when it refuses a connection outright), or
// when a client packet is refused before go-mysql reads it.
func writeRawError(nc net.Conn, seq byte, code uint16, state, msg string) {
	body := []byte{0xff, byte(code), byte(code >> 8), '#'}
	body = append(body, state...)
	body = append(body, msg...)
	pkt := append([]byte{byte(len(body)), byte(len(body) >> 8), byte(len(body) >> 16), seq}, body...)
	_, _ = nc.Write(pkt)
}

// tlsNames names a TLS session as MariaDB's SHOW STATUS does (Ssl_version,
// Ssl_cipher): OpenSSL's names, which are the IANA ones for TLS 1.3.
func tlsNames(st tls.ConnectionState) (version, cipher string) {
	switch st.Version {
	case tls.VersionTLS13:
		version = "TLSv1.3"
	case tls.VersionTLS12:
		version = "TLSv1.2"
	default:
		version = tls.VersionName(st.Version)
	}
	cipher = tls.CipherSuiteName(st.CipherSuite)
	if o, ok := openSSLCiphers[st.CipherSuite]; ok {
		cipher = o
	}
	return version, cipher
}

// openSSLCiphers are OpenSSL's names of the TLS 1.2 suites Go negotiates.
var openSSLCiphers = map[uint16]string{
	tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256:         "ECDHE-RSA-AES128-GCM-SHA256",
	tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384:         "ECDHE-RSA-AES256-GCM-SHA384",
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256:       "ECDHE-ECDSA-AES128-GCM-SHA256",
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384:       "ECDHE-ECDSA-AES256-GCM-SHA384",
	tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256:   "ECDHE-RSA-CHACHA20-POLY1305",
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256: "ECDHE-ECDSA-CHACHA20-POLY1305",
	tls.TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA:            "ECDHE-RSA-AES128-SHA",
	tls.TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA:            "ECDHE-RSA-AES256-SHA",
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA:          "ECDHE-ECDSA-AES128-SHA",
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA:          "ECDHE-ECDSA-AES256-SHA",
	tls.TLS_RSA_WITH_AES_128_GCM_SHA256:               "AES128-GCM-SHA256",
	tls.TLS_RSA_WITH_AES_256_GCM_SHA384:               "AES256-GCM-SHA384",
}

// Addr returns the listening address, once Serve runs.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}
