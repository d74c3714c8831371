package binlog

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"database/sql/driver"
	"errors"
	"fmt"
	"math"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/convoy-im/convoy/internal/testsvc"
)

func imOnly(schema, table string) bool { return schema == "im_0" && table != "other" }

// wantChange checks one change against its expected kind, table and rows.
func wantChange(t *testing.T, c Change, kind Kind, table string, before, after []any) {
	t.Helper()
	if c.Kind != kind || c.Schema != "im_0" || c.Table != table {
		t.Fatalf("change = %s %s.%s, want %s im_0.%s", c.Kind, c.Schema, c.Table, kind, table)
	}
	if !reflect.DeepEqual(c.Before, before) {
		t.Errorf("%s %s before = %#v\nwant %#v", kind, table, c.Before, before)
	}
	if !reflect.DeepEqual(c.After, after) {
		t.Errorf("%s %s after = %#v\nwant %#v", kind, table, c.After, after)
	}
}

// TestStreamIMTables: the IM schema's changes through go-sql-driver, in and
// out of transactions, come out whole, typed and filtered, one Txn per
// commit; rolled-back work and other tables' transactions do not.
func TestStreamIMTables(t *testing.T) {
	m, db := startIM(t)
	mustExec(t, db, "CREATE TABLE other (id INT PRIMARY KEY)")
	r := newReader(t, m, Config{Filter: imOnly})
	start := currentPos(t, db)
	c := collect(t, r, start)
	const u64max = uint64(math.MaxUint64)

	// Autocommit insert, extreme values: BIGINT UNSIGNED max must not come
	// out as -1, TINYINT UNSIGNED 255 not as -1, bytes as bytes.
	body := []byte{0, 1, 0xff, 'x'}
	mustExec(t, db, "INSERT INTO msg_content VALUES (?, 1, ?, 255, ?, '2024-05-01 12:00:00.125')", u64max, u64max-1, body)
	x := c.next(t)
	if len(x.Changes) != 1 || x.GTID == "" {
		t.Fatalf("txn = %+v", x)
	}
	ch := x.Changes[0]
	if want := []string{"msg_id", "conv_id", "sender_uid", "msg_type", "content", "created_at"}; !reflect.DeepEqual(ch.Columns, want) {
		t.Fatalf("columns = %q, want %q", ch.Columns, want)
	}
	if !reflect.DeepEqual(ch.Key, []int{0}) {
		t.Errorf("key = %v, want [0]", ch.Key)
	}
	wantChange(t, ch, Insert, "msg_content", nil, []any{u64max, uint64(1), u64max - 1, uint64(255), body, "2024-05-01 12:00:00.125"})
	if ok, _ := x.Next.Reached(start); !ok || x.Next == start {
		t.Errorf("Next %q does not advance from %q", x.Next, start)
	}
	if want := currentPos(t, db); x.Next != want {
		t.Errorf("Next = %q, server's gtid_binlog_pos = %q", x.Next, want)
	}

	// A multi-statement transaction over three IM tables and one filtered
	// out: one Txn, the IM changes in statement order.
	inTxn(t, db, true,
		"INSERT INTO im_conv_seq (conv_id, max_seq, member_cnt) VALUES (7, 0, 2)",
		"INSERT INTO other VALUES (1)",
		"UPDATE im_conv_seq SET max_seq = max_seq + 1 WHERE conv_id = 7",
		"INSERT INTO conv_msg VALUES (7, 1, 100, 9, 1, '2024-05-01 12:00:01.000')",
		"INSERT INTO im_inbox VALUES (9, 7, 1, 100, '2024-05-01 12:00:01.000'), (10, 7, 1, 100, '2024-05-01 12:00:01.000')")
	x = c.next(t)
	if len(x.Changes) != 5 {
		t.Fatalf("txn has %d changes, want 5: %+v", len(x.Changes), x.Changes)
	}
	wantChange(t, x.Changes[0], Insert, "im_conv_seq", nil, []any{uint64(7), uint64(0), uint64(2)})
	wantChange(t, x.Changes[1], Update, "im_conv_seq", []any{uint64(7), uint64(0), uint64(2)}, []any{uint64(7), uint64(1), uint64(2)})
	wantChange(t, x.Changes[2], Insert, "conv_msg", nil, []any{uint64(7), uint64(1), uint64(100), uint64(9), uint64(1), "2024-05-01 12:00:01.000"})
	wantChange(t, x.Changes[3], Insert, "im_inbox", nil, []any{uint64(9), uint64(7), uint64(1), uint64(100), "2024-05-01 12:00:01.000"})
	wantChange(t, x.Changes[4], Insert, "im_inbox", nil, []any{uint64(10), uint64(7), uint64(1), uint64(100), "2024-05-01 12:00:01.000"})
	if !reflect.DeepEqual(x.Changes[2].Key, []int{0, 1}) {
		t.Errorf("conv_msg key = %v, want [0 1]", x.Changes[2].Key)
	}

	// UPDATE of several rows and of an INT UNSIGNED to its max; DELETE.
	mustExec(t, db, "UPDATE im_inbox SET msg_id = msg_id + 1 WHERE conv_id = 7")
	x = c.next(t)
	if len(x.Changes) != 2 {
		t.Fatalf("multi-row update: %d changes", len(x.Changes))
	}
	wantChange(t, x.Changes[1], Update, "im_inbox",
		[]any{uint64(10), uint64(7), uint64(1), uint64(100), "2024-05-01 12:00:01.000"},
		[]any{uint64(10), uint64(7), uint64(1), uint64(101), "2024-05-01 12:00:01.000"})
	mustExec(t, db, "UPDATE im_conv_seq SET member_cnt = 4294967295 WHERE conv_id = 7")
	x = c.next(t)
	wantChange(t, x.Changes[0], Update, "im_conv_seq", []any{uint64(7), uint64(1), uint64(2)}, []any{uint64(7), uint64(1), uint64(4294967295)})
	mustExec(t, db, "DELETE FROM conv_msg WHERE conv_id = 7")
	x = c.next(t)
	wantChange(t, x.Changes[0], Delete, "conv_msg", []any{uint64(7), uint64(1), uint64(100), uint64(9), uint64(1), "2024-05-01 12:00:01.000"}, nil)

	// A rolled-back transaction and one of a filtered-out table deliver
	// nothing: the next Txn is the marker after them.
	skipped := r.Stats().Skipped
	inTxn(t, db, false, "INSERT INTO im_conv_seq (conv_id) VALUES (8)")
	mustExec(t, db, "INSERT INTO other VALUES (2)")
	// Savepoints: the rows rolled back to one are not logged at all.
	inTxn(t, db, true,
		"INSERT INTO im_conv_seq (conv_id) VALUES (9)",
		"SAVEPOINT s1",
		"INSERT INTO im_conv_seq (conv_id) VALUES (10)",
		"ROLLBACK TO SAVEPOINT s1",
		"INSERT INTO im_conv_seq (conv_id) VALUES (11)")
	x = c.next(t)
	if len(x.Changes) != 2 || x.Changes[0].After[0] != uint64(9) || x.Changes[1].After[0] != uint64(11) {
		t.Fatalf("savepoint txn = %+v, want inserts of conv 9 and 11", x.Changes)
	}
	if got := r.Stats().Skipped; got != skipped+1 {
		t.Errorf("Skipped = %d, want %d (the transaction of table other)", got, skipped+1)
	}

	// DDL is read, counted, not delivered; later rows carry the new column.
	ddls := r.Stats().DDLs
	mustExec(t, db, "ALTER TABLE im_conv_member ADD COLUMN note VARCHAR(20) CHARACTER SET utf8mb4 NULL AFTER mute")
	mustExec(t, db, "INSERT INTO im_conv_member VALUES (1, 7, 0, 1, NULL, '2024-05-01 00:00:00.000'), (2, 7, 5, 0, 'héllo 😀', '2024-05-01 00:00:00.001')")
	x = c.next(t)
	if want := []string{"uid", "conv_id", "last_read_seq", "mute", "note", "updated_at"}; !reflect.DeepEqual(x.Changes[0].Columns, want) {
		t.Fatalf("columns after ALTER = %q", x.Changes[0].Columns)
	}
	wantChange(t, x.Changes[0], Insert, "im_conv_member", nil, []any{uint64(1), uint64(7), uint64(0), uint64(1), nil, "2024-05-01 00:00:00.000"})
	wantChange(t, x.Changes[1], Insert, "im_conv_member", nil, []any{uint64(2), uint64(7), uint64(5), uint64(0), "héllo 😀", "2024-05-01 00:00:00.001"})
	if got := r.Stats().DDLs; got != ddls+1 {
		t.Errorf("DDLs = %d, want %d", got, ddls+1)
	}
	mustExec(t, db, "ALTER TABLE im_conv_member DROP COLUMN note")
	mustExec(t, db, "UPDATE im_conv_member SET mute = 0 WHERE uid = 1")
	x = c.next(t)
	wantChange(t, x.Changes[0], Update, "im_conv_member",
		[]any{uint64(1), uint64(7), uint64(0), uint64(1), "2024-05-01 00:00:00.000"},
		[]any{uint64(1), uint64(7), uint64(0), uint64(0), "2024-05-01 00:00:00.000"})

	st := r.Stats()
	if st.Txns != 8 || st.Reconnects != 0 || !st.Connected || st.Position != x.Next {
		t.Errorf("stats = %+v, want 8 txns, no reconnect, connected, at %q", st, x.Next)
	}
	if err := c.stop(); !errors.Is(err, context.Canceled) {
		t.Errorf("Stream after cancel = %v, want context.Canceled", err)
	}
}

