package engine

import (
	"errors"
	"io"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/convoy-im/convoy/proxy/sqlerr"
)

func expectLog(t *testing.T, rec *recorder, want ...string) {
	t.Helper()
	got := rec.take()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("backend log\n got: %q\nwant: %q", got, want)
	}
}

func expectCode(t *testing.T, err error, c sqlerr.Code) {
	t.Helper()
	var e *sqlerr.Error
	if !errors.As(err, &e) || e.Code != c {
		t.Fatalf("error %v, want code %d", err, c)
	}
}

func TestPreparedRoutesByBoundValue(t *testing.T) {
	s, rec := newTestSession()
	p, err := s.Prepare("SELECT seq, msg_id FROM conv_msg WHERE conv_id = ? AND seq < ? ORDER BY seq DESC LIMIT 20")
	if err != nil {
		t.Fatal(err)
	}
	if p.Params != 2 || p.Columns != 6 {
		t.Fatalf("params=%d columns=%d", p.Params, p.Columns)
	}
	rec.take()
	// 42 -> shard 136 (im_1 on ds0); 2^64-1 -> shard 282 (im_2 on ds0); 1<<63+5 -> 902 (im_7 on ds1).
	for _, c := range []struct {
		key  any
		want string
	}{
		{int64(42), "ds0#2 text: SELECT `seq`,`msg_id` FROM `im_1`.`conv_msg_0136` AS `conv_msg` WHERE `conv_id`=42 AND `seq`<100 ORDER BY `seq` DESC LIMIT 20"},
		{uint64(math.MaxUint64), "ds0#3 text: SELECT `seq`,`msg_id` FROM `im_2`.`conv_msg_0282` AS `conv_msg` WHERE `conv_id`=18446744073709551615 AND `seq`<100 ORDER BY `seq` DESC LIMIT 20"},
		{uint64(1<<63 + 5), "ds1#4 text: SELECT `seq`,`msg_id` FROM `im_7`.`conv_msg_0902` AS `conv_msg` WHERE `conv_id`=9223372036854775813 AND `seq`<100 ORDER BY `seq` DESC LIMIT 20"},
	} {
		// One backend statement per physical table would thrash the
		// backend's prepared-statement cache: the values go inline, as text.
		r, err := s.Execute(p, []any{c.key, int64(100)})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.RowDatas) == 0 || r.RowDatas[0][0] != 0 {
			t.Fatalf("rows of an inlined EXECUTE must be converted to the binary protocol: %x", r.RowDatas)
		}
		expectLog(t, rec, c.want)
	}
	// A value without an exact literal (a double) is bound on the backend.
	if _, err := s.Execute(p, []any{int64(42), 100.5}); err != nil {
		t.Fatal(err)
	}
	expectLog(t, rec, "ds0#5 prepared[42 100.5]: SELECT `seq`,`msg_id` FROM `im_1`.`conv_msg_0136` AS `conv_msg` WHERE `conv_id`=? AND `seq`<? ORDER BY `seq` DESC LIMIT 20")
	_, err = s.Execute(p, []any{nil, int64(1)})
	expectCode(t, err, sqlerr.BadShardKey)
	_, err = s.Execute(p, []any{int64(1)})
	expectCode(t, err, sqlerr.WrongArguments)
	expectLog(t, rec)
}

