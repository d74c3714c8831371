package backend

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"slices"
	"sync/atomic"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// wire speaks the command phase of the MySQL client protocol on one backend
// connection, once go-mysql's client has done the handshake (auth, TLS,
// collation). It replaces go-mysql's command layer because of what the
// profiles showed (BENCHMARKS.md): go-mysql decodes every row into values
// Convoy forwards unchanged, copies each packet through a pooled buffer, and
// resets a socket deadline twice per packet read. Here a result arrives as
// raw packets in one buffer: column definitions parsed (the engine renames
// tables in them), rows left as the server sent them.
//
// Capabilities are go-mysql's without CLIENT_DEPRECATE_EOF (Pool.dial turns
// it off: go-mysql asks for it whatever the server offers) plus
// multi-results (see Pool.dial): a response is one OK, one error, or one
// result set ended by EOF, except for a CALL (or Convoy's own batches,
// multi), whose results come as a chain flagged SERVER_MORE_RESULTS_EXISTS
// (results).
type wire struct {
	nc  net.Conn
	br  *bufio.Reader
	out []byte // the command being built, 4-byte header first
	seq uint8  // sequence number of the next packet to read
	// status is the server status of the last OK or EOF packet.
	status uint16
	// failed: a write failed, so the server holds part of a command at most;
	// the connection must not be reused, whatever error is reported.
	failed bool

	readTimeout, writeTimeout time.Duration
	readBy, writeBy           time.Time // deadlines set on nc

	// busy is when the command being answered was written (unix ns), 0
	// once Conn.check or Release ended it. The watchdog or the breaker
	// gives up on a command by swapping in a negative claim (see
	// Conn.interrupt) and expiring nc's deadlines; every later read or
	// write then fails with errInterrupted.
	busy atomic.Int64
	// killing is set while a KILL QUERY for this connection's server
	// thread is on its way (Manager.InterruptQuery): the next command
	// waits until it has been answered, so that it cannot stop that
	// command instead of the one it was sent for.
	killing atomic.Pointer[chan struct{}]
}

// readBufSize: a point-select result is ~100 bytes, a 50-row history page a
// few KiB; larger results stream through it.
const readBufSize = 16 << 10

// maxKeptCommand: a command buffer grown beyond this (a bulk INSERT) is
// dropped after use rather than kept by a pooled connection.
const maxKeptCommand = 1 << 20

// maxPayload is the largest payload of one protocol packet; longer ones are
// split, a part of exactly this size announcing another.
const maxPayload = 1<<24 - 1

func newWire(nc net.Conn, readTimeout, writeTimeout time.Duration) *wire {
	w := &wire{nc: nc, readTimeout: readTimeout, writeTimeout: writeTimeout}
	w.br = bufio.NewReaderSize(deadlineReader{w}, readBufSize)
	return w
}

// errProtocol is a response that breaks the protocol (bad sequence, short or
// unknown packet): the connection's state is unknown and it is dropped.
var errProtocol = errors.New("malformed packet from the server")

func protocolError(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errProtocol, fmt.Sprintf(format, args...))
}

// Deadlines are renewed lazily: setting one is a timer update under a lock,
// which per packet cost more than the rest of the read. A deadline is only
// moved once a quarter of its window has passed, so a stalled read or write
// fails after between 3/4 and all of its timeout, and a busy connection sets
// one every few seconds instead of several per statement.
func renew(by *time.Time, timeout time.Duration, now time.Time) (time.Time, bool) {
	if timeout <= 0 {
		return time.Time{}, false
	}
	if by.Sub(now) > timeout*3/4 {
		return time.Time{}, false
	}
	*by = now.Add(timeout)
	return *by, true
}

// deadlineReader is what the buffered reader reads from: bufio calls it only
// when its buffer is empty, i.e. right before a read syscall.
type deadlineReader struct{ w *wire }

