package proxy

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// errPacketTooLarge ends a connection whose client sent a packet above the
// limit (after the client got errno 1153).
var errPacketTooLarge = errors.New("client packet larger than max_allowed_packet")

// clientConn sits below go-mysql's packet layer once the handshake is done
// (so it sees plaintext even under TLS) and does what go-mysql does not:
//
//   - Read watches the packet headers a client sends and stops a packet
//     bigger than max before go-mysql buffers it whole: without it one
//     client could make the proxy allocate gigabytes.
//   - Read hands the prepared-statement commands to stmtWire whole, which
//     rewrites COM_STMT_EXECUTE into a form go-mysql decodes correctly and
//     answers or swallows what go-mysql would get wrong (see stmtWire).
//   - Write buffers: go-mysql writes every packet (each column definition,
//     each row, each EOF) with its own syscall, which cost ~40% of the
//     proxy's CPU on point selects. The connection loop calls Flush once per
//     command; large results flush every writeChunk bytes.
//
// Read never returns bytes of two packets in one call, so go-mysql's own
// buffered reader never holds the start of a command clientConn has not
// looked at yet.
type clientConn struct {
	net.Conn
	br      *bufio.Reader
	wbuf    []byte
	max     int
	pending []byte // the rest of a held (possibly rewritten) packet, header included
	left    int    // payload bytes still to pass up of the current streamed packet
	logical int    // payload bytes of the current logical packet (chunks of 0xFFFFFF join)
	cont    bool   // the next physical packet continues a logical one
	tripped bool
	stmts   *stmtWire
	// sniffPrepare: the command being answered is COM_STMT_PREPARE, so the
	// next Write starts with its OK (statement id and parameter count).
	sniffPrepare bool
	// prep, when set, rewrites the PREPARE response being written (see
	// setPrepareColumns).
	prep *prepareReply
	// extraPackets are the packets a rewritten command gained (see
	// nextPacket); the handler takes them off go-mysql's reply sequence.
	extraPackets byte
	// replyWith, when set, is the payload sent in place of the next packet
	// go-mysql writes (its OK after a command it does not know, such as
	// COM_STATISTICS, whose answer is a bare string), in its sequence.
	replyWith []byte
	// okInfo, when set, is the info text appended to the next packet if
	// it is an OK, length-encoded as MariaDB sends it (libmariadb reads it
	// so whatever the capabilities): go-mysql writes it only under
	// CLIENT_SESSION_TRACK, which Convoy does not offer
	// (hiddenCapabilities).
	okInfo string
	// closes are statement ids whose COM_STMT_CLOSE go-mysql is handed
	// before the client's next command (see closeStatements).
	closes []uint32
	// raw: the next packet is not a command (an authentication response
	// inside COM_CHANGE_USER) and goes up uninspected.
	raw bool
}

func newClientConn(nc net.Conn, maxPacket int) *clientConn {
	return &clientConn{Conn: nc, br: bufio.NewReaderSize(nc, 16<<10), max: maxPacket, stmts: newStmtWire(maxPacket)}
}

// writeChunk bounds the buffered bytes of one command's response.
const writeChunk = 64 << 10