func TestInsertSplitsByShard(t *testing.T) {
	s, rec := newTestSession()
	// 0 -> 801 (im_6, ds1), 1 -> 951 (im_7, ds1), 42 -> 136 (im_1, ds0).
	_, err := s.Query("INSERT INTO im_inbox (uid, conv_id, seq, msg_id, send_time) VALUES (0, 1, 1, 1, NOW()), (42, 1, 2, 2, NOW()), (0, 2, 3, 3, NOW())")
	if err != nil {
		t.Fatal(err)
	}
	expectLog(t, rec,
		"ds1#1 text: BEGIN",
		"ds1#1 text: INSERT INTO `im_6`.`im_inbox_0801` (`uid`,`conv_id`,`seq`,`msg_id`,`send_time`) VALUES (0,1,1,1,NOW()),(0,2,3,3,NOW())",
		"ds0#2 text: BEGIN",
		"ds0#2 text: INSERT INTO `im_1`.`im_inbox_0136` (`uid`,`conv_id`,`seq`,`msg_id`,`send_time`) VALUES (42,1,2,2,NOW())",
		"ds1#1 text: COMMIT",
		"ds0#2 text: COMMIT",
	)
	// A failure on any shard rolls every shard back.
	rec.failOn = "im_inbox_0136"
	_, err = s.Query("INSERT INTO im_inbox (uid, conv_id, seq, msg_id, send_time) VALUES (0, 1, 1, 1, NOW()), (42, 1, 2, 2, NOW())")
	if err == nil {
		t.Fatal("expected the duplicate-key error")
	}
	got := rec.take()
	if got[len(got)-2] != "ds1#3 text: ROLLBACK" || got[len(got)-1] != "ds0#4 text: ROLLBACK" {
		t.Fatalf("no rollback on every shard: %q", got)
	}
	// Without two-phase commit, a datasource failing during the commits
	// leaves the shards committed before it: the error says which, so the
	// client knows a retry must be idempotent.
	rec.failOn, rec.failDS, rec.failErr = "COMMIT", "ds0", errors.New("connection reset by peer")
	_, err = s.Query("INSERT INTO im_inbox (uid, conv_id, seq, msg_id, send_time) VALUES (0, 1, 1, 1, NOW()), (42, 1, 2, 2, NOW())")
	if !sqlerr.Is(err, sqlerr.BackendUnavailable) || !strings.Contains(err.Error(), "COMMIT failed on shard 0136 after shards 0801 committed") {
		t.Fatalf("commit failing half way: %v", err)
	}
	got = rec.take()
	if got[len(got)-3] != "ds1#5 text: COMMIT" || got[len(got)-2] != "ds0#6 text: COMMIT" {
		t.Fatalf("commits: %q", got)
	}
}

