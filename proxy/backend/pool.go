// Package backend keeps pooled connections to the MySQL datasources named by
// the route table. It knows nothing about shards or SQL routing: the engine
// asks for a connection to a datasource, runs statements on it and releases it.
package backend

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"
	"go.uber.org/zap"

	"github.com/convoy-im/convoy/router"
)

// Collation is set on every backend connection. go-mysql's default (id 255)
// is unknown to MariaDB 10.11, which silently falls back to latin1 and would
// mangle every emoji; utf8mb4_general_ci is known to both MySQL and MariaDB.
const Collation = "utf8mb4_general_ci"

// Options bound what the pools may do. Zero values take the defaults.
type Options struct {
	ConnectTimeout time.Duration // dial + handshake; default 3s
	// ReadTimeout: a backend that sends nothing for this long fails the
	// statement (between 3/4 and all of it: see renew); default 30s, long
	// scans need headroom. WriteTimeout likewise for a backend that stops
	// reading; default 10s.
	ReadTimeout  time.Duration
	WriteTimeout time.Duration
	MaxOpen      int           // per datasource; default 256
	MaxIdle      int           // per datasource; default 64
	WaitTimeout  time.Duration // how long Acquire waits for a free slot; default 5s
	IdleTimeout  time.Duration // idle conns older than this are closed; default 5m
	// StatementTimeout bounds each command sent on a pooled connection
	// (and the dial of a new one): past it the statement fails with a
	// TimeoutError and the connection is dropped. 0 is off (no default
	// here: convoy serve defaults to 10s).
	StatementTimeout time.Duration
	// HealthInterval is the period of the health probe (COM_PING on a
	// connection of the checker's own) while a datasource is up; default
	// 500ms. HealthTimeout bounds each probe; a probe that gets no answer
	// within it marks the datasource hung, a refused one down; default 1s.
	// A negative HealthInterval runs no checker (tests against scripted
	// servers that accept one connection).
	HealthInterval time.Duration
	HealthTimeout  time.Duration
	// Log receives one line per datasource state change; default none.
	Log *zap.Logger
}

func (o *Options) withDefaults() Options {
	r := *o
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&r.ConnectTimeout, 3*time.Second)
	def(&r.ReadTimeout, 30*time.Second)
	def(&r.WriteTimeout, 10*time.Second)
	def(&r.WaitTimeout, 5*time.Second)
	def(&r.IdleTimeout, 5*time.Minute)
	if r.HealthInterval >= 0 {
		def(&r.HealthInterval, 500*time.Millisecond)
	}
	def(&r.HealthTimeout, time.Second)
	if r.StatementTimeout < 0 {
		r.StatementTimeout = 0
	}
	if r.Log == nil {
		r.Log = zap.NewNop()
	}
	if r.MaxOpen <= 0 {
		r.MaxOpen = 256
	}
	if r.MaxIdle <= 0 {
		r.MaxIdle = 64
	}
	if r.MaxIdle > r.MaxOpen {
		r.MaxIdle = r.MaxOpen
	}
	return r
}

// ErrPoolTimeout is returned when no connection slot frees up within WaitTimeout.
var ErrPoolTimeout = errors.New("timed out waiting for a backend connection")

// ErrUnknownDatasource is returned for a datasource the route table does not name.
var ErrUnknownDatasource = errors.New("unknown datasource")

// ResolvePassword reads a datasource password from the environment variable
// or file the route table names. Secrets never live in etcd.
func ResolvePassword(ds router.Datasource) (string, error) {
	switch {
	case ds.PasswordEnv != "":
		return os.Getenv(ds.PasswordEnv), nil
	case ds.PasswordFile != "":
		b, err := os.ReadFile(ds.PasswordFile)
		if err != nil {
			return "", fmt.Errorf("datasource %s: reading password file: %w", ds.Name, err)
		}
		return strings.TrimRight(string(b), "\r\n"), nil
	}
	return "", nil
}

