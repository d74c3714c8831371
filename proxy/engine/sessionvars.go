package engine

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/pingcap/tidb/pkg/parser/ast"

	"github.com/convoy-im/convoy/proxy/backend"
	"github.com/convoy-im/convoy/rewrite"
)

// SetClient records who the session belongs to: CURRENT_USER() and USER()
// name the Convoy account, not the backend's, and CONNECTION_ID() is the id
// the client was greeted with.
//
// It registers the session for KILL and SHOW PROCESSLIST, whose readers
// are other sessions: set the rest of what they read (SetRemoteAddr,
// SetCloser) first.
func (s *Session) SetClient(user, host string, connID uint32) {
	s.user, s.host, s.connID = user, host, connID
	s.ownerCtx = backend.WithOwner(context.Background(), connID)
	s.endCommand() // connected: sleeping since now
	s.e.live.add(connID, s)
}

// SetMaxAllowedPacket fixes the session's max_allowed_packet: the limit the
// front end enforces on this client, taken from MaxAllowedPacket when the
// client connected (MariaDB too copies the global value into a session at
// connect; a later change applies to new sessions only).
func (s *Session) SetMaxAllowedPacket(n int64) { s.maxPacket = n }

// sessionValue is the session's own answer for a session value a
// statement reads (see rewrite.SessionTemplate).
func (s *Session) sessionValue(r rewrite.SessionRef) rewrite.SessionValue {
	num := func(n uint64) rewrite.SessionValue { return rewrite.SessionValue{Num: n, IsNum: true} }
	flag := func(b bool) uint64 {
		if b {
			return 1
		}
		return 0
	}
	switch r {
	case rewrite.RefAutocommit:
		return rewrite.SessionValue{Num: flag(s.autocommit), IsNum: true, Signed: true}
	case rewrite.RefInTransaction:
		return num(flag(s.InTransaction()))
	case rewrite.RefLastInsertID:
		return num(s.lastID)
	case rewrite.RefMaxAllowedPacket:
		if s.maxPacket > 0 {
			return num(uint64(s.maxPacket))
		}
		return num(uint64(s.e.MaxAllowedPacket()))
	case rewrite.RefDatabase:
		if s.db == "" {
			return rewrite.SessionValue{Null: true}
		}
		return rewrite.SessionValue{Str: s.db}
	case rewrite.RefUser:
		return rewrite.SessionValue{Str: s.user + "@" + s.host}
	case rewrite.RefCurrentUser:
		// Convoy's accounts are not bound to a host.
		return rewrite.SessionValue{Str: s.user + "@%"}
	case rewrite.RefConnectionID:
		return num(uint64(s.connID))
	case rewrite.RefWarningCount:
		w, _ := s.diagCounts()
		return num(w)
	case rewrite.RefErrorCount:
		_, e := s.diagCounts()
		return num(e)
	case rewrite.RefFoundRows: // signed BIGINT, as MariaDB types them
		return rewrite.SessionValue{IsNum: true, Signed: true, Num: uint64(s.found)}
	case rewrite.RefRowCount:
		return rewrite.SessionValue{IsNum: true, Signed: true, Num: uint64(s.rowCount)}
	case rewrite.RefColdPartial:
		v := "warning"
		if s.coldPartialError() {
			v = "error"
		}
		return rewrite.SessionValue{Str: v, Own: true}
	case rewrite.RefTxnMode:
		v := "single"
		if s.outboxOn() {
			v = "outbox"
		}
		return rewrite.SessionValue{Str: v, Own: true}
	case rewrite.RefSQLMode:
		// The backends run without NO_BACKSLASH_ESCAPES (nobackslash.go):
		// while the session has it, the session answers.
		if s.sqlModeNBE == "" {
			return rewrite.SessionValue{Keep: true}
		}
		return rewrite.SessionValue{Str: s.sqlModeNBE}
	}
	return rewrite.SessionValue{Null: true}
}

// sessionPlan is a plan on sharded tables for one execution, with the
// session's values printed where the statement reads them (`SELECT
// DATABASE(), ... FROM conv_msg`, `... AND seq = LAST_INSERT_ID()`): a
// shard's pooled connection would answer for itself. Its templates are
// built per execution and nothing of them is kept; such plans are not
// shared either (buildShared).
func (s *Session) sessionPlan(pl *plan) (*plan, error) {
	p, err := pl.WithSessionValues(s.sessionValue)
	if err != nil {
		return nil, err
	}
	return &plan{Plan: p, noInline: pl.noInline}, nil
}

// readLastID learns the value a LAST_INSERT_ID(expr) just set on c.
func (s *Session) readLastID(c Conn) error {
	r, err := c.Exec("SELECT LAST_INSERT_ID()")
	if err != nil {
		return err
	}
	if err := decodeRows(r); err != nil {
		return err
	}
	if len(r.Values) == 1 && len(r.Values[0]) == 1 {
		if v, err := strconv.ParseUint(r.Values[0][0].String(), 10, 64); err == nil {
			s.lastID = v
		}
	}
	return nil
}

// showSession puts the session's own values into the rows of a SHOW
// [SESSION] VARIABLES or STATUS answer that the backend connection gave for
// itself: autocommit, in_transaction, last_insert_id / identity and
// max_allowed_packet among the variables, Ssl_version and Ssl_cipher among
// the status values. binary: the rows are in the binary protocol (a
// prepared SHOW).
func (s *Session) showSession(a *rewrite.Analysis, r *mysql.Result, binary bool) {
	st, ok := a.Stmt.(*ast.ShowStmt)
	if !ok || st.GlobalScope || r == nil || r.Resultset == nil || len(r.Fields) != 2 {
		return
	}
	var mine func(name string) (string, bool)
	switch st.Tp {
	case ast.ShowVariables:
		mine = s.variableText
	case ast.ShowStatus:
		mine = s.statusText
	default:
		return
	}
	for i, row := range r.RowDatas {
		name, value, ok := splitVarRow(row, binary)
		if !ok {
			continue
		}
		if text, ok := mine(strings.ToLower(name)); ok && text != value {
			r.RowDatas[i] = varRow(name, text, binary)
		}
	}
}