func TestTransactionPinsOneShard(t *testing.T) {
	s, rec := newTestSession()
	mustQuery := func(q string) {
		t.Helper()
		if _, err := s.Query(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	mustQuery("BEGIN")
	if !s.InTransaction() {
		t.Fatal("not in transaction after BEGIN")
	}
	expectLog(t, rec) // BEGIN is sent lazily
	mustQuery("SELECT 1")
	mustQuery("UPDATE conv_msg SET msg_type = 2 WHERE conv_id = 42 AND seq = 1")
	_, err := s.Query("UPDATE conv_msg SET msg_type = 2 WHERE conv_id = 1 AND seq = 1")
	expectCode(t, err, sqlerr.CrossShardTxn)
	mustQuery("DELETE FROM msg_content WHERE conv_id = 42 AND msg_id = 7")
	mustQuery("COMMIT")
	// A statement without a table neither opens nor pins the transaction.
	expectLog(t, rec,
		"ds0#1 text: SELECT 1",
		"ds0#2 text: BEGIN",
		"ds0#2 text: UPDATE `im_1`.`conv_msg_0136` AS `conv_msg` SET `msg_type`=2 WHERE `conv_id`=42 AND `seq`=1",
		"ds0#2 text: DELETE FROM `im_1`.`msg_content_0136` WHERE `conv_id`=42 AND `msg_id`=7",
		"ds0#2 text: COMMIT",
	)
	// ... so a transaction whose first statement has no table may still take
	// a shard on another datasource (autocommit=0 clients often start so).
	mustQuery("SET autocommit = 0")
	mustQuery("SELECT @@autocommit")
	mustQuery("UPDATE conv_msg SET msg_type = 2 WHERE conv_id = 1 AND seq = 1")
	mustQuery("ROLLBACK")
	if got := rec.take(); len(got) != 4 || !strings.HasPrefix(got[1], "ds1#") || got[1] != strings.Replace(got[3], "ROLLBACK", "BEGIN", 1) {
		t.Fatalf("autocommit=0 after a table-less SELECT: %q", got)
	}
	mustQuery("SET autocommit = 1")
	if s.InTransaction() {
		t.Fatal("still in transaction after COMMIT")
	}
}

func TestDDLFansOutToEveryPhysicalTable(t *testing.T) {
	s, rec := newTestSession()
	if _, err := s.Query("CREATE TABLE IF NOT EXISTS conv_msg (conv_id BIGINT UNSIGNED NOT NULL, seq BIGINT UNSIGNED NOT NULL, PRIMARY KEY (conv_id, seq))"); err != nil {
		t.Fatal(err)
	}
	got := rec.take()
	dbs, tables := 0, map[string]bool{}
	for _, l := range got {
		switch {
		case strings.Contains(l, "CREATE DATABASE IF NOT EXISTS"):
			dbs++
		case strings.Contains(l, "CREATE TABLE IF NOT EXISTS"):
			tables[l[strings.Index(l, "`im_"):strings.Index(l, " (")]] = true
		}
	}
	if dbs != 8 || len(tables) != 1024 {
		t.Fatalf("CREATE DATABASE x%d (want 8), distinct tables %d (want 1024)", dbs, len(tables))
	}
	if !tables["`im_3`.`conv_msg_0441`"] {
		t.Fatal("shard 441's table missing")
	}
	// DDL is not bounded by the statement timeout (an ALTER of a big table
	// takes minutes); reads are.
	if rec.untimed != 8+1024 {
		t.Errorf("%d DDL statements ran without the statement timeout, want all %d", rec.untimed, 8+1024)
	}
	if _, err := s.Query("SELECT seq, msg_id FROM conv_msg"); err != nil {
		t.Fatal(err)
	}
	if rec.untimed != 8+1024 {
		t.Errorf("a multi-shard SELECT ran without the statement timeout")
	}
}

// TestReservedUserVariables: statements naming the user variables of
// Convoy's own datasource sessions (the storage fence lets the migration's
// writes pass by one) are refused, however spelled; others are not.
func TestReservedUserVariables(t *testing.T) {
	s, rec := newTestSession()
	for _, q := range []string{
		"SET @convoy_migration = 1",
		"SET @CONVOY_MIGRATION := 1, @x = 2",
		"SELECT @`convoy_migration` := 1",
		"SELECT 1 INTO @'Convoy_purge'",
		"UPDATE conv_msg SET msg_type = (@convoy_migration := 1) WHERE conv_id = 42",
	} {
		_, err := s.Query(q)
		expectCode(t, err, sqlerr.NotSupported)
		if _, perr := s.Prepare(q); perr == nil {
			t.Errorf("PREPARE %s: accepted", q)
		}
	}
	if got := rec.take(); len(got) != 0 {
		t.Fatalf("a refused statement reached a backend: %q", got)
	}
	for _, q := range []string{"SET @convoyx = 1", "SELECT @convoy", "SELECT 'a@b'", "SELECT 'ops@convoy_team.example'", "SELECT @@convoy_x"} {
		if _, err := s.Query(q); err != nil {
			t.Errorf("%s: %v", q, err)
		}
	}
}

func TestSetIsCheckedAndCarried(t *testing.T) {
	s, rec := newTestSession()
	if _, err := s.Query("SET @@session.sql_mode = 'STRICT_TRANS_TABLES', @x = 5"); err != nil {
		t.Fatal(err)
	}
	if got := rec.take(); len(got) != 1 || !strings.Contains(got[0], "sync") {
		t.Fatalf("SET was not applied on a backend at once: %q", got)
	}
	_, err := s.Query("SET sql_mode = 'ANSI'")
	expectCode(t, err, sqlerr.NotSupported)
	_, err = s.Query("SET NAMES gbk")
	expectCode(t, err, sqlerr.NotSupported)
	if _, err := s.Query("SELECT * FROM conv_msg WHERE conv_id = 42"); err != nil {
		t.Fatal(err)
	}
	got := rec.take()
	if len(got) != 2 || !strings.Contains(got[0], "@x:5") || !strings.Contains(got[0], "@@sql_mode:'STRICT_TRANS_TABLES'") {
		t.Fatalf("session variables not carried to the shard connection: %q", got)
	}
}

// BenchmarkExecutePrepared measures routing a cached prepared statement:
// bind -> key -> shard -> render -> hand to the backend (a no-op fake).
func BenchmarkExecutePrepared(b *testing.B) {
	s, rec := newTestSession()
	p, err := s.Prepare("SELECT seq, msg_id, sender_uid, msg_type, created_at FROM conv_msg WHERE conv_id = ? AND seq < ? ORDER BY seq DESC LIMIT 20")
	if err != nil {
		b.Fatal(err)
	}
	rec.take()
	rec.quiet = true
	args := []any{int64(0), int64(100)}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		args[0] = int64(i)
		if _, err := s.Execute(p, args); err != nil {
			b.Fatal(err)
		}
		if i%1024 == 0 {
			rec.take()
		}
	}
}

// BenchmarkQueryText measures a text statement end to end in the engine:
// parse -> analyse -> route -> render (backend is a no-op fake).
func BenchmarkQueryText(b *testing.B) {
	s, rec := newTestSession()
	rec.quiet = true
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := s.Query("SELECT seq, msg_id, sender_uid, msg_type, created_at FROM conv_msg WHERE conv_id = 12345 AND seq < 100 ORDER BY seq DESC LIMIT 20"); err != nil {
			b.Fatal(err)
		}
		if i%1024 == 0 {
			rec.take()
		}
	}
}

