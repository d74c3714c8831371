package proxy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// execPkt builds a COM_STMT_EXECUTE payload: flags, null bitmap, bound flag,
// types (when bound) and raw values.
func execPkt(id uint32, flags byte, nulls []byte, bound bool, types, vals []byte) []byte {
	b := []byte{comStmtExecute}
	b = binary.LittleEndian.AppendUint32(b, id)
	b = append(b, flags)
	b = binary.LittleEndian.AppendUint32(b, 1)
	b = append(b, nulls...)
	if bound {
		b = append(b, 1)
		b = append(b, types...)
	} else {
		b = append(b, 0)
	}
	return append(b, vals...)
}

func le64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

func TestStmtWireReusesBoundTypes(t *testing.T) {
	w := newStmtWire(1 << 20)
	w.prepared(7, 2)
	types := []byte{mysql.MYSQL_TYPE_LONGLONG, 0, mysql.MYSQL_TYPE_LONGLONG, 0}
	first := execPkt(7, 0, []byte{0}, true, types, append(le64(42), le64(2)...))
	out, reply := w.command(first)
	if reply != nil || !bytes.Equal(out, first) {
		t.Fatalf("a plain bound EXECUTE must pass unchanged: %v %x", reply, out)
	}
	again := execPkt(7, 0, []byte{0}, false, nil, append(le64(42), le64(3)...))
	out, reply = w.command(again)
	want := execPkt(7, 0, []byte{0}, true, types, append(le64(42), le64(3)...))
	if reply != nil || !bytes.Equal(out, want) {
		t.Fatalf("re-EXECUTE without types:\n got %x %v\nwant %x", out, reply, want)
	}
}

func TestStmtWireTemporalAndLongData(t *testing.T) {
	w := newStmtWire(1 << 20)
	w.prepared(1, 3)
	// Long data for parameter 0 in two pieces.
	for _, piece := range []string{"ab", "c"} {
		ld := binary.LittleEndian.AppendUint16(binary.LittleEndian.AppendUint32([]byte{comStmtSendLongData}, 1), 0)
		if out, reply := w.command(append(ld, piece...)); out != nil || reply != nil {
			t.Fatalf("SEND_LONG_DATA must be consumed silently: %x %v", out, reply)
		}
	}
	types := []byte{mysql.MYSQL_TYPE_BLOB, 0, mysql.MYSQL_TYPE_DATETIME, 0, mysql.MYSQL_TYPE_TIME, 0}
	dtv := []byte{11, 0xea, 0x07, 12, 31, 23, 59, 58, 0x20, 0xa1, 0x07, 0} // 2026-12-31 23:59:58.500000
	tmv := []byte{8, 1, 2, 0, 0, 0, 3, 4, 5}                               // -(2 days) 03:04:05
	pkt := execPkt(1, 1 /* cursor */, []byte{0}, true, types, append(append([]byte{}, dtv...), tmv...))
	out, reply := w.command(pkt)
	if reply != nil {
		t.Fatal(reply)
	}
	wantTypes := []byte{mysql.MYSQL_TYPE_BLOB, 0, mysql.MYSQL_TYPE_STRING, 0, mysql.MYSQL_TYPE_STRING, 0}
	var vals []byte
	for _, v := range []string{"abc", "2026-12-31 23:59:58.500000", "-51:04:05"} {
		vals = append(vals, byte(len(v)))
		vals = append(vals, v...)
	}
	if want := execPkt(1, 0, []byte{0}, true, wantTypes, vals); !bytes.Equal(out, want) {
		t.Fatalf("\n got %q\nwant %q", out, want)
	}
	// Long data is consumed by the EXECUTE: the next one must carry values.
	if _, reply := w.command(execPkt(1, 0, []byte{0}, false, nil, nil)); reply == nil || reply.Code != mysql.ER_WRONG_ARGUMENTS {
		t.Fatalf("EXECUTE without values after the long data was used: %v, want 1210", reply)
	}
}