func (d deadlineReader) Read(p []byte) (int, error) {
	if d.w.busy.Load() < 0 {
		return 0, errInterrupted // a renewed deadline must not undo the claim
	}
	if t, ok := renew(&d.w.readBy, d.w.readTimeout, time.Now()); ok {
		if err := d.w.nc.SetReadDeadline(t); err != nil {
			return 0, err
		}
	}
	return d.w.nc.Read(p)
}

// begin starts a command: sequence 0, then the command byte; the caller
// appends the arguments to w.out and calls send.
func (w *wire) begin(cmd byte) {
	w.out = append(w.out[:0], 0, 0, 0, 0, cmd)
}

// send writes the command built since begin, in one write.
func (w *wire) send() error {
	b := w.frame(0)
	if cap(w.out) > maxKeptCommand {
		w.out = nil
	}
	if err := w.write(b); err != nil {
		return w.refusal(err)
	}
	return nil
}

// frame returns w.out with the command built from at on (a 4-byte header
// slot first) framed as packets, and sets the sequence number of its reply.
// The bytes before at (other commands written with it) stay in front.
func (w *wire) frame(at int) []byte {
	b := w.out
	n := len(b) - at - 4
	if n < maxPayload {
		b[at], b[at+1], b[at+2], b[at+3] = byte(n), byte(n>>8), byte(n>>16), 0
		w.seq = 1
		return b
	}
	w.seq = uint8(n/maxPayload + 1) // one packet per full part, then the short one
	return splitPackets(b[:at], b[at+4:])
}

// refusal returns the error packet a server sent before closing on a
// command it would not read to the end (1153, a packet above its
// max_allowed_packet), or writeErr when there is none. The packet was
// received before the reset that failed the write, so it is already queued
// on the socket: a short deadline only bounds the look. Replies to the
// commands before it in the same write (a batch's COM_SET_OPTION) come
// first. The connection is not used again either way (failed).
func (w *wire) refusal(writeErr error) error {
	w.failed = true
	w.readTimeout, w.readBy = refusalWait, time.Time{}
	for range 2 {
		h, err := w.br.Peek(4)
		if err != nil {
			return writeErr
		}
		w.seq = h[3] // numbered from the server's count of what it read
		_, p, err := w.readPacket(nil)
		switch {
		case err != nil || len(p) == 0:
			return writeErr
		case p[0] == mysql.ERR_HEADER:
			return serverError(p)
		case !isEOF(p) && p[0] != mysql.OK_HEADER:
			return writeErr
		}
	}
	return writeErr
}

const refusalWait = 100 * time.Millisecond

// write sends framed packets in one write; it starts the command's clock
// (busy) unless the command was already claimed.
func (w *wire) write(b []byte) error {
	if ch := w.killing.Load(); ch != nil {
		<-*ch
	}
	now := time.Now()
	for {
		start := w.busy.Load()
		if start < 0 {
			return errInterrupted
		}
		if w.busy.CompareAndSwap(start, now.UnixNano()) {
			break
		}
	}
	if t, ok := renew(&w.writeBy, w.writeTimeout, now); ok {
		if err := w.nc.SetWriteDeadline(t); err != nil {
			return err
		}
	}
	_, err := w.nc.Write(b)
	return err
}

// splitPackets returns prefix followed by a payload of maxPayload bytes or
// more framed as several packets (sequence 0, 1, ...), ending with one
// shorter than maxPayload (empty if the payload is an exact multiple).
func splitPackets(prefix, p []byte) []byte {
	out := make([]byte, 0, len(prefix)+len(p)+4*(len(p)/maxPayload+1))
	out = append(out, prefix...)
	for seq := byte(0); ; seq++ {
		n := min(len(p), maxPayload)
		out = append(out, byte(n), byte(n>>8), byte(n>>16), seq)
		out = append(out, p[:n]...)
		p = p[n:]
		if n < maxPayload {
			return out
		}
	}
}