// Pool is the set of connections to one datasource.
type Pool struct {
	ds       router.Datasource
	password string
	tls      *tlsSetup
	opt      Options
	log      *zap.Logger
	br       *breaker
	// onTransition is told every state change of the breaker (metrics).
	onTransition func(datasource string, to State)
	stopCheck    context.CancelFunc
	checkDone    chan struct{} // closed when the health checker returned

	slots chan struct{} // one token per open connection: bounds MaxOpen
	mu    sync.Mutex
	// idle connections by flavour (see flavour), LIFO: the most recently
	// used connection is warmest. Both flavours share slots (MaxOpen).
	idle  [2][]*Conn
	inUse int
	// live is every open connection, for the watchdog and the breaker.
	live map[*Conn]struct{}
	// gen counts outages: a connection opened before the last one is
	// closed at Release instead of pooled.
	gen    uint64
	closed bool
}

// newPool returns a pool for ds and starts its health checker.
func newPool(ds router.Datasource, opt Options, onTransition func(string, State)) (*Pool, error) {
	pw, err := ResolvePassword(ds)
	if err != nil {
		return nil, err
	}
	ts, err := newTLSSetup(ds)
	if err != nil {
		return nil, err
	}
	p := &Pool{ds: ds, password: pw, tls: ts, opt: opt, log: opt.Log, br: newBreaker(), onTransition: onTransition,
		slots: make(chan struct{}, opt.MaxOpen), live: map[*Conn]struct{}{}, checkDone: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	p.stopCheck = cancel
	if opt.HealthInterval < 0 {
		close(p.checkDone)
		return p, nil
	}
	go p.check(ctx)
	return p, nil
}

// Name is the datasource name.
func (p *Pool) Name() string { return p.ds.Name }

// Stats reports connections in use and idle.
func (p *Pool) Stats() (inUse, idle int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.inUse, len(p.idle[0]) + len(p.idle[1])
}

// flavour 1 connections carry CLIENT_FOUND_ROWS (affected rows of an UPDATE
// count matched rows, as the client asked: Connector/J does by default);
// the capability is fixed at the handshake, so connections are not shared
// across flavours.
func flavour(foundRows bool) int {
	if foundRows {
		return 1
	}
	return 0
}

// popIdle takes the warmest idle connection of flavour f (nil: none).
func (p *Pool) popIdle(f int) *Conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.idle[f])
	if n == 0 {
		return nil
	}
	c := p.idle[f][n-1]
	p.idle[f] = p.idle[f][:n-1]
	p.inUse++
	return c
}

// Acquire returns a healthy connection, reusing an idle one when possible.
// While the datasource is marked down or hung it fails at once with an
// OutageError.
func (p *Pool) Acquire(ctx context.Context, foundRows bool) (*Conn, error) {
	if err := p.br.refuse(p.ds.Name); err != nil {
		return nil, err
	}
	f := flavour(foundRows)
	for {
		p.mu.Lock()
		closed := p.closed
		p.mu.Unlock()
		if closed {
			return nil, fmt.Errorf("datasource %s: pool closed", p.ds.Name)
		}
		c := p.popIdle(f)
		if c == nil {
			break
		}
		if time.Since(c.lastUsed) > p.opt.IdleTimeout {
			p.discard(c)
			continue
		}
		c.limit.Store(int64(p.opt.StatementTimeout))
		return c, nil
	}
	return p.open(ctx, foundRows, 0)
}

