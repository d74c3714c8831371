package integration

// Fault drills and security checks of docs/design.md §8 with real processes: a
// datasource killed under load, a backend dying mid-transaction, pool
// exhaustion, a blackholed backend, secrets in logs, LOAD DATA LOCAL, and
// the metrics listener's default bind address.

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/convoy-im/convoy/internal/testsvc"
	"github.com/convoy-im/convoy/router"
)

// snapshotOf reads the stack's route table from etcd.
func snapshotOf(t *testing.T, s *stack) *router.Snapshot {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	doc, err := s.store.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := router.NewSnapshot(doc)
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// keysOn returns n conv_id keys whose shard lives on datasource ds.
func keysOn(t *testing.T, s *stack, ds string, n int) []uint64 {
	t.Helper()
	snap := snapshotOf(t, s)
	var out []uint64
	for k := uint64(1); len(out) < n; k++ {
		if snap.Target(router.ShardOf(k)).Datasource == ds {
			out = append(out, k)
		}
	}
	return out
}

func goroutines(t *testing.T, p *convoyProc) float64 {
	return metricValue(t, scrape(t, p.metrics), "go_goroutines")
}

// fdCount counts Convoy's open files other than pooled backend connections
// (idle pooled connections are kept on purpose, up to the pool's max_idle).
func fdCount(p *convoyProc) int {
	es, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p.cmd.Process.Pid))
	return len(es) - poolConns(p)
}

func poolConns(p *convoyProc) int {
	resp, err := http.Get("http://" + p.metrics + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	n := 0.0
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "convoy_pool_connections{") {
			if f := strings.Fields(line); len(f) == 2 {
				v, _ := strconv.ParseFloat(f[1], 64)
				n += v
			}
		}
	}
	return int(n)
}

