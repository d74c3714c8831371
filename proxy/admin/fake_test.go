package admin

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/convoy-im/convoy/proxy/mysqlrow"
	"github.com/convoy-im/convoy/proxy/sqlerr"
	"github.com/convoy-im/convoy/proxy/stats"
	"github.com/convoy-im/convoy/router"
)

// fakeEngine is a recording Engine: it serves one snapshot and a stats
// window the test fills, answers SHOW SHARD HEALTH's disk query with the
// bytes used per datasource (a server error for a datasource not in used)
// and anything else with one row holding 1, and records every
// QueryDatasource and CountStatement call.
type fakeEngine struct {
	snap     *router.Snapshot
	window   *stats.Window
	qps      float64
	writeP99 time.Duration
	used     map[string]uint64
	down     map[string]bool // datasources whose queries fail

	mu    sync.Mutex
	calls []string
}

func newFakeEngine() *fakeEngine {
	return &fakeEngine{snap: testSnapshot(), window: stats.New(time.Minute, nil), qps: 3000, writeP99: 50 * time.Millisecond}
}

func testSnapshot() *router.Snapshot {
	doc, err := router.DefaultLayout([]router.Datasource{{Name: "ds0", Addr: "127.0.0.1:1", User: "convoy"}, {Name: "ds1", Addr: "127.0.0.1:2", User: "convoy"}}, 8)
	if err != nil {
		panic(err)
	}
	s, err := router.NewSnapshot(doc)
	if err != nil {
		panic(err)
	}
	return s
}

func (e *fakeEngine) record(format string, args ...any) {
	e.mu.Lock()
	e.calls = append(e.calls, fmt.Sprintf(format, args...))
	e.mu.Unlock()
}

// take returns the calls recorded so far, sorted (datasources are asked at
// once), and forgets them.
func (e *fakeEngine) take() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := e.calls
	e.calls = nil
	sort.Strings(out)
	return out
}

func (e *fakeEngine) Routes() *router.Snapshot   { return e.snap }
func (e *fakeEngine) StatsWindow() *stats.Window { return e.window }
func (e *fakeEngine) HealthThresholds() (float64, time.Duration) {
	return e.qps, e.writeP99
}
func (e *fakeEngine) CountStatement(class string) { e.record("count %s", class) }

func (e *fakeEngine) QueryDatasource(ds, sql string, timeout time.Duration) (*mysql.Result, error) {
	e.record("query %s %s: %s", ds, timeout, sql)
	if e.down[ds] {
		return nil, errors.New("connection refused")
	}
	var v uint64 = 1
	if strings.Contains(sql, "information_schema.TABLES") {
		used, ok := e.used[ds]
		if !ok {
			return nil, &mysql.MyError{Code: 1142, State: "42000", Message: "SELECT command denied"}
		}
		v = used
	}
	rs, err := mysql.BuildSimpleResultset([]string{"v"}, [][]any{{v}}, false)
	if err != nil {
		return nil, err
	}
	// Decoded, as the engine hands it.
	vals, err := rs.RowDatas[0].Parse(rs.Fields, false, nil)
	if err != nil {
		return nil, err
	}
	rs.Values = [][]mysql.FieldValue{vals}
	return mysql.NewResult(rs), nil
}

// fakeSession is a recording Session: its account is an admin or not, and
// RunTargeted records its arguments and answers with result or err.
type fakeSession struct {
	admin  bool
	calls  []string
	result *mysql.Result
	err    error
}

func (s *fakeSession) IsAdmin() bool { return s.admin }

func (s *fakeSession) RunTargeted(shard int, datasource, sql string) (*mysql.Result, error) {
	s.calls = append(s.calls, fmt.Sprintf("shard=%d datasource=%q sql=%q", shard, datasource, sql))
	return s.result, s.err
}

// query answers sql as package proxy does: Parse once, then Run.
func query(t *testing.T, a *Admin, s Session, sql string) (*mysql.Result, error) {
	t.Helper()
	d, ok, err := Parse(sql)
	if !ok {
		t.Fatalf("%s is not a directive", sql)
	}
	if err != nil {
		return nil, err
	}
	return a.Run(s, d)
}

func expectCode(t *testing.T, err error, c sqlerr.Code) {
	t.Helper()
	var e *sqlerr.Error
	if !errors.As(err, &e) || e.Code != c {
		t.Fatalf("error %v, want code %d", err, c)
	}
}

// rows renders a result set's columns and rows, cells joined by " | ".
func rows(t *testing.T, r *mysql.Result) (cols string, out []string) {
	t.Helper()
	if r == nil || r.Resultset == nil {
		t.Fatalf("result %v has no result set", r)
	}
	var names []string
	for _, f := range r.Fields {
		names = append(names, string(f.Name))
		if f.Type != mysql.MYSQL_TYPE_VAR_STRING {
			t.Errorf("column %s has type %d, want VAR_STRING", f.Name, f.Type)
		}
	}
	text, err := mysqlrow.TextRows(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range text {
		var cells []string
		for _, v := range row {
			cells = append(cells, string(v))
		}
		out = append(out, strings.Join(cells, " | "))
	}
	return strings.Join(names, ","), out
}