// readPacket appends the payload of the next packet (the parts of one longer
// than maxPayload joined) to buf; it returns buf and the payload within it.
func (w *wire) readPacket(buf []byte) ([]byte, []byte, error) {
	start := len(buf)
	for {
		h, err := w.br.Peek(4)
		if err != nil {
			return buf, nil, err
		}
		n := int(h[0]) | int(h[1])<<8 | int(h[2])<<16
		if h[3] != w.seq {
			return buf, nil, protocolError("packet sequence %d, expected %d", h[3], w.seq)
		}
		w.seq++
		_, _ = w.br.Discard(4)
		m := len(buf)
		buf = slices.Grow(buf, n)[:m+n]
		if _, err := io.ReadFull(w.br, buf[m:]); err != nil {
			return buf[:m], nil, err
		}
		if n < maxPayload {
			// Capped: an append to one row must not run into the next.
			return buf, buf[start:len(buf):len(buf)], nil
		}
	}
}

func isEOF(p []byte) bool { return len(p) < 9 && len(p) > 0 && p[0] == mysql.EOF_HEADER }

// eof records the warnings and status of an EOF packet.
func (w *wire) eof(p []byte, r *mysql.Result) {
	if len(p) >= 5 {
		r.Warnings = binary.LittleEndian.Uint16(p[1:])
		r.Status = binary.LittleEndian.Uint16(p[3:])
		w.status = r.Status
	}
}

// serverError decodes an error packet; the strings are copied, the packet
// buffer may be reused.
func serverError(p []byte) error {
	if len(p) < 3 {
		return protocolError("error packet of %d bytes", len(p))
	}
	e := &mysql.MyError{Code: binary.LittleEndian.Uint16(p[1:]), State: "HY000"}
	msg := p[3:]
	if len(msg) >= 6 && msg[0] == '#' {
		e.State = string(msg[1:6])
		msg = msg[6:]
	}
	e.Message = string(msg)
	return e
}

// lenenc reads a length-encoded integer; ok=false when p is too short.
// 0xfb (NULL) reads as 0 with n=1.
func lenenc(p []byte) (v uint64, n int, ok bool) {
	if len(p) == 0 {
		return 0, 0, false
	}
	switch p[0] {
	case 0xfc:
		if len(p) < 3 {
			return 0, 0, false
		}
		return uint64(binary.LittleEndian.Uint16(p[1:])), 3, true
	case 0xfd:
		if len(p) < 4 {
			return 0, 0, false
		}
		return uint64(p[1]) | uint64(p[2])<<8 | uint64(p[3])<<16, 4, true
	case 0xfe:
		if len(p) < 9 {
			return 0, 0, false
		}
		return binary.LittleEndian.Uint64(p[1:]), 9, true
	case 0xfb:
		return 0, 1, true
	case 0xff:
		return 0, 0, false
	}
	return uint64(p[0]), 1, true
}

// okResult decodes an OK packet.
func (w *wire) okResult(p []byte) (*mysql.Result, error) {
	// go-mysql's client hands an empty result set with every OK; callers
	// read r.Fields without checking.
	r := &mysql.Result{Resultset: &mysql.Resultset{}}
	pos := 1
	var n int
	var ok1, ok2 bool
	r.AffectedRows, n, ok1 = lenenc(p[pos:])
	pos += n
	r.InsertId, n, ok2 = lenenc(p[pos:])
	pos += n
	if !ok1 || !ok2 || len(p) < pos+4 {
		return nil, protocolError("OK packet of %d bytes", len(p))
	}
	r.Status = binary.LittleEndian.Uint16(p[pos:])
	r.Warnings = binary.LittleEndian.Uint16(p[pos+2:])
	// Then the info text ("Records: 3  Duplicates: 0  Warnings: 0", "Rows
	// matched: 1  Changed: 1  Warnings: 0"), length-encoded as MariaDB
	// writes it; nothing follows it, as connections do not negotiate
	// CLIENT_SESSION_TRACK.
	if rest := p[pos+4:]; len(rest) > 0 {
		if n, w, ok := lenenc(rest); ok && uint64(len(rest)-w) >= n {
			r.StatusMessage = string(rest[w : w+int(n)])
		}
	}
	w.status = r.Status
	return r, nil
}

