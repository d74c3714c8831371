package backend

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/convoy-im/convoy/internal/testsvc"
)

// scriptedServer accepts one connection on a loopback port and runs serve
// on it (closing it afterwards); it returns the address.
func scriptedServer(t *testing.T, serve func(c net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		serve(c)
	}()
	return ln.Addr().String()
}

// dialWire connects a wire to addr, with the given read and write timeouts.
func dialWire(t *testing.T, addr string, readTimeout, writeTimeout time.Duration) *wire {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return newWire(nc, readTimeout, writeTimeout)
}

// fakeServer accepts one connection and answers every command packet it
// reads with the next reply of replies (raw bytes, headers included). A nil
// reply means "say nothing" (a stalled server).
func fakeServer(t *testing.T, replies ...[]byte) *wire {
	t.Helper()
	addr := scriptedServer(t, func(c net.Conn) {
		for _, r := range replies {
			var h [4]byte
			if _, err := io.ReadFull(c, h[:]); err != nil {
				return
			}
			body := make([]byte, int(h[0])|int(h[1])<<8|int(h[2])<<16)
			if _, err := io.ReadFull(c, body); err != nil {
				return
			}
			if r == nil {
				time.Sleep(5 * time.Second)
				return
			}
			if _, err := c.Write(r); err != nil {
				return
			}
		}
		io.Copy(io.Discard, c)
	})
	return dialWire(t, addr, 300*time.Millisecond, time.Second)
}

// pkt frames payload as one packet with sequence number seq.
func pkt(seq byte, payload ...byte) []byte {
	n := len(payload)
	return append([]byte{byte(n), byte(n >> 8), byte(n >> 16), seq}, payload...)
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// TestWireMalformedReplies: whatever a server sends, the reader returns an
// error (a protocol error for broken framing), never panics or hangs.
func TestWireMalformedReplies(t *testing.T) {
	colDef := []byte{3, 'd', 'e', 'f', 0, 0, 0, 1, 'a', 0, 0x0c, 0x3f, 0, 1, 0, 0, 0, 3, 0, 0, 0, 0, 0}
	eof := []byte{0xfe, 0, 0, 2, 0}
	cases := []struct {
		name  string
		reply []byte
	}{
		{"empty packet", pkt(1)},
		{"short OK", pkt(1, 0x00, 0x01)},
		{"OK with truncated lenenc", pkt(1, 0x00, 0xfc, 0x01)},
		{"short error", pkt(1, 0xff, 0x01)},
		{"wrong sequence", pkt(3, 0x00, 0, 0, 2, 0, 0, 0)},
		{"bare OK header", pkt(1, 0x00)},
		{"column count without columns", pkt(1, 0xfc, 0xff, 0xff)},
		{"column count beyond int32", pkt(1, 0xfe, 0, 0, 0, 0, 1, 0, 0, 0)},
		{"column count with trailing bytes", pkt(1, 1, 1)},
		{"short column definition", cat(pkt(1, 1), pkt(2, 3, 'd', 'e', 'f', 0))},
		{"columns without EOF", cat(pkt(1, 1), pkt(2, colDef...), pkt(3, 1, 'x'))},
		{"empty row", cat(pkt(1, 1), pkt(2, colDef...), pkt(3, eof...), pkt(4))},
		{"stream ends mid-packet", cat(pkt(1, 1), pkt(2, colDef...), pkt(3, eof...), []byte{9, 0, 0, 4, 1})},
		{"stream ends after header", []byte{1, 0}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := fakeServer(t, c.reply)
			done := make(chan error, 1)
			go func() { _, err := w.query("SELECT a"); done <- err }()
			select {
			case err := <-done:
				if err == nil {
					t.Fatal("malformed reply accepted")
				}
				if IsServerError(err) {
					t.Fatalf("malformed reply taken for a server error: %v", err)
				}
			case <-time.After(3 * time.Second):
				t.Fatal("reader hung on a malformed reply")
			}
		})
	}
}

