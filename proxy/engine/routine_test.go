package engine

import (
	"fmt"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/convoy-im/convoy/proxy/sqlerr"
	"github.com/convoy-im/convoy/rewrite"
)

// The fake answers stored code with one result set flagged
// SERVER_MORE_RESULTS_EXISTS and a final OK; code containing "opens_txn"
// leaves a transaction open (SERVER_STATUS_IN_TRANS in the final OK).
func fakeChain(sql string, binary bool) []*mysql.Result {
	rs, err := mysql.BuildSimpleResultset([]string{"x"}, [][]any{{int64(1)}}, binary)
	if err != nil {
		panic(err)
	}
	final := &mysql.Result{Status: mysql.SERVER_STATUS_AUTOCOMMIT}
	if strings.Contains(sql, "opens_txn") {
		final.Status |= mysql.SERVER_STATUS_IN_TRANS
	}
	return []*mysql.Result{{Status: mysql.SERVER_MORE_RESULTS_EXISTS | mysql.SERVER_STATUS_AUTOCOMMIT, Resultset: rs}, final}
}

func (c *fakeConn) ExecAll(sql string) ([]*mysql.Result, error) {
	return fakeChain(sql, false), c.r.record(c, "all", sql)
}

func (c *fakeConn) ExecPreparedAll(sql string, args []any) ([]*mysql.Result, error) {
	return fakeChain(sql, true), c.r.record(c, fmt.Sprintf("all prepared%v", args), sql)
}