// result reads the response to a query or EXECUTE: an OK, the server's
// error, or a result set (rows raw: text or binary protocol as the command
// asked).
func (w *wire) result() (*mysql.Result, error) {
	buf, p, err := w.readPacket(make([]byte, 0, 512))
	if err != nil {
		return nil, err
	}
	if len(p) == 0 {
		return nil, protocolError("empty response packet")
	}
	switch p[0] {
	case mysql.OK_HEADER:
		return w.okResult(p)
	case mysql.ERR_HEADER:
		return nil, serverError(p)
	case mysql.LocalInFile_HEADER:
		// Connections never announce CLIENT_LOCAL_FILES, so a server asking
		// for a file breaks the protocol: answer "no file", then drop it.
		return nil, w.refuseLocalFile()
	}
	// No bound on the count: a table has at most 4096 columns, but a SELECT
	// list has none (MariaDB sends 70,000 columns if asked). columns only
	// allocates for the definitions that really arrive.
	count, n, ok := lenenc(p)
	if !ok || n != len(p) || count == 0 || count > math.MaxInt32 {
		return nil, protocolError("bad column count packet")
	}
	rs := &mysql.Resultset{}
	if buf, rs.Fields, err = w.columns(buf, int(count)); err != nil {
		return nil, err
	}
	r := &mysql.Result{Resultset: rs}
	for {
		if buf, p, err = w.readPacket(buf); err != nil {
			return nil, err
		}
		if isEOF(p) {
			w.eof(p, r)
			return r, nil
		}
		if len(p) == 0 {
			return nil, protocolError("empty row packet")
		}
		if p[0] == mysql.ERR_HEADER {
			return nil, serverError(p)
		}
		rs.RowDatas = append(rs.RowDatas, p)
	}
}

// columns reads count column definitions and the EOF after them. Memory
// grows with the definitions read, not with the count a server announced.
func (w *wire) columns(buf []byte, count int) ([]byte, []*mysql.Field, error) {
	store := make([]mysql.Field, 0, min(count, preallocColumns))
	for range count {
		var p []byte
		var err error
		if buf, p, err = w.readPacket(buf); err != nil {
			return buf, nil, err
		}
		store = append(store, mysql.Field{})
		if err := parseField(&store[len(store)-1], p); err != nil {
			return buf, nil, err
		}
	}
	fields := make([]*mysql.Field, count)
	for i := range fields {
		fields[i] = &store[i]
	}
	buf, p, err := w.readPacket(buf)
	if err != nil {
		return buf, nil, err
	}
	if !isEOF(p) {
		return buf, nil, protocolError("%d column definitions not followed by EOF", count)
	}
	if len(p) >= 5 {
		w.status = binary.LittleEndian.Uint16(p[3:])
	}
	return buf, fields, nil
}

// preallocColumns: definitions allocated up front for a result set; a wider
// one grows as its definitions arrive.
const preallocColumns = 64

// skipDefinitions reads count definitions and the EOF after them, keeping
// nothing: a PREPARE's parameter definitions (up to 65535) carry nothing
// Convoy uses.
func (w *wire) skipDefinitions(count int) error {
	var buf, p []byte
	var err error
	for range count + 1 {
		if buf, p, err = w.readPacket(buf[:0]); err != nil {
			return err
		}
	}
	if !isEOF(p) {
		return protocolError("%d parameter definitions not followed by EOF", count)
	}
	if len(p) >= 5 {
		w.status = binary.LittleEndian.Uint16(p[3:])
	}
	return nil
}

