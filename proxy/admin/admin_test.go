package admin

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/convoy-im/convoy/proxy/sqlerr"
	"github.com/convoy-im/convoy/router"
)

func TestParse(t *testing.T) {
	if _, ok, _ := Parse("SELECT 1 /*+ convoy SHOW ROUTES */"); ok {
		t.Error("SQL with a directive after its start was read as a directive")
	}
	if _, ok, _ := Parse("/*+ MAX_EXECUTION_TIME(1) */ SELECT 1"); ok {
		t.Error("another hint was read as a directive")
	}
	d, ok, err := Parse("/*+ convoy shard=3 */ SELECT 1")
	if !ok || err != nil || d.Shard != 3 || d.Rest != " SELECT 1" {
		t.Fatalf("shard=3: %+v %v %v", d, ok, err)
	}
	_, ok, err = Parse("/*+ convoy SHOW TABLES */")
	if !ok {
		t.Fatal("a malformed directive was read as SQL")
	}
	expectCode(t, err, sqlerr.Syntax)
	if !strings.HasPrefix(err.Error(), "convoy directive: unknown directive SHOW TABLES; valid directives") {
		t.Errorf("syntax error %q", err)
	}
}

// TestRunIsTheAdmins: a directive is the admin's only; a refused one asks
// nothing of the engine and is not counted, an admin's is counted once.
func TestRunIsTheAdmins(t *testing.T) {
	e := newFakeEngine()
	a := New(e, Config{})
	s := &fakeSession{}
	for _, q := range []string{"/*+ convoy SHOW ROUTES */", "/*+ convoy shard=3 */ DELETE FROM conv_msg"} {
		_, err := query(t, a, s, q)
		expectCode(t, err, sqlerr.AccessDenied)
		if want := "Access denied; you need the Convoy admin privilege for "; !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s: %q", q, err)
		}
	}
	if calls := append(e.take(), s.calls...); len(calls) != 0 {
		t.Errorf("refused directives reached the engine: %q", calls)
	}
	s.admin = true
	if _, err := query(t, a, s, "/*+ convoy SHOW ROUTES WHERE shard = 3 */"); err != nil {
		t.Fatal(err)
	}
	if got := e.take(); strings.Join(got, ",") != "count admin" {
		t.Errorf("engine calls %q, want one count of class admin", got)
	}
}

// TestTargetedDirectives: shard=N, datasource=NAME and all hand the
// statement after the comment, byte for byte, to the session, and its
// answer back unchanged.
func TestTargetedDirectives(t *testing.T) {
	a := New(newFakeEngine(), Config{})
	want := &mysql.Result{AffectedRows: 7}
	s := &fakeSession{admin: true, result: want}
	for _, q := range []string{
		"/*+ convoy shard=441 */ UPDATE conv_msg SET msg_type = 3;",
		"/*+ convoy datasource=`ds1` */\tSHOW ENGINE INNODB STATUS",
		"/*+ convoy all */ DELETE FROM im_inbox WHERE send_time < '2026-01-01'",
	} {
		if r, err := query(t, a, s, q); r != want || err != nil {
			t.Fatalf("%s: %v %v", q, r, err)
		}
	}
	if got, want := strings.Join(s.calls, "\n"), strings.Join([]string{
		`shard=441 datasource="" sql=" UPDATE conv_msg SET msg_type = 3;"`,
		`shard=-1 datasource="ds1" sql="\tSHOW ENGINE INNODB STATUS"`,
		`shard=-1 datasource="" sql=" DELETE FROM im_inbox WHERE send_time < '2026-01-01'"`,
	}, "\n"); got != want {
		t.Errorf("RunTargeted calls:\n%s\nwant:\n%s", got, want)
	}
	s.err = sqlerr.Errorf(sqlerr.CrossShardTxn, "/*+ convoy all */ cannot run inside a transaction")
	if _, err := query(t, a, s, "/*+ convoy all */ DELETE FROM conv_msg"); err != s.err {
		t.Errorf("the session's error came back as %v", err)
	}
}