func TestStmtWireRefusals(t *testing.T) {
	w := newStmtWire(64)
	w.prepared(1, 1)
	longlong := []byte{mysql.MYSQL_TYPE_LONGLONG, 0}
	for name, c := range map[string]struct {
		pkt  []byte
		code uint16
	}{
		"short header":     {[]byte{comStmtExecute, 1, 0}, 1835},
		"unknown id":       {execPkt(9, 0, []byte{0}, true, longlong, le64(1)), mysql.ER_UNKNOWN_STMT_HANDLER},
		"never bound":      {execPkt(1, 0, []byte{0}, false, nil, le64(1)), mysql.ER_WRONG_ARGUMENTS},
		"truncated value":  {execPkt(1, 0, []byte{0}, true, longlong, le64(1)[:5]), mysql.ER_WRONG_ARGUMENTS},
		"unknown type":     {execPkt(1, 0, []byte{0}, true, []byte{0x77, 0}, le64(1)), mysql.ER_WRONG_ARGUMENTS},
		"bad date length":  {execPkt(1, 0, []byte{0}, true, []byte{mysql.MYSQL_TYPE_DATE, 0}, []byte{5, 1, 2, 3, 4, 5}), mysql.ER_WRONG_ARGUMENTS},
		"lenenc too long":  {execPkt(1, 0, []byte{0}, true, []byte{mysql.MYSQL_TYPE_STRING, 0}, []byte{0xfc, 0xff, 0xff, 'x'}), mysql.ER_WRONG_ARGUMENTS},
		"reset unknown id": {binary.LittleEndian.AppendUint32([]byte{comStmtReset}, 5), mysql.ER_UNKNOWN_STMT_HANDLER},
	} {
		out, reply := w.command(c.pkt)
		if out != nil || reply == nil || reply.Code != c.code {
			t.Errorf("%s: got %x %v, want errno %d", name, out, reply, c.code)
		}
	}
}

// TestStmtWireLongDataLimits: long data as MariaDB 10.11 takes it (measured
// against it in integration's TestHostileMaxPacket): one parameter may hold
// up to max_allowed_packet bytes; beyond that, or for a parameter the
// statement does not have, every EXECUTE fails (1105 / 1210, MariaDB's
// words) until COM_STMT_RESET; the sum over parameters is bounded by
// maxLongTotal x max_allowed_packet (1153, once).
func TestStmtWireLongDataLimits(t *testing.T) {
	const max = 64
	blob := []byte{mysql.MYSQL_TYPE_BLOB, 0}
	longData := func(param uint16, n int) []byte {
		b := binary.LittleEndian.AppendUint16(binary.LittleEndian.AppendUint32([]byte{comStmtSendLongData}, 1), param)
		return append(b, bytes.Repeat([]byte{'x'}, n)...)
	}
	execLong := execPkt(1, 0, []byte{0}, true, append(append([]byte{}, blob...), blob...), nil) // both values from long data
	reset := binary.LittleEndian.AppendUint32([]byte{comStmtReset}, 1)
	w := newStmtWire(max)
	w.prepared(1, 2)
	run := func(name string, want uint16, pkts ...[]byte) {
		t.Helper()
		for _, p := range pkts[:len(pkts)-1] {
			if out, reply := w.command(p); out != nil || reply != nil {
				t.Fatalf("%s: long data answered: %x %v", name, out, reply)
			}
		}
		out, reply := w.command(pkts[len(pkts)-1])
		switch {
		case want == 0 && (reply != nil || out == nil):
			t.Errorf("%s: %v, want the EXECUTE to go through", name, reply)
		case want != 0 && (reply == nil || reply.Code != want):
			t.Errorf("%s: %x %v, want errno %d", name, out, reply, want)
		}
	}
	run("exactly max_allowed_packet in two pieces", 0, longData(0, 40), longData(0, max-40), longData(1, max), execLong)
	run("one byte more", mysql.ER_UNKNOWN_ERROR, longData(0, 40), longData(0, max-39), longData(1, 1), execLong)
	run("still failed", mysql.ER_UNKNOWN_ERROR, longData(0, 1), longData(1, 1), execLong)
	if _, reply := w.command(reset); reply != nil {
		t.Fatal(reply)
	}
	run("after COM_STMT_RESET", 0, longData(0, 1), longData(1, 1), execLong)
	run("a parameter the statement lacks", mysql.ER_WRONG_ARGUMENTS, longData(0, 1), longData(2, 1), longData(1, 1), execLong)
	if _, reply := w.command(reset); reply != nil {
		t.Fatal(reply)
	}
	if _, reply := w.command(execLong); reply == nil || reply.Code != mysql.ER_WRONG_ARGUMENTS || reply.Message != "Incorrect arguments to mysqld_stmt_execute" {
		t.Errorf("EXECUTE without values after the reset: %v", reply)
	}
	w = newStmtWire(max)
	w.prepared(1, 6)
	blobs := bytes.Repeat(blob, 6)
	var pkts [][]byte
	for i := range 6 {
		pkts = append(pkts, longData(uint16(i), max))
	}
	run("more long data than maxLongTotal x max", mysql.ER_NET_PACKET_TOO_LARGE, append(pkts, execPkt(1, 0, []byte{0}, true, blobs, nil))...)
	run("the next one starts afresh", 0, append(pkts[:4], execPkt(1, 0, []byte{0x30}, true, blobs, nil))...)
}

