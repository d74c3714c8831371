package engine

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/convoy-im/convoy/proxy/backend"
	"github.com/convoy-im/convoy/proxy/sqlerr"
)

// TestOutageCountsPerShard: statements that get no connection (the
// datasource's breaker is open) fail with its message and count in the
// shard's and the datasource's error series like statements that failed on
// the server, once each: point reads, prepared ones, one shard's part of a
// multi-shard INSERT.
func TestOutageCountsPerShard(t *testing.T) {
	reg := prometheus.NewRegistry()
	rec := &recorder{cols: 2, failAcquire: map[string]error{"ds1": &backend.OutageError{Datasource: "ds1", State: backend.StateHung,
		Since: time.Now(), Err: &backend.UnavailableError{Datasource: "ds1", Err: errors.New("no answer to a health probe within 1s")}}}}
	e := New(rec, staticRoutes{defaultSnapshot()}, NewMetrics(reg), nil, Options{})
	s := e.NewSession("im")
	defer s.Close()
	// conv_id 1 is shard 0951 on ds1, conv_id 42 shard 0136 on ds0.
	_, err := s.Query("SELECT seq, msg_id FROM conv_msg WHERE conv_id = 1")
	expectCode(t, err, sqlerr.BackendUnavailable)
	if !strings.HasPrefix(err.Error(), "datasource ds1 is unavailable (hung since ") || !strings.HasSuffix(err.Error(), "no answer to a health probe within 1s") {
		t.Errorf("message: %v", err)
	}
	p, err := s.Prepare("SELECT seq, msg_id FROM conv_msg WHERE conv_id = ?")
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Execute(p, []any{int64(1)})
	expectCode(t, err, sqlerr.BackendUnavailable)
	if _, err := s.Execute(p, []any{int64(42)}); err != nil {
		t.Errorf("ds0 key while ds1 is out: %v", err)
	}
	_, err = s.Query("INSERT INTO im_inbox (uid, conv_id, seq, msg_id, send_time) VALUES (0, 1, 1, 1, NOW()), (42, 1, 2, 2, NOW())")
	expectCode(t, err, sqlerr.BackendUnavailable)
	body := scrapeText(t, reg)
	for series, want := range map[string]string{
		`convoy_shard_errors_total{shard="0951"}`:                       "2",
		`convoy_shard_queries_total{kind="read",shard="0951"}`:          "2",
		`convoy_shard_errors_total{shard="0801"}`:                       "1", // im_inbox of uid 0
		`convoy_shard_queries_total{kind="write",shard="0801"}`:         "1",
		`convoy_datasource_errors_total{datasource="ds1",kind="read"}`:  "2",
		`convoy_datasource_errors_total{datasource="ds1",kind="write"}`: "1",
		`convoy_datasource_errors_total{datasource="ds0",kind="read"}`:  "0",
	} {
		if got := valueOf(body, series); got != want {
			t.Errorf("%s = %q, want %s", series, got, want)
		}
	}
}

// TestScatterStopsAtFirstFailure: a multi-shard SELECT fails with the first
// failing shard named, and starts no part after it (on a hung datasource
// each would wait out the statement timeout in turn).
func TestScatterStopsAtFirstFailure(t *testing.T) {
	rec := &recorder{cols: 2, failOn: "conv_msg_", failDS: "ds1",
		failErr: &backend.TimeoutError{Datasource: "ds1", Timeout: time.Second}}
	e := New(rec, staticRoutes{defaultSnapshot()}, nil, nil, Options{ScatterParallelism: 1})
	s := e.NewSession("im")
	defer s.Close()
	_, err := s.Query("SELECT COUNT(*) FROM conv_msg")
	expectCode(t, err, sqlerr.StatementTimeout)
	if !strings.HasPrefix(err.Error(), "shard ") || !strings.Contains(err.Error(), "max_statement_time exceeded") {
		t.Errorf("message: %v", err)
	}
	got := rec.take()
	last := got[len(got)-1]
	if !strings.HasPrefix(last, "ds1#") {
		t.Errorf("statements ran after the failing part: %q", got)
	}
	if n := len(defaultSnapshot().AllPhysical("conv_msg")); len(got) >= n {
		t.Errorf("%d of %d parts ran", len(got), n)
	}
}

// TestStatementTimeoutInTransaction: a statement timing out in a
// transaction aborts it like a broken connection (the connection is
// dropped, so the server rolls it back): the statement gets 1969's code,
// later ones the aborted-transaction error until ROLLBACK. A COMMIT timing
// out says its outcome is unknown; a ROLLBACK timing out succeeds.
func TestStatementTimeoutInTransaction(t *testing.T) {
	s, rec := newTestSession()
	timeout := &backend.TimeoutError{Datasource: "ds0", Timeout: time.Second}
	must := func(q string) {
		t.Helper()
		if _, err := s.Query(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	must("BEGIN")
	rec.failOn, rec.failErr = "UPDATE", timeout
	_, err := s.Query("UPDATE conv_msg SET msg_type = 2 WHERE conv_id = 42 AND seq = 1")
	expectCode(t, err, sqlerr.StatementTimeout)
	if !strings.Contains(err.Error(), "outcome is unknown") {
		t.Errorf("message: %v", err)
	}
	_, err = s.Query("SELECT seq FROM conv_msg WHERE conv_id = 42")
	expectCode(t, err, sqlerr.TxnAborted)
	_, err = s.Query("COMMIT")
	expectCode(t, err, sqlerr.TxnAborted)
	must("SELECT seq FROM conv_msg WHERE conv_id = 42")

	rec.failOn = "COMMIT"
	must("BEGIN")
	must("UPDATE conv_msg SET msg_type = 2 WHERE conv_id = 42 AND seq = 1")
	_, err = s.Query("COMMIT")
	expectCode(t, err, sqlerr.TxnAborted)
	if !strings.Contains(err.Error(), "outcome on the server is unknown") {
		t.Errorf("COMMIT timing out: %v", err)
	}
	rec.failOn = "ROLLBACK"
	must("BEGIN")
	must("UPDATE conv_msg SET msg_type = 2 WHERE conv_id = 42 AND seq = 1")
	must("ROLLBACK")
	if s.InTransaction() {
		t.Error("still in a transaction after ROLLBACK")
	}
}