// open takes a slot and dials a connection in it (see dial for drop).
func (p *Pool) open(ctx context.Context, foundRows bool, drop uint32) (*Conn, error) {
	if err := p.br.refuse(p.ds.Name); err != nil {
		return nil, err
	}
	select {
	case p.slots <- struct{}{}:
	default:
		// Every slot is taken: an idle connection of the other flavour
		// gives its slot up rather than make this one wait for nothing.
		if c := p.popIdle(1 - flavour(foundRows)); c != nil {
			p.discard(c)
		}
		wait := time.NewTimer(p.opt.WaitTimeout)
		defer wait.Stop()
		select {
		case p.slots <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-p.br.trippedC():
			// The slots are held by statements on a datasource that
			// stopped answering: no use waiting for them.
			return nil, p.br.refuse(p.ds.Name)
		case <-wait.C:
			return nil, fmt.Errorf("datasource %s: %w after %s (max %d open)", p.ds.Name, ErrPoolTimeout, p.opt.WaitTimeout, p.opt.MaxOpen)
		}
	}
	// A dial to a datasource that is being marked down or hung gives up
	// then, not at its timeout.
	tripped := p.br.trippedC()
	dctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-tripped:
			cancel()
		case <-dctx.Done():
		}
	}()
	c, err := p.dial(dctx, foundRows, drop)
	cancel()
	if err != nil {
		<-p.slots
		if oerr := p.br.refuse(p.ds.Name); oerr != nil {
			return nil, oerr
		}
		if !IsServerError(err) {
			p.br.suspect()
		}
		return nil, err
	}
	p.mu.Lock()
	p.inUse++
	c.gen = p.gen
	p.live[c] = struct{}{}
	p.mu.Unlock()
	return c, nil
}

// dial opens a connection. Pooled connections announce CLIENT_MULTI_RESULTS
// and CLIENT_PS_MULTI_RESULTS, as the clients of today do: without them the
// server refuses a CALL of a procedure that returns rows (1312) and sends no
// OUT parameters to a prepared CALL. drop removes capabilities for a
// connection opened for one statement of a client that lacks them
// (Pool.AcquireOnce).
func (p *Pool) dial(ctx context.Context, foundRows bool, drop uint32) (*Conn, error) {
	timeout := p.opt.ConnectTimeout
	if st := p.opt.StatementTimeout; st > 0 {
		timeout = min(timeout, st) // the dial is part of the statement
	}
	nc, id, err := p.connect(ctx, timeout, foundRows, drop)
	if err != nil {
		return nil, err
	}
	c := &Conn{w: newWire(nc, p.opt.ReadTimeout, p.opt.WriteTimeout), id: id,
		pool: p, foundRows: foundRows, vars: map[string]string{}, lastUsed: time.Now()}
	c.limit.Store(int64(p.opt.StatementTimeout))
	return c, nil
}