// TestSeqInsertOneBatch: a message for one conversation allocates its seq,
// inserts and commits in one backend batch (the INSERT reads the seq the
// batch allocated); prepared values go inline; several conversations take
// the general path, one statement at a time.
func TestSeqInsertOneBatch(t *testing.T) {
	s, rec := newTestSession()
	r, err := s.Query("INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (42, 7, 1, 1, NOW()), (42, 8, 1, 1, NOW())")
	if err != nil {
		t.Fatal(err)
	}
	if r.InsertId != 999 { // the fake's new max_seq is 1000: two rows, the first gets 999
		t.Fatalf("InsertId = %d, want 999", r.InsertId)
	}
	seq := "(SELECT `max_seq` FROM `im_1`.`im_conv_seq_0136` WHERE `conv_id` = 42)"
	expectLog(t, rec,
		"ds0#1 multi: BEGIN",
		"ds0#1 multi: INSERT INTO `im_1`.`im_conv_seq_0136` (conv_id, max_seq) VALUES (42, LAST_INSERT_ID(2)) ON DUPLICATE KEY UPDATE max_seq = LAST_INSERT_ID(max_seq + 2)",
		"ds0#1 multi: INSERT INTO `im_1`.`conv_msg_0136` (`conv_id`,`msg_id`,`sender_uid`,`msg_type`,`created_at`,`seq`) VALUES (42,7,1,1,NOW(),"+seq+" - 1),(42,8,1,1,NOW(),"+seq+" - 0)",
		"ds0#1 multi: COMMIT")

	p, err := s.Prepare("INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (?, ?, ?, 1, NOW())")
	if err != nil {
		t.Fatal(err)
	}
	rec.take()
	if _, err := s.Execute(p, []any{int64(42), int64(9), []byte("it's")}); err != nil {
		t.Fatal(err)
	}
	expectLog(t, rec,
		"ds0#3 multi: BEGIN",
		"ds0#3 multi: INSERT INTO `im_1`.`im_conv_seq_0136` (conv_id, max_seq) VALUES (42, LAST_INSERT_ID(1)) ON DUPLICATE KEY UPDATE max_seq = LAST_INSERT_ID(max_seq + 1)",
		"ds0#3 multi: INSERT INTO `im_1`.`conv_msg_0136` (`conv_id`,`msg_id`,`sender_uid`,`msg_type`,`created_at`,`seq`) VALUES (42,9,'it\\'s',1,NOW(),"+seq+" - 0)",
		"ds0#3 multi: COMMIT")

	// Two conversations: allocation per conversation, then the INSERT.
	if _, err := s.Query("INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (42, 10, 1, 1, NOW()), (43, 11, 1, 1, NOW())"); err != nil {
		t.Fatal(err)
	}
	for _, l := range rec.take() {
		if strings.Contains(l, "multi") {
			t.Fatalf("a two-conversation insert went through the batch: %s", l)
		}
	}
}

// TestSeqBatchErrors: a batch that fails on the server is rolled back on
// its connection; one that fails on the wire is not (the connection is
// dropped, which rolls back); one whose COMMIT answered before the
// connection failed stored the message, and says so.
func TestSeqBatchErrors(t *testing.T) {
	const send = "INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (42, 7, 1, 1, NOW())"
	s, rec := newTestSession()
	rec.multiErr = io.ErrUnexpectedEOF
	if r, err := s.Query(send); err != nil || r.InsertId != 1000 {
		t.Fatalf("committed batch, connection lost after: %v, %+v", err, r)
	}
	rec.multiErr = nil
	rec.take()

	rec.failOn = "conv_msg_0136"
	if _, err := s.Query(send); err == nil {
		t.Fatal("failing batch: no error")
	}
	if log := rec.take(); len(log) == 0 || !strings.HasSuffix(log[len(log)-1], "text: ROLLBACK") {
		t.Fatalf("server error in the batch, no ROLLBACK: %q", log)
	}
	rec.failErr = io.ErrUnexpectedEOF
	if _, err := s.Query(send); err == nil {
		t.Fatal("broken batch: no error")
	}
	for _, l := range rec.take() {
		if strings.Contains(l, "ROLLBACK") {
			t.Fatalf("ROLLBACK sent on a broken connection: %s", l)
		}
	}
}