// TestValueTypes: every common column type comes out as the Go value the
// Change documentation promises, extremes and NULL included.
func TestValueTypes(t *testing.T) {
	m, db := startIM(t)
	mustExec(t, db, `CREATE TABLE types (
		id INT NOT NULL PRIMARY KEY,
		ti TINYINT, tu TINYINT UNSIGNED, si SMALLINT, su SMALLINT UNSIGNED,
		mi MEDIUMINT, mu MEDIUMINT UNSIGNED, ii INT, iu INT UNSIGNED, bi BIGINT, bu BIGINT UNSIGNED,
		de DECIMAL(20,4), fl FLOAT, do DOUBLE, bt BIT(64), yr YEAR,
		da DATE, tm TIME(2), dt DATETIME(3), dt0 DATETIME, ts TIMESTAMP(6) NULL,
		vc VARCHAR(50), ch CHAR(5), tx TEXT, js JSON,
		vb VARBINARY(50), bn BINARY(3), bl BLOB,
		en ENUM('a','b','c'), st SET('x','y','z')
	) CHARACTER SET utf8mb4`)
	r := newReader(t, m, Config{Filter: func(_, table string) bool { return table == "types" }})
	c := collect(t, r, currentPos(t, db))
	mustExec(t, db, "SET time_zone = '+00:00'")

	mustExec(t, db, `INSERT INTO types VALUES (1,
		-128, 255, -32768, 65535, -8388608, 16777215, -2147483648, 4294967295, -9223372036854775808, 18446744073709551615,
		-12345678901234.5678, 0.1, 0.1, b'1111111111111111111111111111111111111111111111111111111111111111', 2155,
		'0000-00-00', '-838:59:59.99', '9999-12-31 23:59:59.999', '2024-01-02 03:04:05', '2038-01-19 03:14:07.999999',
		'日本語 😀', 'ab', 'long text', '{"a": [1, 2]}',
		X'00ff10', X'0102', X'deadbeef',
		'c', 'x,z')`)
	mustExec(t, db, "INSERT INTO types (id) VALUES (2)")
	x := c.next(t)
	want := []any{int64(1),
		int64(-128), uint64(255), int64(-32768), uint64(65535), int64(-8388608), uint64(16777215),
		int64(-2147483648), uint64(4294967295), int64(math.MinInt64), uint64(math.MaxUint64),
		"-12345678901234.5678", float32(0.1), float64(0.1), uint64(math.MaxUint64), int64(2155),
		"0000-00-00", "-838:59:59.99", "9999-12-31 23:59:59.999", "2024-01-02 03:04:05", "2038-01-19 03:14:07.999999",
		"日本語 😀", "ab", "long text", `{"a": [1, 2]}`,
		[]byte{0, 0xff, 0x10}, []byte{1, 2, 0}, []byte{0xde, 0xad, 0xbe, 0xef},
		"c", "x,z"}
	got := x.Changes[0].After
	if len(got) != len(want) {
		t.Fatalf("%d values, want %d", len(got), len(want))
	}
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Errorf("column %s = %#v (%T), want %#v (%T)", x.Changes[0].Columns[i], got[i], got[i], want[i], want[i])
		}
	}
	x = c.next(t)
	for i, v := range x.Changes[0].After[1:] {
		if v != nil {
			t.Errorf("column %s of the NULL row = %#v, want nil", x.Changes[0].Columns[i+1], v)
		}
	}
}