// waitBaseline waits until Convoy's goroutines and fds are back near the
// baseline (after the clients closed their connections).
func waitBaseline(t *testing.T, p *convoyProc, g0 float64, fd0 int, slack float64, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	var g float64
	var fd int
	for {
		g, fd = goroutines(t, p), fdCount(p)
		if g <= g0+slack && float64(fd) <= float64(fd0)+slack {
			t.Logf("back to baseline: goroutines %v (baseline %v), fds %d (baseline %d)", g, g0, fd, fd0)
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("convoy did not return to baseline within %s: goroutines %v (baseline %v), fds %d (baseline %d)", d, g, g0, fd, fd0)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

type loadStats struct {
	mu       sync.Mutex
	ok, errs map[string]int // by datasource
	slow     []string       // statements that took longer than 3 s
	unclear  []string       // errors without a MySQL errno
	lastErr  map[string]time.Time
	firstErr map[string]time.Time
}

// TestFaultKillDatasource: kill ds1's mariadbd under load. Only keys on ds1
// fail, each within 3 s with a MySQL errno; ds0 keys never fail; after the
// restart ds1 keys work again within 5 s; goroutines and fds return to
// baseline. Every error a client saw counts once in ds1's shards'
// convoy_shard_errors_total (the statements that failed at once while ds1
// was marked down too), and Convoy logged ds1 going down and coming back.
func TestFaultKillDatasource(t *testing.T) {
	s := newStack(t)
	db := s.convoy.open(t, "convoy", "convoy", "im")
	db.SetMaxOpenConns(8)
	k0, k1 := keysOn(t, s, "ds0", 8), keysOn(t, s, "ds1", 8)
	for _, k := range append(append([]uint64{}, k0...), k1...) {
		mustExec(t, db, "INSERT INTO conv_msg (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES (?, 1, ?, 1, 1, NOW())", k, k)
	}
	// Warm up, then take the baseline with the client pool idle.
	g0, fd0 := goroutines(t, s.convoy), fdCount(s.convoy)
	ds1Shards := shardsOf(t, s, "ds1")
	shardErrs0 := shardErrors(t, s.convoy, ds1Shards)
	var probeErrs atomic.Int64 // errors of the recovery check below

	st := &loadStats{ok: map[string]int{}, errs: map[string]int{}, lastErr: map[string]time.Time{}, firstErr: map[string]time.Time{}}
	var stop atomic.Bool
	var wg sync.WaitGroup
	worker := func(ds string, keys []uint64) {
		defer wg.Done()
		for i := 0; !stop.Load(); i++ {
			k := keys[i%len(keys)]
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			start := time.Now()
			var n int
			err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM conv_msg WHERE conv_id = ?", k).Scan(&n)
			d := time.Since(start)
			cancel()
			st.mu.Lock()
			if d > 3*time.Second {
				st.slow = append(st.slow, fmt.Sprintf("%s key %d: %s (%v)", ds, k, d, err))
			}
			if err != nil {
				st.errs[ds]++
				if st.firstErr[ds].IsZero() {
					st.firstErr[ds] = time.Now()
				}
				st.lastErr[ds] = time.Now()
				if errno(err) == 0 && len(st.unclear) < 5 {
					st.unclear = append(st.unclear, fmt.Sprintf("%s key %d: %v", ds, k, err))
				}
			} else {
				st.ok[ds]++
			}
			st.mu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
	}
	for i := 0; i < 3; i++ {
		wg.Add(2)
		go worker("ds0", k0)
		go worker("ds1", k1)
	}
	time.Sleep(500 * time.Millisecond)
	killed := time.Now()
	s.ds[1].Kill()
	time.Sleep(3 * time.Second)
	st.mu.Lock()
	okDuring1 := st.ok["ds1"]
	first := st.firstErr["ds1"]
	st.mu.Unlock()
	if first.IsZero() {
		t.Errorf("no ds1 key failed within 3 s of the kill")
	} else if d := first.Sub(killed); d > 3*time.Second {
		t.Errorf("first ds1 error %s after the kill, want <= 3 s", d)
	}
	// Let it stay down a little more, then restart.
	time.Sleep(time.Second)
	st.mu.Lock()
	okBefore := st.ok["ds1"]
	st.mu.Unlock()
	restarted := time.Now()
	s.ds[1].Start()
	var recovered time.Duration
	waitFor(t, "ds1 keys to work again after the restart", 15*time.Second, func() bool {
		// Every ds1 key must answer, on fresh statements.
		for _, k := range k1 {
			var n int
			err := db.QueryRow("SELECT COUNT(*) FROM conv_msg WHERE conv_id = ?", k).Scan(&n)
			if err != nil {
				probeErrs.Add(1)
			}
			if err != nil || n != 1 {
				return false
			}
		}
		recovered = time.Since(restarted)
		return true
	})
	if recovered > 5*time.Second {
		t.Errorf("full recovery took %s after the restart, want <= 5 s", recovered)
	}
	// The load keeps running for a second after recovery: no new ds1 errors.
	st.mu.Lock()
	errsAtRecovery := st.errs["ds1"]
	st.mu.Unlock()
	time.Sleep(time.Second)
	stop.Store(true)
	wg.Wait()
	st.mu.Lock()
	defer st.mu.Unlock()
	t.Logf("ds0: %d ok, %d errors; ds1: %d ok, %d errors (ok while down: %d); recovery %s after restart (mariadbd start included)",
		st.ok["ds0"], st.errs["ds0"], st.ok["ds1"], st.errs["ds1"], okBefore-okDuring1, recovered)
	if st.errs["ds0"] != 0 {
		t.Errorf("%d errors on ds0 keys while ds1 was down", st.errs["ds0"])
	}
	if n := st.errs["ds1"] - errsAtRecovery; n > 0 {
		t.Errorf("%d ds1 errors after recovery was reported", n)
	}
	for _, u := range st.unclear {
		t.Errorf("error without a MySQL errno: %s", u)
	}
	for i, sl := range st.slow {
		if i < 5 {
			t.Errorf("statement over 3 s: %s", sl)
		}
	}
	seen := st.errs["ds1"] + int(probeErrs.Load())
	counted := shardErrors(t, s.convoy, ds1Shards) - shardErrs0
	t.Logf("errors clients saw on ds1 keys: %d; convoy_shard_errors_total over ds1's %d shards rose by %v", seen, len(ds1Shards), counted)
	if counted != float64(seen) {
		t.Errorf("per-shard error metrics of ds1 rose by %v, clients saw %d errors", counted, seen)
	}
	for _, want := range [][]string{{`"datasource unavailable`, `"datasource":"ds1"`, `"state":"down"`}, {`"datasource back up"`, `"datasource":"ds1"`, `"out_for"`}} {
		if n := len(logLines(t, s.convoy, want...)); n != 1 {
			t.Errorf("%d log lines with %q, want 1", n, want)
		}
	}
	db.Close()
	waitBaseline(t, s.convoy, g0, fd0, 8, 10*time.Second)
	s.convoy.alive(t, "killing a datasource")
}

// TestFaultBackendDiesMidTransaction: the pinned backend dies between the
// INSERT and the COMMIT; COMMIT fails with a clear errno, nothing is
// replayed, ROLLBACK clears the session.
func TestFaultBackendDiesMidTransaction(t *testing.T) {
	s := newStack(t)
	db := s.convoy.open(t, "convoy", "convoy", "im")
	k := keysOn(t, s, "ds1", 1)[0]
	ctx := context.Background()
	c, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	mustExec(t, c, "BEGIN")
	mustExec(t, c, "INSERT INTO conv_msg (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES (?, 1, 1, 1, 1, NOW())", k)
	s.ds[1].Kill()
	start := time.Now()
	_, err = c.ExecContext(ctx, "COMMIT")
	t.Logf("COMMIT with the backend dead: %v (%s)", err, time.Since(start).Round(time.Millisecond))
	if err == nil {
		t.Fatalf("COMMIT succeeded although the pinned backend is dead")
	}
	// README, Errors: "transaction lost because its backend connection
	// broke" is 1180.
	if n := errno(err); n != 1180 {
		t.Errorf("COMMIT on a dead pinned backend: %v (errno %d), want 1180", err, n)
	}
	if time.Since(start) > 3*time.Second {
		t.Errorf("COMMIT took %s to fail", time.Since(start))
	}
	// Statements before ROLLBACK are refused (the transaction is lost) ...
	_, err = c.ExecContext(ctx, "SELECT 1")
	t.Logf("SELECT 1 in the lost transaction: %v", err)
	// ... ROLLBACK clears it.
	if _, err := c.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Errorf("ROLLBACK after the lost transaction: %v", err)
	}
	var one int
	if err := c.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
		t.Errorf("session after ROLLBACK: %v", err)
	}
	s.ds[1].Start()
	var n int
	waitFor(t, "ds1 back", 10*time.Second, func() bool {
		return c.QueryRowContext(ctx, "SELECT COUNT(*) FROM conv_msg WHERE conv_id = ?", k).Scan(&n) == nil
	})
	if n != 0 {
		t.Errorf("the uncommitted row is visible after the restart (replayed?): %d rows", n)
	}
	// The session is fully usable: a new transaction on the same shard.
	mustExec(t, c, "BEGIN")
	mustExec(t, c, "INSERT INTO conv_msg (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES (?, 2, 2, 1, 1, NOW())", k)
	mustExec(t, c, "COMMIT")
	if err := c.QueryRowContext(ctx, "SELECT COUNT(*) FROM conv_msg WHERE conv_id = ?", k).Scan(&n); err != nil || n != 1 {
		t.Errorf("after a new transaction: %d rows, %v", n, err)
	}
}

// restartConvoy replaces the stack's Convoy with one started with extra YAML.
func restartConvoy(t *testing.T, s *stack, extra ...string) {
	t.Helper()
	s.convoy.kill()
	s.convoy = startConvoy(t, s.etcd.Endpoints(), extra...)
}

// TestFaultPoolExhaustion: max_open 2 per datasource; two transactions hold
// both connections of ds0; a third statement for ds0 gets a timeout errno
// after about wait_timeout (500 ms); ds1 is unaffected.
func TestFaultPoolExhaustion(t *testing.T) {
	s := newStack(t)
	restartConvoy(t, s, "backend: {max_open: 2, wait_timeout: 500ms}")
	db := s.convoy.open(t, "convoy", "convoy", "im")
	ctx := context.Background()
	k0 := keysOn(t, s, "ds0", 3)
	k1 := keysOn(t, s, "ds1", 1)[0]
	// The third client logs in first: a login with a database checks it on
	// the default datasource (ds0), which needs a pool slot too.
	c3, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if err := c3.PingContext(ctx); err != nil {
		t.Fatal(err)
	}
	// A text-protocol client (no PREPARE), logged in before the exhaustion.
	c4, err := openDSN(t, s.convoy.dsn("convoy", "convoy", "im")+"&interpolateParams=true").Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c4.Close()
	if err := c4.PingContext(ctx); err != nil {
		t.Fatal(err)
	}
	var held []*sql.Conn
	for i := 0; i < 2; i++ {
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		mustExec(t, c, "BEGIN")
		mustExec(t, c, "INSERT INTO conv_msg (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES (?, 1, ?, 1, 1, NOW())", k0[i], 100+i)
		held = append(held, c)
	}
	start := time.Now()
	var n int
	err = c3.QueryRowContext(ctx, "SELECT COUNT(*) FROM conv_msg WHERE conv_id = ?", k0[2]).Scan(&n)
	d := time.Since(start)
	t.Logf("third statement on ds0: %v after %s", err, d.Round(time.Millisecond))
	if errno(err) != 1040 {
		t.Errorf("third statement with the pool exhausted: %v (errno %d), want the pool-timeout errno 1040", err, errno(err))
	}
	if d < 400*time.Millisecond || d > 2*time.Second {
		t.Errorf("pool timeout after %s, want about 500 ms", d)
	}
	if err := c4.QueryRowContext(ctx, "SELECT COUNT(*) FROM conv_msg WHERE conv_id = ?", k1).Scan(&n); err != nil {
		t.Errorf("ds1 key (text protocol) while ds0's pool is exhausted: %v", err)
	}
	// PREPARE of a sharded statement is described on shard 0's datasource
	// (ds0 here): a ds1 key must not depend on ds0.
	if err := c3.QueryRowContext(ctx, "SELECT COUNT(*) FROM conv_msg WHERE conv_id = ?", k1).Scan(&n); err != nil {
		t.Errorf("ds1 key (prepared) while ds0's pool is exhausted: %v", err)
	}
	for _, c := range held {
		mustExec(t, c, "ROLLBACK")
	}
	if err := c3.QueryRowContext(ctx, "SELECT COUNT(*) FROM conv_msg WHERE conv_id = ?", k0[2]).Scan(&n); err != nil {
		t.Errorf("ds0 after the transactions ended: %v", err)
	}
}

// TestFaultBlackholedBackend: ds1's address is changed (route update) to a
// listener that accepts and never answers. ds1 keys fail within
// connect_timeout (1 s) plus slack with a MySQL errno; goroutine growth is
// bounded; after the route is restored everything works and goroutines
// return to baseline.
func TestFaultBlackholedBackend(t *testing.T) {
	if _, err := os.Stat("/usr/sbin/iptables"); err == nil {
		t.Log("iptables exists, but a userspace blackhole is used anyway (no root rules in tests)")
	}
	s := newStack(t)
	restartConvoy(t, s, "backend: {connect_timeout: 1s}")
	// Client-side bound: a statement Convoy does not answer fails after 5 s
	// here instead of go-sql-driver's 30 s read timeout.
	db := openDSN(t, s.convoy.dsn("convoy", "convoy", "im")+"&readTimeout=5s")
	db.SetMaxOpenConns(20)
	q := func(k uint64) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var n int
		return db.QueryRowContext(ctx, "SELECT COUNT(*) FROM conv_msg WHERE conv_id = ?", k).Scan(&n)
	}
	k0, k1 := keysOn(t, s, "ds0", 4), keysOn(t, s, "ds1", 4)
	ctx := context.Background()
	g0, fd0 := goroutines(t, s.convoy), fdCount(s.convoy)

	bh := testsvc.Blackhole(t)
	doc, err := s.store.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	orig := doc
	orig.Datasources = append([]router.Datasource{}, doc.Datasources...)
	for i := range doc.Datasources {
		if doc.Datasources[i].Name == "ds1" {
			doc.Datasources[i].Addr = bh
		}
	}
	doc.Datasources = append([]router.Datasource{}, doc.Datasources...)
	if _, err := s.store.Apply(ctx, doc); err != nil {
		t.Fatal(err)
	}
	// Wait for the new route (a ds1 key stops working).
	waitFor(t, "the blackhole route to take effect", 10*time.Second, func() bool {
		return q(k1[0]) != nil
	})
	// 20 concurrent statements on ds1 keys, 20 on ds0 keys.
	var wg sync.WaitGroup
	var mu sync.Mutex
	var worst time.Duration
	var bad []string
	var ds0err []string
	for i := 0; i < 20; i++ {
		wg.Add(2)
		go func(i int) {
			defer wg.Done()
			start := time.Now()
			err := q(k1[i%len(k1)])
			d := time.Since(start)
			mu.Lock()
			defer mu.Unlock()
			if d > worst {
				worst = d
			}
			if err == nil || errno(err) == 0 {
				bad = append(bad, fmt.Sprintf("%v", err))
			}
		}(i)
		go func(i int) {
			defer wg.Done()
			if err := q(k0[i%len(k0)]); err != nil {
				mu.Lock()
				ds0err = append(ds0err, err.Error())
				mu.Unlock()
			}
		}(i)
	}
	peakG := 0.0
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	for {
		if g := goroutines(t, s.convoy); g > peakG {
			peakG = g
		}
		select {
		case <-done:
		case <-time.After(100 * time.Millisecond):
			continue
		}
		break
	}
	t.Logf("blackholed ds1: worst statement %s; goroutines baseline %v, peak %v; ds0 errors %d", worst.Round(time.Millisecond), g0, peakG, len(ds0err))
	if worst > 3*time.Second {
		t.Errorf("a statement on the blackholed datasource took %s (connect_timeout 1s)", worst)
	}
	if len(bad) > 0 {
		t.Errorf("%d statements on the blackholed datasource did not fail with a MySQL errno, e.g. %s", len(bad), bad[0])
	}
	if len(ds0err) > 0 {
		t.Errorf("%d ds0 statements failed while ds1 was blackholed, e.g. %s", len(ds0err), ds0err[0])
	}
	if peakG > g0+200 {
		t.Errorf("goroutines grew from %v to %v for 40 statements", g0, peakG)
	}
	// Restore the route; ds1 works again.
	cur, err := s.store.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	orig.Version = cur.Version
	if _, err := s.store.Apply(ctx, orig); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "ds1 back after the route is restored", 20*time.Second, func() bool {
		return q(k1[0]) == nil
	})
	db.Close()
	waitBaseline(t, s.convoy, g0, fd0, 8, 10*time.Second)
}