// parseField decodes a column definition. go-mysql's decoder indexes by the
// lengths it reads; a backend's packet is untrusted, so a short one is a
// protocol error here, not a panic.
func parseField(f *mysql.Field, p []byte) (err error) {
	defer func() {
		if recover() != nil {
			err = protocolError("short column definition")
		}
	}()
	if err := f.Parse(p); err != nil {
		return protocolError("column definition: %v", err)
	}
	return nil
}

// refuseLocalFile answers a LOCAL INFILE request with an empty file and
// reads the server's reply, then reports the request as an error.
func (w *wire) refuseLocalFile() error {
	empty := []byte{0, 0, 0, w.seq}
	w.seq++
	if _, err := w.nc.Write(empty); err != nil {
		return err
	}
	if _, _, err := w.readPacket(nil); err != nil {
		return err
	}
	return protocolError("the server asked for a local file (LOAD DATA LOCAL); Convoy never sends one")
}

// query runs a text-protocol statement.
func (w *wire) query(sql string) (*mysql.Result, error) {
	if err := w.startQuery(sql); err != nil {
		return nil, err
	}
	return w.result()
}

// startQuery sends a COM_QUERY; the caller reads the reply.
func (w *wire) startQuery(sql string) error {
	w.begin(mysql.COM_QUERY)
	w.out = append(w.out, sql...)
	return w.send()
}

// multi runs sql, several statements separated by ';', in one round trip:
// COM_SET_OPTION turns multi-statements on for this one COM_QUERY and off
// again, the three commands written together (the server executes them in
// order; nothing on the connection outlives the batch). Connections never
// announce CLIENT_MULTI_STATEMENTS, so a client's text can never smuggle a
// second statement past the parser: only Convoy's own batches get here.
// The server stops at the first failing statement: multi returns the
// results of the statements before it and that statement's error.
func (w *wire) multi(sql string) ([]*mysql.Result, error) {
	const on, off = 0, 1 // MYSQL_OPTION_MULTI_STATEMENTS_ON / _OFF
	setOption := func(b []byte, op byte) []byte { return append(b, 3, 0, 0, 0, mysql.COM_SET_OPTION, op, 0) }
	w.out = setOption(w.out[:0], on)
	at := len(w.out)
	w.out = append(w.out, 0, 0, 0, 0, mysql.COM_QUERY)
	w.out = append(w.out, sql...)
	b := setOption(w.frame(at), off)
	querySeq := w.seq
	if querySeq == 1 { // one packet, framed in place: keep the buffer it grew into
		w.out = b
	}
	if cap(w.out) > maxKeptCommand {
		w.out = nil
	}
	if err := w.write(b); err != nil {
		return nil, w.refusal(err)
	}
	if err := w.optionReply(); err != nil {
		return nil, err
	}
	// One sequence runs through all the results of the query.
	w.seq = querySeq
	var out []*mysql.Result
	var stmtErr error
	for {
		r, err := w.result()
		if err != nil {
			if !IsServerError(err) {
				return out, err
			}
			stmtErr = err // the server stops here: no more results follow
			break
		}
		out = append(out, r)
		if r.Status&mysql.SERVER_MORE_RESULTS_EXISTS == 0 {
			break
		}
	}
	if err := w.optionReply(); err != nil {
		return out, err
	}
	return out, stmtErr
}

// optionReply reads the answer to COM_SET_OPTION: EOF (or OK).
func (w *wire) optionReply() error {
	w.seq = 1
	_, p, err := w.readPacket(nil)
	switch {
	case err != nil:
		return err
	case isEOF(p):
		if len(p) >= 5 {
			w.status = binary.LittleEndian.Uint16(p[3:])
		}
		return nil
	case len(p) > 0 && p[0] == mysql.OK_HEADER:
		_, err = w.okResult(p)
		return err
	case len(p) > 0 && p[0] == mysql.ERR_HEADER:
		return protocolError("COM_SET_OPTION refused: %v", serverError(p))
	}
	return protocolError("unexpected reply to COM_SET_OPTION")
}