// TestResumeFromNext: a stream started from a delivered Txn.Next gives
// exactly the transactions after it: no duplicate, no gap.
func TestResumeFromNext(t *testing.T) {
	m, db := startIM(t)
	start := currentPos(t, db)
	for i := 1; i <= 10; i++ {
		mustExec(t, db, "INSERT INTO im_conv_seq (conv_id) VALUES (?)", i)
	}
	ids := func(c *collector, n int) ([]uint64, []Position) {
		var got []uint64
		var next []Position
		for range n {
			x := c.next(t)
			got = append(got, x.Changes[0].After[0].(uint64))
			next = append(next, x.Next)
		}
		return got, next
	}
	// "" is the oldest binlog: the schema's DDL (read, not delivered), then
	// the inserts.
	c := collect(t, newReader(t, m, Config{Filter: imOnly}), "")
	got, next := ids(c, 10)
	if want := []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}; !reflect.DeepEqual(got, want) {
		t.Fatalf("from the start: %v", got)
	}
	if ok, _ := next[0].Reached(start); !ok {
		t.Fatalf("first insert at %q, before the schema's %q", next[0], start)
	}
	c.stop()

	c = collect(t, newReader(t, m, Config{Filter: imOnly}), next[3])
	mustExec(t, db, "INSERT INTO im_conv_seq (conv_id) VALUES (11)")
	got, next2 := ids(c, 7)
	if want := []uint64{5, 6, 7, 8, 9, 10, 11}; !reflect.DeepEqual(got, want) {
		t.Fatalf("resumed after the 4th: %v, want %v", got, want)
	}
	if !reflect.DeepEqual(next2[:6], next[4:]) {
		t.Errorf("positions differ on the second read: %q vs %q", next2[:6], next[4:])
	}
	c.caughtUp(t, db)
	select {
	case x := <-c.txns:
		t.Fatalf("extra transaction %+v", x)
	default:
	}

	// fn's error ends Stream unchanged, and the transaction it refused is
	// not counted as read.
	errStop := errors.New("stop here")
	r := newReader(t, m, Config{}) // no filter: every table
	n := 0
	err := r.Stream(context.Background(), next[0], func(x Txn) error {
		if n++; n == 3 {
			return errStop
		}
		return nil
	})
	if err != errStop || r.Stats().Position != next[2] || r.Stats().Txns != 2 {
		t.Fatalf("Stream = %v at %q after %d txns; want errStop at %q after 2", err, r.Stats().Position, r.Stats().Txns, next[2])
	}
}