// TestPreparedBinaryValueInline: bytes that are not UTF-8 go inline as a
// binary literal where they are stored, and stay bound where compared.
func TestPreparedBinaryValueInline(t *testing.T) {
	s, rec := newTestSession()
	ins, err := s.Prepare("INSERT INTO msg_content (msg_id, conv_id, sender_uid, msg_type, content, created_at) VALUES (?, ?, 1, 1, ?, NOW())")
	if err != nil {
		t.Fatal(err)
	}
	sel, err := s.Prepare("SELECT msg_id FROM msg_content WHERE conv_id = ? AND content = ?")
	if err != nil {
		t.Fatal(err)
	}
	rec.take()
	body := []byte{0xff, 0x00, '\''}
	if _, err := s.Execute(ins, []any{int64(5), int64(42), body}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Execute(sel, []any{int64(42), body}); err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 64<<10+1)
	big[0] = 0xff
	if _, err := s.Execute(ins, []any{int64(6), int64(42), big}); err != nil {
		t.Fatal(err)
	}
	log := rec.take()
	if len(log) != 3 {
		t.Fatalf("backend log: %q", log)
	}
	if want := "ds0#3 text: INSERT INTO `im_1`.`msg_content_0136` (`msg_id`,`conv_id`,`sender_uid`,`msg_type`,`content`,`created_at`) VALUES (5,42,1,1,_binary X'FF0027',NOW())"; log[0] != want {
		t.Fatalf("stored binary value:\n got %s\nwant %s", log[0], want)
	}
	if !strings.HasPrefix(log[1], "ds0#4 prepared[42 [255 0 39]]: SELECT") || !strings.Contains(log[2], " prepared[") {
		t.Fatalf("compared or oversized binary values must stay bound: %q", log[1:])
	}
	// Any value above 64 KiB stays bound, UTF-8 text too: the
	// backend connection sends it as long data, so one of up to
	// max_allowed_packet fits the backend.
	if _, err := s.Execute(ins, []any{int64(7), int64(42), strings.Repeat("a", 64<<10+1)}); err != nil {
		t.Fatal(err)
	}
	if log := rec.take(); len(log) != 1 || !strings.Contains(log[0], " prepared[") {
		t.Fatalf("a long UTF-8 value must stay bound: %.200q", log)
	}
	// A latin1 client: the server would convert the bound string from
	// latin1 and not a binary literal, so the value stays bound.
	if _, err := s.Query("SET NAMES latin1"); err != nil {
		t.Fatal(err)
	}
	rec.take()
	if _, err := s.Execute(ins, []any{int64(7), int64(42), []byte("caf\xe9")}); err != nil {
		t.Fatal(err)
	}
	if log := rec.take(); len(log) == 0 || !strings.Contains(log[len(log)-1], " prepared[") || strings.Contains(strings.Join(log, "\n"), "_binary") {
		t.Fatalf("latin1 session, non-UTF-8 stored value: %q, want a bound parameter", log)
	}
}

// TestSQLModeExpr: only expressions over @@sql_mode and literals are
// evaluated on a backend; anything else stays refused as a non-literal.
func TestSQLModeExpr(t *testing.T) {
	for v, want := range map[string]bool{
		"CONCAT(@@`sql_mode`, ',STRICT_TRANS_TABLES')":          true,
		"concat(@@SESSION.`sql_mode`, ',NO_BACKSLASH_ESCAPES')": true, // evaluated, then refused by checkSQLMode
		"REPLACE(@@`sql_mode`, 'STRICT_TRANS_TABLES', '')":      true,
		"CONCAT_WS(',', @@`sql_mode`, 'a\\'b')":                 true,
		"'STRICT_TRANS_TABLES'":                                 false, // a literal: checked as it is
		"@m":                                                    false,
		"CONCAT(@m, ',X')":                                      false,
		"CONCAT((SELECT `c` FROM `t`), '')":                     false,
		"CONCAT(LOAD_FILE('/etc/passwd'), '')":                  false,
		"CONCAT(@@`sql_mode`, ',X'":                             true, // the server refuses the syntax
		"CONCAT(@@`sql_mode`, 'x) /* ')":                        true,
		"CONCAT(@@`sql_mode`) -- x":                             false,
		"CONCAT(@@`sql_mode`, 'unterminated)":                   false,
	} {
		if got := sqlModeExpr(v); got != want {
			t.Errorf("sqlModeExpr(%s) = %v, want %v", v, got, want)
		}
	}
}

