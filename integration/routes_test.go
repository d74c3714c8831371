package integration

import (
	"context"
	"flag"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/convoy-im/convoy/router"
)

var etcdDown = flag.Duration("routes.etcddown", time.Minute, "how long TestRouteChange keeps etcd down while it reads and writes")

func scrape(t testing.TB, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func metricValue(t testing.TB, body, series string) float64 {
	t.Helper()
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`)
	m := re.FindStringSubmatch(body)
	if m == nil {
		return -1
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

func waitFor(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestRouteChangeAndEtcdOutage: a route change pushed to etcd takes effect
// without a restart; with etcd down Convoy keeps serving its last snapshot
// and says so in a metric; a restart while etcd is down serves from the
// local snapshot copy.
func TestRouteChangeAndEtcdOutage(t *testing.T) {
	s := newStack(t)
	db := s.convoy.open(t, "convoy", "convoy", "im")
	const key = 42 // shard 136
	sh := router.ShardOf(key)
	mustExec(t, db, "INSERT INTO conv_msg (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES (42, 1, 1, 1, 1, NOW())")

	body := scrape(t, s.convoy.metrics)
	if v := metricValue(t, body, `convoy_shard_queries_total{kind="write",shard="`+sh.String()+`"}`); v < 1 {
		t.Errorf("per-shard write counter for shard %s = %v\n", sh, v)
	}
	if v := metricValue(t, body, `convoy_route_version{cluster="it"}`); v != 1 {
		t.Errorf("convoy_route_version = %v, want 1", v)
	}

	// Move shard 136 alone to a new database on ds1 that holds a marker row.
	s.ds[1].Exec(t, "CREATE DATABASE im_moved", "CREATE TABLE im_moved.conv_msg_0136 LIKE im_1.conv_msg_0512")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	doc, err := s.store.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ranges []router.ShardRange
	for _, r := range doc.Shards {
		if int(sh) < r.From || int(sh) > r.To {
			ranges = append(ranges, r)
			continue
		}
		if r.From < int(sh) {
			left := r
			left.To = int(sh) - 1
			ranges = append(ranges, left)
		}
		ranges = append(ranges, router.ShardRange{From: int(sh), To: int(sh), Datasource: "ds1", Database: "im_moved"})
		if r.To > int(sh) {
			right := r
			right.From = int(sh) + 1
			ranges = append(ranges, right)
		}
	}
	doc.Shards = ranges
	s.ds[1].Exec(t, "INSERT INTO im_moved.conv_msg_0136 (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES (42, 99, 999, 1, 1, NOW())")
	if _, err := s.store.Apply(ctx, doc); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the moved shard to serve its marker row", 5*time.Second, func() bool {
		var seq int
		err := db.QueryRow("SELECT seq FROM conv_msg WHERE conv_id = 42").Scan(&seq)
		return err == nil && seq == 99
	})
	if v := metricValue(t, scrape(t, s.convoy.metrics), `convoy_route_version{cluster="it"}`); v != 2 {
		t.Errorf("convoy_route_version = %v after apply, want 2", v)
	}

	// etcd down for -routes.etcddown (a minute by default): reads keep
	// working on the last snapshot the whole time, a route change fails
	// closed (nothing half-applied), goroutines stay bounded. Writes to
	// sharded tables work until the proxy's registration may have expired
	// (the TTL, 10 s by default, less a 1 s margin, from its last renewal:
	// a migration could then switch a shard without it), and from then on
	// are refused with a clear error until etcd answers again.
	g0 := goroutines(t, s.convoy)
	stopped := time.Now()
	s.etcd.Stop()
	const ttl = 10 * time.Second
	downUntil := stopped.Add(max(*etcdDown, ttl+5*time.Second))
	var lastOK, firstRefused time.Duration
	for i := 0; time.Now().Before(downUntil); i++ {
		var n int
		if err := db.QueryRow("SELECT COUNT(*) FROM conv_msg WHERE conv_id = ?", 42).Scan(&n); err != nil || n != 1 {
			t.Fatalf("read with etcd down for %s: n=%d err=%v", time.Since(stopped).Round(time.Second), n, err)
		}
		at := time.Since(stopped)
		_, err := db.Exec("INSERT INTO im_inbox (uid, conv_id, seq, msg_id, send_time) VALUES (1, 42, ?, 1, NOW())", i+1)
		switch {
		case err == nil:
			lastOK = at
			if firstRefused > 0 {
				t.Fatalf("a write succeeded %s after etcd stopped, after one was refused at %s", at.Round(time.Millisecond), firstRefused.Round(time.Millisecond))
			}
		case errno(err) == 1105 && strings.Contains(err.Error(), "registration may have expired"):
			if firstRefused == 0 {
				firstRefused = at
			}
		default:
			t.Fatalf("a write %s after etcd stopped: %v, want success or 1105 naming the registration", at.Round(time.Millisecond), err)
		}
		if i%50 == 0 {
			cctx, ccancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, err := s.store.Apply(cctx, doc)
			ccancel()
			if err == nil {
				t.Fatal("a route change was accepted with etcd down")
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("etcd down: the last write accepted %s after, the first refused %s after", lastOK.Round(time.Millisecond), firstRefused.Round(time.Millisecond))
	// Renewals every TTL/3: the last one at most that long before the stop.
	if lastOK < ttl-time.Second-ttl/3-time.Second {
		t.Errorf("writes were refused from %s after etcd stopped, before the registration could have expired", lastOK)
	}
	if firstRefused == 0 || firstRefused > ttl {
		t.Errorf("the first write refused %s after etcd stopped (0: none), want before the %s TTL ran out", firstRefused, ttl)
	}
	if v := metricValue(t, scrape(t, s.convoy.metrics), `convoy_migration_write_fenced{cluster="it"}`); v != 1 {
		t.Errorf("convoy_migration_write_fenced = %v while fenced, want 1", v)
	}
	if g := goroutines(t, s.convoy); g > g0+50 {
		t.Errorf("goroutines grew from %v to %v while etcd was down", g0, g)
	}
	if v := metricValue(t, scrape(t, s.convoy.metrics), `convoy_route_version{cluster="it"}`); v != 2 {
		t.Errorf("convoy_route_version = %v after etcd was down, want 2 (unchanged)", v)
	}
	waitFor(t, "convoy_route_stale to become 1", 10*time.Second, func() bool {
		return metricValue(t, scrape(t, s.convoy.metrics), `convoy_route_stale{cluster="it"}`) == 1
	})

	// A restart while etcd is down serves from the local snapshot copy.
	s.convoy.kill()
	s.convoy.start(t)
	db2 := s.convoy.open(t, "convoy", "convoy", "im")
	var seq int
	if err := db2.QueryRow("SELECT seq FROM conv_msg WHERE conv_id = 42").Scan(&seq); err != nil || seq != 99 {
		t.Fatalf("cold start from the local snapshot: seq=%d err=%v\n%s", seq, err, s.convoy.logTail())
	}
	// Unregistered, it is invisible to migrators: writes are refused with
	// a clear error (reads are served) until it registers.
	const write = "INSERT INTO im_inbox (uid, conv_id, seq, msg_id, send_time) VALUES (2, 42, 1, 1, NOW())"
	if _, err := db2.Exec(write); errno(err) != 1105 || !strings.Contains(err.Error(), "not registered") {
		t.Fatalf("a write with the proxy unregistered: %v, want 1105 naming the registration", err)
	}

	s.etcd.Start()
	waitFor(t, "writes to be accepted once registered", 15*time.Second, func() bool {
		_, err := db2.Exec(write)
		return err == nil
	})
	waitFor(t, "convoy_route_stale to return to 0", 15*time.Second, func() bool {
		return metricValue(t, scrape(t, s.convoy.metrics), `convoy_route_stale{cluster="it"}`) == 0
	})
	if !strings.Contains(scrape(t, s.convoy.metrics), "convoy_route_staleness_seconds") {
		t.Error("convoy_route_staleness_seconds missing")
	}
}
