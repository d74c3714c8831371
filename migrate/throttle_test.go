package migrate

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestThrottleDecisions: the factor halves at each decision a side's
// probes are over the line (to the floor, never 0), holds between 80 % of
// the line and the line, and doubles back to 1 once both sides are well
// under it; the reason names the side.
func TestThrottleDecisions(t *testing.T) {
	th := newThrottle(50*time.Millisecond, nil, nil)
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	decide := func(src, dst time.Duration, rounds int) {
		for i := 0; i < rounds; i++ {
			th.observe([2]time.Duration{src, dst}, 20, i == rounds-1)
		}
	}
	decide(ms(5), ms(5), 20)
	if f, why := th.state(); f != 1 || why != "" {
		t.Fatalf("healthy: %v %q", f, why)
	}
	// A single slow probe among 20 is not the p95 (the second slowest).
	decide(ms(200), ms(5), 1)
	if f, _ := th.state(); f != 1 {
		t.Fatalf("one slow probe throttled: %v", f)
	}
	decide(ms(80), ms(5), 5)
	f, why := th.state()
	if f != 0.5 || !strings.Contains(why, "source write probes p95 80ms > 50ms") {
		t.Fatalf("the source over the line: %v %q", f, why)
	}
	for range 10 {
		decide(ms(5), ms(90), 5)
	}
	if f, why := th.state(); f != throttleFloor || !strings.Contains(why, "target write probes") {
		t.Fatalf("the target over the line for long: %v %q, want the floor %v", f, why, throttleFloor)
	}
	// Between 80 % of the line and the line: hold.
	decide(ms(45), ms(45), 20)
	if f, _ := th.state(); f != throttleFloor {
		t.Fatalf("at 90%% of the line the factor moved: %v", f)
	}
	for range 10 {
		decide(ms(5), ms(5), 5)
	}
	if f, why := th.state(); f != 1 || why != "" {
		t.Fatalf("recovered: %v %q", f, why)
	}
}

// The throttle against a real server: the source's probe table locked
// (its writes wait, as behind a saturated disk) makes the copy's factor
// fall within a second and name the source; unlocked, it returns to 1.
func testThrottle(t *testing.T, e *env) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e.database(t, "thr")
	for _, m := range []*env{e} {
		m.src.Exec(t, "CREATE TABLE thr."+HeartbeatTable+" (job VARCHAR(64) NOT NULL, side VARCHAR(8) NOT NULL, at DATETIME(6) NOT NULL, PRIMARY KEY (job, side))")
		m.dst.Exec(t, "CREATE TABLE thr."+HeartbeatTable+" (job VARCHAR(64) NOT NULL, side VARCHAR(8) NOT NULL, at DATETIME(6) NOT NULL, PRIMARY KEY (job, side))")
	}
	// A line well above what this loaded machine's commits take: only
	// the lock crosses it.
	th := newThrottle(300*time.Millisecond, heartbeat(e.sdb, "thr", "j", "source"), heartbeat(e.ddb, "thr", "j", "target"))
	go th.run(ctx, func() {})
	lock, err := e.sdb.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if _, err := lock.ExecContext(ctx, "LOCK TABLES thr."+HeartbeatTable+" WRITE"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if f, why := th.state(); f < 1 && strings.Contains(why, "source write probes") {
			break
		}
		if time.Now().After(deadline) {
			f, why := th.state()
			t.Fatalf("the source's writes stalled and the copy was not throttled for it: %v %q", f, why)
		}
	}
	if _, err := lock.ExecContext(ctx, "UNLOCK TABLES"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if f, why := th.state(); f == 1 && why == "" {
			break
		}
		if time.Now().After(deadline) {
			f, why := th.state()
			t.Fatalf("the source's writes are fast again and the copy is still throttled: %v %q", f, why)
		}
	}
}