// TestWireReplies decodes well-formed replies as MySQL defines them.
func TestWireReplies(t *testing.T) {
	colDef := []byte{3, 'd', 'e', 'f', 2, 'd', 'b', 1, 't', 1, 't', 1, 'a', 1, 'a', 0x0c, 0x3f, 0, 1, 0, 0, 0, 3, 0, 0, 0, 0, 0}
	w := fakeServer(t,
		pkt(1, 0x00, 0xfc, 0x2c, 0x01, 7, 0x03, 0x00, 0x02, 0x00),                  // OK: 300 rows, id 7, status IN_TRANS|AUTOCOMMIT, 2 warnings
		pkt(1, 0xff, 0x7a, 0x04, '#', '4', '2', 'S', '0', '2', 'n', 'o', 'p', 'e'), // error 1146
		cat(pkt(1, 1), pkt(2, colDef...), pkt(3, 0xfe, 0, 0, 2, 0), pkt(4, 1, '5'), pkt(5, 0xfb), pkt(6, 0xfe, 1, 0, 0, 0)),
	)
	r, err := w.query("UPDATE x")
	if err != nil {
		t.Fatal(err)
	}
	if r.AffectedRows != 300 || r.InsertId != 7 || r.Warnings != 2 || w.status&mysql.SERVER_STATUS_IN_TRANS == 0 {
		t.Fatalf("OK decoded as %+v, status %x", r, w.status)
	}
	_, err = w.query("SELECT * FROM nope")
	var me *mysql.MyError
	if !errors.As(err, &me) || me.Code != 1146 || me.State != "42S02" || me.Message != "nope" {
		t.Fatalf("error decoded as %#v", err)
	}
	r, err = w.query("SELECT a FROM t")
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Fields) != 1 || string(r.Fields[0].Name) != "a" || string(r.Fields[0].Schema) != "db" || r.Fields[0].Type != mysql.MYSQL_TYPE_LONG {
		t.Fatalf("field decoded as %+v", r.Fields)
	}
	if len(r.RowDatas) != 2 || !bytes.Equal(r.RowDatas[0], []byte{1, '5'}) || !bytes.Equal(r.RowDatas[1], []byte{0xfb}) {
		t.Fatalf("rows %q", r.RowDatas)
	}
	if cap(r.RowDatas[0]) != len(r.RowDatas[0]) {
		t.Fatal("a row shares capacity with the next: an append would overwrite it")
	}
	if r.Warnings != 1 || w.status&mysql.SERVER_STATUS_IN_TRANS != 0 {
		t.Fatalf("final EOF: warnings %d status %x", r.Warnings, w.status)
	}
}