// TestReconnectMidTransaction: a connection lost between a transaction's
// first rows event and its commit costs a reconnect, not the transaction
// and not a duplicate of the one before it.
func TestReconnectMidTransaction(t *testing.T) {
	m, db := startIM(t)
	r := newReader(t, m, Config{Filter: imOnly})
	failed := false
	r.hook = func(ev *replication.BinlogEvent) error {
		if rows, ok := ev.Event.(*replication.RowsEvent); ok && !failed && rows.Rows[0][0] == uint64(2) {
			failed = true
			return errors.New("injected connection loss")
		}
		return nil
	}
	c := collect(t, r, currentPos(t, db))
	mustExec(t, db, "INSERT INTO im_conv_seq (conv_id) VALUES (1)")
	var stmts []string
	for i := 2; i <= 6; i++ {
		stmts = append(stmts, fmt.Sprintf("INSERT INTO im_conv_seq (conv_id) VALUES (%d)", i))
	}
	inTxn(t, db, true, stmts...)
	mustExec(t, db, "INSERT INTO im_conv_seq (conv_id) VALUES (7)")
	var got [][]uint64
	for range 3 {
		x := c.next(t)
		var ids []uint64
		for _, ch := range x.Changes {
			ids = append(ids, ch.After[0].(uint64))
		}
		got = append(got, ids)
	}
	if want := [][]uint64{{1}, {2, 3, 4, 5, 6}, {7}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("transactions = %v, want %v", got, want)
	}
	if st := r.Stats(); !failed || st.Reconnects != 1 || !strings.Contains(st.LastError, "injected") {
		t.Fatalf("failed=%v stats %+v: want one reconnect after the injected loss", failed, st)
	}
}