// variableText is a session variable Convoy keeps, as SHOW VARIABLES
// prints it.
func (s *Session) variableText(name string) (string, bool) {
	ref, ok := rewrite.SessionVariable(name)
	if !ok {
		return "", false
	}
	v := s.sessionValue(ref)
	switch {
	case v.Keep:
		return "", false // the server's own
	case ref == rewrite.RefAutocommit:
		return map[uint64]string{0: "OFF", 1: "ON"}[v.Num], true
	case !v.IsNum:
		return v.Str, true
	}
	return strconv.FormatUint(v.Num, 10), true
}

// statusText is a status value of the client's own connection.
func (s *Session) statusText(name string) (string, bool) {
	switch name {
	case "ssl_version":
		return s.tlsVersion, true
	case "ssl_cipher":
		return s.tlsCipher, true
	}
	return "", false
}

// splitVarRow reads the two strings of a SHOW VARIABLES row.
func splitVarRow(row []byte, binary bool) (name, value string, ok bool) {
	if binary {
		if len(row) < 2 || row[0] != 0 || row[1] != 0 { // header, no NULL bits
			return "", "", false
		}
		row = row[2:]
	}
	n, rest, ok := lenencString(row)
	if !ok {
		return "", "", false
	}
	v, rest, ok := lenencString(rest)
	if !ok || len(rest) != 0 {
		return "", "", false
	}
	return n, v, true
}

func varRow(name, value string, binary bool) mysql.RowData {
	var b []byte
	if binary {
		b = append(b, 0, 0)
	}
	b = mysql.AppendLengthEncodedInteger(b, uint64(len(name)))
	b = append(b, name...)
	b = mysql.AppendLengthEncodedInteger(b, uint64(len(value)))
	return append(b, value...)
}

func lenencString(b []byte) (string, []byte, bool) {
	n, isNull, size := mysql.LengthEncodedInt(b)
	if isNull || size == 0 || uint64(len(b)-size) < n {
		return "", nil, false
	}
	return string(b[size : size+int(n)]), b[size+int(n):], true
}

// maxPacketCache holds the datasources' smallest max_allowed_packet.
type maxPacketCache struct {
	mu         sync.Mutex
	value      int64
	fetched    time.Time
	refreshing bool
}

// maxPacketTTL bounds how stale the datasources' max_allowed_packet may be:
// a DBA may raise or lower it at any time.
const maxPacketTTL = time.Minute

// MaxAllowedPacket is what `@@max_allowed_packet` reads through Convoy: the
// smallest of Convoy's own bound on client packets and every datasource's
// max_allowed_packet. Drivers size their packets from it (go-sql-driver
// splits or refuses a statement above it), so a statement within it is one
// every backend accepts. The front end reads it for every new client, so
// only the first call waits for the datasources: later ones get the cached
// value, and a stale one is refreshed in the background (a datasource that
// is slow to answer must not hold up every login).
func (e *Engine) MaxAllowedPacket() int64 {
	c := &e.maxPacket
	c.mu.Lock()
	if c.value > 0 {
		v := c.value
		if time.Since(c.fetched) >= maxPacketTTL && !c.refreshing {
			c.refreshing = true
			go func() {
				least := e.leastMaxPacket()
				c.mu.Lock()
				c.value, c.fetched, c.refreshing = least, time.Now(), false
				c.mu.Unlock()
			}()
		}
		c.mu.Unlock()
		return v
	}
	c.mu.Unlock()
	least := e.leastMaxPacket()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.value <= 0 { // else a concurrent first call has just stored it
		c.value, c.fetched = least, time.Now()
	}
	return c.value
}

// leastMaxPacket asks every datasource for its max_allowed_packet (bounded
// by the pools' connect and wait timeouts) and returns the smallest, or
// Convoy's own bound when that is smaller.
func (e *Engine) leastMaxPacket() int64 {
	least := e.opt.MaxPacket
	for _, ds := range e.routes.Current().Datasources() {
		if v, ok := e.datasourceMaxPacket(ds.Name); ok && v < least {
			least = v
		}
	}
	return least
}

func (e *Engine) datasourceMaxPacket(ds string) (int64, bool) {
	conn, err := e.acquire(ds)
	if err != nil {
		return 0, false // down: the others and Convoy's own bound decide
	}
	defer conn.Release()
	r, err := conn.Exec("SELECT @@max_allowed_packet")
	if err != nil || decodeRows(r) != nil || len(r.Values) != 1 || len(r.Values[0]) != 1 {
		return 0, false
	}
	v, err := strconv.ParseInt(r.Values[0][0].String(), 10, 64)
	return v, err == nil && v >= minMaxPacket
}

// SetTLS records the TLS session the client connected with (empty: none),
// for SHOW STATUS LIKE 'Ssl_%': the backend connection answering it has
// its own (or none), and clients check the cipher to know their link is
// encrypted (go-sql-driver's TLS tests do).
func (s *Session) SetTLS(version, cipher string) { s.tlsVersion, s.tlsCipher = version, cipher }

// minMaxPacket is MariaDB's smallest max_allowed_packet: a smaller answer
// is not a real server's and is not allowed to shrink every client's limit
// (the front end enforces this value on client packets).
const minMaxPacket = 1024
