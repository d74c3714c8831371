package integration

// Drills of docs/operations/failures.md for datasources: a hung datasource fails its
// statements within the statement timeout and then at once, leaves the
// other datasource's latency alone, never blocks SHOW DATASOURCES, and
// recovers as soon as it answers; a killed one is counted exactly in the
// per-shard error metrics and logged when it goes down and comes back.

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/convoy-im/convoy/router"
)

// sample is one client statement of a drill's load.
type sample struct {
	ds       string
	start, d time.Duration // since the load began
	err      error
}

// loadRecorder runs point reads on keys of each datasource from a few
// workers and keeps every sample.
type loadRecorder struct {
	t     *testing.T
	db    *sql.DB
	begin time.Time
	stop  atomic.Bool
	wg    sync.WaitGroup
	mu    sync.Mutex
	all   []sample
}

func startLoad(t *testing.T, db *sql.DB, workers int, keys map[string][]uint64) *loadRecorder {
	l := &loadRecorder{t: t, db: db, begin: time.Now()}
	for ds, ks := range keys {
		for w := 0; w < workers; w++ {
			l.wg.Add(1)
			go func() {
				defer l.wg.Done()
				for i := w; !l.stop.Load(); i++ {
					k := ks[i%len(ks)]
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					start := time.Now()
					var n int
					err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM conv_msg WHERE conv_id = ?", k).Scan(&n)
					end := time.Now()
					cancel()
					l.mu.Lock()
					l.all = append(l.all, sample{ds: ds, start: start.Sub(l.begin), d: end.Sub(start), err: err})
					l.mu.Unlock()
					time.Sleep(5 * time.Millisecond)
				}
			}()
		}
	}
	return l
}

func (l *loadRecorder) now() time.Duration { return time.Since(l.begin) }

func (l *loadRecorder) finish() []sample {
	l.stop.Store(true)
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.all
}

// pick returns the samples of ds that started in [from, to).
func pick(all []sample, ds string, from, to time.Duration) []sample {
	var out []sample
	for _, s := range all {
		if s.ds == ds && s.start >= from && s.start < to {
			out = append(out, s)
		}
	}
	return out
}