// TestRefusals: settings, positions and transactions that cannot be read
// as whole named rows stop the stream with an error that says what to
// fix, instead of delivering something wrong.
func TestRefusals(t *testing.T) {
	m, db := startIM(t)
	ctx := context.Background()
	run := func(cfg Config, from Position) error {
		t.Helper()
		return collect(t, newReader(t, m, cfg), from).failure(t)
	}
	for _, s := range []struct{ set, reset, want string }{
		{"binlog_row_metadata = MINIMAL", "binlog_row_metadata = FULL", "binlog_row_metadata is MINIMAL"},
		{"binlog_row_image = MINIMAL", "binlog_row_image = FULL", "binlog_row_image is MINIMAL"},
		{"binlog_format = MIXED", "binlog_format = ROW", "binlog_format is MIXED"},
	} {
		mustExec(t, db, "SET GLOBAL "+s.set)
		err := run(Config{}, "")
		mustExec(t, db, "SET GLOBAL "+s.reset)
		if !errors.Is(err, ErrServerConfig) || !strings.Contains(err.Error(), s.want) {
			t.Errorf("with %s: Stream = %v, want ErrServerConfig saying %q", s.set, err, s.want)
		}
	}

	// A position ahead of the server, and one whose binlogs are purged.
	var serverID int
	if err := db.QueryRow("SELECT @@server_id").Scan(&serverID); err != nil {
		t.Fatal(err)
	}
	if err := run(Config{}, Position(fmt.Sprintf("0-%d-1000000", serverID))); !errors.Is(err, ErrPositionUnavailable) {
		t.Errorf("position ahead of the server: %v", err)
	}
	mustExec(t, db, "INSERT INTO im_conv_seq (conv_id) VALUES (1)")
	old := currentPos(t, db)
	mustExec(t, db, "INSERT INTO im_conv_seq (conv_id) VALUES (2)")
	mustExec(t, db, "FLUSH BINARY LOGS")
	var file string
	if err := db.QueryRow("SHOW MASTER STATUS").Scan(&file, new(any), new(any), new(any)); err != nil {
		t.Fatal(err)
	}
	// MariaDB keeps a binlog until InnoDB has flushed its transactions
	// (the binlog checkpoint; about a second with a lazy log flush).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		mustExec(t, db, "PURGE BINARY LOGS TO '"+file+"'")
		var first string
		if err := db.QueryRow("SHOW BINARY LOGS").Scan(&first, new(any)); err != nil {
			t.Fatal(err)
		}
		if first == file {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("binlogs before %s still there after 10 s", file)
		}
	}
	if err := run(Config{}, old); !errors.Is(err, ErrPositionUnavailable) {
		t.Errorf("purged position: %v", err)
	}

	// Mid-stream: a session that logs partial rows, or rows as statements.
	for _, s := range []struct {
		session, stmt string
		want          error
	}{
		{"SET SESSION binlog_row_image = MINIMAL", "UPDATE im_conv_seq SET max_seq = 5 WHERE conv_id = 1", ErrServerConfig},
		{"SET SESSION binlog_format = STATEMENT", "-- a client's comment\nUPDATE im_conv_seq SET max_seq = 6 WHERE conv_id = 1", ErrServerConfig},
	} {
		c := collect(t, newReader(t, m, Config{Filter: imOnly}), currentPos(t, db))
		conn, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		mustExec(t, conn, s.session)
		mustExec(t, conn, s.stmt)
		// Back to the pool with these settings it must not go.
		conn.Raw(func(any) error { return driver.ErrBadConn })
		conn.Close()
		if err := c.failure(t); !errors.Is(err, s.want) {
			t.Errorf("%s: Stream = %v, want %v", s.session, err, s.want)
		}
	}

	// Too many filtered changes in one transaction; unfiltered rows do not
	// count.
	c := collect(t, newReader(t, m, Config{Filter: imOnly, MaxTxnChanges: 3}), currentPos(t, db))
	mustExec(t, db, "CREATE TABLE other (id INT PRIMARY KEY)")
	mustExec(t, db, "INSERT INTO other VALUES (1), (2), (3), (4), (5)")
	mustExec(t, db, "INSERT INTO im_conv_seq (conv_id) VALUES (20), (21), (22)")
	if x := c.next(t); len(x.Changes) != 3 {
		t.Fatalf("3 changes at the limit: %+v", x)
	}
	mustExec(t, db, "INSERT INTO im_conv_seq (conv_id) VALUES (30), (31), (32), (33)")
	if err := c.failure(t); !errors.Is(err, ErrTxnTooLarge) {
		t.Errorf("4 changes over a limit of 3: %v", err)
	}

	// XA: skipped on other tables, refused on filtered ones.
	c = collect(t, newReader(t, m, Config{Filter: imOnly}), currentPos(t, db))
	conn, err := db.Conn(ctx) // XA statements belong to one session
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, q := range []string{"XA START 'a'", "INSERT INTO other VALUES (10)", "XA END 'a'", "XA PREPARE 'a'", "XA COMMIT 'a'"} {
		mustExec(t, conn, q)
	}
	mustExec(t, db, "INSERT INTO im_conv_seq (conv_id) VALUES (40)")
	if x := c.next(t); x.Changes[0].After[0] != uint64(40) {
		t.Fatalf("after an XA transaction on another table: %+v", x)
	}
	for _, q := range []string{"XA START 'b'", "INSERT INTO im_conv_seq (conv_id) VALUES (41)", "XA END 'b'", "XA PREPARE 'b'", "XA COMMIT 'b'"} {
		mustExec(t, conn, q)
	}
	if err := c.failure(t); !errors.Is(err, ErrUnsupported) {
		t.Errorf("XA on a filtered table: %v", err)
	}

	if _, err := NewReader(Config{Addr: m.Addr()}); err == nil {
		t.Error("NewReader accepted ServerID 0")
	}
}