func TestShowRoutesAndShardFor(t *testing.T) {
	a := New(newFakeEngine(), Config{})
	s := &fakeSession{admin: true}
	r, err := query(t, a, s, "/*+ convoy SHOW ROUTES WHERE shard = 1023 */")
	if err != nil {
		t.Fatal(err)
	}
	if cols, got := rows(t, r); cols != "shard,datasource,database,table,state,route_version" || strings.Join(got, "\n") != "1023 | ds1 | im_7 | *_1023 | serving | 1" {
		t.Errorf("SHOW ROUTES WHERE shard = 1023: %s %q", cols, got)
	}
	r, err = query(t, a, s, "/*+ convoy SHOW ROUTES WHERE datasource = ds1 */")
	if err != nil {
		t.Fatal(err)
	}
	if _, got := rows(t, r); len(got) != 512 || !strings.HasPrefix(got[0], "0512 | ds1 | im_4 |") {
		t.Errorf("SHOW ROUTES WHERE datasource = ds1: %d rows, first %q", len(got), got[0])
	}
	_, err = query(t, a, s, "/*+ convoy SHOW ROUTES WHERE datasource = ds9 */")
	expectCode(t, err, sqlerr.NotSupported)
	if err.Error() != `unknown datasource "ds9"` {
		t.Errorf("unknown datasource: %q", err)
	}
	r, err = query(t, a, s, "/*+ convoy SHOW SHARD FOR uid = 7 */")
	if err != nil {
		t.Fatal(err)
	}
	sh := router.ShardOf(7).String()
	if _, got := rows(t, r); strings.Join(got, "\n") != strings.Join([]string{
		"uid | 7 | " + sh + " | im_conv_member | ds1 | im_5 | im_conv_member_" + sh + " | SELECT CRC32(7) % 1024",
		"uid | 7 | " + sh + " | im_inbox | ds1 | im_5 | im_inbox_" + sh + " | SELECT CRC32(7) % 1024",
	}, "\n") {
		t.Errorf("SHOW SHARD FOR uid = 7: %q", got)
	}
}

// TestShowDatasources: the pools' figures and health beside a live probe
// of every datasource: the Probe hook's when there is one, else SELECT 1
// through the engine, bounded by liveProbeTimeout; a failed probe marks a
// datasource without a health checker down.
func TestShowDatasources(t *testing.T) {
	e := newFakeEngine()
	e.down = map[string]bool{"ds1": true}
	since := time.Now().Add(-time.Minute)
	a := New(e, Config{Pools: func() []PoolStat {
		return []PoolStat{{Datasource: "ds0", InUse: 2, Idle: 3, State: "up", Since: since, TLS: "off"}}
	}})
	s := &fakeSession{admin: true}
	r, err := query(t, a, s, "/*+ convoy SHOW DATASOURCES */")
	if err != nil {
		t.Fatal(err)
	}
	cols, got := rows(t, r)
	if cols != "datasource,addr,user,health,ping,pool_in_use,pool_idle,default,since,for,last_error,tls" || len(got) != 2 {
		t.Fatalf("SHOW DATASOURCES: %s %q", cols, got)
	}
	c0, c1 := strings.Split(got[0], " | "), strings.Split(got[1], " | ")
	if c0[0] != "ds0" || c0[1] != "127.0.0.1:1" || c0[2] != "convoy" || c0[3] != "up" || strings.HasPrefix(c0[4], "failed") ||
		c0[5] != "2" || c0[6] != "3" || c0[7] != "yes" || c0[8] != since.Format("2006-01-02 15:04:05.000") || c0[11] != "off" {
		t.Errorf("ds0: %q", c0)
	}
	if c1[0] != "ds1" || c1[3] != "down" || c1[4] != "failed: connection refused" || c1[7] != "" || c1[8] != "" {
		t.Errorf("ds1: %q", c1)
	}
	if got, want := strings.Join(e.take(), "\n"), "count admin\nquery ds0 300ms: SELECT 1\nquery ds1 300ms: SELECT 1"; got != want {
		t.Errorf("engine calls:\n%s\nwant:\n%s", got, want)
	}

	// With a Probe hook, the engine is not asked.
	var deadlines []time.Duration
	a = New(e, Config{Probe: func(ctx context.Context, ds string) (time.Duration, error) {
		d, _ := ctx.Deadline()
		deadlines = append(deadlines, time.Until(d))
		return time.Millisecond, nil
	}})
	a.c.Probe = serialized(a.c.Probe)
	r, err = query(t, a, s, "/*+ convoy SHOW DATASOURCES */")
	if err != nil {
		t.Fatal(err)
	}
	if _, got := rows(t, r); !strings.HasPrefix(got[1], "ds1 | 127.0.0.1:2 | convoy | up | 1ms | 0 | 0 |") {
		t.Errorf("ds1 probed by the hook: %q", got[1])
	}
	if calls := e.take(); strings.Join(calls, ",") != "count admin" {
		t.Errorf("engine calls %q with a Probe hook", calls)
	}
	if len(deadlines) != 2 || deadlines[0] > liveProbeTimeout || deadlines[1] > liveProbeTimeout {
		t.Errorf("probe deadlines %v, want 2 within %s", deadlines, liveProbeTimeout)
	}
}