// simple runs a command answered by OK or an error (COM_INIT_DB).
func (w *wire) simple(cmd byte, arg string) error {
	w.begin(cmd)
	w.out = append(w.out, arg...)
	if err := w.send(); err != nil {
		return err
	}
	_, p, err := w.readPacket(nil)
	switch {
	case err != nil:
		return err
	case len(p) > 0 && p[0] == mysql.OK_HEADER:
		_, err = w.okResult(p)
		return err
	case len(p) > 0 && p[0] == mysql.ERR_HEADER:
		return serverError(p)
	}
	return protocolError("unexpected reply to command %d", cmd)
}

// fieldList runs COM_FIELD_LIST: column definitions until EOF.
func (w *wire) fieldList(table, wildcard string) ([]*mysql.Field, error) {
	w.begin(mysql.COM_FIELD_LIST)
	w.out = append(append(append(w.out, table...), 0), wildcard...)
	if err := w.send(); err != nil {
		return nil, err
	}
	var fields []*mysql.Field
	var buf []byte
	for {
		var p []byte
		var err error
		if buf, p, err = w.readPacket(buf); err != nil {
			return nil, err
		}
		switch {
		case isEOF(p):
			return fields, nil
		case len(p) > 0 && p[0] == mysql.ERR_HEADER:
			return nil, serverError(p)
		}
		f := &mysql.Field{}
		if err := parseField(f, p); err != nil {
			return nil, err
		}
		fields = append(fields, f)
	}
}

// stmt is a statement prepared on this connection.
type stmt struct {
	id      uint32
	params  int
	columns []*mysql.Field
}

// prepare runs COM_STMT_PREPARE.
func (w *wire) prepare(sql string) (*stmt, error) {
	w.begin(mysql.COM_STMT_PREPARE)
	w.out = append(w.out, sql...)
	if err := w.send(); err != nil {
		return nil, err
	}
	buf, p, err := w.readPacket(nil)
	if err != nil {
		return nil, err
	}
	if len(p) > 0 && p[0] == mysql.ERR_HEADER {
		return nil, serverError(p)
	}
	if len(p) < 12 || p[0] != mysql.OK_HEADER {
		return nil, protocolError("bad COM_STMT_PREPARE reply")
	}
	// Both counts are 2-byte fields: 0..65535 parameters (MariaDB's own
	// limit on placeholders) and columns, all accepted.
	st := &stmt{id: binary.LittleEndian.Uint32(p[1:])}
	ncols := int(binary.LittleEndian.Uint16(p[5:]))
	st.params = int(binary.LittleEndian.Uint16(p[7:]))
	if st.params > 0 {
		if err := w.skipDefinitions(st.params); err != nil {
			return nil, err
		}
	}
	if ncols > 0 {
		if _, st.columns, err = w.columns(buf, ncols); err != nil {
			return nil, err
		}
	}
	return st, nil
}

// closeStmt runs COM_STMT_CLOSE (the server sends no reply).
func (w *wire) closeStmt(id uint32) error {
	w.begin(mysql.COM_STMT_CLOSE)
	w.out = binary.LittleEndian.AppendUint32(w.out, id)
	return w.send()
}

// longArg is the size above which a string or []byte argument goes to the
// server as COM_STMT_SEND_LONG_DATA pieces of at most this size ahead of
// the EXECUTE (in the same write: the server answers none of them). The
// server bounds long data per parameter by its max_allowed_packet, not the
// EXECUTE packet, so a statement whose values the client sent as long data
// (each up to the session's max_allowed_packet, which is at most the
// backend's) fits the backend too, as it fits MariaDB directly; inline, two
// such values, or one at the limit with the statement around it, would not.
const longArg = 64 << 10

