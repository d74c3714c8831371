package engine

import (
	"strings"
	"testing"

	"github.com/convoy-im/convoy/proxy/sqlerr"
)

// TestSetStatement: the statement's variables go to its connection and not
// to the next statement's; variables Convoy keeps itself, a transaction,
// and nesting are refused.
func TestSetStatement(t *testing.T) {
	s, rec := newTestSession()
	if _, err := s.Query("SET STATEMENT max_statement_time = 5, sql_select_limit = 2 FOR SELECT * FROM conv_msg WHERE conv_id = 42"); err != nil {
		t.Fatal(err)
	}
	got := rec.take()
	if len(got) != 2 || !strings.Contains(got[0], "@@max_statement_time:5") || !strings.Contains(got[0], "@@sql_select_limit:2") {
		t.Fatalf("the statement's variables were not on its connection: %q", got)
	}
	if _, err := s.Query("SELECT * FROM conv_msg WHERE conv_id = 42"); err != nil {
		t.Fatal(err)
	}
	if got := rec.take(); strings.Contains(strings.Join(got, " "), "max_statement_time") {
		t.Fatalf("the next statement carried them too: %q", got)
	}
	for _, q := range []string{
		"SET STATEMENT sql_mode = 'ANSI_QUOTES' FOR SELECT 1",
		"SET STATEMENT @x = 1 FOR SELECT 1",
		"SET STATEMENT names = 'gbk' FOR SELECT 1",
		"SET STATEMENT max_statement_time = (SELECT COUNT(*) FROM mysql.user) FOR SELECT 1",
	} {
		_, err := s.Query(q)
		expectCode(t, err, sqlerr.NotSupported)
	}
	_, err := s.Query("SET STATEMENT max_statement_time = 1 FOR SET STATEMENT max_statement_time = 2 FOR SELECT 1")
	expectCode(t, err, sqlerr.Syntax)
	if _, err := s.Query("BEGIN"); err != nil {
		t.Fatal(err)
	}
	_, err = s.Query("SET STATEMENT max_statement_time = 1 FOR SELECT * FROM conv_msg WHERE conv_id = 42")
	expectCode(t, err, sqlerr.NotSupported)
}
