package integration

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/convoy-im/convoy/internal/testsvc"
)

// imLoad is the IM mix of docs/design.md §4 from several clients: first
// screens, catch-ups after a reconnect, and sends.
type imLoad struct {
	convs   int
	workers int
	msgID   atomic.Int64
}

type phaseResult struct {
	name      string
	ops, errs int64
	firstErr  string
	secs      float64
	hot       float64 // statements Convoy served from the hot tier during the phase
}

func (r phaseResult) rate() float64 { return float64(r.ops) / r.secs }

const (
	drillFirstScreen = "SELECT seq, msg_id, sender_uid, msg_type, created_at FROM conv_msg WHERE conv_id = ? AND seq < ? ORDER BY seq DESC LIMIT 20"
	drillCatchUp     = "SELECT seq, msg_id, sender_uid, msg_type, created_at FROM conv_msg WHERE conv_id = ? AND seq > ? ORDER BY seq ASC LIMIT 20"
	drillSend        = "INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (?, ?, ?, 1, NOW(3))"
)

// run is one measured phase on db.
func (l *imLoad) run(t *testing.T, name string, db *sql.DB, p *convoyProc, d time.Duration) phaseResult {
	t.Helper()
	r := l.slice(t, db, p, d)
	r.name = name
	t.Logf("%-28s %6.0f/s (%d statements, %d errors, %.0f served hot)", name, r.rate(), r.ops, r.errs, r.hot)
	return r
}

// slice drives db for d and counts statements and errors; hot is read from
// the metrics of p (nil: not counted).
func (l *imLoad) slice(t *testing.T, db *sql.DB, p *convoyProc, d time.Duration) phaseResult {
	t.Helper()
	hot := func() float64 {
		if p == nil {
			return 0
		}
		return max(0, metricValue(t, scrape(t, p.metrics), `convoy_statements_total{class="hot"}`))
	}
	h0 := hot()
	var ops, errs atomic.Int64
	var firstErr atomic.Pointer[string]
	var wg sync.WaitGroup
	t0 := time.Now()
	stop := t0.Add(d)
	for w := range l.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), uint64(t0.UnixNano())))
			for time.Now().Before(stop) {
				conv := 1 + rng.IntN(l.convs)
				var err error
				switch x := rng.IntN(100); {
				case x < 15:
					_, err = db.Exec(drillSend, conv, l.msgID.Add(1), w)
				case x < 70:
					_, err = readPage(context.Background(), db, drillFirstScreen, conv, int64(1)<<40)
				default:
					_, err = readPage(context.Background(), db, drillCatchUp, conv, rng.IntN(40))
				}
				ops.Add(1)
				if err != nil {
					errs.Add(1)
					msg := err.Error()
					firstErr.CompareAndSwap(nil, &msg)
				}
			}
		}()
	}
	wg.Wait()
	r := phaseResult{ops: ops.Load(), errs: errs.Load(), secs: time.Since(t0).Seconds(), hot: hot() - h0}
	if e := firstErr.Load(); e != nil {
		r.firstErr = *e
	}
	return r
}

// versus runs the load on a and b in alternating slices for d each, so
// that both see the same machine (other processes share its two cores).
func (l *imLoad) versus(t *testing.T, name string, a *sql.DB, pa *convoyProc, b *sql.DB, d time.Duration) (phaseResult, phaseResult) {
	t.Helper()
	ra, rb := phaseResult{name: name}, phaseResult{name: name + ", tier disabled"}
	add := func(sum *phaseResult, r phaseResult) {
		sum.ops += r.ops
		sum.errs += r.errs
		sum.secs += r.secs
		sum.hot += r.hot
		if sum.firstErr == "" {
			sum.firstErr = r.firstErr
		}
	}
	const slice = 250 * time.Millisecond
	for i := time.Duration(0); i < d; i += slice {
		add(&ra, l.slice(t, a, pa, slice))
		add(&rb, l.slice(t, b, nil, slice))
	}
	t.Logf("%-28s %6.0f/s (%d statements, %d errors, %.0f served hot); tier disabled %6.0f/s (%d errors): ratio %.2f",
		name, ra.rate(), ra.ops, ra.errs, ra.hot, rb.rate(), rb.errs, ra.rate()/rb.rate())
	return ra, rb
}

// untilHot keeps the load on until Convoy serves from the tier again and
// reports how long that took after since.
func (l *imLoad) untilHot(t *testing.T, what string, db *sql.DB, p *convoyProc, since time.Time) {
	t.Helper()
	for time.Since(since) < 15*time.Second {
		if r := l.slice(t, db, p, 250*time.Millisecond); r.hot > 0 {
			t.Logf("%-28s hot tier serving again %.1fs after", what, time.Since(since).Seconds())
			return
		}
	}
	t.Errorf("%s: the hot tier did not serve again within 15 s", what)
}