// execute runs COM_STMT_EXECUTE with args (binary-protocol rows back).
// Argument types are those go-mysql's server decodes from a client's
// EXECUTE, plus int, uint, bool and string.
func (w *wire) execute(st *stmt, args []any) (*mysql.Result, error) {
	long, err := w.startExecute(st, args)
	if err != nil {
		return nil, err
	}
	r, err := w.result()
	if long && IsServerError(err) {
		// A statement whose long data the server refused keeps failing
		// until it is reset (MariaDB); it stays in the connection's cache.
		if rerr := w.resetStmt(st.id); rerr != nil {
			return nil, rerr
		}
	}
	return r, err
}

// startExecute sends a COM_STMT_EXECUTE (after the long data of its long
// arguments, if any: long reports them); the caller reads the reply.
func (w *wire) startExecute(st *stmt, args []any) (long bool, err error) {
	if len(args) != st.params {
		// Nothing sent: the connection stays usable.
		return false, &mysql.MyError{Code: mysql.ER_WRONG_ARGUMENTS, State: "HY000",
			Message: fmt.Sprintf("Incorrect arguments to mysqld_stmt_execute (statement takes %d parameters, %d given)", st.params, len(args))}
	}
	w.out = w.out[:0]
	for i, a := range args {
		if w.appendLongData(st.id, i, a) {
			long = true
		}
	}
	at := len(w.out)
	w.out = append(w.out, 0, 0, 0, 0, mysql.COM_STMT_EXECUTE)
	w.out = binary.LittleEndian.AppendUint32(w.out, st.id)
	w.out = append(w.out, mysql.CURSOR_TYPE_NO_CURSOR, 1, 0, 0, 0) // flags, iteration count 1
	if n := len(args); n > 0 {
		nulls := len(w.out)
		w.out = append(w.out, make([]byte, (n+7)/8)...)
		w.out = append(w.out, 1) // new-params-bound: types follow, every time
		types := len(w.out)
		w.out = append(w.out, make([]byte, 2*n)...)
		for i, a := range args {
			if IsLongArg(a) {
				w.out[types+2*i] = mysql.MYSQL_TYPE_STRING // the value came as long data
				continue
			}
			tp, unsigned, err := w.appendArg(a)
			if err != nil {
				return false, fmt.Errorf("parameter %d: %w", i+1, err)
			}
			if tp == mysql.MYSQL_TYPE_NULL {
				w.out[nulls+i/8] |= 1 << (i % 8)
			}
			w.out[types+2*i] = tp
			if unsigned {
				w.out[types+2*i+1] = mysql.PARAM_UNSIGNED
			}
		}
	}
	b := w.frame(at)
	if cap(w.out) > maxKeptCommand {
		w.out = nil
	}
	if err := w.write(b); err != nil {
		return long, w.refusal(err)
	}
	return long, nil
}

// IsLongArg reports an argument ExecPrepared sends as long data (a string
// or []byte over longArg bytes).
func IsLongArg(a any) bool {
	switch v := a.(type) {
	case []byte:
		return len(v) > longArg
	case string:
		return len(v) > longArg
	}
	return false
}

// appendLongData appends the COM_STMT_SEND_LONG_DATA packets of argument i
// (each a command of its own, sequence 0) when it is long.
func (w *wire) appendLongData(id uint32, i int, a any) bool {
	if !IsLongArg(a) {
		return false
	}
	var v []byte
	var s string
	switch x := a.(type) {
	case []byte:
		v = x
	case string:
		s = x
	}
	n := max(len(v), len(s))
	for off := 0; off < n; off += longArg {
		end := min(off+longArg, n)
		size := 7 + end - off
		w.out = append(w.out, byte(size), byte(size>>8), byte(size>>16), 0, mysql.COM_STMT_SEND_LONG_DATA)
		w.out = binary.LittleEndian.AppendUint32(w.out, id)
		w.out = binary.LittleEndian.AppendUint16(w.out, uint16(i))
		if v != nil {
			w.out = append(w.out, v[off:end]...)
		} else {
			w.out = append(w.out, s[off:end]...)
		}
	}
	return true
}

