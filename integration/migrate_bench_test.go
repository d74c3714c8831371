package integration

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/convoy-im/convoy/migrate"
	"github.com/convoy-im/convoy/migrate/inproxy"
	"github.com/convoy-im/convoy/router"
)

var (
	migBenchCycles = flag.Int("migbench.cycles", 10, "BenchmarkMigrationUnderLoad: migrate-then-roll-back cycles (two switches each)")
	migBenchRows   = flag.Int("migbench.rows", 10000, "BenchmarkMigrationUnderLoad: rows seeded in the migrating shard (each backfill copies them at the default 2000 rows/s)")
	migBenchIdle   = flag.Duration("migbench.idle", 5*time.Second, "BenchmarkMigrationUnderLoad: the no-migration window measured before each cycle")
	migBenchThink  = flag.Duration("migbench.think", 20*time.Millisecond, "BenchmarkMigrationUnderLoad: each writer's pause between two inserts")
	migBenchProxy  = flag.Int("migbench.proxies", 3, "BenchmarkMigrationUnderLoad: Convoy processes the writers go through")
)

// Writer classes of BenchmarkMigrationUnderLoad.
const (
	wcMoving = iota // conversations of the migrating shard
	wcSource        // another shard on the migration's source server
	wcTarget        // another shard on the migration's target server
	wcN
)

var wcNames = [wcN]string{"migrating shard", "other shard, source server (ds0)", "other shard, target server (ds1)"}

// benchWrite is one message insert as its client saw it: alone, or (txn)
// in a transaction that first reads the conversation's seq row with FOR
// UPDATE, which its client runs again when a switch rolled it back (1213,
// as an ORM does: retries counts them, took spans every attempt).
type benchWrite struct {
	class, proxy int
	txn          bool
	retries      int
	start        time.Time
	took         time.Duration
	err          error
}

func (w benchWrite) end() time.Time { return w.start.Add(w.took) }

// span is a time interval.
type span struct{ from, to time.Time }

func (s span) overlaps(w benchWrite) bool { return w.start.Before(s.to) && w.end().After(s.from) }
func (s span) has(t time.Time) bool       { return !t.Before(s.from) && t.Before(s.to) }