// connect dials and authenticates a connection, both within timeout, and
// returns its socket (the handshake done, no deadline set) and the server's
// connection id.
func (p *Pool) connect(ctx context.Context, timeout time.Duration, foundRows bool, drop uint32) (net.Conn, uint32, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	d := &net.Dialer{Timeout: timeout}
	// The dialer's timeout covers only TCP: a server that accepts and never
	// answers would hold the handshake until the read timeout (30 s).
	// handshakeConn clamps every deadline go-mysql sets to the connect
	// deadline until the handshake is done. go-mysql uses ctx only for the
	// TCP dial: canceling it (Pool.open, when the breaker opens) expires
	// the handshake's deadlines instead.
	var hc *handshakeConn
	tlsCfg := p.tls.cfg // nil: clear text; the dialer may clear it (preferred)
	stopAbort := func() bool { return false }
	defer func() { stopAbort() }()
	dial := func(dctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := d.DialContext(dctx, network, addr)
		if err != nil {
			return nil, err
		}
		hc = &handshakeConn{Conn: nc, until: time.Now().Add(timeout)}
		_ = nc.SetDeadline(hc.until)
		stopAbort = context.AfterFunc(ctx, hc.abort)
		if p.tls.mode == router.TLSPreferred {
			// TLS only if the greeting offers it: read it here, before
			// go-mysql does, and hand it the same bytes.
			offered, err := hc.peekGreeting()
			if err != nil {
				return nil, err
			}
			if !offered {
				tlsCfg = nil
			}
		}
		return hc, nil
	}
	start := time.Now()
	cc, err := client.ConnectWithDialer(ctx, "tcp", p.ds.Addr, p.ds.User, p.password, "", dial,
		func(c *client.Conn) error {
			c.ReadTimeout = p.opt.ReadTimeout
			c.WriteTimeout = p.opt.WriteTimeout
			if tlsCfg != nil { // decided by the dialer, which ran before
				c.SetTLSConfig(tlsCfg)
			}
			// A backend asking for a local file (LOAD DATA LOCAL) must never
			// get one: without this capability the server refuses the statement.
			c.UnsetCapability(mysql.CLIENT_LOCAL_FILES)
			// MySQL 8.0.23+ offers query attributes and go-mysql would take
			// them; Convoy's own commands (wire) carry none, and with the
			// capability on the server would read their first bytes as an
			// attribute count.
			c.UnsetCapability(mysql.CLIENT_QUERY_ATTRIBUTES)
			// go-mysql asks for CLIENT_DEPRECATE_EOF whatever the server
			// offers; wire reads result sets ended by EOF packets.
			c.UnsetCapability(mysql.CLIENT_DEPRECATE_EOF)
			// wire.okResult reads an OK packet's info text and no more; with
			// session tracking, state changes would follow it.
			c.UnsetCapability(mysql.CLIENT_SESSION_TRACK)
			want := []uint32{mysql.CLIENT_MULTI_RESULTS, mysql.CLIENT_PS_MULTI_RESULTS}
			if foundRows {
				want = append(want, mysql.CLIENT_FOUND_ROWS)
			}
			for _, flag := range want {
				// One flag a call: go-mysql refuses (and ignores) a set of
				// several.
				if err := c.SetCapability(flag); err != nil {
					return err
				}
			}
			c.UnsetCapability(drop)
			return c.SetCollation(Collation)
		})
	if err != nil {
		if hc != nil {
			_ = hc.Conn.Close()
		}
		if errors.Is(ctx.Err(), context.DeadlineExceeded) || time.Since(start) >= timeout {
			// go-mysql's handshake errors are text: say what happened.
			err = &dialTimeout{timeout: timeout, err: err}
		}
		// The error text of go-mysql never contains the password.
		return nil, 0, &UnavailableError{Datasource: p.ds.Name, Err: err}
	}
	if !stopAbort() {
		_ = hc.Conn.Close() // ctx ended as the handshake did
		return nil, 0, &UnavailableError{Datasource: p.ds.Name, Err: ctx.Err()}
	}
	// From here on Convoy speaks the protocol itself (see wire) on the bare
	// socket, or on the TLS session over it; go-mysql's reader holds
	// nothing after the handshake's OK.
	_ = hc.Conn.SetDeadline(time.Time{})
	nc := hc.Conn
	if tlsCfg != nil {
		hc.until = time.Time{} // the handshake is done: no more clamping
		nc = cc.Conn.Conn
	}
	p.tls.established(nc)
	return nc, cc.GetConnectionID(), nil
}

// release returns c to the idle list, or closes it when it is broken, still
// inside a transaction, or the idle list is full.
func (p *Pool) release(c *Conn) {
	c.lastUsed = time.Now()
	if c.w.busy.Swap(0) < 0 {
		c.broken = true // claimed as it ended: its deadlines are expired
	}
	p.mu.Lock()
	p.inUse--
	f := flavour(c.foundRows)
	keep := !p.closed && !c.broken && !c.retire && !c.InTxn() && c.gen == p.gen && len(p.idle[0])+len(p.idle[1]) < p.opt.MaxIdle
	if keep {
		p.idle[f] = append(p.idle[f], c)
	}
	p.mu.Unlock()
	if !keep {
		c.close()
		<-p.slots
	}
}

func (p *Pool) discard(c *Conn) {
	p.mu.Lock()
	p.inUse--
	p.mu.Unlock()
	c.close()
	<-p.slots
}