// p99 of the durations of ss (0 for none).
func p99(ss []sample) time.Duration {
	if len(ss) == 0 {
		return 0
	}
	ds := make([]time.Duration, len(ss))
	for i, s := range ss {
		ds[i] = s.d
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[(len(ds)*99)/100]
}

func maxDur(ss []sample) time.Duration {
	var m time.Duration
	for _, s := range ss {
		m = max(m, s.d)
	}
	return m
}

func errCount(ss []sample) int {
	n := 0
	for _, s := range ss {
		if s.err != nil {
			n++
		}
	}
	return n
}

// shardsOf lists the shards whose target is on datasource ds.
func shardsOf(t *testing.T, s *stack, ds string) []router.Shard {
	t.Helper()
	snap := snapshotOf(t, s)
	var out []router.Shard
	for sh := 0; sh < router.NumShards; sh++ {
		if snap.Target(router.Shard(sh)).Datasource == ds {
			out = append(out, router.Shard(sh))
		}
	}
	return out
}

// shardErrors sums convoy_shard_errors_total over shards.
func shardErrors(t *testing.T, p *convoyProc, shards []router.Shard) float64 {
	t.Helper()
	body := scrape(t, p.metrics)
	sum := 0.0
	for _, sh := range shards {
		if v := metricValue(t, body, fmt.Sprintf(`convoy_shard_errors_total{shard="%s"}`, sh)); v > 0 {
			sum += v
		}
	}
	return sum
}

// logLines returns the lines of Convoy's log containing every one of subs.
func logLines(t *testing.T, p *convoyProc, subs ...string) []string {
	t.Helper()
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
next:
	for _, l := range strings.Split(string(b), "\n") {
		for _, s := range subs {
			if !strings.Contains(l, s) {
				continue next
			}
		}
		out = append(out, l)
	}
	return out
}

// TestFaultHungDatasource: with a point-read load on keys of both
// datasources, ds1 is stopped (SIGSTOP) for 5 s with a statement timeout of
// 1 s. ds1's statements fail within the timeout (a statement running when it
// froze is interrupted when the health checker marks it hung, at most
// health_interval + health_timeout = 1.5 s later, or at the timeout), then
// at once while it is marked; ds0's P99 stays within noise of what it was
// before; SHOW DATASOURCES answers within a second and says hung; after
// SIGCONT ds1 answers again within 2 s and every transition is logged, in
// the log's JSON like every other line.
func TestFaultHungDatasource(t *testing.T) {
	s := newStack(t)
	restartConvoy(t, s, "backend: {statement_timeout: 1s}")
	db := s.convoy.open(t, "convoy", "convoy", "im")
	db.SetMaxOpenConns(16)
	db.SetMaxIdleConns(16)
	admin := s.convoy.open(t, "convoy", "convoy", "im")
	keys := map[string][]uint64{"ds0": keysOn(t, s, "ds0", 8), "ds1": keysOn(t, s, "ds1", 8)}
	for _, ks := range keys {
		for _, k := range ks {
			mustExec(t, db, "INSERT INTO conv_msg (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES (?, 1, ?, 1, 1, NOW())", k, k)
		}
	}
	showDatasources := func() (time.Duration, [][]string) {
		start := time.Now()
		rows := queryRows(t, admin, "/*+ convoy SHOW DATASOURCES */")
		return time.Since(start), rows
	}
	showDatasources() // the admin connection is open before the hang

	l := startLoad(t, db, 3, keys)
	time.Sleep(2500 * time.Millisecond)
	s.ds[1].Pause()
	paused := l.now()
	time.Sleep(300 * time.Millisecond)
	earlyShow, _ := showDatasources() // before the checker can have marked it
	time.Sleep(1700 * time.Millisecond)
	lateShow, rows := showDatasources()
	time.Sleep(paused + 5*time.Second - l.now())
	resumed := l.now()
	s.ds[1].Resume()
	time.Sleep(3 * time.Second)
	all := l.finish()
	end := l.now()

	// ds0: no error, P99 during the hang within noise of before.
	before0, during0, after0 := pick(all, "ds0", 500*time.Millisecond, paused), pick(all, "ds0", paused, resumed), pick(all, "ds0", resumed, end)
	ratio := float64(p99(during0)) / float64(max(p99(before0), time.Microsecond))
	t.Logf("ds0: P99 before %s (%d statements), during the hang %s (%d), after %s (%d): during/before %.2fx",
		p99(before0), len(before0), p99(during0), len(during0), p99(after0), len(after0), ratio)
	if n := errCount(pick(all, "ds0", 0, end)); n > 0 {
		t.Errorf("%d ds0 statements failed while ds1 was hung", n)
	}
	if ratio > 3 && p99(during0)-p99(before0) > 50*time.Millisecond {
		t.Errorf("ds0 P99 went from %s to %s while ds1 was hung", p99(before0), p99(during0))
	}

	// ds1: statements running or started during the hang all fail, with an
	// errno, within the timeout plus the watchdog's tick (or when marked).
	var hung []sample
	for _, sm := range pick(all, "ds1", 0, resumed) {
		if sm.start+sm.d > paused {
			hung = append(hung, sm)
		}
	}
	var marked time.Duration // when the first statement failed with the breaker's error
	fast := 0
	for _, sm := range hung {
		if sm.err == nil {
			if sm.start+sm.d < resumed { // one ending after SIGCONT may have reached ds1 after it
				t.Errorf("a ds1 statement started at +%s succeeded during the hang", (sm.start - paused).Round(time.Millisecond))
			}
			continue
		}
		if errno(sm.err) == 0 {
			t.Errorf("ds1 statement failed without a MySQL errno: %v", sm.err)
		}
		if strings.Contains(sm.err.Error(), "is unavailable (hung since") {
			fast++
			if end := sm.start + sm.d; marked == 0 || end < marked {
				marked = end
			}
		}
	}
	slowest := maxDur(hung)
	var afterMark []sample
	for _, sm := range hung {
		if marked > 0 && sm.start >= marked {
			afterMark = append(afterMark, sm)
		}
	}
	t.Logf("ds1 hung: %d statements failed, slowest %s; marked hung %s after SIGSTOP; %d failed at once after that, P99 %s, max %s",
		len(hung), slowest.Round(time.Millisecond), (marked - paused).Round(time.Millisecond), len(afterMark),
		p99(afterMark).Round(time.Microsecond), maxDur(afterMark).Round(time.Microsecond))
	if slowest > 1500*time.Millisecond {
		t.Errorf("a ds1 statement took %s to fail (statement timeout 1s)", slowest)
	}
	if marked == 0 || marked-paused > 2*time.Second {
		t.Errorf("ds1 was not marked hung within 2 s of SIGSTOP (first fast failure at +%s)", marked-paused)
	}
	if fast < 20 || p99(afterMark) > 100*time.Millisecond {
		t.Errorf("after ds1 was marked hung: %d fast failures, P99 %s; want statements to fail at once", fast, p99(afterMark))
	}

	// SHOW DATASOURCES never waits on the hung datasource.
	t.Logf("SHOW DATASOURCES during the hang: %s at +0.3 s, %s at +2 s: %v", earlyShow.Round(time.Millisecond), lateShow.Round(time.Millisecond), rows)
	if earlyShow > time.Second || lateShow > time.Second {
		t.Errorf("SHOW DATASOURCES took %s / %s with ds1 hung", earlyShow, lateShow)
	}
	if len(rows) != 2 || rows[1][0] != "ds1" || rows[1][3] != "hung" || !strings.HasPrefix(rows[1][4], "failed") || rows[1][10] == "" {
		t.Errorf("SHOW DATASOURCES with ds1 hung: %v", rows)
	}

	// Recovery: within 2 s of SIGCONT, and no error after it.
	var firstOK time.Duration
	for _, sm := range pick(all, "ds1", resumed, end) {
		if sm.err == nil && (firstOK == 0 || sm.start+sm.d < firstOK) {
			firstOK = sm.start + sm.d
		}
	}
	late := errCount(pick(all, "ds1", resumed+2*time.Second, end))
	t.Logf("ds1 resumed: first success %s after SIGCONT; %d errors after +2 s", (firstOK - resumed).Round(time.Millisecond), late)
	if firstOK == 0 || firstOK-resumed > 2*time.Second {
		t.Errorf("ds1 statements did not succeed within 2 s of SIGCONT (first at +%s)", firstOK-resumed)
	}
	if late > 0 {
		t.Errorf("%d ds1 statements failed more than 2 s after SIGCONT", late)
	}
	for _, want := range [][]string{{`"datasource unavailable`, `"datasource":"ds1"`, `"state":"hung"`}, {`"datasource back up"`, `"datasource":"ds1"`, `"out_for"`}} {
		if n := len(logLines(t, s.convoy, want...)); n != 1 {
			t.Errorf("%d log lines with %q, want 1", n, want)
		}
	}
	// Every line is zap's JSON: no library wrote plain text around it.
	for _, l := range logLines(t, s.convoy, "") {
		if l != "" && !json.Valid([]byte(l)) {
			t.Errorf("a log line that is not JSON: %s", l)
		}
	}
	s.convoy.alive(t, "a hung datasource")
}
