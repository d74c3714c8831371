package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/convoy-im/convoy/proxy/sqlerr"
	"github.com/convoy-im/convoy/rewrite"
)

// TestAnswer: a statement answered outside the engine (a directive) keeps
// a statement's bookkeeping: the process list shows it while it runs,
// Convoy's reserved variables are refused before it runs, and its error is
// classified as the engine's own.
func TestAnswer(t *testing.T) {
	s, _ := newTestSession()
	defer s.Close()
	const q = "/*+ convoy SHOW ROUTES */"
	r, err := s.Answer(q, func() (*mysql.Result, error) {
		if cmd, _, info, _ := s.proc.get(); cmd != "Query" || info != q {
			t.Errorf("the process list shows %s %q while the statement runs", cmd, info)
		}
		return okResult(), nil
	})
	if err != nil || r == nil {
		t.Fatal(r, err)
	}
	if cmd, _, info, _ := s.proc.get(); cmd != "Sleep" || info != "" {
		t.Errorf("the process list shows %s %q after the statement", cmd, info)
	}
	ran := false
	_, err = s.Answer("/*+ convoy shard=3 */ SELECT @convoy_x", func() (*mysql.Result, error) {
		ran = true
		return okResult(), nil
	})
	expectCode(t, err, sqlerr.NotSupported)
	if ran {
		t.Error("a statement naming a reserved variable was answered")
	}
	_, err = s.Answer(q, func() (*mysql.Result, error) {
		return nil, &rewrite.UnsupportedError{Msg: "not here"}
	})
	expectCode(t, err, sqlerr.NotSupported)
}

// TestQueryDatasource: a statement on a datasource's pooled connection,
// not the session's, with its rows decoded.
func TestQueryDatasource(t *testing.T) {
	rec := &recorder{cols: 1}
	e := New(rowsBackends{rec}, staticRoutes{defaultSnapshot()}, nil, nil, Options{})
	r, err := e.QueryDatasource("ds1", "SELECT 1", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := r.GetUint(0, 0); err != nil || v != 1 || r.Values == nil {
		t.Errorf("rows not decoded: %v %v", v, err)
	}
	if got := rec.take(); len(got) != 1 || !strings.HasPrefix(got[0], "ds1#") || !strings.HasSuffix(got[0], "SELECT 1") {
		t.Errorf("sent %q", got)
	}
	rec.failOn = "SELECT 2"
	if _, err := e.QueryDatasource("ds0", "SELECT 2", time.Second); err == nil {
		t.Error("a failed statement's error was lost")
	}
}