// TestWireWideReplies: every count the protocol allows is read: a PREPARE
// reply with 65,535 parameters and 65,535 columns (the counts are 2-byte
// fields; sequence numbers wrap), and a result set with 70,000 columns (a
// SELECT list has no 4096-column limit in MariaDB).
func TestWireWideReplies(t *testing.T) {
	colDef := []byte{3, 'd', 'e', 'f', 0, 0, 0, 1, 'a', 0, 0x0c, 0x3f, 0, 1, 0, 0, 0, 3, 0, 0, 0, 0, 0}
	eof := []byte{0xfe, 0, 0, 2, 0}
	var prep []byte
	seq := byte(1)
	add := func(b *[]byte, payload []byte) {
		*b = append(*b, pkt(seq, payload...)...)
		seq++
	}
	add(&prep, []byte{0, 9, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0})
	for range 65535 {
		add(&prep, []byte{3, 'd', 'e', 'f', 0, 0, 0, 1, '?', 0, 0x0c, 0x3f, 0, 0, 0, 0, 0, 0xfd, 0x80, 0, 0, 0, 0})
	}
	add(&prep, eof)
	for range 65535 {
		add(&prep, colDef)
	}
	add(&prep, eof)
	var wide []byte
	seq = 1
	add(&wide, []byte{0xfd, 0x70, 0x11, 0x01}) // 70,000
	for range 70000 {
		add(&wide, colDef)
	}
	add(&wide, eof)
	add(&wide, []byte{1, '1'})
	add(&wide, eof)
	w := fakeServer(t, prep, wide)
	w.readTimeout = 5 * time.Second
	st, err := w.prepare("SELECT ...")
	if err != nil {
		t.Fatalf("PREPARE with 65535 parameters and columns: %v", err)
	}
	if st.id != 9 || st.params != 65535 || len(st.columns) != 65535 || string(st.columns[65534].Name) != "a" {
		t.Fatalf("PREPARE decoded as id %d, %d params, %d columns", st.id, st.params, len(st.columns))
	}
	r, err := w.query("SELECT ...")
	if err != nil {
		t.Fatalf("result with 70000 columns: %v", err)
	}
	if len(r.Fields) != 70000 || len(r.RowDatas) != 1 || string(r.Fields[69999].Name) != "a" {
		t.Fatalf("result decoded as %d columns, %d rows", len(r.Fields), len(r.RowDatas))
	}
}

// TestWireStalledServer: a server that accepts the statement and never
// answers fails the read within the read timeout (300 ms here).
func TestWireStalledServer(t *testing.T) {
	w := fakeServer(t, nil)
	start := time.Now()
	_, err := w.query("SELECT SLEEP(100)")
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("stalled server: %v", err)
	}
	if d := time.Since(start); d < 200*time.Millisecond || d > 2*time.Second {
		t.Fatalf("timed out after %s, want about 300ms", d)
	}
}

// TestWireRefusedCommand: a server that refuses a command after its header
// (1153, as MariaDB does above max_allowed_packet) and closes while the rest
// is still coming resets the connection under the write; the caller must get
// the server's error, not the reset.
func TestWireRefusedCommand(t *testing.T) {
	addr := scriptedServer(t, func(c net.Conn) {
		io.ReadFull(c, make([]byte, 4))
		c.Write(pkt(1, append([]byte{0xff, 0x81, 0x04}, "#08S01Got a packet bigger than 'max_allowed_packet' bytes"...)...))
		time.Sleep(50 * time.Millisecond)
		// Closing with unread bytes queued: the kernel answers with a reset.
	})
	// The write's deadline is far beyond what building and sending 40 MiB
	// takes even under the race detector on a loaded machine (about 5 s on
	// 2 cores): an answer within half of it came from the refusal, not
	// from a write that waited for its deadline.
	const writeTimeout = 60 * time.Second
	w := dialWire(t, addr, 5*time.Second, writeTimeout)
	start := time.Now()
	_, err := w.query("SELECT '" + strings.Repeat("x", 40<<20) + "'")
	var me *mysql.MyError
	if !errors.As(err, &me) || me.Code != mysql.ER_NET_PACKET_TOO_LARGE || me.State != "08S01" {
		t.Fatalf("refused command: %v, want the server's 1153", err)
	}
	if !w.failed {
		t.Fatal("a connection whose write failed is not marked for closing")
	}
	if d := time.Since(start); d > writeTimeout/2 {
		t.Fatalf("took %s: the write waited for its deadline", d)
	}
}

// TestWireLocalInfile: a server asking for a local file gets an empty one
// (no byte of any file) and the statement fails.
func TestWireLocalInfile(t *testing.T) {
	got := make(chan []byte, 1)
	addr := scriptedServer(t, func(c net.Conn) {
		c.Read(make([]byte, 256)) // the query
		c.Write(pkt(1, append([]byte{0xfb}, "/etc/passwd"...)...))
		ans := make([]byte, 4)
		io.ReadFull(c, ans)
		got <- ans
		c.Write(pkt(3, 0x00, 0, 0, 2, 0, 0, 0))
	})
	w := dialWire(t, addr, time.Second, time.Second)
	_, err := w.query("LOAD DATA LOCAL INFILE '/etc/passwd' INTO TABLE t")
	if err == nil || !strings.Contains(err.Error(), "local file") {
		t.Fatalf("LOCAL INFILE request: %v", err)
	}
	if ans := <-got; !bytes.Equal(ans, []byte{0, 0, 0, 2}) {
		t.Fatalf("answer to the file request: %v, want an empty packet", ans)
	}
}