// TestHotTierRedisOutageDrill is docs/operations/failures.md's Redis drill: the IM mix from 8
// clients through a Convoy with the hot tier, phase by phase: healthy,
// Redis killed, back, hung (SIGSTOP), continued; and through a Convoy
// without the tier on the same datasources just before each outage, the
// baseline. No client error in any phase; during an outage the throughput
// stays at >= 0.7x the baseline (the circuit breaker stops each statement
// waiting out the Redis timeout); after it the tier serves again; and
// afterwards every conversation's pages through Convoy equal MariaDB's.
func TestHotTierRedisOutageDrill(t *testing.T) {
	s := newStack(t)
	r := testsvc.StartRedis(t)
	// Defaults except marker_ttl (fills wait one marker TTL after Redis
	// comes back empty): the per-call timeout is 50 ms, as in the drill of
	// the issue.
	hot := startConvoy(t, s.etcd.Endpoints(), fmt.Sprintf("hot_tier: {enabled: true, addrs: [%q], marker_ttl: 1s}", r.Addr()))
	l := &imLoad{convs: 64, workers: 8}
	l.msgID.Store(1 << 40)
	admin := hot.open(t, "convoy", "convoy", "im")
	for c := 1; c <= l.convs; c++ {
		var vals []string
		for i := 0; i < 40; i++ {
			vals = append(vals, fmt.Sprintf("(%d, %d, 1, 1, NOW(3))", c, l.msgID.Add(1)))
		}
		mustExec(t, admin, "INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES "+strings.Join(vals, ", "))
	}
	pool := func(p *convoyProc) *sql.DB {
		db := openDSN(t, p.dsn("app", "app secret", "im")+"&interpolateParams=true")
		db.SetMaxOpenConns(l.workers)
		db.SetMaxIdleConns(l.workers)
		return db
	}
	withTier, without := pool(hot), pool(s.convoy)
	const phase = 4 * time.Second

	l.run(t, "warm-up", withTier, hot, time.Second)
	healthy, base0 := l.versus(t, "Redis healthy", withTier, hot, without, 2*time.Second)
	r.Kill()
	killed, base1 := l.versus(t, "Redis killed", withTier, hot, without, phase)
	r.Start()
	t0 := time.Now()
	back := l.run(t, "Redis back (empty)", withTier, hot, 2*time.Second)
	l.untilHot(t, "Redis back (empty)", withTier, hot, t0)
	r.Pause()
	hung, base2 := l.versus(t, "Redis hung (SIGSTOP)", withTier, hot, without, phase)
	r.Resume()
	t0 = time.Now()
	resumed := l.run(t, "Redis continued", withTier, hot, 2*time.Second)
	l.untilHot(t, "Redis continued", withTier, hot, t0)

	for _, p := range []phaseResult{healthy, base0, killed, base1, back, hung, base2, resumed} {
		if p.errs != 0 {
			t.Errorf("%s: %d client errors, first: %s", p.name, p.errs, p.firstErr)
		}
	}
	if killed.rate() < 0.7*base1.rate() {
		t.Errorf("Redis killed: %.0f statements/s, under 0.7x the %.0f/s without the tier", killed.rate(), base1.rate())
	}
	if hung.rate() < 0.7*base2.rate() {
		t.Errorf("Redis hung: %.0f statements/s, under 0.7x the %.0f/s without the tier", hung.rate(), base2.rate())
	}
	if healthy.hot < float64(healthy.ops)/4 {
		t.Errorf("only %.0f of %d statements served hot with Redis healthy", healthy.hot, healthy.ops)
	}
	m := scrape(t, hot.metrics)
	if v := metricValue(t, m, `convoy_histcache_breaker_transitions_total{to="open"}`); v < 2 {
		t.Errorf("breaker opened %v times over two outages", v)
	}
	if v := metricValue(t, m, `convoy_histcache_breaker_state`); v != 0 {
		t.Errorf("breaker state %v after the drill, want 0 (closed)", v)
	}
	b, _ := os.ReadFile(hot.logPath)
	log := string(b)
	if o, c := strings.Count(log, "circuit breaker open"), strings.Count(log, "circuit breaker closed"); o != 2 || c != 2 {
		t.Errorf("log has %d opening and %d closing lines of the breaker, want one of each per outage", o, c)
	}

	// Exactness: with the load stopped, every conversation's first screen
	// and a catch-up page through Convoy (several rounds, so that most are
	// served from the refilled tier) equal MariaDB read directly.
	var convs []int64
	for c := 1; c <= l.convs; c++ {
		convs = append(convs, int64(c))
	}
	where := placesOf(t, s, hot, convs)
	h0 := metricValue(t, scrape(t, hot.metrics), `convoy_statements_total{class="hot"}`)
	wrong := 0
	for round := 0; round < 3; round++ {
		for _, c := range convs {
			pl := where[c]
			for _, q := range []struct {
				sql    string
				cursor int64
			}{{drillFirstScreen, 1 << 40}, {drillCatchUp, 10}} {
				want, err := readPage(context.Background(), pl.db, strings.Replace(q.sql, "FROM conv_msg", "FROM "+pl.table, 1), c, q.cursor)
				if err != nil {
					t.Fatal(err)
				}
				got, err := readPage(context.Background(), withTier, q.sql, c, q.cursor)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, want) {
					if wrong++; wrong <= 3 {
						t.Errorf("conv %d %q: through Convoy\n%v\nMariaDB\n%v", c, q.sql[60:], got, want)
					}
				}
			}
		}
		time.Sleep(300 * time.Millisecond) // background fills
	}
	served := metricValue(t, scrape(t, hot.metrics), `convoy_statements_total{class="hot"}`) - h0
	t.Logf("after the drill: %d pages compared, %d wrong, %.0f served hot", 3*2*len(convs), wrong, served)
	if served < float64(len(convs)) {
		t.Errorf("only %.0f of %d compared pages served hot: the comparison did not check the tier", served, 3*2*len(convs))
	}
}
