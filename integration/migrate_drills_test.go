package integration

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/convoy-im/convoy/coord"
	"github.com/convoy-im/convoy/internal/testsvc"
	"github.com/convoy-im/convoy/router"
)

// TestMigrationDrills runs docs/design.md §5's failure drills against real
// processes while writers send seq-allocating inserts through three Convoy
// processes, on the migrating shard and on another shard of the same
// physical table. The jobs run in two `convoy migrate worker` processes
// (the proxies run none). One shard's migration meets the drills in turn:
//
//   - backfill: the worker running the job is SIGKILLed mid-copy. The other
//     worker takes the job over once the dead one's lease expires and goes
//     on from the last checkpoint (the copy never goes backwards).
//   - backfill: the target mysqld is SIGKILLed mid-copy. The job shows the
//     error and keeps retrying; once the server is back (same datadir and
//     port) the copy goes on from its checkpoint (never backwards), and the
//     job verifies.
//   - switch (NEXT): etcd is stopped and started again (same data dir)
//     while the migration lock is held and an acknowledgement is pending
//     (a transaction open on the shard delays one proxy's). The switch
//     completes or aborts with the routes unchanged; writes resume; a NEXT
//     completes an aborted one. Both sides then hold the same rows.
//   - switch back (ROLLBACK): a Convoy process holding a transaction on
//     the shard is SIGKILLed while the lock is held: the switch aborts
//     cleanly until the dead proxy's registration expires, then completes.
//
// Afterwards the source, authoritative again, holds every acknowledged
// message exactly once with the seq its client was told, seqs contiguous,
// each conversation's seq counter at its last seq, the transactions open
// during the switches committed or not as their clients were told, and the
// other shard saw no error.
func TestMigrationDrills(t *testing.T) {
	began := time.Now()
	at := func() string { return "at " + time.Since(began).Round(100*time.Millisecond).String() + ": " }
	s := newStack(t)
	// The proxies run no jobs: the workers do, so killing a proxy never
	// kills the migrator and killing the migrator kills no proxy.
	noJobs := "migration:\n  run_jobs: false"
	// The hot tier on: its pages must stay exact through every drill.
	hot := hotTierYAML(testsvc.StartRedis(t))
	s.convoy.restartWith(t, noJobs+"\n"+hot)
	proxies := []*convoyProc{s.convoy, startConvoy(t, s.etcd.Endpoints(), noJobs, hot), startConvoy(t, s.etcd.Endpoints(), noJobs, hot)}
	// A 3 s runner lease: the surviving worker takes over 3 s after the
	// kill (10 s by default).
	workers := []*convoyProc{startWorker(t, s.etcd.Endpoints(), "migration:\n  runner_ttl: 3s"),
		startWorker(t, s.etcd.Endpoints(), "migration:\n  runner_ttl: 3s")}
	admin := s.convoy.open(t, "convoy", "convoy", "im")
	t.Cleanup(func() {
		if t.Failed() {
			for i, w := range workers {
				t.Logf("worker %d's log:\n%s", i+1, w.logTail())
				if os.Getenv("CONVOY_KEEP_TESTDIRS") != "" {
					b, _ := os.ReadFile(w.logPath)
					path := filepath.Join(os.TempDir(), fmt.Sprintf("convoy-drills-worker%d.log", i+1))
					_ = os.WriteFile(path, b, 0o600)
					t.Logf("worker %d's whole log: %s", i+1, path)
				}
			}
		}
	})
	cli, err := clientv3.New(clientv3.Config{Endpoints: s.etcd.Endpoints(), DialTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	waitFor(t, "three proxies to register", 20*time.Second, func() bool {
		ps, err := coord.ListProxies(ctx, cli, testCluster)
		return err == nil && len(ps) == 3
	})

	const shard, otherShard = router.Shard(5), router.Shard(6) // both in im_0's first tables on ds0
	snap := snapshotOf(t, s)
	msgTable, seqTable := snap.Physical("conv_msg", shard), snap.Physical("im_conv_seq", shard)
	if msgTable != snap.Physical("conv_msg", otherShard) || msgTable.Datasource != "ds0" {
		t.Fatalf("[BUG] shards %s and %s do not share a table on ds0: %+v, %+v", shard, otherShard, msgTable, snap.Physical("conv_msg", otherShard))
	}
	src := s.ds[0].Open(t, "")
	srcMsg := msgTable.Database + "." + msgTable.Table
	srcSeq := seqTable.Database + "." + seqTable.Table
	dstMsg, dstSeq := "im_mig."+msgTable.Table, "im_mig."+seqTable.Table

	// Rows for the copy to take a few seconds at RATE 1000: 40
	// conversations of 100 messages, written on the source directly.
	all := convsOn(shard, 45)
	convs, filler, mixed := all[:3], all[3:43], all[43:]
	preloaded := map[uint64]bool{}
	const perConv = 100
	for _, c := range filler {
		var vals []string
		for seq := 1; seq <= perConv; seq++ {
			id := 1<<40 + c*1000 + uint64(seq)
			preloaded[id] = true
			vals = append(vals, fmt.Sprintf("(%d, %d, %d, 7, 1, NOW(3))", c, seq, id))
		}
		s.ds[0].Exec(t,
			fmt.Sprintf("INSERT INTO %s (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES %s", srcMsg, strings.Join(vals, ",")),
			fmt.Sprintf("INSERT INTO %s (conv_id, max_seq, member_cnt) VALUES (%d, %d, 2)", srcSeq, c, perConv))
	}
	control := convsOn(otherShard, 1)
	for _, c := range append(append(append([]uint64{}, convs...), control...), mixed...) {
		mustExec(t, admin, "INSERT INTO im_conv_seq (conv_id, max_seq, member_cnt) VALUES (?, 0, 2)", c)
	}

	// Writers: each conversation through every proxy at once.
	var hold atomic.Bool
	dbs := make([]*sql.DB, len(proxies))
	for i, p := range proxies {
		dbs[i] = p.open(t, "app", "app secret", "im")
		dbs[i].SetMaxOpenConns(10)
	}
	var writers []*writer
	for _, conv := range append(append([]uint64{}, convs...), control...) {
		for p := range proxies {
			w := &writer{conv: conv, proxy: p, db: dbs[p], next: uint64(len(writers)+1) << 32, every: 50 * time.Millisecond,
				hold: &hold, stop: make(chan struct{}), done: make(chan struct{})}
			writers = append(writers, w)
			go w.run()
		}
	}
	// Two conversations of the shard take the mixed load of the layout
	// proof (inserts, updates, deletes by primary key, history pages
	// checked against what was acknowledged) through the two proxies that
	// live to the end.
	var models []*convModel
	stopMixed := make(chan struct{})
	var mixedWG sync.WaitGroup
	for n, c := range mixed {
		m := &convModel{conv: c, live: map[uint64][2]uint64{}, deleted: map[uint64]uint64{}, unsure: map[uint64]bool{}, hold: &hold}
		models = append(models, m)
		mixedWG.Add(1)
		go func() {
			defer mixedWG.Done()
			runConvLoad(m, dbs[:2], uint64(n+100)<<32, stopMixed)
		}()
	}
	haltAll := func() {
		for _, w := range writers {
			w.halt()
		}
		select {
		case <-stopMixed:
		default:
			close(stopMixed)
		}
		mixedWG.Wait()
	}
	t.Cleanup(haltAll)
	// writesResume waits until a write through every live proxy succeeded
	// after since.
	writesResume := func(what string, since time.Time, live []int) {
		t.Helper()
		waitFor(t, "writes through every live proxy to succeed again "+what, 30*time.Second, func() bool {
			ok := map[int]bool{}
			for _, w := range writers {
				for _, a := range w.snapshot() {
					if a.err == nil && a.start.After(since) {
						ok[w.proxy] = true
					}
				}
			}
			for _, p := range live {
				if !ok[p] {
					return false
				}
			}
			return true
		})
	}
	jobs := coord.NewJobStore(cli, testCluster)
	step := func() string {
		ms := showMigrations(t, admin)
		if len(ms) == 0 {
			return ""
		}
		return ms[0]["step"]
	}
	placedOn := func() string {
		t.Helper()
		rows := queryRows(t, admin, fmt.Sprintf("/*+ convoy SHOW SHARD FOR conv_id = %d */", convs[0]))
		return rows[0][4] + "." + rows[0][5]
	}
	routeVersion := func() int64 {
		t.Helper()
		doc, err := s.store.Get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return doc.Version
	}
	// sidesEqual waits (writers idle) until the shard's rows of both tables
	// the writers touch are the same on both sides.
	sidesEqual := func(what string) {
		t.Helper()
		hold.Store(true)
		defer hold.Store(false)
		waitFor(t, "the writers to idle", 10*time.Second, func() bool {
			for _, w := range writers {
				if !w.parked.Load() && !isDone(w) {
					return false
				}
			}
			for _, m := range models {
				if !m.parked.Load() {
					return false
				}
			}
			return true
		})
		dst := s.ds[1].Open(t, "")
		var msgs int
		deadline := time.Now().Add(30 * time.Second)
		for _, tbl := range [][2]string{{srcMsg, dstMsg}, {srcSeq, dstSeq}} {
			for {
				a, b := shardDump(t, src, tbl[0], "conv_id", shard), shardDump(t, dst, tbl[1], "conv_id", shard)
				if tbl[0] == srcMsg {
					msgs = len(a)
				}
				if reflect.DeepEqual(a, b) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s: %s has %d rows of shard %s, %s %d: not equal after 30 s", what, tbl[0], len(a), shard, tbl[1], len(b))
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
		t.Logf(at()+"%s: both sides hold the same %d messages of shard %s, and the same seq counters", what, msgs, shard)
	}

	time.Sleep(300 * time.Millisecond) // load before the migration
	mustExec(t, admin, fmt.Sprintf("/*+ convoy MIGRATE SHARD %d TO ds1 DATABASE im_mig RATE 1000 */", shard))

	var lastCopy copyProgress
	copyOf := func() copyProgress {
		t.Helper()
		j, err := jobs.Get(ctx, int(shard))
		if err != nil {
			t.Fatal(err)
		}
		cp := decodeCopy(t, j.Progress)
		// The copy never goes back, and the replay start never moves.
		if cp.rows < lastCopy.rows || (lastCopy.start != "" && cp.start != lastCopy.start) {
			t.Fatalf("the copy went back: %+v after %+v", cp, lastCopy)
		}
		lastCopy = cp
		return cp
	}
	// Drill 0: the worker running the job SIGKILLed mid-copy.
	runnerOf := func() string {
		t.Helper()
		ms := showMigrations(t, admin)
		if len(ms) != 1 {
			t.Fatalf("SHOW MIGRATIONS: %v", ms)
		}
		return ms[0]["runner"]
	}
	waitFor(t, "the copy to be under way", time.Minute, func() bool { cp := copyOf(); return cp.rows >= 500 && cp.phase == "copying" })
	victim, survivor := -1, -1
	for i, w := range workers {
		if strings.HasSuffix(runnerOf(), fmt.Sprintf("-%d-worker", w.cmd.Process.Pid)) {
			victim, survivor = i, 1-i
		}
	}
	if victim < 0 {
		t.Fatalf("the job's runner %q is neither worker", runnerOf())
	}
	atWorkerKill := lastCopy
	workers[victim].kill()
	workerKilled := time.Now()
	survivorID := fmt.Sprintf("-%d-worker", workers[survivor].cmd.Process.Pid)
	waitFor(t, "the other worker to take the job over and copy on", time.Minute, func() bool {
		cp := copyOf()
		return strings.HasSuffix(runnerOf(), survivorID) && cp.rows > atWorkerKill.rows
	})
	// The worker exports the job's metrics like a proxy running it would
	// (set at its status refreshes, every 2 s).
	waitFor(t, "the worker running the job to export its rows copied", 10*time.Second, func() bool {
		return metricValue(t, scrape(t, workers[survivor].metrics), fmt.Sprintf(`convoy_migration_rows_copied{shard="%s"}`, shard)) > 0
	})
	t.Logf(at()+"drill 0: the runner worker SIGKILLed at %d rows copied; the other took over and copied on from its checkpoint (%d rows %s after the kill)",
		atWorkerKill.rows, lastCopy.rows, time.Since(workerKilled).Round(100*time.Millisecond))

	// Drill 1: the target mysqld killed mid-copy.
	waitFor(t, "the copy to go on", time.Minute, func() bool {
		cp := copyOf()
		return cp.rows >= atWorkerKill.rows+500 && cp.phase == "copying"
	})
	atKill := lastCopy
	s.ds[1].Kill()
	var lastErr string
	waitFor(t, "SHOW MIGRATIONS to show the target's failure", 30*time.Second, func() bool {
		copyOf()
		ms := showMigrations(t, admin)
		if len(ms) != 1 || ms[0]["step"] != "backfill" {
			t.Fatalf("with the target down: %v", ms)
		}
		lastErr = ms[0]["last_error"]
		return lastErr != ""
	})
	t.Logf("with the target down, at %d rows copied: last_error %q", atKill.rows, lastErr)
	// A retry or two fail too: the job keeps trying, it does not give up.
	time.Sleep(3 * time.Second)
	if got := step(); got != "backfill" {
		t.Fatalf("with the target down the job went to %q", got)
	}
	s.ds[1].Start()
	waitFor(t, "the job to resume, verify and be ready", 2*time.Minute, func() bool { copyOf(); return step() == "ready" })
	ms := showMigrations(t, admin)[0]
	if !strings.HasPrefix(ms["checksum"], "equal") || ms["last_error"] != "" {
		t.Fatalf("after the target came back: %v", ms)
	}
	// Nothing is mirrored before a read ramp (READ PERCENT): the target's
	// outage during the copy cost no write a mirror, and no failure shows.
	if n, err := strconv.Atoi(ms["dualwrite_failures"]); err != nil || n != 0 || ms["dualwrite_backlog"] != "0" {
		t.Errorf("after the target's outage during the copy: dual-write failures %q, backlog %q; want none (no read ramp, no mirror)", ms["dualwrite_failures"], ms["dualwrite_backlog"])
	}
	copyOf()
	t.Logf(at()+"drill 1: the copy resumed from its checkpoint (%d rows before the kill, %d in all), verified: %s",
		atKill.rows, lastCopy.rows, ms["checksum"])
	writesResume("after the target's restart", time.Now(), []int{0, 1, 2})

	// Drill 2: etcd restarted while the lock is held and proxy 2 has not
	// acknowledged (its open transaction on the shard delays it).
	tx, err := dbs[1].BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec("UPDATE conv_msg SET msg_type = 2 WHERE conv_id = ? AND seq = 1", filler[0]); err != nil {
		t.Fatal(err)
	}
	before := routeVersion()
	locks := watchLocks(t, ctx, cli)
	mustExec(t, admin, fmt.Sprintf("/*+ convoy MIGRATION %d NEXT */", shard))
	waitLock(t, locks, 60*time.Second)
	restartAt := time.Now()
	s.etcd.Stop()
	s.etcd.Start()
	t.Logf("etcd restarted in %s while the lock was held", time.Since(restartAt).Round(time.Millisecond))
	commitErr := tx.Commit()
	t.Logf("the transaction open on the shard during the switch: commit %v", commitErr)
	var outcome coord.Job
	waitFor(t, "the switch to complete or abort", time.Minute, func() bool {
		j, err := jobs.Get(ctx, int(shard))
		if err != nil {
			return false // etcd may still be electing
		}
		outcome = j
		return j.Step == "switched" || (j.Step == "ready" && j.Intent == "" && strings.Contains(j.LastError, "switch"))
	})
	if outcome.Step == "ready" {
		if v := routeVersion(); v != before || placedOn() != "ds0.im_0" {
			t.Fatalf("an aborted switch changed the routes: version %d -> %d, shard on %s", before, v, placedOn())
		}
		t.Logf(at()+"drill 2: the switch aborted cleanly: %s", outcome.LastError)
		writesResume("after the aborted switch", time.Now(), []int{0, 1, 2})
		mustExec(t, admin, fmt.Sprintf("/*+ convoy MIGRATION %d NEXT */", shard))
		waitFor(t, "NEXT to switch", time.Minute, func() bool { return step() == "switched" })
	} else {
		t.Log(at() + "drill 2: the switch completed across the etcd restart")
	}
	if v := routeVersion(); v != before+1 {
		t.Fatalf("after the switch the routes are at version %d, want %d (one flip)", v, before+1)
	}
	waitFor(t, "every proxy to route the shard to the target", 30*time.Second, func() bool { return placedOn() == "ds1.im_mig" })
	writesResume("after the switch", time.Now(), []int{0, 1, 2})
	sidesEqual("after the switch")

	// Drill 3: proxy 3, with a transaction open on the shard, SIGKILLed
	// while the lock of the switch back is held.
	for _, w := range writers {
		if w.proxy == 2 {
			w.halt()
		}
	}
	tx, err = dbs[2].BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec("UPDATE conv_msg SET msg_type = 3 WHERE conv_id = ? AND seq = 1", filler[1]); err != nil {
		t.Fatal(err)
	}
	before = routeVersion()
	locks.drain()
	locksBefore := locks.count.Load()
	mustExec(t, admin, fmt.Sprintf("/*+ convoy MIGRATION %d ROLLBACK */", shard))
	waitLock(t, locks, 60*time.Second)
	proxies[2].kill()
	killedAt := time.Now()
	_ = tx.Rollback()
	waitFor(t, "the rollback to complete without the dead proxy", 90*time.Second, func() bool {
		if v := routeVersion(); v != before && v != before+1 {
			t.Fatalf("routes at version %d during the rollback, from %d: more than one flip", v, before)
		}
		return step() == ""
	})
	if v := routeVersion(); v != before+1 || placedOn() != "ds0.im_0" {
		t.Fatalf("after the rollback: routes version %d (want %d), shard on %s", v, before+1, placedOn())
	}
	t.Logf(at()+"drill 3: the rollback completed %s after the SIGKILL (%d switch attempts)", time.Since(killedAt).Round(100*time.Millisecond), locks.count.Load()-locksBefore)
	writesResume("after the rollback", time.Now(), []int{0, 1})
	time.Sleep(300 * time.Millisecond)
	haltAll()

	// The mixed load's conversations: every page was exact, and the
	// source holds every live message once with its seq and last type.
	final := snapshotOf(t, s)
	servers := map[string]*sql.DB{"ds0": src, "ds1": s.ds[1].Open(t, "")}
	reads, failedOps := 0, 0
	for _, m := range models {
		reads += m.reads
		failedOps += len(m.failed)
		for _, e := range m.readBad[:min(3, len(m.readBad))] {
			t.Errorf("conversation %d: %s", m.conv, e)
		}
		for _, e := range m.failed[:min(3, len(m.failed))] {
			t.Logf("conversation %d (a write failed during a drill, outcome unknown): %s", m.conv, e)
		}
		checkAuthoritative(t, final, servers, m)
	}
	var hotPages float64
	for _, p := range proxies[:2] {
		hotPages += metricValue(t, scrape(t, p.metrics), `convoy_statements_total{class="hot"}`)
	}
	if reads == 0 || hotPages <= 0 {
		t.Errorf("the mixed load read %d pages, %v from the hot tier", reads, hotPages)
	}
	t.Logf("mixed load: %d history pages checked (%v served by the hot tier), %d operations failed", reads, hotPages, failedOps)

	// The source holds every acknowledged message once, with its seq.
	stored := checkMessages(t, src, srcMsg, append(append([]uint64{}, convs...), filler...), writers, preloaded)
	// The transactions open during the switches: proxy 2's commit was
	// answered (an error says it was rolled back), proxy 3 died with its.
	var type0, type1 int
	if err := src.QueryRow(fmt.Sprintf("SELECT (SELECT msg_type FROM %[1]s WHERE conv_id = ? AND seq = 1), (SELECT msg_type FROM %[1]s WHERE conv_id = ? AND seq = 1)", srcMsg),
		filler[0], filler[1]).Scan(&type0, &type1); err != nil {
		t.Fatal(err)
	}
	if want := map[bool]int{true: 2, false: 1}[commitErr == nil]; type0 != want {
		t.Errorf("the transaction open during the switch ended with commit error %v, its update is %d on the source, want %d", commitErr, type0, want)
	}
	if type1 != 1 {
		t.Errorf("the transaction of the killed proxy was committed: msg_type %d", type1)
	}
	// Each conversation's seq counter moved with its messages: at the last
	// seq stored, so the next insert gets the next seq, never a used one.
	var counterOff int
	if err := src.QueryRow(fmt.Sprintf("SELECT COUNT(*) FROM %s s JOIN (SELECT conv_id, MAX(seq) AS m FROM %s WHERE CRC32(conv_id) %% 1024 = %d GROUP BY conv_id) c USING (conv_id) WHERE s.max_seq <> c.m",
		srcSeq, srcMsg, shard)).Scan(&counterOff); err != nil {
		t.Fatal(err)
	}
	if counterOff != 0 {
		t.Errorf("%d conversations of shard %s have a seq counter other than their last seq on the source", counterOff, shard)
	}
	checkMessages(t, admin, "conv_msg", control, writers, nil)
	if want := len(filler) * perConv; stored < want {
		t.Errorf("%d messages of shard %s on the source, at least %d expected", stored, shard, want)
	}
	acked, failed := 0, 0
	for _, w := range writers {
		for _, a := range w.snapshot() {
			switch {
			case a.err == nil:
				acked++
			case router.ShardOf(a.conv) == otherShard:
				t.Errorf("a write of the other shard failed through proxy %d: %v", w.proxy+1, a.err)
			default:
				failed++
			}
		}
	}
	var left int
	if err := s.ds[1].Open(t, "").QueryRow("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'im_mig' AND TABLE_NAME LIKE 'conv\\_msg%'").Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("the rolled-back job left %d conv_msg tables on the target", left)
	}
	t.Logf("%d messages stored on the source; %d writes acknowledged, %d of the migrating shard failed (held past a bound or during the outages)", stored, acked, failed)
}

func isDone(w *writer) bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// copyProgress is what the job record says of its copy.
type copyProgress struct {
	phase, start string
	rows         int64
}

// decodeCopy reads the copy's progress from a job record (migrate's
// jobProgress, as JSON).
func decodeCopy(t *testing.T, raw json.RawMessage) copyProgress {
	t.Helper()
	var p struct {
		State struct {
			Backfill struct {
				Phase string                          `json:"phase"`
				Start json.RawMessage                 `json:"start"`
				Copy  map[string]struct{ Rows int64 } `json:"copy"`
			} `json:"backfill"`
		} `json:"state"`
	}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &p); err != nil {
			t.Fatalf("job progress: %v: %s", err, raw)
		}
	}
	cp := copyProgress{phase: p.State.Backfill.Phase, start: string(p.State.Backfill.Start)}
	if cp.start == "null" {
		cp.start = ""
	}
	for _, c := range p.State.Backfill.Copy {
		cp.rows += c.Rows
	}
	return cp
}

// lockWatch reports the creations of migration locks.
type lockWatch struct {
	created chan struct{}
	count   atomic.Int64
}

// watchLocks follows the lock creations from now on.
func watchLocks(t *testing.T, ctx context.Context, cli *clientv3.Client) *lockWatch {
	lw := &lockWatch{created: make(chan struct{}, 100)}
	now, err := cli.Get(ctx, coord.LocksPrefix(testCluster), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		// A watch broken by the etcd restart is started again from the
		// revision it reached.
		rev := now.Header.Revision
		for ctx.Err() == nil {
			for resp := range cli.Watch(ctx, coord.LocksPrefix(testCluster), clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
				for _, ev := range resp.Events {
					rev = ev.Kv.ModRevision
					if ev.Type == clientv3.EventTypePut && ev.Kv.Version == 1 {
						lw.count.Add(1)
						select {
						case lw.created <- struct{}{}:
						default:
						}
					}
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	return lw
}

// drain forgets the lock creations seen so far: call it before the
// command whose lock waitLock then waits for.
func (lw *lockWatch) drain() {
	for {
		select {
		case <-lw.created:
		default:
			return
		}
	}
}

// waitLock waits for a lock creation not drained yet.
func waitLock(t *testing.T, lw *lockWatch, d time.Duration) {
	t.Helper()
	select {
	case <-lw.created:
	case <-time.After(d):
		t.Fatalf("no migration lock taken within %s", d)
	}
}
