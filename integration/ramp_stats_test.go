package integration

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/convoy-im/convoy/migrate/inproxy"
	"github.com/convoy-im/convoy/router"
)

// rampCounts are one proxy's read-ramp counters of shard 5 by "side result"
// (-1: the series is absent).
func rampCounts(t *testing.T, p *convoyProc) map[string]float64 {
	t.Helper()
	body := scrape(t, p.metrics)
	out := map[string]float64{}
	for _, side := range []string{"old", "new"} {
		for _, result := range []string{"ok", "error"} {
			out[side+" "+result] = metricValue(t, body,
				fmt.Sprintf(`%s{result="%s",shard="0005",side="%s"}`, inproxy.MetricRampReads, result, side))
		}
	}
	return out
}

// TestReadRampStats: during a read ramp every proxy counts the ramp's reads
// by side, and SHOW MIGRATIONS shows the live proxies' sums: reads sent
// through two Convoy processes for a conversation inside the 50% share
// (the target) and one outside (the source) are counted exactly on their
// side, reads failing on the target (its table renamed away) are errors of
// the new side only, and the series and columns go when the ramp ends.
func TestReadRampStats(t *testing.T) {
	s := newStack(t)
	p2 := startConvoy(t, s.etcd.Endpoints())
	proxies := []*convoyProc{s.convoy, p2}
	admin := s.convoy.open(t, "convoy", "convoy", "im")
	const shard = 5
	var low, high uint64 // conversations of shard 5 inside and outside the 50% share
	for k := uint64(1); low == 0 || high == 0; k++ {
		if router.ShardOf(k) != shard {
			continue
		}
		if inproxy.Share(k) < 50 && low == 0 {
			low = k
		} else if inproxy.Share(k) >= 50 && high == 0 {
			high = k
		}
	}
	mustExec(t, admin, "/*+ convoy MIGRATE SHARD 5 TO ds1 DATABASE im_mig */")
	status := func() map[string]string {
		t.Helper()
		ms := showMigrations(t, admin)
		if len(ms) != 1 {
			t.Fatalf("SHOW MIGRATIONS: %v", ms)
		}
		return ms[0]
	}
	waitFor(t, "the job to be ready", 2*time.Minute, func() bool { return status()["step"] == "ready" })
	if st := status(); st["old_reads"] != "" || st["new_reads"] != "" {
		t.Fatalf("per-side reads before any ramp: %v", st)
	}

	// A marker row on the target only tells which side a read went to.
	target := s.ds[1].Open(t, "")
	for _, c := range []uint64{low, high} {
		if _, err := target.Exec("INSERT INTO im_mig.conv_msg_0000 (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES (?, 999999, ?, 0, 0, NOW(3))", c, 9_000_000+c); err != nil {
			t.Fatal(err)
		}
	}
	clients := [2]func(c uint64) (bool, error){}
	for i, p := range proxies {
		db := p.open(t, "app", "app secret", "im")
		clients[i] = func(c uint64) (bool, error) {
			var n int
			// Text protocol: one backend read per query.
			err := db.QueryRow(fmt.Sprintf("SELECT COUNT(*) FROM conv_msg WHERE conv_id = %d AND seq = 999999", c)).Scan(&n)
			return n == 1, err
		}
	}
	mustExec(t, admin, "/*+ convoy MIGRATION 5 READ PERCENT 50 */")
	for i, read := range clients {
		waitFor(t, fmt.Sprintf("proxy %d to read conversation %d from the target", i, low), 10*time.Second, func() bool {
			onTarget, err := read(low)
			return err == nil && onTarget
		})
	}
	// The probes above were counted too: start from each proxy's counters.
	base := [2]map[string]float64{rampCounts(t, proxies[0]), rampCounts(t, proxies[1])}

	const perConv = 20
	for i, read := range clients {
		for range perConv {
			for _, c := range []uint64{low, high} {
				onTarget, err := read(c)
				if err != nil || onTarget != (c == low) {
					t.Fatalf("proxy %d, conversation %d (share %d): on the target %v, %v", i, c, inproxy.Share(c), onTarget, err)
				}
			}
		}
	}
	// The target's table gone: reads of the target fail, the source's not.
	const failing = 5
	if _, err := target.Exec("RENAME TABLE im_mig.conv_msg_0000 TO im_mig.conv_msg_0000_away"); err != nil {
		t.Fatal(err)
	}
	for i, read := range clients {
		for range failing {
			if _, err := read(low); err == nil || !strings.Contains(err.Error(), "1146") {
				t.Fatalf("proxy %d: a read of the renamed target table: %v", i, err)
			}
			if onTarget, err := read(high); err != nil || onTarget {
				t.Fatalf("proxy %d: a read of the source: %v %v", i, onTarget, err)
			}
		}
	}
	if _, err := target.Exec("RENAME TABLE im_mig.conv_msg_0000_away TO im_mig.conv_msg_0000"); err != nil {
		t.Fatal(err)
	}

	sum := map[string]float64{}
	for i, p := range proxies {
		got := rampCounts(t, p)
		want := map[string]float64{
			"old ok": base[i]["old ok"] + perConv + failing, "old error": base[i]["old error"],
			"new ok": base[i]["new ok"] + perConv, "new error": base[i]["new error"] + failing,
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("proxy %d: %s reads %g, want %g (before: %v)", i, k, got[k], v, base[i])
			}
			sum[k] += got[k]
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	// SHOW MIGRATIONS: both proxies' last minute, summed (each publishes
	// every 5 s).
	oldReads, newReads := sum["old ok"]+sum["old error"], sum["new ok"]+sum["new error"]
	pct := strconv.FormatFloat(100*sum["new error"]/newReads, 'f', 2, 64)
	var st map[string]string
	waitFor(t, "SHOW MIGRATIONS to sum both proxies' reads", 15*time.Second, func() bool {
		st = status()
		return st["old_reads"] == strconv.Itoa(int(oldReads)) && st["new_reads"] == strconv.Itoa(int(newReads))
	})
	if st["old_err_pct"] != "0.00" || st["new_err_pct"] != pct || st["old_p99_ms"] == "" || st["new_p99_ms"] == "" || st["read_share"] != "50%" {
		t.Fatalf("SHOW MIGRATIONS %v; want old_err_pct 0.00, new_err_pct %s, both P99s", st, pct)
	}
	t.Logf("per side: old %s reads, %s%% errors, P99 %s ms; new %s reads, %s%% errors, P99 %s ms",
		st["old_reads"], st["old_err_pct"], st["old_p99_ms"], st["new_reads"], st["new_err_pct"], st["new_p99_ms"])

	// The ramp ends: series and columns go.
	mustExec(t, admin, "/*+ convoy MIGRATION 5 READ PERCENT 0 */")
	waitFor(t, "the ramp series to go", 10*time.Second, func() bool {
		for _, p := range proxies {
			if strings.Contains(scrape(t, p.metrics), "convoy_migration_ramp_") {
				return false
			}
		}
		return true
	})
	waitFor(t, "the per-side columns to empty", 15*time.Second, func() bool {
		st = status()
		return st["old_reads"] == "" && st["new_reads"] == "" && st["new_p99_ms"] == ""
	})
}