func TestSplitPackets(t *testing.T) {
	for _, n := range []int{maxPayload, maxPayload + 1, 2 * maxPayload} {
		p := bytes.Repeat([]byte{'x'}, n)
		out := splitPackets([]byte("pre"), p)
		if string(out[:3]) != "pre" {
			t.Fatalf("n=%d: prefix lost", n)
		}
		out = out[3:]
		var joined []byte
		seq := byte(0)
		for rest := out; len(rest) > 0; seq++ {
			l := int(rest[0]) | int(rest[1])<<8 | int(rest[2])<<16
			if rest[3] != seq {
				t.Fatalf("n=%d: packet %d has sequence %d", n, seq, rest[3])
			}
			joined = append(joined, rest[4:4+l]...)
			last := l < maxPayload
			rest = rest[4+l:]
			if last && len(rest) > 0 {
				t.Fatalf("n=%d: bytes after the final short packet", n)
			}
		}
		if !bytes.Equal(joined, p) || int(seq) != n/maxPayload+1 {
			t.Fatalf("n=%d: %d packets, payload intact %v", n, seq, bytes.Equal(joined, p))
		}
	}
}

// realConn is a pooled connection to a MariaDB of the test's own.
func realConn(t *testing.T) *Conn {
	t.Helper()
	mgr := newTestManager(t, testsvc.StartMariaDB(t), Options{})
	c, err := mgr.Acquire(context.Background(), "ds0", false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Release)
	return c
}