// FuzzStmtWire: no input panics, and a rewritten EXECUTE is a fixed point
// (normalising it again changes nothing), i.e. go-mysql gets a packet with
// the bound flag set and every value where its types say.
func FuzzStmtWire(f *testing.F) {
	f.Add(uint8(2), execPkt(1, 0, []byte{0}, true, []byte{8, 0, 8, 0}, append(le64(1), le64(2)...)))
	f.Add(uint8(2), execPkt(1, 0, []byte{0}, false, nil, append(le64(1), le64(2)...)))
	f.Add(uint8(1), execPkt(1, 1, []byte{0}, true, []byte{12, 0}, []byte{11, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}))
	f.Add(uint8(3), []byte{comStmtSendLongData, 1, 0, 0, 0, 1, 0, 'x'})
	f.Fuzz(func(t *testing.T, params uint8, pkt []byte) {
		if len(pkt) == 0 {
			return
		}
		pkt[0] = []byte{comStmtExecute, comStmtSendLongData, comStmtClose, comStmtReset}[int(pkt[0])%4]
		w := newStmtWire(1 << 16)
		w.prepared(1, int(params))
		w.stmts[1].types = make([]byte, 2*int(params)) // as if bound before (type DECIMAL: lenenc)
		out, reply := w.command(pkt)
		if out == nil || reply != nil || pkt[0] != comStmtExecute || params == 0 {
			return
		}
		if out[5] != 0 || out[10+(int(params)+7)/8] != 1 {
			t.Fatalf("rewritten EXECUTE keeps flags %x or bound flag %x", out[5], out[10+(int(params)+7)/8])
		}
		again, reply := w.command(out)
		if reply != nil || !bytes.Equal(again, out) {
			t.Fatalf("not a fixed point: %x -> %x (%v)", out, again, reply)
		}
	})
}

func TestPatchGreeting(t *testing.T) {
	caps := uint32(mysql.CLIENT_PROTOCOL_41 | mysql.CLIENT_PLUGIN_AUTH | mysql.CLIENT_SESSION_TRACK)
	body := []byte{10}
	body = append(body, "11.4.0-convoy\x00"...)
	body = binary.LittleEndian.AppendUint32(body, 7) // connection id
	body = append(body, "12345678"...)               // salt part 1
	body = append(body, 0)                           // filler
	body = binary.LittleEndian.AppendUint16(body, uint16(caps))
	body = append(body, 45, 0, 0) // charset, status (go-mysql sends 0)
	body = binary.LittleEndian.AppendUint16(body, uint16(caps>>16))
	body = append(body, 21, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0) // auth data length, reserved
	p := appendPackets(nil, body, 0)
	patchGreeting(p, mysql.CLIENT_FOUND_ROWS|mysql.CLIENT_MULTI_RESULTS, mysql.CLIENT_SESSION_TRACK, mysql.SERVER_STATUS_AUTOCOMMIT)
	low := 4 + 1 + len("11.4.0-convoy\x00") + 4 + 8 + 1
	got := uint32(binary.LittleEndian.Uint16(p[low:])) | uint32(binary.LittleEndian.Uint16(p[low+5:]))<<16
	if want := caps&^mysql.CLIENT_SESSION_TRACK | mysql.CLIENT_FOUND_ROWS | mysql.CLIENT_MULTI_RESULTS; got != want {
		t.Fatalf("capabilities %#x, want %#x", got, want)
	}
	if p[low+2] != 45 || binary.LittleEndian.Uint16(p[low+3:]) != mysql.SERVER_STATUS_AUTOCOMMIT {
		t.Fatalf("charset %d / status %#x, want 45 / autocommit", p[low+2], binary.LittleEndian.Uint16(p[low+3:]))
	}
}