// Close closes idle connections, stops the health checker (without waiting
// for it: see checkDone) and makes further Acquire calls fail; connections
// in use are closed when released.
func (p *Pool) Close() {
	p.stopCheck()
	p.mu.Lock()
	p.closed = true
	idle := append(p.idle[0], p.idle[1]...)
	p.idle = [2][]*Conn{}
	p.mu.Unlock()
	for _, c := range idle {
		c.close()
		<-p.slots
	}
}

// UnavailableError means a datasource could not be reached or the connection
// broke mid-statement. The statement's outcome on the server is unknown.
type UnavailableError struct {
	Datasource string
	Err        error
}

func (e *UnavailableError) Error() string {
	return fmt.Sprintf("datasource %s unavailable: %v", e.Datasource, e.Err)
}

func (e *UnavailableError) Unwrap() error { return e.Err }

// IsServerError reports whether err is an error packet sent by the MySQL
// server (the connection is still fine) rather than an I/O failure.
func IsServerError(err error) bool {
	var me *mysql.MyError
	return errors.As(err, &me)
}

// dialTimeout is a dial or login that got no answer within its timeout.
type dialTimeout struct {
	timeout time.Duration
	err     error
}

func (e *dialTimeout) Error() string {
	return fmt.Sprintf("no answer within %s while connecting (%v)", e.timeout, e.err)
}
func (e *dialTimeout) Timeout() bool { return true }
func (e *dialTimeout) Unwrap() error { return e.err }

// handshakeConn bounds the MySQL handshake: while until is set, no deadline
// go-mysql asks for may lie beyond it. Only the dialing goroutine uses it.
type handshakeConn struct {
	net.Conn
	until   time.Time
	aborted atomic.Bool // ctx ended: every deadline is in the past
	// pending holds bytes read ahead (the greeting, by peekGreeting) that
	// Read hands out before reading the socket.
	pending []byte
}

func (h *handshakeConn) Read(b []byte) (int, error) {
	if len(h.pending) > 0 {
		n := copy(b, h.pending)
		h.pending = h.pending[n:]
		return n, nil
	}
	return h.Conn.Read(b)
}

// peekGreeting reads the server's first packet and keeps it for Read. It
// reports whether the greeting offers CLIENT_SSL; an error packet (too many
// connections, host blocked) or another protocol version reports false and
// is left for go-mysql to report.
func (h *handshakeConn) peekGreeting() (bool, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(h.Conn, hdr[:]); err != nil {
		return false, err
	}
	n := int(hdr[0]) | int(hdr[1])<<8 | int(hdr[2])<<16
	if n > 1<<16 {
		return false, fmt.Errorf("the server's greeting claims %d bytes", n)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(h.Conn, body); err != nil {
		return false, err
	}
	h.pending = append(hdr[:], body...)
	if len(body) == 0 || body[0] != 10 {
		return false, nil
	}
	// version string NUL, connection id (4), scramble part 1 (8), filler
	// (1), then the capability flags' lower two bytes.
	end := bytes.IndexByte(body[1:], 0)
	pos := 1 + end + 1 + 4 + 8 + 1
	if end < 0 || len(body) < pos+2 {
		return false, nil
	}
	return binary.LittleEndian.Uint16(body[pos:])&uint16(mysql.CLIENT_SSL) != 0, nil
}

func (h *handshakeConn) abort() {
	h.aborted.Store(true)
	_ = h.Conn.SetDeadline(expired)
}

func (h *handshakeConn) clamp(t time.Time) time.Time {
	if h.aborted.Load() {
		return expired
	}
	if !h.until.IsZero() && (t.IsZero() || t.After(h.until)) {
		return h.until
	}
	return t
}

func (h *handshakeConn) SetDeadline(t time.Time) error     { return h.Conn.SetDeadline(h.clamp(t)) }
func (h *handshakeConn) SetReadDeadline(t time.Time) error { return h.Conn.SetReadDeadline(h.clamp(t)) }
func (h *handshakeConn) SetWriteDeadline(t time.Time) error {
	return h.Conn.SetWriteDeadline(h.clamp(t))
}