// serialized runs probe one call at a time (the directive probes every
// datasource at once).
func serialized(probe func(context.Context, string) (time.Duration, error)) func(context.Context, string) (time.Duration, error) {
	mu := make(chan struct{}, 1)
	return func(ctx context.Context, ds string) (time.Duration, error) {
		mu <- struct{}{}
		defer func() { <-mu }()
		return probe(ctx, ds)
	}
}

// TestShowShardStats: the engine's window, every active shard or one
// shard, active or not.
func TestShowShardStats(t *testing.T) {
	e := newFakeEngine()
	e.window.Record(7, true, 2*time.Millisecond, false)
	e.window.Record(9, false, time.Millisecond, true)
	a := New(e, Config{})
	s := &fakeSession{admin: true}
	r, err := query(t, a, s, "/*+ convoy SHOW SHARD STATS */")
	if err != nil {
		t.Fatal(err)
	}
	cols, got := rows(t, r)
	if cols != "shard,qps,reads,writes,errors,read_p50_ms,read_p99_ms,write_p50_ms,write_p99_ms" || len(got) != 2 ||
		!strings.HasPrefix(got[0], "0007 | 1.00 | 0 | 1 | 0 | 0.000 | 0.000 | ") || !strings.HasPrefix(got[1], "0009 | 1.00 | 1 | 0 | 1 | ") {
		t.Errorf("SHOW SHARD STATS: %s %q", cols, got)
	}
	r, err = query(t, a, s, "/*+ convoy SHOW SHARD STATS WHERE shard = 8 */")
	if err != nil {
		t.Fatal(err)
	}
	if _, got := rows(t, r); strings.Join(got, "\n") != "0008 | 0.00 | 0 | 0 | 0 | 0.000 | 0.000 | 0.000 | 0.000" {
		t.Errorf("an idle shard: %q", got)
	}
}

type fakeSearch struct{ err error }

func (f fakeSearch) Status(context.Context) ([]string, [][]any, error) {
	return []string{"datasource", "lag"}, [][]any{{"ds0", "3s"}, {"ds1", nil}}, f.err
}

// TestHooks: RELOAD ROUTES, SHOW PROXIES and SHOW SEARCH STATUS answer
// through their hooks, and say what failed.
func TestHooks(t *testing.T) {
	e := newFakeEngine()
	reloadErr := errors.New("etcd: deadline exceeded")
	a := New(e, Config{
		Reload: func(ctx context.Context) error {
			if d, ok := ctx.Deadline(); !ok || time.Until(d) > reloadTimeout {
				t.Errorf("RELOAD ROUTES without its deadline")
			}
			return reloadErr
		},
		Proxies: func(context.Context) ([]ProxyInfo, error) {
			return []ProxyInfo{{ID: "p1", Listen: ":3307", Version: "v1", StartedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), RouteVersion: 9}}, nil
		},
	})
	s := &fakeSession{admin: true}
	_, err := query(t, a, s, "/*+ convoy RELOAD ROUTES */")
	expectCode(t, err, sqlerr.BackendUnavailable)
	if err.Error() != "RELOAD ROUTES: etcd: deadline exceeded (still serving route version 1)" {
		t.Errorf("RELOAD ROUTES: %q", err)
	}
	reloadErr = nil
	r, err := query(t, a, s, "/*+ convoy RELOAD ROUTES */")
	if err != nil {
		t.Fatal(err)
	}
	if cols, got := rows(t, r); cols != "route_version" || strings.Join(got, ",") != "1" {
		t.Errorf("RELOAD ROUTES: %s %q", cols, got)
	}
	r, err = query(t, a, s, "/*+ convoy SHOW PROXIES */")
	if err != nil {
		t.Fatal(err)
	}
	if cols, got := rows(t, r); cols != "id,listen,metrics,version,started_at,route_version" || strings.Join(got, ",") != "p1 | :3307 |  | v1 | 2026-01-02T03:04:05Z | 9" {
		t.Errorf("SHOW PROXIES: %s %q", cols, got)
	}

	_, err = query(t, a, s, "/*+ convoy SHOW SEARCH STATUS */")
	expectCode(t, err, sqlerr.NotSupported)
	a.SetSearch(fakeSearch{})
	r, err = query(t, a, s, "/*+ convoy SHOW SEARCH STATUS */")
	if err != nil {
		t.Fatal(err)
	}
	if cols, got := rows(t, r); cols != "datasource,lag" || strings.Join(got, ",") != "ds0 | 3s,ds1 | " {
		t.Errorf("SHOW SEARCH STATUS: %s %q", cols, got)
	}
	a.SetSearch(fakeSearch{err: errors.New("index closed")})
	_, err = query(t, a, s, "/*+ convoy SHOW SEARCH STATUS */")
	expectCode(t, err, sqlerr.BackendUnavailable)
}