// TestPreparedScatterLimit: LIMIT / OFFSET placeholders of a SELECT that
// reads many shards are bound at EXECUTE: every shard gets LIMIT
// offset+count as its own placeholder after the others, the merge skips
// offset and keeps count.
func TestPreparedScatterLimit(t *testing.T) {
	s, rec := newTestSession()
	for _, c := range []struct {
		sql      string
		args     []any
		rows     int
		wantArgs string
		wantSQL  string
	}{
		{"SELECT seq, msg_id FROM conv_msg WHERE msg_type = ? ORDER BY seq LIMIT ? OFFSET ?", []any{int64(1), int64(3), int64(2)}, 3,
			"prepared[1 5]", "SELECT `seq`,`msg_id` FROM `im_0`.`conv_msg_0000` AS `conv_msg` WHERE `msg_type`=? ORDER BY `seq` LIMIT ?"},
		{"SELECT seq, msg_id FROM conv_msg WHERE conv_id IN (?, ?) ORDER BY seq LIMIT ?, ?", []any{int64(1), int64(42), int64(1), "1"}, 1,
			"prepared[1 42 2]", "SELECT `seq`,`msg_id` FROM `im_1`.`conv_msg_0136` AS `conv_msg` WHERE `conv_id` IN (?,?) ORDER BY `seq` LIMIT ?"},
		// MariaDB takes a negative count as a huge one: every row.
		{"SELECT seq, msg_id FROM conv_msg WHERE conv_id IN (?, ?) ORDER BY seq LIMIT ?", []any{int64(1), int64(42), int64(-1)}, 2,
			"prepared[1 42 18446744073709551615]", "SELECT `seq`,`msg_id` FROM `im_1`.`conv_msg_0136` AS `conv_msg` WHERE `conv_id` IN (?,?) ORDER BY `seq` LIMIT ?"},
	} {
		p, err := s.Prepare(c.sql)
		if err != nil {
			t.Fatal(err)
		}
		rec.take()
		r, err := s.Execute(p, c.args)
		if err != nil {
			t.Fatalf("%s: %v", c.sql, err)
		}
		if len(r.RowDatas) != c.rows {
			t.Errorf("%s %v: %d rows, want %d", c.sql, c.args, len(r.RowDatas), c.rows)
		}
		found := false
		for _, l := range rec.take() {
			if !strings.Contains(l, " "+c.wantArgs+": ") || !strings.HasSuffix(l, "LIMIT ?") {
				t.Fatalf("%s: shard statement %q, want arguments %s", c.sql, l, c.wantArgs)
			}
			found = found || strings.HasSuffix(l, ": "+c.wantSQL)
		}
		if !found {
			t.Errorf("%s: no shard statement %q", c.sql, c.wantSQL)
		}
	}
}

// TestScatterWithoutResultset: a backend answering a read of every shard
// with an OK packet (no real server does; a broken or hostile one may) is a
// clear error naming the shard, not a panic.
func TestScatterWithoutResultset(t *testing.T) {
	s, _ := newTestSession()
	_, err := s.Query("SELECT COUNT(*) FROM conv_msg") // the fake answers OK
	if !sqlerr.Is(err, sqlerr.BackendUnavailable) || !strings.Contains(err.Error(), "without a result set") || !strings.Contains(err.Error(), "shard ") {
		t.Fatalf("scatter answered by OK packets: %v", err)
	}
}

// BenchmarkWriteText measures a single-shard write end to end in the
// engine (an UPDATE by key; the backend is a no-op fake): the path every
// write takes past the per-shard migration hold check.
func BenchmarkWriteText(b *testing.B) {
	s, rec := newTestSession()
	rec.quiet = true
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := s.Query("UPDATE conv_msg SET msg_type = 2 WHERE conv_id = 12345 AND seq = 7"); err != nil {
			b.Fatal(err)
		}
	}
}