// TestPrepareColumnsRewrite: the PREPARE response go-mysql writes (one
// packet per Write, as its packet.Conn does) gets the backend's column
// definitions, also when it has 65,535 parameters and columns and so goes
// out in many writeChunk pieces; sequence numbers (wrapping at 256) are
// kept; parameter definitions become MariaDB's; an error or a response
// with another column count passes unchanged.
func TestPrepareColumnsRewrite(t *testing.T) {
	placeholder := (&mysql.Field{}).Dump()
	param := (&mysql.Field{Name: []byte("?")}).Dump()
	eof := []byte{0xfe, 0, 0, 2, 0}
	okPkt := func(cols, params int) []byte {
		b := []byte{0, 7, 0, 0, 0}
		b = binary.LittleEndian.AppendUint16(b, uint16(cols))
		b = binary.LittleEndian.AppendUint16(b, uint16(params))
		return append(b, 0, 0, 0)
	}
	// response lists the payloads of a PREPARE OK response.
	response := func(params int, cols [][]byte, param []byte) [][]byte {
		out := [][]byte{okPkt(len(cols), params)}
		if params > 0 {
			for range params {
				out = append(out, param)
			}
			out = append(out, eof)
		}
		if len(cols) > 0 {
			out = append(out, cols...)
			out = append(out, eof)
		}
		return out
	}
	// send writes payloads through a clientConn as go-mysql does and
	// returns what reached the socket.
	send := func(cols [][]byte, payloads [][]byte) []byte {
		rc := &recordConn{}
		l := &clientConn{Conn: rc, stmts: newStmtWire(1 << 20)}
		if cols != nil {
			l.setPrepareColumns(cols)
		}
		seq := uint8(1)
		for _, p := range payloads {
			if _, err := l.Write(appendPackets(nil, p, seq)); err != nil {
				t.Fatal(err)
			}
			seq++
		}
		if err := l.endCommand(); err != nil {
			t.Fatal(err)
		}
		return rc.out.Bytes()
	}
	frame := func(payloads [][]byte) []byte {
		var b []byte
		for i, p := range payloads {
			b = appendPackets(b, p, byte(i+1))
		}
		return b
	}
	named := func(n int) [][]byte {
		cols := make([][]byte, n)
		for i := range cols {
			cols[i] = (&mysql.Field{Name: []byte(fmt.Sprintf("c%d", i)), Type: mysql.MYSQL_TYPE_LONGLONG}).Dump()
		}
		return cols
	}
	placeholders := func(n int) [][]byte {
		cols := make([][]byte, n)
		for i := range cols {
			cols[i] = placeholder
		}
		return cols
	}
	for _, c := range []struct{ params, cols int }{{1, 2}, {0, 3}, {2, 0}, {65535, 1}, {2, 65535}, {65535, 65535}} {
		cols := named(c.cols)
		got := send(cols, response(c.params, placeholders(c.cols), param))
		if want := frame(response(c.params, cols, paramDefinition)); !bytes.Equal(got, want) {
			t.Errorf("%d params, %d columns: rewritten response differs (%d bytes, want %d)", c.params, c.cols, len(got), len(want))
		}
		if c.params+c.cols > 60000 && len(got) < 2*writeChunk {
			t.Errorf("%d params, %d columns: case too small to be sent in pieces", c.params, c.cols)
		}
	}
	// A count mismatch or an error response is left alone.
	resp := response(1, placeholders(2), param)
	if got := send(named(1), resp); !bytes.Equal(got, frame(resp)) {
		t.Error("rewrote a response with another column count")
	}
	errResp := [][]byte{{0xff, 0x28, 0x04, '#', '4', '2', '0', '0', '0', 'x'}}
	if got := send(named(2), errResp); !bytes.Equal(got, frame(errResp)) {
		t.Error("rewrote an error response")
	}
	// The next command's response is not touched.
	rc := &recordConn{}
	l := &clientConn{Conn: rc, stmts: newStmtWire(1 << 20)}
	l.setPrepareColumns(named(1))
	_ = l.endCommand() // PREPARE failed before go-mysql wrote anything
	_, _ = l.Write(appendPackets(nil, okPkt(1, 0), 1))
	_, _ = l.Write(appendPackets(nil, placeholder, 2))
	_ = l.endCommand()
	if want := frame([][]byte{okPkt(1, 0), placeholder}); !bytes.Equal(rc.out.Bytes(), want) {
		t.Error("a later response was rewritten")
	}
}