// TestSecretsNeverLogged: a client password and a datasource password (read
// from password_env) never appear in convoy.log, whatever happens: logins,
// failed logins, queries, errors, a route change, debug logging.
func TestSecretsNeverLogged(t *testing.T) {
	const userPW = "S3cr3t-pw!"
	const dsPW = "Ds-S3cret-9x"
	s := newStack(t)
	for _, m := range s.ds {
		m.Exec(t, "CREATE USER 'cv'@'127.0.0.1' IDENTIFIED BY '"+dsPW+"'", "GRANT ALL PRIVILEGES ON *.* TO 'cv'@'127.0.0.1'")
	}
	t.Setenv("CONVOY_IT_DS_PW", dsPW)
	ctx := context.Background()
	doc, err := s.store.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range doc.Datasources {
		doc.Datasources[i].User = "cv"
		doc.Datasources[i].PasswordEnv = "CONVOY_IT_DS_PW"
	}
	if _, err := s.store.Apply(ctx, doc); err != nil {
		t.Fatal(err)
	}
	s.convoy.kill()
	p := startConvoyUsers(t, s.etcd.Endpoints(), `  - {name: convoy, password: convoy, admin: true}
  - {name: sec, password: "`+userPW+`"}`)
	db := openDSN(t, p.dsn("sec", userPW, "im"))
	k0, k1 := keysOn(t, s, "ds0", 1)[0], keysOn(t, s, "ds1", 1)[0]
	for _, k := range []uint64{k0, k1} {
		mustExec(t, db, "INSERT INTO conv_msg (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES (?, 1, ?, 1, 1, NOW())", k, k)
	}
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM conv_msg").Scan(&n); err != nil || n != 2 {
		t.Fatalf("traffic as sec over cv@datasources: %d %v", n, err)
	}
	// Failed logins: wrong password, the secret as a user name, the secret
	// of one user tried on another.
	for _, dsn := range []string{p.dsn("sec", "wrong", "im"), p.dsn("convoy", userPW, "im"), p.dsn("nosuch", userPW, "im")} {
		bad := openDSN(t, dsn)
		if err := bad.Ping(); err == nil {
			t.Errorf("login with a wrong password succeeded")
		}
	}
	// Errors of every kind, and a datasource failure with the credentials in play.
	_, _ = db.Exec("SELECT nosuchcol FROM conv_msg WHERE conv_id = 1")
	_, _ = db.Exec("SELECT * FROM conv_msg WHERE conv_id = -1")
	_, _ = db.Exec("SET NAMES gbk")
	_, _ = db.Exec("SELECT '" + userPW + "' AS pw_in_a_query_is_the_clients_business")
	// Failed statements are logged (digest only): a refusal and a backend
	// error, each with the secret as a literal, one as a bound value.
	_, _ = db.Exec("DELETE FROM conv_msg WHERE msg_id = '" + userPW + "'")
	_, _ = db.Exec("SELECT nosuchcol FROM conv_msg WHERE conv_id = 1 AND sender_uid = '" + userPW + "'")
	_, _ = db.Exec("SELECT nosuchcol FROM conv_msg WHERE conv_id = ? AND sender_uid = ?", 1, userPW)
	s.ds[1].Kill()
	_, _ = db.Exec("SELECT COUNT(*) FROM conv_msg WHERE conv_id = ?", k1)
	s.ds[1].Start()
	// A wrong datasource password (the env var changes are not re-read, so
	// switch the route to a user whose password is wrong).
	doc, _ = s.store.Get(ctx)
	for i := range doc.Datasources {
		if doc.Datasources[i].Name == "ds1" {
			doc.Datasources[i].User = "root_no_such"
		}
	}
	if _, err := s.store.Apply(ctx, doc); err == nil {
		time.Sleep(1500 * time.Millisecond)
		_, _ = db.Exec("SELECT COUNT(*) FROM conv_msg WHERE conv_id = ?", k1)
	}
	time.Sleep(200 * time.Millisecond)
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		t.Fatal(err)
	}
	log := string(b)
	// Only the SELECT literal above may carry the user password (row
	// contents/SQL are the client's); Convoy must not log SQL text either,
	// so any occurrence is reported.
	for _, sec := range []string{userPW, dsPW} {
		if i := strings.Index(log, sec); i >= 0 {
			lo := max(0, i-300)
			hi := min(len(log), i+100)
			t.Errorf("secret %q appears in convoy.log: ...%s...", sec, log[lo:hi])
		}
	}
	// DSN-shaped strings user:password@tcp(...)
	if m := regexp.MustCompile(`[A-Za-z0-9_]+:[^@\s"]+@tcp\(`).FindString(log); m != "" {
		t.Errorf("a DSN with a password appears in convoy.log: %s", m)
	}
	for _, want := range []string{`"errno":1235`, `"stmt":"DELETE FROM conv_msg WHERE msg_id = ?"`,
		`"errno":1054`, `"stmt":"SELECT nosuchcol FROM conv_msg WHERE conv_id = ? AND sender_uid = ?"`} {
		if !strings.Contains(log, want) {
			t.Errorf("convoy.log has no %s: failed statements are not logged", want)
		}
	}
	t.Logf("convoy.log: %d bytes, %d lines scanned", len(log), strings.Count(log, "\n"))
}

// TestLoadDataLocalInfile: LOAD DATA LOCAL INFILE through Convoy never
// makes the proxy read a file of its own host or a datasource read one:
// the only file read is what the client sends when Convoy asks it, and
// Convoy asks only for a load into a sharded table it can route (by
// default; local_infile: all for unsharded tables). Here a client that
// would send any file: unsharded tables are refused before it is asked,
// and its /etc/hostname is no row of conv_msg (not a shard key).
func TestLoadDataLocalInfile(t *testing.T) {
	s := newStack(t)
	cv := openDSN(t, s.convoy.dsn("convoy", "convoy", "im")+"&allowAllFiles=true")
	mustExec(t, cv, "CREATE TABLE ld_t (l TEXT)")
	for _, c := range []struct {
		q     string
		errno uint16
	}{
		{"LOAD DATA LOCAL INFILE '/etc/passwd' INTO TABLE ld_t", 1148},
		{"LOAD DATA LOCAL INFILE '/etc/passwd' INTO TABLE ld_t FIELDS TERMINATED BY '\\n'", 1148},
		{"LOAD DATA LOCAL INFILE '/etc/hostname' INTO TABLE conv_msg", 1525},
		{"/*!LOAD DATA LOCAL INFILE '/etc/passwd' INTO TABLE ld_t*/", 1148},
		{"LOAD XML LOCAL INFILE '/etc/passwd' INTO TABLE ld_t", 1064},
	} {
		_, err := cv.Exec(c.q)
		t.Logf("%q -> %v", c.q, err)
		if errno(err) != c.errno {
			t.Errorf("%q: %v, want errno %d", c.q, err, c.errno)
		}
		s.convoy.alive(t, c.q)
	}
	if n := count(t, cv, "SELECT COUNT(*) FROM ld_t"); n != 0 {
		t.Errorf("ld_t holds %d rows: a local file was read", n)
	}
	if n := count(t, cv, "SELECT COUNT(*) FROM conv_msg"); n != 0 {
		t.Errorf("conv_msg holds %d rows after LOAD DATA", n)
	}
	// Server-side files on the datasource, as a non-admin user: the backend
	// account Convoy uses is root in this test stack, so this is a property
	// of the deployment's grants. Logged only.
	app := openDSN(t, s.convoy.dsn("app", "app secret", "im"))
	var f sql.NullString
	err := app.QueryRow("SELECT LOAD_FILE('/etc/hostname')").Scan(&f)
	t.Logf("note: non-admin SELECT LOAD_FILE('/etc/hostname') through convoy: valid=%v err=%v (depends on the datasource account's FILE privilege)", f.Valid, err)
}

// TestMetricsListenerLoopbackByDefault reads the defaults of `convoy serve`
// (cmd/convoy/config.go, package main, so read as source): the metrics and
// pprof listener and the MySQL listener bind to loopback unless configured.
func TestMetricsListenerLoopbackByDefault(t *testing.T) {
	b, err := os.ReadFile("../cmd/convoy/config.go")
	if err != nil {
		t.Fatal(err)
	}
	src := string(b)
	i := strings.Index(src, "func defaultConfig()")
	if i < 0 {
		t.Fatal("defaultConfig not found in cmd/convoy/config.go")
	}
	body := src[i:]
	if j := strings.Index(body, "\n}\n"); j > 0 {
		body = body[:j]
	}
	for _, field := range []string{"MetricsListen", "Listen"} {
		m := regexp.MustCompile(`c\.` + field + `\s*=\s*"([^"]*)"`).FindStringSubmatch(body)
		if m == nil {
			t.Errorf("defaultConfig sets no default for %s", field)
			continue
		}
		host, _, err := net.SplitHostPort(m[1])
		if err != nil {
			t.Errorf("default %s %q: %v", field, m[1], err)
			continue
		}
		ip := net.ParseIP(host)
		if host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			t.Errorf("default %s is %q: not loopback", field, m[1])
		}
		t.Logf("default %s = %s", field, m[1])
	}
	// config/dev.yaml is what `make run` uses: its metrics listener must be
	// loopback too (or absent).
	if y, err := os.ReadFile("../config/dev.yaml"); err == nil {
		if m := regexp.MustCompile(`(?m)^metrics_listen:\s*"?([^"\s#]+)`).FindStringSubmatch(string(y)); m != nil {
			host, _, _ := net.SplitHostPort(m[1])
			if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
				t.Errorf("config/dev.yaml metrics_listen %q is not loopback", m[1])
			}
		}
	}
}