// resetStmt runs COM_STMT_RESET (answered by OK or an error).
func (w *wire) resetStmt(id uint32) error {
	w.begin(mysql.COM_STMT_RESET)
	w.out = binary.LittleEndian.AppendUint32(w.out, id)
	if err := w.send(); err != nil {
		return err
	}
	_, p, err := w.readPacket(nil)
	switch {
	case err != nil:
		return err
	case len(p) > 0 && (p[0] == mysql.OK_HEADER || p[0] == mysql.ERR_HEADER):
		return nil
	}
	return protocolError("unexpected reply to COM_STMT_RESET")
}

// appendArg appends the binary-protocol value of a and returns its type.
func (w *wire) appendArg(a any) (tp byte, unsigned bool, err error) {
	b := w.out
	le := binary.LittleEndian
	switch v := a.(type) {
	case nil:
		return mysql.MYSQL_TYPE_NULL, false, nil
	case int8:
		b, tp = append(b, byte(v)), mysql.MYSQL_TYPE_TINY
	case uint8:
		b, tp, unsigned = append(b, v), mysql.MYSQL_TYPE_TINY, true
	case bool:
		c := byte(0)
		if v {
			c = 1
		}
		b, tp = append(b, c), mysql.MYSQL_TYPE_TINY
	case int16:
		b, tp = le.AppendUint16(b, uint16(v)), mysql.MYSQL_TYPE_SHORT
	case uint16:
		b, tp, unsigned = le.AppendUint16(b, v), mysql.MYSQL_TYPE_SHORT, true
	case int32:
		b, tp = le.AppendUint32(b, uint32(v)), mysql.MYSQL_TYPE_LONG
	case uint32:
		b, tp, unsigned = le.AppendUint32(b, v), mysql.MYSQL_TYPE_LONG, true
	case int64:
		b, tp = le.AppendUint64(b, uint64(v)), mysql.MYSQL_TYPE_LONGLONG
	case int:
		b, tp = le.AppendUint64(b, uint64(v)), mysql.MYSQL_TYPE_LONGLONG
	case uint64:
		b, tp, unsigned = le.AppendUint64(b, v), mysql.MYSQL_TYPE_LONGLONG, true
	case uint:
		b, tp, unsigned = le.AppendUint64(b, uint64(v)), mysql.MYSQL_TYPE_LONGLONG, true
	case float32:
		b, tp = le.AppendUint32(b, math.Float32bits(v)), mysql.MYSQL_TYPE_FLOAT
	case float64:
		b, tp = le.AppendUint64(b, math.Float64bits(v)), mysql.MYSQL_TYPE_DOUBLE
	case []byte:
		b, tp = append(appendLenenc(b, uint64(len(v))), v...), mysql.MYSQL_TYPE_STRING
	case string:
		b, tp = append(appendLenenc(b, uint64(len(v))), v...), mysql.MYSQL_TYPE_STRING
	default:
		return 0, false, fmt.Errorf("[BUG] no binary encoding for %T", a)
	}
	w.out = b
	return tp, unsigned, nil
}

func appendLenenc(b []byte, n uint64) []byte {
	switch {
	case n < 251:
		return append(b, byte(n))
	case n < 1<<16:
		return append(b, 0xfc, byte(n), byte(n>>8))
	case n < 1<<24:
		return append(b, 0xfd, byte(n), byte(n>>8), byte(n>>16))
	}
	return binary.LittleEndian.AppendUint64(append(b, 0xfe), n)
}

// quit says goodbye and closes the socket.
// A peer that stopped reading must not hold the close up.
func (w *wire) quit() {
	_ = w.nc.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	_, _ = w.nc.Write([]byte{1, 0, 0, 0, mysql.COM_QUIT})
	_ = w.nc.Close()
}