// TestUnparsedRefusals: MariaDB statements the parser does not know get a
// reason (1235), not a syntax error.
func TestUnparsedRefusals(t *testing.T) {
	s, _ := newTestSession()
	for _, q := range []string{"XA START 'x'", "xa recover", "HANDLER conv_msg OPEN", "SHOW ENGINE INNODB STATUS"} {
		_, err := s.Query(q)
		expectCode(t, err, sqlerr.NotSupported)
	}
	_, err := s.Query("SELEC 1")
	expectCode(t, err, sqlerr.Syntax)
}

// @@convoy_cold_partial is Convoy's own variable: a SELECT of it is
// answered with the session's choice, never sent to the server as is
// (which would fail with 1193 unknown system variable).
func TestSelectColdPartialVariable(t *testing.T) {
	s, rec := newTestSession()
	for _, c := range []struct{ set, want string }{
		{"", "'warning'"},
		{"SET SESSION convoy_cold_partial = 'error'", "'error'"},
		{"SET convoy_cold_partial = DEFAULT", "'warning'"},
	} {
		if c.set != "" {
			if _, err := s.Query(c.set); err != nil {
				t.Fatal(err)
			}
		}
		rec.take()
		if _, err := s.Query("SELECT @@convoy_cold_partial, @@session.convoy_cold_partial AS p"); err != nil {
			t.Fatal(err)
		}
		got := rec.take()
		if want := "SELECT " + c.want + " AS `@@convoy_cold_partial`," + c.want + " AS `p`"; len(got) != 1 || !strings.HasSuffix(got[0], want) {
			t.Errorf("after %q: sent %q, want %q", c.set, got, want)
		}
	}
}

// Named-lock statements run on the session's one lock connection, kept
// between statements (its other statements use pooled ones), and released
// when the session closes; mixed with a sharded table they are refused.
func TestNamedLockConnection(t *testing.T) {
	s, rec := newTestSession()
	for _, q := range []string{"SELECT GET_LOCK('a', 5)", "SELECT 1", "DO RELEASE_LOCK('a')", "SELECT IS_USED_LOCK('a')"} {
		if _, err := s.Query(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	got := rec.take()
	if len(got) != 4 {
		t.Fatalf("sent %q", got)
	}
	connOf := func(l string) string { return l[:strings.Index(l, " ")] }
	if connOf(got[0]) != connOf(got[2]) || connOf(got[0]) != connOf(got[3]) || connOf(got[1]) == connOf(got[0]) {
		t.Errorf("the named-lock statements ran on %s, %s and %s, the other one on %s: want one connection of their own",
			connOf(got[0]), connOf(got[2]), connOf(got[3]), connOf(got[1]))
	}
	if s.locks == nil {
		t.Fatal("no lock connection kept")
	}
	if _, err := s.Query("SELECT GET_LOCK('b', 0), seq FROM conv_msg WHERE conv_id = 42"); err == nil {
		t.Error("a named lock with a sharded table was accepted")
	}
	s.Close()
	if s.locks != nil {
		t.Error("the lock connection outlived the session")
	}
}

// A /*+ convoy shard=N */ statement (RunTargeted) may join tables of both
// shard keys (a DBA's per-shard check): shard N's database holds its share
// of each. Without the directive such a statement is still refused.
func TestTargetedShardMixedKeys(t *testing.T) {
	s, rec := newTestSession()
	s.SetPrivileges(Privileges{Read: true, Write: true, DDL: true, Admin: true})
	const q = "SELECT COUNT(*) FROM conv_msg c JOIN im_inbox i ON i.conv_id = c.conv_id AND i.seq = c.seq"
	if _, err := s.Query(q); err == nil {
		t.Fatal("a statement mixing shard keys without a directive was accepted")
	}
	rec.take()
	if _, err := s.RunTargeted(441, "", " "+q); err != nil {
		t.Fatal(err)
	}
	got := rec.take()
	if len(got) != 1 || !strings.Contains(got[0], "`conv_msg_0441`") || !strings.Contains(got[0], "`im_inbox_0441`") {
		t.Fatalf("sent %q, want shard 441's conv_msg and im_inbox", got)
	}
	if _, err := s.Query(q); err == nil {
		t.Fatal("after a targeted statement, the same text without the directive was accepted")
	}
}
