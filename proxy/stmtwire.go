package proxy

import (
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// stmtWire keeps the per-connection state of the binary protocol that
// go-mysql's server does not, and normalises every COM_STMT_EXECUTE before
// go-mysql decodes it. Without it:
//
//   - a re-EXECUTE with new_params_bound_flag = 0 (libmariadb, Connector/C
//     and sysbench send types only on the first EXECUTE after a bind) reached
//     the handler with every argument NULL: `WHERE id = ?` silently became
//     `WHERE id = NULL`;
//   - COM_STMT_SEND_LONG_DATA was unsupported;
//   - DATE / DATETIME / TIME parameters arrived as their binary encoding in a
//     []byte and went to the backend as a string of garbage;
//   - a malformed EXECUTE got errno 1105 instead of MariaDB's 1210 / 1835;
//   - a cursor request (CURSOR_TYPE_READ_ONLY) was refused.
//
// The rewritten packet always carries new_params_bound_flag = 1 with the
// types in force, long data spliced in as length-encoded strings, temporal
// values as their canonical text (type MYSQL_TYPE_STRING: MariaDB converts
// a string to DATE/DATETIME/TIME in comparisons and assignments exactly as
// it does a temporal parameter) and no cursor flags (MySQL itself answers a
// cursor request with a plain result set when it opens no cursor; clients
// see that from the missing SERVER_STATUS_CURSOR_EXISTS).
type stmtWire struct {
	stmts map[uint32]*stmtState
	// maxLong is the session's max_allowed_packet: as in MariaDB, the long
	// data of one parameter may reach it, not exceed it.
	maxLong int
}

type stmtState struct {
	params   int
	types    []byte   // 2 bytes per parameter, as last bound
	long     [][]byte // long data per parameter (nil: none received)
	longSize int
	overflow bool // long data beyond maxLongTotal was dropped; the EXECUTE fails
	// failed is the error of long data MariaDB would not take (a parameter
	// beyond max_allowed_packet, or one the statement does not have): as
	// there, every EXECUTE gets it until COM_STMT_RESET.
	failed *mysql.MyError
}

// maxLongTotal bounds the long data Convoy buffers for one statement, in
// units of max_allowed_packet. MariaDB bounds each parameter only; Convoy
// holds all of it in memory until the EXECUTE, so the sum is bounded too.
const maxLongTotal = 4

const (
	comStmtPrepare      = 0x16
	comStmtExecute      = 0x17
	comStmtSendLongData = 0x18
	comStmtClose        = 0x19
	comStmtReset        = 0x1a
)

// tracked reports commands stmtWire must see whole.
func tracked(cmd byte) bool {
	switch cmd {
	case comStmtExecute, comStmtSendLongData, comStmtClose, comStmtReset:
		return true
	}
	return false
}

func newStmtWire(maxLong int) *stmtWire {
	return &stmtWire{stmts: map[uint32]*stmtState{}, maxLong: maxLong}
}

// prepared records a statement from the server's COM_STMT_PREPARE OK.
func (w *stmtWire) prepared(id uint32, params int) {
	w.stmts[id] = &stmtState{params: params}
}

// sniffPrepareOK reads the first packet of a COM_STMT_PREPARE response
// (header included) and records the statement if it is an OK.
func (w *stmtWire) sniffPrepareOK(pkt []byte) {
	if len(pkt) < 4+12 || pkt[4] != 0x00 {
		return
	}
	w.prepared(binary.LittleEndian.Uint32(pkt[5:9]), int(binary.LittleEndian.Uint16(pkt[11:13])))
}

// command processes one whole client command packet (payload, command byte
// first) of a tracked kind. It returns the payload go-mysql should see, or
// nil when the command is consumed here; reply, when set, is the error to
// answer the consumed command with.
func (w *stmtWire) command(payload []byte) (out []byte, reply *mysql.MyError) {
	switch payload[0] {
	case comStmtSendLongData:
		w.sendLongData(payload)
		return nil, nil // MySQL never answers SEND_LONG_DATA
	case comStmtClose:
		if len(payload) >= 5 {
			delete(w.stmts, binary.LittleEndian.Uint32(payload[1:5]))
		}
		return payload, nil
	case comStmtReset:
		if len(payload) < 5 {
			return nil, &mysql.MyError{Code: 1835, State: "HY000", Message: "Malformed communication packet"}
		}
		id := binary.LittleEndian.Uint32(payload[1:5])
		st := w.stmts[id]
		if st == nil {
			return nil, unknownStmt(id, "mysqld_stmt_reset")
		}
		st.clearLong()
		st.failed = nil
		return payload, nil
	}
	return w.execute(payload)
}

func unknownStmt(id uint32, where string) *mysql.MyError {
	return &mysql.MyError{Code: mysql.ER_UNKNOWN_STMT_HANDLER, State: "HY000",
		Message: "Unknown prepared statement handler (" + strconv.FormatUint(uint64(id), 10) + ") given to " + where}
}

func (st *stmtState) clearLong() {
	st.long, st.longSize, st.overflow = nil, 0, false
}

// Long data errors, as MariaDB 10.11 words them.
var (
	errLongDataTooLong = &mysql.MyError{Code: mysql.ER_UNKNOWN_ERROR, State: "HY000",
		Message: "Parameter of prepared statement which is set through mysql_send_long_data() is longer than 'max_allowed_packet' bytes"}
	errLongDataParam = &mysql.MyError{Code: mysql.ER_WRONG_ARGUMENTS, State: "HY000",
		Message: "Incorrect arguments to mysqld_stmt_send_long_data"}
)

func (w *stmtWire) sendLongData(p []byte) {
	if len(p) < 7 {
		return
	}
	st := w.stmts[binary.LittleEndian.Uint32(p[1:5])]
	if st == nil {
		return // MariaDB ignores long data for an unknown statement
	}
	param := int(binary.LittleEndian.Uint16(p[5:7]))
	if param >= st.params {
		st.failed = errLongDataParam
		return
	}
	data := p[7:]
	if st.long == nil {
		st.long = make([][]byte, st.params)
	}
	if len(st.long[param])+len(data) > w.maxLong {
		st.failed = errLongDataTooLong // and the piece is dropped, as there
		return
	}
	if st.longSize+len(data) > maxLongTotal*w.maxLong {
		st.overflow = true
		return
	}
	if st.long[param] == nil {
		st.long[param] = []byte{}
	}
	st.long[param] = append(st.long[param], data...)
	st.longSize += len(data)
}

var errWrongArguments = &mysql.MyError{Code: mysql.ER_WRONG_ARGUMENTS, State: "HY000", Message: "Incorrect arguments to mysqld_stmt_execute"}

// execute normalises a COM_STMT_EXECUTE (see stmtWire).
func (w *stmtWire) execute(p []byte) ([]byte, *mysql.MyError) {
	if len(p) < 10 { // command, id(4), flags(1), iteration count(4)
		return nil, &mysql.MyError{Code: 1835, State: "HY000", Message: "Malformed communication packet"}
	}
	id := binary.LittleEndian.Uint32(p[1:5])
	st := w.stmts[id]
	if st == nil {
		return nil, unknownStmt(id, "mysqld_stmt_execute")
	}
	if st.failed != nil {
		return nil, st.failed
	}
	defer st.clearLong() // long data is consumed by the EXECUTE, successful or not
	if st.overflow {
		return nil, &mysql.MyError{Code: mysql.ER_NET_PACKET_TOO_LARGE, State: "08S01",
			Message: fmt.Sprintf("Got more long data for one EXECUTE than Convoy holds (%d x max_allowed_packet = %d bytes)", maxLongTotal, maxLongTotal*w.maxLong)}
	}
	flags := p[5]
	if st.params == 0 {
		if flags == 0 {
			return p, nil
		}
		out := append([]byte(nil), p[:10]...)
		out[5] = 0
		return out, nil
	}
	n := st.params
	pos := 10
	nb := (n + 7) / 8
	if len(p) < pos+nb+1 {
		return nil, errWrongArguments
	}
	nulls := p[pos : pos+nb]
	pos += nb
	bound := p[pos] != 0
	boundOne := p[pos] == 1 // go-mysql reads the types only for exactly 1
	pos++
	var types []byte
	if bound {
		if len(p) < pos+2*n {
			return nil, errWrongArguments
		}
		types = p[pos : pos+2*n]
		pos += 2 * n
	} else {
		if st.types == nil {
			return nil, errWrongArguments // never bound: MariaDB refuses too
		}
		types = st.types
	}
	// Walk the values: find each one's bytes, note what must change.
	vals := p[pos:]
	spans := make([][2]int, n) // value i is vals[spans[i][0]:spans[i][1]]
	rewrite := !boundOne || flags != 0
	at := 0
	for i := range n {
		if nulls[i/8]&(1<<(i%8)) != 0 || types[2*i] == mysql.MYSQL_TYPE_NULL {
			continue
		}
		if st.long != nil && st.long[i] != nil {
			rewrite = true // long data: the client sends no value here
			continue
		}
		size, temporal, ok := valueSize(types[2*i], vals[at:])
		if !ok {
			return nil, errWrongArguments
		}
		rewrite = rewrite || temporal
		spans[i] = [2]int{at, at + size}
		at += size
	}
	if bound { // in force for the next EXECUTEs that do not resend them
		st.types = append(st.types[:0], types...)
	}
	if !rewrite {
		return p, nil
	}
	out := make([]byte, 0, len(p)+2*n+st.longSize+9*n)
	out = append(out, p[:10]...)
	out[5] = 0 // flags: no cursor
	nullAt := len(out)
	out = append(out, nulls...)
	out = append(out, 1)
	typeAt := len(out)
	out = append(out, types...)
	for i := range n {
		tp := types[2*i]
		switch {
		case nulls[i/8]&(1<<(i%8)) != 0 || tp == mysql.MYSQL_TYPE_NULL:
		case st.long != nil && st.long[i] != nil:
			out[nullAt+i/8] &^= 1 << (i % 8)
			if !lenencType(tp) {
				out[typeAt+2*i], out[typeAt+2*i+1] = mysql.MYSQL_TYPE_BLOB, 0
			}
			out = mysql.AppendLengthEncodedInteger(out, uint64(len(st.long[i])))
			out = append(out, st.long[i]...)
		case temporalType(tp):
			text := temporalText(tp, vals[spans[i][0]:spans[i][1]])
			out[typeAt+2*i], out[typeAt+2*i+1] = mysql.MYSQL_TYPE_STRING, 0
			out = mysql.AppendLengthEncodedInteger(out, uint64(len(text)))
			out = append(out, text...)
		default:
			out = append(out, vals[spans[i][0]:spans[i][1]]...)
		}
	}
	return out, nil
}

func temporalType(tp byte) bool {
	switch tp {
	case mysql.MYSQL_TYPE_DATE, mysql.MYSQL_TYPE_NEWDATE, mysql.MYSQL_TYPE_DATETIME, mysql.MYSQL_TYPE_TIMESTAMP, mysql.MYSQL_TYPE_TIME:
		return true
	}
	return false
}

// lenencType reports the parameter types sent as length-encoded strings.
func lenencType(tp byte) bool {
	switch tp {
	case mysql.MYSQL_TYPE_DECIMAL, mysql.MYSQL_TYPE_NEWDECIMAL, mysql.MYSQL_TYPE_VARCHAR, mysql.MYSQL_TYPE_BIT,
		mysql.MYSQL_TYPE_ENUM, mysql.MYSQL_TYPE_SET, mysql.MYSQL_TYPE_TINY_BLOB, mysql.MYSQL_TYPE_MEDIUM_BLOB,
		mysql.MYSQL_TYPE_LONG_BLOB, mysql.MYSQL_TYPE_BLOB, mysql.MYSQL_TYPE_VAR_STRING, mysql.MYSQL_TYPE_STRING,
		mysql.MYSQL_TYPE_GEOMETRY:
		return true
	}
	return false
}

// valueSize measures one binary-protocol parameter value at the start of b.
func valueSize(tp byte, b []byte) (size int, temporal, ok bool) {
	fixed := 0
	switch tp {
	case mysql.MYSQL_TYPE_TINY:
		fixed = 1
	case mysql.MYSQL_TYPE_SHORT, mysql.MYSQL_TYPE_YEAR:
		fixed = 2
	case mysql.MYSQL_TYPE_INT24, mysql.MYSQL_TYPE_LONG, mysql.MYSQL_TYPE_FLOAT:
		fixed = 4
	case mysql.MYSQL_TYPE_LONGLONG, mysql.MYSQL_TYPE_DOUBLE:
		fixed = 8
	}
	switch {
	case fixed > 0:
		return fixed, false, len(b) >= fixed
	case temporalType(tp):
		if len(b) < 1 {
			return 0, false, false
		}
		// Only the lengths clients send (MariaDB would read past a value of
		// any other length).
		l := int(b[0])
		ok := l == 0
		if tp == mysql.MYSQL_TYPE_TIME {
			ok = ok || l == 8 || l == 12
		} else {
			ok = ok || l == 4 || l == 7 || l == 11
		}
		return 1 + l, true, ok && len(b) >= 1+l
	case lenencType(tp):
		l, n := lenenc(b)
		if n == 0 || uint64(len(b)-n) < l {
			return 0, false, false
		}
		return n + int(l), false, true
	}
	return 0, false, false // unknown type: MariaDB refuses it too
}

// lenenc reads a length-encoded integer; n = 0 when b is too short or holds
// the NULL marker (go-mysql's reader indexes past short input).
func lenenc(b []byte) (v uint64, n int) {
	if len(b) == 0 {
		return 0, 0
	}
	switch b[0] {
	case 0xfb, 0xff:
		return 0, 0
	case 0xfc:
		n = 3
	case 0xfd:
		n = 4
	case 0xfe:
		n = 9
	default:
		return uint64(b[0]), 1
	}
	if len(b) < n {
		return 0, 0
	}
	for i := n - 1; i >= 1; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v, n
}

// temporalText prints a binary DATE / DATETIME / TIMESTAMP / TIME value
// (length byte included) as MySQL's canonical text.
func temporalText(tp byte, v []byte) []byte {
	l, b := int(v[0]), v[1:]
	var out []byte
	if tp == mysql.MYSQL_TYPE_TIME {
		var neg bool
		var days uint32
		var h, m, s byte
		var us uint32
		if l >= 8 {
			neg, days, h, m, s = b[0] == 1, binary.LittleEndian.Uint32(b[1:5]), b[5], b[6], b[7]
		}
		if l == 12 {
			us = binary.LittleEndian.Uint32(b[8:12])
		}
		if neg {
			out = append(out, '-')
		}
		out = fmt.Appendf(out, "%02d:%02d:%02d", uint64(days)*24+uint64(h), m, s)
		if us != 0 {
			out = fmt.Appendf(out, ".%06d", us)
		}
		return out
	}
	var y uint16
	var mo, d, h, mi, s byte
	var us uint32
	if l >= 4 {
		y, mo, d = binary.LittleEndian.Uint16(b[0:2]), b[2], b[3]
	}
	if l >= 7 {
		h, mi, s = b[4], b[5], b[6]
	}
	if l == 11 {
		us = binary.LittleEndian.Uint32(b[7:11])
	}
	out = fmt.Appendf(out, "%04d-%02d-%02d", y, mo, d)
	if tp == mysql.MYSQL_TYPE_DATE || tp == mysql.MYSQL_TYPE_NEWDATE {
		return out
	}
	out = fmt.Appendf(out, " %02d:%02d:%02d", h, mi, s)
	if us != 0 {
		out = fmt.Appendf(out, ".%06d", us)
	}
	return out
}