// TestStreamTLS: the reader streams from a server that requires secure
// transport, verifying its certificate with the datasource's CA; without
// TLS the server refuses it.
func TestStreamTLS(t *testing.T) {
	ca := testsvc.NewCA(t)
	cert, key := ca.Issue(t, "db", "127.0.0.1")
	m := testsvc.StartMariaDB(t, testsvc.WithMariaDBArgs("--ssl-ca="+ca.File, "--ssl-cert="+cert, "--ssl-key="+key))
	m.Exec(t, "CREATE DATABASE tls", "CREATE TABLE tls.t (id INT PRIMARY KEY)")
	db := m.Open(t, "")
	from := currentPos(t, db)
	m.Exec(t, "INSERT INTO tls.t VALUES (1)", "SET GLOBAL require_secure_transport = ON")
	roots := x509.NewCertPool()
	pem, err := os.ReadFile(ca.File)
	if err != nil {
		t.Fatal(err)
	}
	roots.AppendCertsFromPEM(pem)
	r := newReader(t, m, Config{TLS: &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"}})
	c := collect(t, r, from)
	if x := c.next(t); len(x.Changes) != 1 || x.Changes[0].Table != "t" {
		t.Fatalf("transaction over TLS: %+v", x)
	}
	r2 := newReader(t, m, Config{})
	if err := collect(t, r2, from).failure(t); err == nil {
		t.Fatal("a clear-text reader streamed from a server requiring secure transport")
	}
}

// TestTxnEnd: a transaction's End is where the server's binary log ends
// after it, across a rotation and a reconnect (the server's first ROTATE
// event names the file); a snapshot covering it sees its rows, one that
// cannot cover an offset the server has not reached is rolled back.
func TestTxnEnd(t *testing.T) {
	m, db := startIM(t)
	ctx := context.Background()
	masterEnd := func() FileOffset {
		t.Helper()
		var f FileOffset
		var doDB, ignoreDB any
		if err := db.QueryRow("SHOW MASTER STATUS").Scan(&f.File, &f.Offset, &doDB, &ignoreDB); err != nil {
			t.Fatal(err)
		}
		return f
	}
	r := newReader(t, m, Config{Filter: imOnly})
	start := currentPos(t, db)
	c := collect(t, r, start)
	mustExec(t, db, "INSERT INTO im_conv_seq (conv_id, max_seq, member_cnt) VALUES (1, 0, 2)")
	x := c.next(t)
	if want := masterEnd(); x.End != want {
		t.Fatalf("End = %s, the server's binlog ends at %s", x.End, want)
	}
	mustExec(t, db, "FLUSH BINARY LOGS")
	mustExec(t, db, "INSERT INTO im_conv_seq (conv_id, max_seq, member_cnt) VALUES (2, 0, 2)")
	y := c.next(t)
	if want := masterEnd(); y.End != want || y.End.File == x.End.File {
		t.Fatalf("after a rotation End = %s (before it %s), the server's binlog ends at %s", y.End, x.End, want)
	}
	if n, err := y.End.compare(x.End); err != nil || n != 1 {
		t.Errorf("%s vs %s: %d, %v", y.End, x.End, n, err)
	}
	c.stop()
	// A new connection from x.Next starts in the older file.
	again := collect(t, newReader(t, m, Config{Filter: imOnly}), x.Next)
	if z := again.next(t); z.GTID != y.GTID || z.End != y.End {
		t.Errorf("streamed again: %s ending at %s, first %s ending at %s", z.GTID, z.End, y.GTID, y.End)
	}

	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := SnapshotCovering(ctx, conn, y.End); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := conn.QueryRowContext(ctx, "SELECT COUNT(*) FROM im_conv_seq WHERE conv_id = 2").Scan(&n); err != nil || n != 1 {
		t.Fatalf("the covering snapshot sees %d rows of conv 2, %v", n, err)
	}
	mustExec(t, conn, "COMMIT")
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	ahead := FileOffset{File: y.End.File, Offset: y.End.Offset + 1<<20}
	if err := SnapshotCovering(short, conn, ahead); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a snapshot covering %s, past the server's end: %v", ahead, err)
	}
	var open int
	if err := conn.QueryRowContext(ctx, "SELECT @@in_transaction").Scan(&open); err != nil || open != 0 {
		t.Errorf("@@in_transaction = %d (%v) after SnapshotCovering gave up", open, err)
	}
	if err := SnapshotCovering(ctx, conn, FileOffset{File: "other-bin.000001", Offset: 4}); err == nil {
		t.Error("a snapshot compared with another server's log")
	}
}