func TestRoutineDefinitionsPassThrough(t *testing.T) {
	s, rec := newTestSession()
	body := "CREATE DEFINER = CURRENT_USER PROCEDURE p(IN a INT)\nBEGIN\n  IF a < 0 THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'negative'; END IF;\n  SELECT a; SELECT a + 1;\nEND"
	for _, q := range []string{body, "DROP PROCEDURE IF EXISTS p", "CREATE FUNCTION f() RETURNS INT RETURN 1", "SHOW CREATE PROCEDURE p"} {
		if _, err := s.Query(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	expectLog(t, rec, "ds0#1 text: "+body, "ds0#2 text: DROP PROCEDURE IF EXISTS p", "ds0#3 text: CREATE FUNCTION f() RETURNS INT RETURN 1", "ds0#4 text: SHOW CREATE PROCEDURE p")

	// An open transaction is committed first, as MariaDB does for DDL.
	for _, q := range []string{"BEGIN", "INSERT INTO audit (a) VALUES (1)", "DROP TRIGGER t"} {
		if _, err := s.Query(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if s.InTransaction() {
		t.Fatal("still in a transaction after DROP TRIGGER")
	}
	expectLog(t, rec, "ds0#5 text: BEGIN", "ds0#5 text: INSERT INTO audit (a) VALUES (1)", "ds0#5 text: COMMIT", "ds0#6 text: DROP TRIGGER t")
}

func TestRoutineRefusals(t *testing.T) {
	s, rec := newTestSession()
	for _, q := range []string{
		"CREATE PROCEDURE p() BEGIN DELETE FROM conv_msg WHERE conv_id = 1; END",
		"CREATE TRIGGER t BEFORE INSERT ON conv_msg FOR EACH ROW SET NEW.seq = 1",
		"CREATE PROCEDURE p() BEGIN PREPARE s FROM @sql; EXECUTE s; END",
		"CALL p((SELECT MAX(seq) FROM conv_msg))",
	} {
		_, err := s.Query(q)
		expectCode(t, err, sqlerr.NotSupported)
		if _, err := s.Prepare(q); err == nil {
			t.Fatalf("prepared %s: accepted", q)
		}
	}
	expectLog(t, rec)

	// A transaction pinned to a shard cannot CALL: the procedure runs on the
	// default datasource. The transaction stays usable.
	for _, q := range []string{"BEGIN", "SELECT seq FROM conv_msg WHERE conv_id = 42"} {
		if _, err := s.Query(q); err != nil {
			t.Fatal(err)
		}
	}
	_, err := s.Query("CALL p()")
	expectCode(t, err, sqlerr.CrossShardTxn)
	if _, err := s.Query("COMMIT"); err != nil {
		t.Fatal(err)
	}
	log := rec.take()
	if len(log) != 3 || !strings.HasSuffix(log[2], "COMMIT") {
		t.Fatalf("backend log %q", log)
	}

	// A client without CLIENT_MULTI_RESULTS cannot CALL inside a transaction
	// (outside one, its CALL gets a connection with its own capabilities).
	s.SetMultiResults(false, false)
	if _, err := s.Query("BEGIN"); err != nil {
		t.Fatal(err)
	}
	_, err = s.Query("CALL p()")
	expectCode(t, err, sqlerr.NotSupported)
	expectLog(t, rec)
}

func TestCallChainAndTransactions(t *testing.T) {
	s, rec := newTestSession()
	r, err := s.Query("CALL p(1)")
	if err != nil {
		t.Fatal(err)
	}
	lead := s.TakeLeading()
	if len(lead) != 1 || !lead[0].HasResultset() || r.HasResultset() {
		t.Fatalf("leading %v, final %+v", lead, r)
	}
	if s.TakeLeading() != nil {
		t.Fatal("TakeLeading did not forget")
	}
	if s.InTransaction() {
		t.Fatal("in a transaction after a plain CALL")
	}
	expectLog(t, rec, "ds0#1 all: CALL p(1)")

	// Prepared: the backend describes it, EXECUTE runs it prepared.
	p, err := s.Prepare("CALL p(?)")
	if err != nil {
		t.Fatal(err)
	}
	if p.Params != 1 {
		t.Fatalf("params %d", p.Params)
	}
	if _, err := s.Execute(p, []any{int64(7)}); err != nil {
		t.Fatal(err)
	}
	expectLog(t, rec, "ds0#2 describe: CALL p(?)", "ds0#3 all prepared[7]: CALL p(?)")
	if len(s.TakeLeading()) != 1 {
		t.Fatal("no leading result set from a prepared CALL")
	}
	if _, err := s.Query("CALL p(?)"); err == nil {
		t.Fatal("a text CALL with ? was accepted")
	}

	// A procedure that leaves a transaction open: the session follows it on
	// that connection until COMMIT.
	if _, err := s.Query("CALL opens_txn()"); err != nil {
		t.Fatal(err)
	}
	if !s.InTransaction() {
		t.Fatal("the transaction the procedure opened was lost")
	}
	for _, q := range []string{"INSERT INTO audit (a) VALUES (1)", "COMMIT"} {
		if _, err := s.Query(q); err != nil {
			t.Fatal(err)
		}
	}
	expectLog(t, rec, "ds0#4 all: CALL opens_txn()", "ds0#4 text: INSERT INTO audit (a) VALUES (1)", "ds0#4 text: COMMIT")

	// Inside a transaction the CALL pins it to the default datasource; a
	// procedure that ends it (its final OK without IN_TRANS) ends the
	// session's too.
	for _, q := range []string{"BEGIN", "CALL p()"} {
		if _, err := s.Query(q); err != nil {
			t.Fatal(err)
		}
	}
	if s.InTransaction() {
		t.Fatal("the session still believes in a transaction the procedure ended")
	}
	expectLog(t, rec, "ds0#5 text: BEGIN", "ds0#5 all: CALL p()")
}

func TestSplitWithRoutineBody(t *testing.T) {
	s, _ := newTestSession()
	parts, err := s.Split("DROP PROCEDURE IF EXISTS p; CREATE PROCEDURE p() BEGIN SELECT 1; SELECT 2; END")
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) != 2 || parts[1].Text != " CREATE PROCEDURE p() BEGIN SELECT 1; SELECT 2; END" {
		t.Fatalf("parts %+v", parts)
	}
	// Every statement is checked before any runs.
	for _, q := range []string{"DROP PROCEDURE p; SELEC 1", "SELECT 1; CREATE PROCEDURE p() DELETE FROM conv_msg"} {
		if _, err := s.Split(q); err == nil {
			t.Fatalf("%s: accepted", q)
		}
	}
}

// The statements of a multi-statement query run from the ASTs Split parsed:
// no second parse, and a statement after the first reads its literals at
// their own offsets (0x2A stays the number 42, routed to its shard; read
// at the whole text's offsets it would be sent as the string x'2a').
func TestSplitParsesOnce(t *testing.T) {
	s, rec := newTestSession()
	parts, err := s.Split("UPDATE conv_msg SET msg_type = 1 WHERE conv_id = 7; /* c */ UPDATE conv_msg SET msg_type = 0x2 WHERE conv_id = 0x2A")
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) != 2 || parts[1].Text != " /* c */ UPDATE conv_msg SET msg_type = 0x2 WHERE conv_id = 0x2A" {
		t.Fatalf("parts %+v", parts)
	}
	rec.take()
	n := s.parser.Parses()
	for _, p := range parts {
		if _, err := s.RunStatement(p); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.parser.Parses(); got != n {
		t.Errorf("the statements were parsed again (%d parses)", got-n)
	}
	got := rec.take()
	want := "UPDATE `im_1`.`conv_msg_0136` AS `conv_msg` SET `msg_type`=0x2 WHERE `conv_id`=0x2A"
	if len(got) != 2 || !strings.HasSuffix(got[1], want) {
		t.Fatalf("sent %q, want the second to end %q", got, want)
	}
}

// A client with multi-statements on sends one statement at a time: Split
// hands it on unparsed, so that the plan cache serves it with no parse at
// all (parsing it whole first cost a full parse per statement).
func TestSplitOneStatementUsesPlanCache(t *testing.T) {
	s, rec := newTestSession()
	run := func(q string) {
		t.Helper()
		parts, err := s.Split(q)
		if err != nil {
			t.Fatal(err)
		}
		if len(parts) != 1 || parts[0].Text != q {
			t.Fatalf("%q split into %+v", q, parts)
		}
		if _, err := s.RunStatement(parts[0]); err != nil {
			t.Fatal(err)
		}
	}
	run("SELECT seq FROM conv_msg WHERE conv_id = 7") // planned once (a plan cache miss)
	n := s.parser.Parses()
	run("SELECT seq FROM conv_msg WHERE conv_id = 8")
	if got := s.parser.Parses(); got != n {
		t.Errorf("a statement of a shape the plan cache knows was parsed %d times", got-n)
	}
	run("SELECT seq FROM conv_msg WHERE conv_id = 9 ; ;") // trailing semicolons: one statement still
	if got := rec.take(); len(got) != 3 {
		t.Fatalf("sent %q", got)
	}
	for _, q := range []string{"SELECT 1; SELECT 2", "SELECT 1 /*!; SELECT 2 */", "SELECT 1; -- c\n SELECT 2"} {
		if rewrite.OneStatement(q) {
			t.Errorf("OneStatement(%q)", q)
		}
	}
}