// TestWirePreparedLongArgs: string and []byte arguments above longArg go
// as COM_STMT_SEND_LONG_DATA, so a server with max_allowed_packet = 1 MiB
// takes two values of exactly 1 MiB in one EXECUTE (as MariaDB takes them
// from a client that sent them as long data), and one beyond its limit
// fails with the server's error and leaves the statement usable.
func TestWirePreparedLongArgs(t *testing.T) {
	const limit = 1 << 20
	mgr := newTestManager(t, testsvc.StartMariaDB(t, testsvc.WithMariaDBArgs(fmt.Sprintf("--max-allowed-packet=%d", limit))), Options{})
	c, err := mgr.Acquire(context.Background(), "ds0", false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Release)
	a := bytes.Repeat([]byte{0, 'a', 0xff}, limit/3+1)[:limit]
	b := strings.Repeat("b", limit)
	sql := "SELECT CONCAT_WS('|', LENGTH(?), MD5(?), ?, LENGTH(?))"
	want := fmt.Sprintf("%d|%x|7|%d", limit, md5.Sum(a), limit)
	for round := 0; round < 2; round++ {
		r, err := c.ExecPrepared(sql, []any{a, a, int64(7), b})
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		vals, err := r.RowDatas[0].Parse(r.Fields, true, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := string(vals[0].AsString()); got != want {
			t.Fatalf("round %d: got %s, want %s", round, got, want)
		}
	}
	_, err = c.ExecPrepared(sql, []any{a, append(a, 'x'), int64(7), "c"})
	var me *mysql.MyError
	if !errors.As(err, &me) || me.Code != mysql.ER_UNKNOWN_ERROR || !strings.Contains(me.Message, "max_allowed_packet") {
		t.Fatalf("long data beyond the server's limit: %v, want MariaDB's 1105", err)
	}
	r, err := c.ExecPrepared(sql, []any{"x", "y", int64(7), "zz"})
	if err != nil {
		t.Fatalf("the statement after refused long data: %v", err)
	}
	if vals, _ := r.RowDatas[0].Parse(r.Fields, true, nil); string(vals[0].AsString()) != fmt.Sprintf("1|%x|7|2", md5.Sum([]byte("y"))) {
		t.Fatalf("the statement after refused long data: %s", vals[0].AsString())
	}
}

// TestWirePreparedArgs: every argument type the engine hands to
// ExecPrepared reaches a real MariaDB as the value it is.
func TestWirePreparedArgs(t *testing.T) {
	c := realConn(t)
	args := []any{nil, int8(-5), uint8(250), int16(-300), uint16(65000), int32(-70000), uint32(4000000000),
		int64(-1 << 40), uint64(1<<63 + 5), int(-7), uint(8), true, float32(2.25), float64(-1.5),
		[]byte("h\xc3\xa9llo\x00'"), "s", strings.Repeat("y", 300)}
	want := "N|-5|250|-300|65000|-70000|4000000000|-1099511627776|9223372036854775813|-7|8|1|2.25|-1.5|" +
		"68C3A96C6C6F0027|s|" + strings.Repeat("y", 300)
	sql := "SELECT CONCAT_WS('|', IFNULL(?, 'N'), ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, HEX(?), ?, ?)"
	for round := 0; round < 2; round++ { // the second run reuses the cached statement
		r, err := c.ExecPrepared(sql, args)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.RowDatas) != 1 {
			t.Fatalf("%d rows", len(r.RowDatas))
		}
		vals, err := r.RowDatas[0].Parse(r.Fields, true, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := string(vals[0].AsString()); got != want {
			t.Fatalf("round %d:\n got %s\nwant %s", round, got, want)
		}
	}
	if _, err := c.ExecPrepared(sql, args[:3]); err == nil {
		t.Fatal("wrong argument count accepted")
	}
	if _, err := c.ExecPrepared("SELECT ?", []any{struct{}{}}); err == nil || !strings.Contains(err.Error(), "no binary encoding") {
		t.Fatalf("unknown argument type: %v", err)
	}
	// The connection is still in step after the refusals.
	if got := scalar(t, c, "SELECT 41 + 1"); got != "42" {
		t.Fatalf("after refused arguments: %s", got)
	}
}

// TestExecMulti: a batch runs in one round trip, stops at the first failing
// statement (the open transaction stays for the caller to roll back), and
// leaves multi-statements off for everything else on the connection.
func TestExecMulti(t *testing.T) {
	c := realConn(t)
	for _, q := range []string{"CREATE DATABASE IF NOT EXISTS mt", "CREATE TABLE mt.t (id INT PRIMARY KEY, v VARCHAR(10))"} {
		if _, err := c.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	rs, err := c.ExecMulti("BEGIN; INSERT INTO mt.t VALUES (1, 'a'), (2, 'b'); SELECT id, v FROM mt.t ORDER BY id; UPDATE mt.t SET v = 'c' WHERE id = 2; COMMIT")
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 5 || rs[1].AffectedRows != 2 || len(rs[2].RowDatas) != 2 || len(rs[2].Fields) != 2 || rs[3].AffectedRows != 1 {
		t.Fatalf("batch results: %d results", len(rs))
	}
	if c.InTxn() {
		t.Fatal("transaction still open after the batch's COMMIT")
	}
	rs, err = c.ExecMulti("BEGIN; INSERT INTO mt.t VALUES (3, 'x'); INSERT INTO mt.t VALUES (1, 'dup'); INSERT INTO mt.t VALUES (4, 'never'); COMMIT")
	var me *mysql.MyError
	if !errors.As(err, &me) || me.Code != 1062 || len(rs) != 2 {
		t.Fatalf("failing batch: %d results, %v", len(rs), err)
	}
	if !c.InTxn() {
		t.Fatal("the failed batch's transaction should still be open")
	}
	if _, err := c.Exec("ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	if got := scalar(t, c, "SELECT GROUP_CONCAT(id, v ORDER BY id) FROM mt.t"); got != "1a,2c" {
		t.Fatalf("rows after the rolled-back batch: %s", got)
	}
	// Multi-statements are off again for ordinary statements.
	if _, err := c.Exec("SELECT 1; SELECT 2"); !errors.As(err, &me) || me.Code != 1064 {
		t.Fatalf("a second statement in plain Exec: %v", err)
	}
	if got := scalar(t, c, "SELECT 7"); got != "7" {
		t.Fatalf("connection after the batches: %s", got)
	}
}

// TestNoQueryAttributes: a MySQL 8.0.23+ server offers query attributes;
// Convoy's commands carry none, so its connections must not take the
// capability (the server would read each command's first bytes as an
// attribute count).
func TestNoQueryAttributes(t *testing.T) {
	const serverCaps = mysql.CLIENT_LONG_PASSWORD | mysql.CLIENT_LONG_FLAG | mysql.CLIENT_PROTOCOL_41 |
		mysql.CLIENT_TRANSACTIONS | mysql.CLIENT_SECURE_CONNECTION | mysql.CLIENT_PLUGIN_AUTH |
		mysql.CLIENT_QUERY_ATTRIBUTES | mysql.CLIENT_LOCAL_FILES
	got := make(chan uint32, 1)
	addr := scriptedServer(t, func(c net.Conn) {
		g := []byte{10}
		g = append(g, "8.0.36\x00"...)
		g = append(g, 1, 0, 0, 0)
		g = append(g, "abcdefgh"...)
		caps := uint32(serverCaps)
		g = append(g, 0, byte(caps), byte(caps>>8), 45, 2, 0, byte(caps>>16), byte(caps>>24), 21)
		g = append(g, make([]byte, 10)...)
		g = append(g, "ijklmnopqrst\x00"...)
		g = append(g, "mysql_native_password\x00"...)
		c.Write(pkt(0, g...))
		h := make([]byte, 4)
		if _, err := io.ReadFull(c, h); err != nil {
			return
		}
		body := make([]byte, int(h[0])|int(h[1])<<8|int(h[2])<<16)
		if _, err := io.ReadFull(c, body); err != nil || len(body) < 4 {
			return
		}
		got <- binary.LittleEndian.Uint32(body)
		c.Write(pkt(h[3]+1, 0, 0, 0, 2, 0, 0, 0))
		io.Copy(io.Discard, c)
	})
	mgr := newTestManagerAt(t, addr, Options{HealthInterval: -1}) // the scripted server accepts one connection
	c, err := mgr.Acquire(context.Background(), "ds0", false)
	if err != nil {
		t.Fatal(err)
	}
	c.Release()
	select {
	case caps := <-got:
		if caps&mysql.CLIENT_QUERY_ATTRIBUTES != 0 || caps&mysql.CLIENT_LOCAL_FILES != 0 {
			t.Fatalf("client capabilities %#x take query attributes or local files", caps)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no handshake response")
	}
}

// TestWireMultiLongBatch: a batch of 16 MiB or more goes out as split
// packets between its two COM_SET_OPTIONs, and the reply's sequence number
// follows the parts.
func TestWireMultiLongBatch(t *testing.T) {
	eof := pkt(1, 0xfe, 0, 0, 2, 0)
	w := fakeServer(t, eof, []byte{}, pkt(2, 0x00, 1, 0, 2, 0, 0, 0), eof)
	w.readTimeout = 10 * time.Second
	rs, err := w.multi("INSERT INTO t VALUES ('" + strings.Repeat("x", maxPayload) + "')")
	if err != nil || len(rs) != 1 || rs[0].AffectedRows != 1 {
		t.Fatalf("long batch: %d results, %v", len(rs), err)
	}
}