// Write takes one packet at a time from go-mysql (its writer frames each
// packet below 16 MiB, header included, into a single Write).
func (l *clientConn) Write(p []byte) (int, error) {
	if l.sniffPrepare {
		l.sniffPrepare = false
		l.stmts.sniffPrepareOK(p)
	}
	switch {
	case l.replyWith != nil && len(p) >= 4:
		n := len(l.replyWith)
		l.wbuf = append(l.wbuf, byte(n), byte(n>>8), byte(n>>16), p[3])
		l.wbuf = append(l.wbuf, l.replyWith...)
		l.replyWith = nil
	case l.okInfo != "" && len(p) > 4 && p[4] == mysql.OK_HEADER:
		info := append(mysql.PutLengthEncodedInt(uint64(len(l.okInfo))), l.okInfo...)
		n := len(p) - 4 + len(info)
		l.wbuf = append(l.wbuf, byte(n), byte(n>>8), byte(n>>16), p[3])
		l.wbuf = append(append(l.wbuf, p[4:]...), info...)
		l.okInfo = ""
	case l.prep == nil || !l.prep.rewrite(l, p):
		l.okInfo = ""
		l.wbuf = append(l.wbuf, p...)
	}
	if len(l.wbuf) >= writeChunk {
		if err := l.Flush(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// setPrepareColumns makes the PREPARE response being written carry these
// column definitions (payloads) instead of go-mysql's empty placeholders:
// libmariadb-based clients (Ruby mysql2, PHP mysqli, Connector/C) name
// result columns from the PREPARE response.
func (l *clientConn) setPrepareColumns(cols [][]byte) { l.prep = &prepareReply{cols: cols} }

// endCommand finishes the response of one command and sends it.
func (l *clientConn) endCommand() error {
	l.prep, l.replyWith, l.okInfo = nil, nil, ""
	return l.Flush()
}

// prepareReply rewrites a COM_STMT_PREPARE OK response (OK, parameter
// definitions + EOF, column definitions + EOF) packet by packet as go-mysql
// writes it, giving it cols as its column definitions (and MariaDB's
// parameter definitions, paramDefinition) and keeping every packet's
// sequence number. Packet by packet, because a response with
// thousands of parameters or columns (up to 65,535 each) is sent in
// writeChunk pieces before go-mysql has written all of it. A response it
// does not recognise (an error, another column count) is left alone.
type prepareReply struct {
	cols  [][]byte
	seen  int // packets written so far
	first int // index of the first column definition, once the OK is seen
}

// paramDefinition is the definition MariaDB 10.11 sends for every parameter
// of a prepared statement: name "?", binary charset, type NULL, BINARY flag
// (go-mysql's has charset 0 and type DECIMAL). Clients do not use it; it is
// sent as MariaDB sends it so that the PREPARE response is byte for byte
// MariaDB's.
var paramDefinition = func() []byte {
	f := mysql.Field{Name: []byte("?"), Charset: 63, Type: mysql.MYSQL_TYPE_NULL, Flag: mysql.BINARY_FLAG}
	return f.Dump()
}()

// rewrite appends packet p (header included), or its replacement, to l's
// buffer; false leaves p to the caller and ends the rewrite.
func (r *prepareReply) rewrite(l *clientConn, p []byte) bool {
	i := r.seen
	r.seen++
	if len(p) < 4 || int(p[0])|int(p[1])<<8|int(p[2])<<16 != len(p)-4 {
		l.prep = nil // not one whole packet: go-mysql changed; write as is
		return false
	}
	if i == 0 {
		payload := p[4:]
		if len(payload) < 9 || payload[0] != mysql.OK_HEADER ||
			int(binary.LittleEndian.Uint16(payload[5:7])) != len(r.cols) {
			l.prep = nil
			return false
		}
		r.first = 1
		if params := int(binary.LittleEndian.Uint16(payload[7:9])); params > 0 {
			r.first += params + 1 // definitions and their EOF
		}
		return false
	}
	c := i - r.first
	if c < 0 {
		if i < r.first-1 { // a parameter definition (the last one before first is their EOF)
			l.wbuf = appendPackets(l.wbuf, paramDefinition, p[3])
			return true
		}
		return false
	}
	if c >= len(r.cols) {
		l.prep = nil // the EOF after the columns: done
		return false
	}
	if len(r.cols[c]) >= 0xffffff {
		return false // cannot be one packet: keep the placeholder
	}
	l.wbuf = appendPackets(l.wbuf, r.cols[c], p[3])
	return true
}

// Flush sends the buffered response bytes.
func (l *clientConn) Flush() error {
	if len(l.wbuf) == 0 {
		return nil
	}
	_, err := l.Conn.Write(l.wbuf)
	if cap(l.wbuf) > 4*writeChunk {
		l.wbuf = nil // one huge result must not pin its buffer for the session's life
	} else {
		l.wbuf = l.wbuf[:0]
	}
	return err
}

func (l *clientConn) Read(p []byte) (int, error) {
	for {
		if l.tripped {
			return 0, errPacketTooLarge
		}
		if len(l.pending) > 0 {
			n := copy(p, l.pending)
			l.pending = l.pending[n:]
			return n, nil
		}
		if l.left > 0 {
			n, err := l.br.Read(p[:min(len(p), l.left)])
			l.left -= n
			return n, err
		}
		if len(l.closes) > 0 {
			l.pending = appendPackets(l.pending[:0], binary.LittleEndian.AppendUint32([]byte{comStmtClose}, l.closes[0]), 0)
			l.closes = l.closes[1:]
			continue
		}
		if err := l.nextPacket(); err != nil {
			return 0, err
		}
	}
}

// nextPacket reads the next physical packet header and either holds the
// whole packet in pending (prepared-statement commands, maybe rewritten or
// consumed) or sets it up to stream through.
func (l *clientConn) nextPacket() error {
	var hdr [4]byte
	if _, err := io.ReadFull(l.br, hdr[:]); err != nil {
		return err
	}
	size := int(hdr[0]) | int(hdr[1])<<8 | int(hdr[2])<<16
	first := !l.cont
	l.logical += size
	if l.logical >= l.max {
		// As MariaDB: a logical packet of max_allowed_packet bytes or more is
		// refused as soon as the header of the physical packet that reaches
		// the limit arrives, the error numbered after that packet (a split
		// packet crossing it in its second 16 MiB part gets sequence 2), and
		// the connection is closed.
		l.tripped = true
		_ = l.Flush()
		writeRawError(l.Conn, hdr[3]+1, mysql.ER_NET_PACKET_TOO_LARGE, "08S01", "Got a packet bigger than 'max_allowed_packet' bytes")
		l.drain(size, size == 0xffffff)
		return errPacketTooLarge
	}
	l.cont = size == 0xffffff
	if !l.cont {
		l.logical = 0
	}
	if first && l.raw {
		l.raw, first = false, false
	}
	if first && size > 0 {
		cmd, err := l.br.Peek(1)
		if err != nil {
			return err
		}
		l.sniffPrepare = cmd[0] == comStmtPrepare
		if !l.cont && tracked(cmd[0]) {
			payload := make([]byte, size)
			if _, err := io.ReadFull(l.br, payload); err != nil {
				return err
			}
			out, reply := l.stmts.command(payload)
			switch {
			case reply != nil:
				// Consumed: go-mysql never sees this command. Its previous
				// response was flushed before it asked for the next command.
				writeRawError(l.Conn, hdr[3]+1, reply.Code, reply.State, reply.Message)
			case out != nil:
				l.pending = appendPackets(make([]byte, 0, len(out)+8), out, hdr[3])
				// An EXECUTE with its long data spliced in can reach 16 MiB
				// and go up as several packets: go-mysql then numbers its
				// reply after the last of them, the client after its one.
				l.extraPackets = byte(len(out) / 0xffffff)
			}
			return nil
		}
	}
	l.pending = append(l.pending[:0], hdr[:]...)
	l.left = size
	return nil
}

// closeStatements ends every prepared statement of the connection, as
// MariaDB does on COM_RESET_CONNECTION and COM_CHANGE_USER: an EXECUTE of
// one of them gets 1243 (stmtWire no longer knows it), and go-mysql, which
// keeps its own statements and offers no way to drop them, reads a
// COM_STMT_CLOSE of each before the client's next command (no reply), so
// that their slots and memory are freed. A pool that resets its
// connections (MySqlConnector, Connector/J's useResetConnection) would
// otherwise reach max_prepared_per_session.
func (l *clientConn) closeStatements() {
	for id := range l.stmts.stmts {
		l.closes = append(l.closes, id)
	}
	clear(l.stmts.stmts)
}

// appendPackets frames payload as packets starting at sequence seq.
func appendPackets(dst, payload []byte, seq byte) []byte {
	for {
		n := min(len(payload), 0xffffff)
		dst = append(dst, byte(n), byte(n>>8), byte(n>>16), seq)
		dst = append(dst, payload[:n]...)
		payload = payload[n:]
		seq++
		if n < 0xffffff {
			return dst
		}
	}
}

// drain reads and drops what the client is still sending of the refused
// logical packet, the parts after the current one included (bounded in
// bytes and time), so that its write completes and it reads the 1153
// instead of a connection reset. MariaDB closes at once, and go-sql-driver
// then often reports the reset, not the 1153 (TestHostileMaxPacket).
func (l *clientConn) drain(left int, more bool) {
	_ = l.Conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	budget := int64(max(4*l.max, maxDrain))
	for budget > 0 {
		n, err := io.CopyN(io.Discard, l.br, min(int64(left), budget))
		budget -= n
		if err != nil || !more || budget <= 0 {
			return
		}
		var hdr [4]byte
		if _, err := io.ReadFull(l.br, hdr[:]); err != nil {
			return
		}
		left = int(hdr[0]) | int(hdr[1])<<8 | int(hdr[2])<<16
		more = left == 0xffffff
	}
}

// maxDrain: a client whose DSN allows more than the server (go-sql-driver's
// maxAllowedPacket) may send a statement of a few 16 MiB parts before it
// reads the refusal; reading and dropping them costs no memory.
const maxDrain = 64 << 20

// extraCapabilities are announced in the server greeting on top of
// go-mysql's own set, which has no option for them. Clients such as
// go-sql-driver keep only the capabilities the server announces, so without
// CLIENT_FOUND_ROWS a client asking for it (Connector/J does by default)
// would silently get changed-rows counts, and multi-statements could not be
// enabled at all. CLIENT_MULTI_RESULTS and CLIENT_PS_MULTI_RESULTS are what
// MariaDB announces: a CALL answers with a chain of results, and a prepared
// CALL with its OUT parameters only for a client that kept the latter
// (libmariadb does).
const extraCapabilities = mysql.CLIENT_FOUND_ROWS | mysql.CLIENT_MULTI_STATEMENTS | mysql.CLIENT_MULTI_RESULTS | mysql.CLIENT_PS_MULTI_RESULTS

// hiddenCapabilities are taken out of go-mysql's set in the greeting.
// CLIENT_SESSION_TRACK promises that OK packets report changes of the
// session's schema and variables, which Convoy does not send: MariaDB
// Connector/J 3.x, seeing it, answers getCatalog() from the tracked schema
// and would keep the database of the connect after a USE.
const hiddenCapabilities = mysql.CLIENT_SESSION_TRACK

// greetingConn patches the first packet written on a new connection, the
// server greeting (HandshakeV10): capabilities (extraCapabilities in,
// hiddenCapabilities out) and the status a new session really has
// (SERVER_STATUS_AUTOCOMMIT; go-mysql sends 0x0000, and clients such as
// PyMySQL, so SQLAlchemy, take autocommit to be off, skip their
// `SET autocommit=0`, and then every statement of a "transaction" commits on
// its own). The greeting is always plaintext; the handshake's OK gets its
// status from authHandler.OnAuthSuccess.
type greetingConn struct {
	net.Conn
	add, drop uint32
	status    uint16
	patched   bool
	// salt is the greeting's scramble (go-mysql keeps its own private):
	// COM_CHANGE_USER's authentication answers it.
	salt []byte
}

func (g *greetingConn) Write(p []byte) (int, error) {
	if !g.patched {
		g.patched = true
		g.salt = patchGreeting(p, g.add, g.drop, g.status)
	}
	return g.Conn.Write(p)
}

// patchGreeting sets the capabilities add, clears drop and ORs status into
// a HandshakeV10 packet (header included): protocol version, NUL-terminated
// server version, connection id (4), salt part 1 (8), filler (1),
// capabilities low (2), charset (1), status (2), capabilities high (2),
// then the salt's length (1), reserved (10) and salt part 2 (12 + NUL). It
// returns the salt (nil if the packet is not such a greeting).
func patchGreeting(p []byte, add, drop uint32, status uint16) []byte {
	if len(p) < 5 || p[4] != 10 {
		return nil
	}
	end := bytes.IndexByte(p[5:], 0)
	if end < 0 {
		return nil
	}
	low := 5 + end + 1 + 4 + 8 + 1
	if len(p) < low+7 {
		return nil
	}
	var salt []byte
	if part2 := low + 7 + 1 + 10; len(p) >= part2+12 {
		salt = append(append(salt, p[low-9:low-1]...), p[part2:part2+12]...)
	}
	caps := uint32(binary.LittleEndian.Uint16(p[low:])) | uint32(binary.LittleEndian.Uint16(p[low+5:]))<<16
	caps = caps&^drop | add
	binary.LittleEndian.PutUint16(p[low:], uint16(caps))
	binary.LittleEndian.PutUint16(p[low+5:], uint16(caps>>16))
	p[low+3] |= byte(status)
	p[low+4] |= byte(status >> 8)
	return salt
}

// authThrottle blocks a host for a while after repeated failed logins, so a
// password cannot be guessed at network speed.
type authThrottle struct {
	mu       sync.Mutex
	limit    int
	window   time.Duration
	failures map[string][]time.Time
}

func newAuthThrottle(limit int, window time.Duration) *authThrottle {
	return &authThrottle{limit: limit, window: window, failures: map[string][]time.Time{}}
}

func (a *authThrottle) recent(host string, now time.Time) []time.Time {
	fs := a.failures[host]
	i := 0
	for i < len(fs) && now.Sub(fs[i]) > a.window {
		i++
	}
	fs = fs[i:]
	if len(fs) == 0 {
		delete(a.failures, host)
	} else {
		a.failures[host] = fs
	}
	return fs
}

// blocked reports whether host has failed limit times within the window.
func (a *authThrottle) blocked(host string) bool {
	if a.limit <= 0 {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.recent(host, time.Now())) >= a.limit
}

func (a *authThrottle) fail(host string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := time.Now()
	a.failures[host] = append(a.recent(host, now), now)
}

func hostOf(addr net.Addr) string {
	h, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		return addr.String()
	}
	return h
}