// BenchmarkMigrationUnderLoad measures, in one run, what clients writing
// through several Convoy processes see of real migration jobs (directives, the
// runner a proxy hosts, the real copier, binlog apply, fence and lock):
//
//   - the write pause of the switch: every cycle migrates the shard
//     (MIGRATE, backfill, verify, NEXT: switch to ds1) and rolls it back
//     (ROLLBACK: switch back to ds0), so -migbench.cycles 10 gives 20
//     switches under the lock, each in both proxies' engine hold;
//   - the write latency of the migrating shard and of two other shards (on
//     the source and on the target server) during the backfill at the
//     default rate, against windows with no migration before each cycle.
//
// Writers insert seq-allocating messages (the IM send) in a closed loop
// with a think time (-migbench.think, 20 ms): two conversations per class,
// each through every proxy (-migbench.proxies, 3); through every other
// proxy, the migrating shard's writers send each message in a transaction
// that reads the conversation's seq row FOR UPDATE first, and run it again
// when a switch rolled it back (1213). The switch windows come from the proxies' own
// logs (the lock follower's "lock seen" and "shard writes released", the
// runner's lock taken / acknowledged / flipped / released). Run it alone
// (about 4 minutes, see BENCHMARKS.md):
//
//	go test -run '^$' -bench BenchmarkMigrationUnderLoad -benchtime=1x -timeout 30m ./integration/
func BenchmarkMigrationUnderLoad(b *testing.B) {
	s := newStack(b)
	// JSON logs: the switch timeline is read back from them.
	s.convoy.kill()
	s.convoy = startConvoy(b, s.etcd.Endpoints(), "log_format: json")
	proxies := []*convoyProc{s.convoy}
	for len(proxies) < *migBenchProxy {
		proxies = append(proxies, startConvoy(b, s.etcd.Endpoints(), "log_format: json"))
	}
	ctx := context.Background()

	doc, err := s.store.Get(ctx)
	if err != nil {
		b.Fatal(err)
	}
	snap, err := router.NewSnapshot(doc)
	if err != nil {
		b.Fatal(err)
	}
	const moving = router.Shard(5)
	home := snap.Physical("conv_msg", moving)
	if home.Datasource != "ds0" {
		b.Fatalf("shard %s is on %s, the benchmark moves it from ds0", moving, home)
	}
	// Another shard on each server; on the source, not in the moving
	// shard's shared table (the production layout has a table per shard).
	var onSource, onTarget router.Shard
	var haveSource, haveTarget bool
	for sh := router.Shard(0); int(sh) < router.NumShards; sh++ {
		p := snap.Physical("conv_msg", sh)
		switch {
		case !haveSource && p.Datasource == "ds0" && p.Table != home.Table:
			onSource, haveSource = sh, true
		case !haveTarget && p.Datasource == "ds1":
			onTarget, haveTarget = sh, true
		}
	}
	if !haveSource || !haveTarget {
		b.Fatalf("no other shard on ds0 (%v) or ds1 (%v)", haveSource, haveTarget)
	}
	movingConvs := convsOn(moving, 2+100)
	classConvs := [wcN][]uint64{movingConvs[:2], convsOn(onSource, 2), convsOn(onTarget, 2)}

	admin := openDSN(b, s.convoy.dsn("convoy", "convoy", "im"))
	for _, cs := range classConvs {
		for _, c := range cs {
			if _, err := admin.Exec("INSERT INTO im_conv_seq (conv_id, max_seq, member_cnt) VALUES (?, 0, 2)", c); err != nil {
				b.Fatal(err)
			}
		}
	}
	// The rows every backfill copies, spread over 100 other conversations
	// of the shard, written straight into its physical table.
	ds0 := s.ds[0].Open(b, "")
	homeTable := fmt.Sprintf("`%s`.`%s`", home.Database, home.Table)
	seedConvs := movingConvs[2:]
	for i := 0; i < *migBenchRows; {
		var vals []string
		for ; i < *migBenchRows && len(vals) < 1000; i++ {
			vals = append(vals, fmt.Sprintf("(%d, %d, %d, 7, 1, NOW(3))", seedConvs[i%len(seedConvs)], i/len(seedConvs)+1, 1<<50+i))
		}
		if _, err := ds0.Exec("INSERT INTO " + homeTable + " (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES " + strings.Join(vals, ",")); err != nil {
			b.Fatal(err)
		}
	}

	for range b.N {
		res := runMigrationLoad(b, s, proxies, admin, ds0, home, classConvs, seedConvs)
		res.report(b)
	}
}

// migLoad is what one run of the benchmark recorded.
type migLoad struct {
	writes   []benchWrite
	idle     []span // no job
	backfill []span // step backfill: copy, then binlog apply until caught up
	copy     []span // the copy (until every seeded row is on the target)
	apply    []span // the rest: the apply catching up
	verify   []span
	ramp     []span // READ PERCENT 100 confirmed, before the switch
	switches []switchTimes
	aborted  int
	cycles   int
	proxies  []*convoyProc
	// The dual-write as the proxies counted it (both summed): mirror
	// calls by result, and the time they added before the ACKs.
	dualCalls, dualSeconds float64
	dualResults            map[string]float64
	dualLog                map[string]string // the proxies' dual-write log lines by message
}