// TestClientPacketLimit: a logical packet is refused when it reaches the
// limit (MariaDB refuses payload >= max_allowed_packet), with 1153 numbered
// after the physical packet that reached it, and the refused packet's
// remaining parts are read (so a client still writing them gets the error,
// not a reset); one byte less passes through whole.
func TestClientPacketLimit(t *testing.T) {
	const part = 0xffffff
	for _, c := range []struct {
		name    string
		max     int
		sizes   []int // physical packet sizes of one logical packet
		wantSeq int   // -1: passes
	}{
		{"one byte under", 100, []int{99}, -1},
		{"at the limit", 100, []int{100}, 1},
		{"first part over", 100, []int{part, 5}, 1},
		{"second part reaches it", part + 10, []int{part, 10}, 2},
		{"second part under it", part + 10, []int{part, 9}, -1},
		{"second of three parts", part + 10, []int{part, part, 3}, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			client, server := net.Pipe()
			defer client.Close()
			l := newClientConn(server, c.max)
			var sent []byte
			for i, n := range c.sizes {
				sent = append(sent, byte(n), byte(n>>8), byte(n>>16), byte(i))
				sent = append(sent, bytes.Repeat([]byte{comQueryByte}, n)...)
			}
			// net.Pipe has no buffer: the client writes and reads at once,
			// as over TCP.
			writeErr := make(chan error, 1)
			go func() { _, err := client.Write(sent); writeErr <- err }()
			reply := make(chan []byte, 1)
			go func() {
				_ = client.SetReadDeadline(time.Now().Add(5 * time.Second))
				hdr := make([]byte, 4)
				if _, err := io.ReadFull(client, hdr); err != nil {
					reply <- nil
					return
				}
				body := make([]byte, int(hdr[0])|int(hdr[1])<<8|int(hdr[2])<<16)
				_, _ = io.ReadFull(client, body)
				reply <- append(hdr, body...)
			}()
			got, err := io.ReadAll(io.LimitReader(readerFunc(l.Read), int64(len(sent))))
			if c.wantSeq < 0 {
				if err != nil || !bytes.Equal(got, sent) {
					t.Fatalf("packet under the limit: %v, %d of %d bytes passed", err, len(got), len(sent))
				}
				return
			}
			if !errors.Is(err, errPacketTooLarge) {
				t.Fatalf("read: %v, want errPacketTooLarge", err)
			}
			r := <-reply
			if len(r) < 7 {
				t.Fatalf("no error packet: %q", r)
			}
			hdr, body := r[:4], r[4:]
			if int(hdr[3]) != c.wantSeq || binary.LittleEndian.Uint16(body[1:]) != mysql.ER_NET_PACKET_TOO_LARGE ||
				string(body[3:]) != "#08S01Got a packet bigger than 'max_allowed_packet' bytes" {
				t.Fatalf("refusal: seq %d %q, want seq %d and MariaDB's 1153", hdr[3], body, c.wantSeq)
			}
			select {
			case err := <-writeErr:
				if err != nil {
					t.Fatalf("the client's write of the refused packet failed: %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the rest of the refused packet was not read: the client's write blocks")
			}
		})
	}
}

const comQueryByte = 0x03

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }
