package engine

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/convoy-im/convoy/router"
)

// recorder is a recording fake of the backends: every statement is logged
// as "ds0#3 text: SELECT ..." (datasource, connection number, protocol).
type recorder struct {
	mu       sync.Mutex
	log      []string
	nconn    int
	failOn   string // statements containing this fail with a server error
	failDS   string // ... only on this datasource's connections, if set
	failErr  error  // ... or with this error instead
	failN    int    // ... only this many times, if set
	multiErr error  // ExecMulti returns it after running every statement
	cols     int    // column count Describe reports
	// failAcquire makes Acquire fail for a datasource (a breaker open, a
	// pool timeout).
	failAcquire map[string]error
	untimed     int  // connections whose statement timeout was turned off
	quiet       bool // benchmarks: record nothing, so the fake costs ~nothing
	// hook, if set, runs before each recorded statement (outside the
	// lock): a test blocks a statement "on the server" with it.
	hook func(sql string)
}

type fakeConn struct {
	r    *recorder
	ds   string
	id   int
	vars map[string]string
}

func (r *recorder) Acquire(_ context.Context, ds string, _ bool) (Conn, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.failAcquire[ds]; err != nil {
		return nil, err
	}
	r.nconn++
	return &fakeConn{r: r, ds: ds, id: r.nconn}, nil
}

func (r *recorder) record(c *fakeConn, kind, sql string) error {
	if r.quiet {
		return nil
	}
	if r.hook != nil {
		r.hook(sql)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log = append(r.log, fmt.Sprintf("%s#%d %s: %s", c.ds, c.id, kind, sql))
	if r.failOn != "" && strings.Contains(sql, r.failOn) && (r.failDS == "" || r.failDS == c.ds) {
		if r.failN > 0 {
			if r.failN--; r.failN == 0 {
				r.failOn = ""
			}
		}
		if r.failErr != nil {
			return r.failErr
		}
		return &mysql.MyError{Code: 1062, State: "23000", Message: "Duplicate entry"}
	}
	return nil
}

func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := r.log
	r.log = nil
	return l
}

func (c *fakeConn) Datasource() string { return c.ds }

// fakeResult answers a SELECT with one row (seq 1, msg_id 2) in the
// protocol asked for, anything else with an OK; a seq allocation reports
// 1000 as the conversation's new max_seq.
func fakeResult(sql string, binary bool) *mysql.Result {
	if strings.HasPrefix(sql, "SELECT `seq`,`msg_id` FROM") {
		rs, err := mysql.BuildSimpleResultset([]string{"seq", "msg_id"}, [][]any{{int64(1), int64(2)}}, binary)
		if err != nil {
			panic(err)
		}
		return &mysql.Result{Resultset: rs}
	}
	if strings.HasPrefix(sql, "SELECT c.msg_id, c.conv_id, m.seq") { // a msg_search's fresh window: empty
		rs, err := mysql.BuildSimpleResultset([]string{"msg_id", "conv_id", "seq", "sender_uid", "msg_type", "content", "created_at"}, nil, binary)
		if err != nil {
			panic(err)
		}
		return &mysql.Result{Resultset: rs}
	}
	if strings.HasPrefix(sql, "SELECT conv_id FROM") { // a msg_search's members: uid is in 42 and 43
		var rows [][]any
		_, one, narrowed := strings.Cut(sql, "AND conv_id = ")
		for _, c := range []string{"42", "43"} {
			if !narrowed || one == c {
				rows = append(rows, []any{c})
			}
		}
		rs, err := mysql.BuildSimpleResultset([]string{"conv_id"}, rows, binary)
		if err != nil {
			panic(err)
		}
		return &mysql.Result{Resultset: rs}
	}
	if sql == "SELECT @@last_gtid" { // the dual-write's note of a commit
		rs, err := mysql.BuildSimpleResultset([]string{"@@last_gtid"}, [][]any{{"0-1-77"}}, binary)
		if err != nil {
			panic(err)
		}
		return &mysql.Result{Resultset: rs}
	}
	if strings.Contains(sql, "LAST_INSERT_ID(") {
		return &mysql.Result{AffectedRows: 1, InsertId: 1000}
	}
	return &mysql.Result{AffectedRows: 1}
}

func (c *fakeConn) Exec(sql string) (*mysql.Result, error) {
	return fakeResult(sql, false), c.r.record(c, "text", sql)
}
func (c *fakeConn) ExecMulti(sql string) ([]*mysql.Result, error) {
	var out []*mysql.Result
	for _, st := range strings.Split(sql, ";") { // the fake's batches hold no ';' in literals
		if err := c.r.record(c, "multi", st); err != nil {
			return out, err
		}
		out = append(out, fakeResult(st, false))
	}
	return out, c.r.multiErr
}
func (c *fakeConn) ExecPrepared(sql string, args []any) (*mysql.Result, error) {
	if c.r.quiet {
		return fakeResult(sql, true), nil
	}
	return fakeResult(sql, true), c.r.record(c, fmt.Sprintf("prepared%v", args), sql)
}
func (c *fakeConn) Describe(sql string) (int, []*mysql.Field, error) {
	fs := make([]*mysql.Field, c.r.cols)
	for i := range fs {
		fs[i] = &mysql.Field{Name: []byte(fmt.Sprintf("c%d", i)), Type: mysql.MYSQL_TYPE_LONGLONG}
	}
	return strings.Count(sql, "?"), fs, c.r.record(c, "describe", sql)
}
func (c *fakeConn) UseDB(string) error { return nil }
func (c *fakeConn) SyncVars(want map[string]string) error {
	if len(want) == len(c.vars) {
		return nil
	}
	c.vars = want
	return c.r.record(c, "sync", fmt.Sprint(want))
}
func (c *fakeConn) Release() {}
func (c *fakeConn) SetTimeout(d time.Duration) {
	if d == 0 {
		c.r.mu.Lock()
		c.r.untimed++
		c.r.mu.Unlock()
	}
}

type staticRoutes struct{ s *router.Snapshot }

func (r staticRoutes) Current() *router.Snapshot { return r.s }

func defaultSnapshot() *router.Snapshot {
	doc, err := router.DefaultLayout([]router.Datasource{{Name: "ds0", Addr: "127.0.0.1:1"}, {Name: "ds1", Addr: "127.0.0.1:2"}}, 8)
	if err != nil {
		panic(err)
	}
	s, err := router.NewSnapshot(doc)
	if err != nil {
		panic(err)
	}
	return s
}

func newTestSession() (*Session, *recorder) {
	rec := &recorder{cols: 6}
	e := New(rec, staticRoutes{defaultSnapshot()}, nil, nil, Options{})
	return e.NewSession("im"), rec
}