func runMigrationLoad(b *testing.B, s *stack, proxies []*convoyProc, admin, ds0 *sql.DB, home router.Physical, classConvs [wcN][]uint64, seedConvs []uint64) *migLoad {
	homeTable := fmt.Sprintf("`%s`.`%s`", home.Database, home.Table)
	// Writers: every conversation through every proxy.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var writes []benchWrite
	n := 0
	for class, convs := range classConvs {
		for _, conv := range convs {
			for p, proxy := range proxies {
				n++
				db := openDSN(b, proxy.dsn("app", "app secret", "im")+"&interpolateParams=true")
				wg.Add(1)
				// The migrating shard's conversations also take
				// transactions that read before they write.
				txn := class == wcMoving && p%2 == 1
				go func(class, p int, conv, id uint64) {
					defer wg.Done()
					var mine []benchWrite
					for {
						select {
						case <-stop:
							mu.Lock()
							writes = append(writes, mine...)
							mu.Unlock()
							return
						default:
						}
						id++
						w := benchWrite{class: class, proxy: p, txn: txn, start: time.Now()}
						if txn {
							for attempt := 0; ; attempt++ {
								w.err = readThenWrite(db, conv, id)
								if errno(w.err) != 1213 || attempt == 2 {
									break
								}
								w.retries++
							}
						} else {
							_, w.err = db.Exec("INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (?, ?, 7, 1, NOW(3))", conv, id)
						}
						w.took = time.Since(w.start)
						mine = append(mine, w)
						time.Sleep(*migBenchThink)
					}
				}(class, p, conv, uint64(n)<<40)
			}
		}
	}

	// The job's step, polled through a proxy the whole run (the same load
	// in every window): the backfill and verify windows are read from it.
	type stepAt struct {
		at   time.Time
		step string
	}
	var (
		stepMu   sync.Mutex
		timeline []stepAt
		pollErr  error
	)
	// The copy's end within the backfill step: when every seeded row is
	// on the target (the writers' conversations are copied too, but their
	// rows also arrive by dual-write, so they cannot tell).
	stepCol := slices.Index(migrate.StatusColumns, "step")
	target := s.ds[1].Open(b, "")
	seeded := fmt.Sprintf("SELECT COUNT(*) FROM `im_mig`.`%s` WHERE conv_id IN (%s)", home.Table, strings.Trim(strings.Join(strings.Fields(fmt.Sprint(seedConvs)), ","), "[]"))
	pollDone := make(chan struct{})
	go func() {
		defer close(pollDone)
		last := "?"
		for {
			select {
			case <-stop:
				return
			default:
			}
			step, err := migrationStep(admin, stepCol)
			now := time.Now()
			if err == nil && step == migrate.StepBackfill && last == step {
				var n int
				if target.QueryRow(seeded).Scan(&n) == nil && n >= *migBenchRows {
					step = stepCopied
				}
			}
			stepMu.Lock()
			if err != nil && pollErr == nil {
				pollErr = err
			}
			if err == nil && step != last && !(last == stepCopied && step == migrate.StepBackfill) {
				timeline = append(timeline, stepAt{now, step})
				last = step
			}
			stepMu.Unlock()
			time.Sleep(100 * time.Millisecond)
		}
	}()
	current := func() string {
		stepMu.Lock()
		defer stepMu.Unlock()
		if pollErr != nil {
			b.Fatalf("SHOW MIGRATIONS: %v", pollErr)
		}
		if len(timeline) == 0 {
			return "?"
		}
		return timeline[len(timeline)-1].step
	}
	waitStep := func(want string, d time.Duration) {
		b.Helper()
		deadline := time.Now().Add(d)
		for current() != want {
			if time.Now().After(deadline) {
				var row []string
				if rows, err := admin.Query("/*+ convoy SHOW MIGRATIONS */"); err == nil {
					cols, _ := rows.Columns()
					vals := make([]sql.NullString, len(cols))
					ptrs := make([]any, len(cols))
					for i := range vals {
						ptrs[i] = &vals[i]
					}
					for rows.Next() {
						if rows.Scan(ptrs...) == nil {
							for i, c := range cols {
								if c == "step" || c == "state" || c == "last_error" || c == "switch" {
									row = append(row, c+"="+vals[i].String)
								}
							}
						}
					}
					rows.Close()
				}
				b.Fatalf("migration not at %q after %s (at %q): %v", want, d, current(), row)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	exec := func(q string) {
		b.Helper()
		if _, err := admin.Exec(q); err != nil {
			b.Fatalf("%s: %v", q, err)
		}
	}

	res := &migLoad{cycles: *migBenchCycles, proxies: proxies}
	// waitRamped waits until the runner confirmed READ PERCENT 100: every
	// proxy announced it and mirrors the shard's writes.
	waitRamped := func() {
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
			ms := showMigrations(b, admin)
			if len(ms) == 1 && strings.Contains(ms[0]["state"], "reads of 100%") && !strings.Contains(ms[0]["state"], "being confirmed") {
				return
			}
			if time.Now().After(deadline) {
				b.Fatalf("READ PERCENT 100 not confirmed after a minute: %v", ms)
			}
		}
	}
	waitStep("", 10*time.Second)
	for range *migBenchCycles {
		// Keep the shard's size steady: the writers' older messages go
		// (the seq counters stay), outside any measured window.
		if _, err := ds0.Exec("DELETE FROM "+homeTable+" WHERE conv_id IN (?, ?) AND created_at < NOW(3) - INTERVAL 1 SECOND", classConvs[wcMoving][0], classConvs[wcMoving][1]); err != nil {
			b.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
		idle := span{from: time.Now()}
		time.Sleep(*migBenchIdle)
		idle.to = time.Now()
		res.idle = append(res.idle, idle)
		exec("/*+ convoy MIGRATE SHARD 5 TO ds1 DATABASE im_mig */")
		waitStep("ready", 3*time.Minute)
		// The read ramp at its widest: every conversation of the shard is
		// read from the target, so every write of it is mirrored there.
		exec("/*+ convoy MIGRATION 5 READ PERCENT 100 */")
		waitRamped()
		ramp := span{from: time.Now()}
		time.Sleep(*migBenchIdle)
		ramp.to = time.Now()
		res.ramp = append(res.ramp, ramp)
		exec("/*+ convoy MIGRATION 5 NEXT */")
		waitStep("switched", time.Minute)
		time.Sleep(500 * time.Millisecond) // writes on the new side, replicated back
		exec("/*+ convoy MIGRATION 5 ROLLBACK */")
		waitStep("", time.Minute)
	}
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	<-pollDone
	res.writes = writes

	stepMu.Lock()
	for i, st := range timeline {
		end := time.Now()
		if i+1 < len(timeline) {
			end = timeline[i+1].at
		}
		switch st.step {
		case migrate.StepBackfill:
			res.copy = append(res.copy, span{st.at, end})
			res.backfill = append(res.backfill, span{st.at, end})
		case stepCopied:
			res.apply = append(res.apply, span{st.at, end})
			res.backfill[len(res.backfill)-1].to = end
		case migrate.StepVerify:
			res.verify = append(res.verify, span{st.at, end})
		}
	}
	stepMu.Unlock()
	if len(res.backfill) != res.cycles || len(res.apply) != res.cycles {
		b.Fatalf("saw %d backfill steps and %d copy ends in %d cycles (the step poll missed some)", len(res.backfill), len(res.apply), res.cycles)
	}
	res.dualResults = map[string]float64{}
	for _, p := range proxies {
		body := scrape(b, p.metrics)
		res.dualCalls += max(0, metricValue(b, body, inproxy.MetricDualWriteSeconds+"_count")) // -1: absent
		res.dualSeconds += max(0, metricValue(b, body, inproxy.MetricDualWriteSeconds+"_sum"))
		for _, r := range []string{"mirrored", "queued", "lost", "unkeyed"} {
			if v := metricValue(b, body, inproxy.MetricDualWrites+`{result="`+r+`"}`); v > 0 {
				res.dualResults[r] += v
			}
		}
	}
	res.switches, res.aborted, res.dualLog = switchTimeline(b, proxies, int(router.Shard(5)))
	if len(res.switches) != 2*res.cycles {
		b.Fatalf("the logs show %d completed switches (%d aborted), want %d", len(res.switches), res.aborted, 2*res.cycles)
	}
	return res
}

// readThenWrite is one message sent in a transaction that reads the
// conversation's seq row with FOR UPDATE first (an application checking
// membership or a counter before it writes).
func readThenWrite(db *sql.DB, conv, id uint64) error {
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	var maxSeq uint64
	if err := tx.QueryRow("SELECT max_seq FROM im_conv_seq WHERE conv_id = ? FOR UPDATE", conv).Scan(&maxSeq); err != nil {
		_ = tx.Rollback()
		return err
	}
	if _, err := tx.Exec("INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (?, ?, 7, 1, NOW(3))", conv, id); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// stepCopied marks, in the benchmark's step timeline, the end of the
// backfill's copy (the apply catches up until the step changes).
const stepCopied = "backfill (copied)"

// migrationStep is the step of the one migration job ("" without one),
// without the intent SHOW MIGRATIONS appends ("ready -> switch").
func migrationStep(db *sql.DB, stepCol int) (string, error) {
	rows, err := db.Query("/*+ convoy SHOW MIGRATIONS */")
	if err != nil {
		return "", err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return "", err
	}
	step := ""
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return "", err
		}
		step, _, _ = strings.Cut(vals[stepCol].String, " ")
	}
	return step, rows.Err()
}

// switchTimes is one completed switch as the runner and each proxy logged
// it (wall clock of this host; the logs have millisecond resolution).
type switchTimes struct {
	taken, acked, flipped, released time.Time // the runner's lock
	seen, acks, freed               []time.Time
	// The runner's fence inside the lock (migrate's "the stream passed
	// the fence marker"): the marker's write, the wait for the stream to apply
	// it, the stream's stop.
	fenceWrite, fenceWait time.Duration
	// seen[p]: proxy p saw the lock (its hold starts queueing the shard's
	// new writes); acks[p]: its acknowledgement is in etcd (its writes
	// drained); freed[p]: it released the held writes (routes served).
}

// window is the span in which some proxy held the shard's writes.
func (st switchTimes) window() span {
	return span{slices.MinFunc(st.seen, time.Time.Compare), slices.MaxFunc(st.freed, time.Time.Compare)}
}

// logLine is the part of a Convoy JSON log line the timeline needs.
type logLine struct {
	TS      string `json:"ts"`
	Msg     string `json:"msg"`
	Shard   *int   `json:"shard"`
	LockRev int64  `json:"lock_revision"`
	Flipped *bool  `json:"flipped"`
	// Durations: zap's JSON encoder writes seconds.
	Error      string  `json:"error"`
	FenceWrite float64 `json:"fence_write"`
	FenceWait  float64 `json:"fence_wait"`
	at         time.Time
}

// switchTimeline reads the switches of shard from the proxies' logs: the
// runner's lines (in whichever proxy ran the job) and each proxy's lock
// follower lines, joined on the lock's revision.
func switchTimeline(b *testing.B, proxies []*convoyProc, shard int) ([]switchTimes, int, map[string]string) {
	b.Helper()
	byRev := map[int64]*switchTimes{}
	var revs []int64
	get := func(rev int64) *switchTimes {
		st := byRev[rev]
		if st == nil {
			st = &switchTimes{seen: make([]time.Time, len(proxies)), acks: make([]time.Time, len(proxies)), freed: make([]time.Time, len(proxies))}
			byRev[rev] = st
			revs = append(revs, rev)
		}
		return st
	}
	aborted := 0
	var fences []logLine
	// The dual-write's warnings and errors, counted by message, with the
	// first one's error.
	dual := map[string]string{}
	dualN := map[string]int{}
	for p, proc := range proxies {
		f, err := os.Open(proc.logPath)
		if err != nil {
			b.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		gone := int64(0) // the lock whose release this proxy waits for
		for sc.Scan() {
			var l logLine
			if json.Unmarshal(sc.Bytes(), &l) != nil {
				continue
			}
			at, err := time.Parse("2006-01-02T15:04:05.000Z0700", l.TS)
			if err != nil {
				continue
			}
			if strings.Contains(l.Msg, "dual-write") {
				if dualN[l.Msg]++; dualN[l.Msg] == 1 {
					dual[l.Msg] = l.Error
				}
			}
			switch l.Msg {
			case "migration lock taken; waiting for every live proxy to hold the shard's writes":
				get(l.LockRev).taken = at
			case "every live proxy holds the shard's writes; switching":
				get(l.LockRev).acked = at
			case "routes flipped under the migration lock":
				get(l.LockRev).flipped = at
			case "migration lock released":
				get(l.LockRev).released = at
				if l.Flipped == nil || !*l.Flipped {
					aborted++
				}
			case "migration switch ended with an error":
				aborted++
			case "the stream passed the fence marker":
				l.at = at
				fences = append(fences, l)
			case "migration lock seen; holding the shard's writes":
				if l.Shard != nil && *l.Shard == shard {
					get(l.LockRev).seen[p] = at
				}
			case "migration lock acknowledged":
				if l.Shard != nil && *l.Shard == shard {
					get(l.LockRev).acks[p] = at
				}
			case "migration lock gone":
				if l.Shard != nil && *l.Shard == shard {
					gone = l.LockRev
				}
			case "shard writes released":
				if l.Shard != nil && *l.Shard == shard && gone != 0 {
					get(gone).freed[p] = at
					gone = 0
				}
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			b.Fatal(err)
		}
	}
	var out []switchTimes
	for _, rev := range revs {
		st := byRev[rev]
		complete := !st.taken.IsZero() && !st.acked.IsZero() && !st.flipped.IsZero() && !st.released.IsZero()
		for p := range proxies {
			complete = complete && !st.seen[p].IsZero() && !st.acks[p].IsZero() && !st.freed[p].IsZero()
		}
		if !complete {
			continue
		}
		secs := func(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }
		for _, f := range fences {
			if !f.at.Before(st.acked) && !f.at.After(st.flipped) {
				st.fenceWrite, st.fenceWait = secs(f.FenceWrite), secs(f.FenceWait)
			}
		}
		out = append(out, *st)
	}
	slices.SortFunc(out, func(a, c switchTimes) int { return a.taken.Compare(c.taken) })
	for msg, n := range dualN {
		dual[msg] = fmt.Sprintf("%d lines, the first: %s", n, dual[msg])
	}
	return out, aborted, dual
}

// dist is a latency distribution's summary.
type dist struct {
	n             int
	p50, p99, max time.Duration
}

func distOf(ds []time.Duration) dist {
	if len(ds) == 0 {
		return dist{}
	}
	return dist{len(ds), percentile(ds, .5), percentile(ds, .99), percentile(ds, 1)}
}

func (d dist) String() string {
	ms := func(x time.Duration) string { return fmt.Sprintf("%.1f", float64(x.Microseconds())/1000) }
	return fmt.Sprintf("n %d, p50 %s ms, p99 %s ms, max %s ms", d.n, ms(d.p50), ms(d.p99), ms(d.max))
}

// latencies returns the took of the successful writes of class that
// started inside one of spans (class < 0: every class).
func (r *migLoad) latencies(class int, spans []span) []time.Duration {
	var out []time.Duration
	for _, w := range r.writes {
		if w.err != nil || (class >= 0 && w.class != class) {
			continue
		}
		for _, s := range spans {
			if s.has(w.start) {
				out = append(out, w.took)
				break
			}
		}
	}
	return out
}

func (r *migLoad) report(b *testing.B) {
	b.Helper()
	// Printed, not logged: the testing package keeps only ten lines of a
	// benchmark's log.
	var out strings.Builder
	logf := func(format string, args ...any) { fmt.Fprintf(&out, format+"\n", args...) }
	defer func() { fmt.Print(out.String()) }()
	errs := 0
	for _, w := range r.writes {
		if w.err != nil {
			if errs < 5 {
				b.Errorf("a write (%s, proxy %d) failed at %s: %v", wcNames[w.class], w.proxy+1, w.start.Format("15:04:05.000"), w.err)
			}
			errs++
		}
	}
	var switchWindows []span
	for _, st := range r.switches {
		switchWindows = append(switchWindows, st.window())
	}

	// The pause: per switch, the slowest write of the migrating shard whose
	// time at its client overlapped the span in which a proxy held the
	// shard; and every write that was held (it started, at its client,
	// inside its own proxy's hold).
	ms := func(d time.Duration) string { return fmt.Sprintf("%7.1f", float64(d.Microseconds())/1000) }
	var perSwitch []string
	var pauses, held, holdSpan, proxyHold, toSeen, toAck, ackSeen, ackWait, flip, fenceWrite, fenceWait, flipRest, unlock, release []time.Duration
	for _, st := range r.switches {
		win := st.window()
		var longest time.Duration
		for _, w := range r.writes {
			if w.class != wcMoving || w.err != nil {
				continue
			}
			if win.overlaps(w) {
				longest = max(longest, w.took)
			}
			if (span{st.seen[w.proxy], st.freed[w.proxy]}).has(w.start) {
				held = append(held, w.took)
			}
		}
		pauses = append(pauses, longest)
		perSwitch = append(perSwitch, fmt.Sprintf("%s %s %s %s %s %s %s %s", ms(longest), ms(win.to.Sub(win.from)), ms(st.acked.Sub(st.taken)),
			ms(slices.MaxFunc(st.acks, time.Time.Compare).Sub(slices.MinFunc(st.seen, time.Time.Compare))), ms(st.flipped.Sub(st.acked)),
			ms(st.fenceWait), ms(st.released.Sub(st.flipped)), ms(slices.MaxFunc(st.freed, time.Time.Compare).Sub(st.released))))
		holdSpan = append(holdSpan, win.to.Sub(win.from))
		for p := range st.seen {
			proxyHold = append(proxyHold, st.freed[p].Sub(st.seen[p]))
			toSeen = append(toSeen, st.seen[p].Sub(st.taken))
			toAck = append(toAck, st.acks[p].Sub(st.seen[p]))
		}
		ackSeen = append(ackSeen, st.acked.Sub(slices.MaxFunc(st.acks, time.Time.Compare)))
		ackWait = append(ackWait, st.acked.Sub(st.taken))
		flip = append(flip, st.flipped.Sub(st.acked))
		fenceWrite, fenceWait = append(fenceWrite, st.fenceWrite), append(fenceWait, st.fenceWait)
		flipRest = append(flipRest, st.flipped.Sub(st.acked)-st.fenceWrite-st.fenceWait)
		unlock = append(unlock, st.released.Sub(st.flipped))
		release = append(release, slices.MaxFunc(st.freed, time.Time.Compare).Sub(st.released))
	}
	pd := distOf(pauses)
	logf("per switch, ms (odd: to ds1, even: back): pause, hold span, lock to every ack, first seen to last ack, acks to flip, fence wait, flip to unlock, unlock to last release")
	for i, l := range perSwitch {
		logf("  %2d %s", i+1, l)
	}
	txns, retried, retries := 0, 0, 0
	for _, w := range r.writes {
		if w.txn {
			txns++
			if w.retries > 0 {
				retried++
				retries += w.retries
			}
		}
	}
	logf("%d switches under load through %d proxies (%d cycles of MIGRATE + NEXT + ROLLBACK, %d aborted and retried), %d writes, %d failed; %d of them read-then-write transactions, %d rolled back by a switch (1213) and run again by their client (%d attempts)",
		len(r.switches), len(r.proxies), r.cycles, r.aborted, len(r.writes), errs, txns, retried, retries)
	logf("pause per switch (slowest migrating-shard write overlapping the hold, at the client): %s", pd)
	logf("held writes (started inside their proxy's hold), client start to ACK: %s", distOf(held))
	logf("hold span, first proxy's lock seen to last proxy's release (logs): %s", distOf(holdSpan))
	logf("  per proxy, lock seen to release: %s", distOf(proxyHold))
	logf("  runner: lock taken to every ack: %s", distOf(ackWait))
	logf("    per proxy, lock taken to lock seen: %s", distOf(toSeen))
	logf("    per proxy, lock seen to its ack written (writes drained): %s", distOf(toAck))
	logf("    last ack written to the runner seeing it: %s", distOf(ackSeen))
	logf("  runner: acks to routes flipped: %s", distOf(flip))
	logf("    fence marker written: %s", distOf(fenceWrite))
	logf("    the stream applied it: %s", distOf(fenceWait))
	logf("    the rest (forward: target position, state saved; both: route flip): %s", distOf(flipRest))
	logf("  runner: flipped to lock removed: %s", distOf(unlock))
	logf("  lock removed to the last proxy's release: %s", distOf(release))
	for c := range wcN {
		logf("other writes during the switches, %s: %s", wcNames[c], distOf(r.latencies(c, switchWindows)))
	}

	if r.dualCalls > 0 {
		logf("dual-write (proxies' %s): %.0f mirror calls (%v), %.1f ms each on average before the ACK",
			inproxy.MetricDualWriteSeconds, r.dualCalls, r.dualResults, 1000*r.dualSeconds/r.dualCalls)
	}
	for msg, what := range r.dualLog {
		logf("  logged %q: %s", msg, what)
	}
	logf("write latency, no migration (%d windows) vs backfill at the default rate (%d windows) vs verify:", len(r.idle), len(r.backfill))
	total := func(spans []span) time.Duration {
		var d time.Duration
		for _, s := range spans {
			d += s.to.Sub(s.from)
		}
		return d.Round(100 * time.Millisecond)
	}
	logf("  windows in all: idle %s, backfill %s (copy %s, apply catching up %s), verify %s, read ramp %s",
		total(r.idle), total(r.backfill), total(r.copy), total(r.apply), total(r.verify), total(r.ramp))
	units := [wcN]string{"moving", "source", "target"}
	for c := range wcN {
		idle, bf := distOf(r.latencies(c, r.idle)), distOf(r.latencies(c, r.backfill))
		ratio, ratio50 := float64(bf.p99)/float64(idle.p99), float64(bf.p50)/float64(idle.p50)
		logf("  %s: backfill/idle p99 %.2f, p50 %.2f", wcNames[c], ratio, ratio50)
		logf("    idle %s", idle)
		logf("    backfill %s", bf)
		logf("      copy %s", distOf(r.latencies(c, r.copy)))
		logf("      apply %s", distOf(r.latencies(c, r.apply)))
		logf("    verify %s", distOf(r.latencies(c, r.verify)))
		ramp := distOf(r.latencies(c, r.ramp))
		logf("    read ramp at 100%% %s (ramp/idle p99 %.2f)", ramp, float64(ramp.p99)/float64(idle.p99))
		b.ReportMetric(ratio, "bf-p99-ratio-"+units[c])
		b.ReportMetric(float64(ramp.p99)/float64(idle.p99), "ramp-p99-ratio-"+units[c])
	}
	b.ReportMetric(float64(pd.p50.Microseconds())/1000, "pause-p50-ms")
	b.ReportMetric(float64(pd.p99.Microseconds())/1000, "pause-p99-ms")
	b.ReportMetric(float64(pd.max.Microseconds())/1000, "pause-max-ms")
	if len(pauses) < 20 {
		b.Errorf("%d switches measured, the issue asks for at least 20", len(pauses))
	}
}
