package integration

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/convoy-im/convoy/internal/testsvc"
	"github.com/convoy-im/convoy/migrate/inproxy"
	"github.com/convoy-im/convoy/router"
)

// A shard migration fails closed (docs/design.md §5). After a switch no
// write of the moved shard reaches the old side, whatever a transaction, a
// paused proxy or the network does; where Convoy cannot be sure, the
// client gets an error it can retry, never an acknowledgement of a write on
// the wrong side.

// waitMigrationStep waits until SHOW MIGRATIONS shows exactly one job, at
// step want ("" : no job left).
func waitMigrationStep(t *testing.T, admin *sql.DB, want string, d time.Duration) {
	t.Helper()
	var ms []map[string]string
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		ms = showMigrations(t, admin)
		if want == "" && len(ms) == 0 || len(ms) == 1 && ms[0]["step"] == want {
			return
		}
	}
	t.Fatalf("the migration is not at step %q after %s: %v", want, d, ms)
}

// waitShardStep waits until SHOW MIGRATIONS shows shard's job at step want.
func waitShardStep(t *testing.T, admin *sql.DB, shard router.Shard, want string, d time.Duration) {
	t.Helper()
	var ms []map[string]string
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		ms = showMigrations(t, admin)
		for _, m := range ms {
			if m["shard"] == shard.String() && m["step"] == want {
				return
			}
		}
	}
	t.Fatalf("shard %s's migration is not at step %q after %s: %v", shard, want, d, ms)
}

// shardPlacement is where the proxy behind admin routes conv's shard, as
// "datasource.database".
func shardPlacement(t *testing.T, admin *sql.DB, conv uint64) string {
	t.Helper()
	rows := queryRows(t, admin, fmt.Sprintf("/*+ convoy SHOW SHARD FOR conv_id = %d */", conv))
	return rows[0][4] + "." + rows[0][5]
}

// TestMigrationTransactionAcrossSwitch (window 1): a transaction reads its
// shard with SELECT ... FOR UPDATE (the switch waits for it until its
// hold's deadline, then rolls it back), the shard switches to another
// datasource under the same database name (the migration's default), and
// the transaction then inserts a message and commits. Either the message is on the new side and the client was
// told so, or the client got the deadlock error (1213) and later 1180 on
// COMMIT and the message is nowhere; it is never acknowledged on the old
// side, where reads through Convoy no longer look.
func TestMigrationTransactionAcrossSwitch(t *testing.T) {
	s := newStack(t)
	admin := s.convoy.open(t, "convoy", "convoy", "im")
	app := s.convoy.open(t, "app", "app secret", "im")
	const shard = router.Shard(5)
	conv := convsOn(shard, 1)[0]
	mustExec(t, admin, "INSERT INTO im_conv_seq (conv_id, max_seq, member_cnt) VALUES (?, 0, 2)", conv)
	mustExec(t, app, "INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (?, 1001, 7, 1, NOW(3))", conv)
	from := shardPlacement(t, admin, conv)
	if from != "ds0.im_0" {
		t.Fatalf("[BUG] shard %s starts on %s, the test expects ds0.im_0", shard, from)
	}

	mustExec(t, admin, fmt.Sprintf("/*+ convoy MIGRATE SHARD %d TO ds1 */", shard))
	waitMigrationStep(t, admin, "ready", 2*time.Minute)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tx, err := app.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	mustExec(t, tx, "BEGIN")
	var maxSeq uint64
	if err := tx.QueryRowContext(ctx, "SELECT max_seq FROM im_conv_seq WHERE conv_id = ? FOR UPDATE", conv).Scan(&maxSeq); err != nil {
		t.Fatal(err)
	}

	mustExec(t, admin, fmt.Sprintf("/*+ convoy MIGRATION %d NEXT */", shard))
	waitMigrationStep(t, admin, "switched", time.Minute)
	waitFor(t, "the proxy to serve the switched routes", 10*time.Second, func() bool { return shardPlacement(t, admin, conv) == "ds1.im_0" })
	// SHOW MIGRATION n: the job's fields, one row each.
	detail := map[string]string{}
	for _, r := range queryRows(t, admin, fmt.Sprintf("/*+ convoy SHOW MIGRATION %d */", shard)) {
		detail[r[0]] = r[1]
	}
	if !strings.Contains(detail["state"], "switched: the target is authoritative, the source fenced") ||
		!strings.HasPrefix(detail["checksum im_0.conv_msg_0000"], "equal:") || detail["switched_at"] == "" {
		t.Fatalf("SHOW MIGRATION %d after the switch: %v", shard, detail)
	}

	const msgID = 2002
	_, insErr := tx.ExecContext(ctx, "INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (?, ?, 7, 1, NOW(3))", conv, msgID)
	_, commitErr := tx.ExecContext(ctx, "COMMIT")
	count := func(db *sql.DB) int {
		t.Helper()
		var n int
		if err := db.QueryRow("SELECT COUNT(*) FROM im_0.conv_msg_0000 WHERE conv_id = ? AND msg_id = ?", conv, msgID).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	onOld, onNew := count(s.ds[0].Open(t, "")), count(s.ds[1].Open(t, ""))
	switch {
	case insErr == nil && commitErr == nil:
		if onNew != 1 || onOld != 0 {
			t.Fatalf("the transaction was acknowledged, and its message is %d times on the new side, %d times on the old one", onNew, onOld)
		}
	case insErr != nil:
		if errno(insErr) != 1213 || errno(commitErr) != 1180 {
			t.Fatalf("INSERT after the switch: %v (errno %d), COMMIT: %v (errno %d); want 1213 then 1180", insErr, errno(insErr), commitErr, errno(commitErr))
		}
		if onNew+onOld != 0 {
			t.Fatalf("the client was told the transaction failed, and its message is on the new side %d times, on the old one %d times", onNew, onOld)
		}
		t.Logf("the transaction spanning the switch was refused: %v", insErr)
	default:
		t.Fatalf("INSERT succeeded and COMMIT failed (%v): the outcome is unknown to the client", commitErr)
	}
	if _, err := tx.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	// Through Convoy: the shard's next write lands on the new side and
	// the old message was copied there.
	mustExec(t, tx, "INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (?, 3003, 7, 1, NOW(3))", conv)
	var ids []uint64
	rows, err := app.QueryContext(ctx, "SELECT msg_id FROM conv_msg WHERE conv_id = ? ORDER BY seq", conv)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id uint64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(ids) < 2 || ids[0] != 1001 || ids[len(ids)-1] != 3003 {
		t.Fatalf("the conversation through Convoy after the switch: %v", ids)
	}
}

// TestMigrationFailClosedProxies (window 2): a switch completes without a
// proxy that cannot take part, and that proxy writes nothing to the old
// side afterwards.
//
//   - Cut off: proxy 1 reaches etcd through a relay the test pauses (etcd,
//     MariaDB and the other proxy go on). The job is created while it is
//     cut off, so it never saw it. Its registration expires and the switch
//     proceeds without it; before that it refuses every sharded write
//     itself (1105 naming its registration), and once the relay resumes it
//     serves the new routes and writes again.
//   - Paused: proxy 2 is SIGSTOPped past its lease with writes in flight,
//     the switch proceeds without it, and it is resumed: whatever it had
//     in hand is refused (by its own write fence, or by the old side's
//     storage fence) or lands before the switch.
//
// Writers send seq-allocating inserts through the healthy proxy and the
// drilled one throughout; afterwards the new side holds every
// acknowledged message once, with the seq its client was told, seqs
// contiguous.
func TestMigrationFailClosedProxies(t *testing.T) {
	s := newStack(t)
	admin := s.convoy.open(t, "convoy", "convoy", "im")
	relay := testsvc.StartRelay(t, strings.TrimPrefix(s.etcd.Endpoints()[0], "http://"))
	// A 3 s registration: the switch waits at most that long for a proxy
	// that cannot answer. The jobs run in the healthy proxy.
	opts := []string{"etcd.registration_ttl: 3s", "migration:\n  run_jobs: false"}
	cutOff := startConvoy(t, []string{"http://" + relay.Addr()}, opts...)
	paused := startConvoy(t, s.etcd.Endpoints(), opts...)

	drill := func(name string, shard router.Shard, p *convoyProc, act func(), heal func()) {
		t.Helper()
		convs := convsOn(shard, 2)
		for _, c := range convs {
			mustExec(t, admin, "INSERT INTO im_conv_seq (conv_id, max_seq, member_cnt) VALUES (?, 0, 2)", c)
		}
		dbs := []*sql.DB{s.convoy.open(t, "app", "app secret", "im"), p.open(t, "app", "app secret", "im")}
		var writers []*writer
		for i, c := range convs {
			for px, db := range dbs {
				w := &writer{conv: c, proxy: px, db: db, next: uint64(shard)<<40 | uint64(i*2+px)<<32, every: 20 * time.Millisecond,
					stop: make(chan struct{}), done: make(chan struct{})}
				writers = append(writers, w)
				go w.run()
			}
		}
		defer func() {
			for _, w := range writers {
				w.halt()
			}
		}()
		time.Sleep(500 * time.Millisecond)
		act()
		mustExec(t, admin, fmt.Sprintf("/*+ convoy MIGRATE SHARD %d TO ds1 AUTO */", shard))
		waitShardStep(t, admin, shard, "switched", 2*time.Minute)
		switchedAt := time.Now()
		time.Sleep(time.Second)
		heal()
		padmin := p.open(t, "convoy", "convoy", "im")
		waitFor(t, name+": the drilled proxy to serve the switched routes", 30*time.Second, func() bool {
			return shardPlacement(t, padmin, convs[0]) == "ds1.im_0"
		})
		defer func() {
			if t.Failed() {
				t.Logf("%s: the drilled proxy's log ends:\n%s", name, p.logTail())
			}
		}()
		waitFor(t, name+": writes through the drilled proxy to succeed again", 30*time.Second, func() bool {
			for _, w := range writers {
				if w.proxy != 1 {
					continue
				}
				for _, a := range w.snapshot() {
					if a.err == nil && a.start.After(switchedAt) {
						return true
					}
				}
			}
			return false
		})
		for _, w := range writers {
			w.halt()
		}
		errs := map[string]int{}
		for _, w := range writers {
			for _, a := range w.snapshot() {
				if a.err == nil {
					continue
				}
				errs[fmt.Sprintf("proxy %d errno %d", w.proxy, errno(a.err))]++
				if w.proxy == 0 {
					t.Errorf("%s: a write through the healthy proxy failed: %v", name, a.err)
				}
				if name == "cut off" && !strings.Contains(a.err.Error(), "registration may have expired") {
					// Its clock tells it before etcd expires it: its own
					// fence, not the storage's, refuses its writes.
					t.Errorf("%s: a write through the cut-off proxy failed otherwise than by its write fence: %v", name, a.err)
				}
			}
		}
		n := checkMessages(t, s.ds[1].Open(t, ""), "im_0.conv_msg_0000", convs, writers, nil)
		t.Logf("%s: %d messages on the new side, every acknowledged one once; failed writes by proxy and errno: %v", name, n, errs)
	}

	drill("cut off", 5, cutOff, func() { relay.Pause(true) }, func() { relay.Pause(false) })
	drill("paused", 6, paused, func() { paused.pause(t) }, paused.resume)
}

// TestMigrationRollbackDuringRamp (windows 4 and 5): reads of half the
// shard's conversations go to the target (READ PERCENT 50) while two
// proxies serve inserts, msg_type updates and deletes of those
// conversations and check every history page they read against what was
// acknowledged before it (no live message missing, no deleted one shown,
// the last acknowledged msg_type: an older row image brought back on the
// target by a lagging apply shows as a wrong type). Then ROLLBACK under
// the same load: the ramp is dropped everywhere before any row goes from
// the target, so no page misses a row or fails on a dropped table.
// Afterwards the source holds every conversation exactly as acknowledged.
func TestMigrationRollbackDuringRamp(t *testing.T) {
	s := newStack(t)
	p2 := startConvoy(t, s.etcd.Endpoints())
	admin := s.convoy.open(t, "convoy", "convoy", "im")
	const shard = router.Shard(5)
	var convs []uint64
	var low, high int
	for _, c := range convsOn(shard, 40) {
		switch {
		case inproxy.Share(c) < 50 && low < 2:
			low++
		case inproxy.Share(c) >= 50 && high < 2:
			high++
		default:
			continue
		}
		convs = append(convs, c)
	}
	dbs := []*sql.DB{s.convoy.open(t, "app", "app secret", "im"), p2.open(t, "app", "app secret", "im")}
	var models []*convModel
	for _, c := range convs {
		mustExec(t, admin, "INSERT INTO im_conv_seq (conv_id, max_seq, member_cnt) VALUES (?, 0, 2)", c)
		models = append(models, &convModel{conv: c, live: map[uint64][2]uint64{}, deleted: map[uint64]uint64{}, unsure: map[uint64]bool{}})
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, m := range models {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runConvLoad(m, dbs, uint64(i+1)<<32, stop)
		}()
	}
	halt := func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}
	defer halt()

	mustExec(t, admin, fmt.Sprintf("/*+ convoy MIGRATE SHARD %d TO ds1 DATABASE im_mig */", shard))
	waitMigrationStep(t, admin, "ready", 2*time.Minute)
	mustExec(t, admin, fmt.Sprintf("/*+ convoy MIGRATION %d READ PERCENT 50 */", shard))
	newReads := func() int {
		ms := showMigrations(t, admin)
		if len(ms) != 1 {
			return 0
		}
		n, _ := strconv.Atoi(ms[0]["new_reads"])
		return n
	}
	// Pages of the ramped conversations come from the target (the proxies
	// publish their per-side reads every 5 s).
	waitFor(t, "reads on the target", 30*time.Second, func() bool { return newReads() > 0 })
	time.Sleep(2 * time.Second)
	onTarget := newReads()
	mustExec(t, admin, fmt.Sprintf("/*+ convoy MIGRATION %d ROLLBACK */", shard))
	waitMigrationStep(t, admin, "", 2*time.Minute)
	time.Sleep(time.Second)
	halt()

	snap := snapshotOf(t, s)
	if at := snap.Target(shard); at.Datasource != "ds0" || at.Database != "im_0" {
		t.Fatalf("after the rollback shard %s is on %+v", shard, at)
	}
	servers := map[string]*sql.DB{"ds0": s.ds[0].Open(t, ""), "ds1": s.ds[1].Open(t, "")}
	reads, updates := 0, 0
	for _, m := range models {
		for _, f := range m.failed {
			t.Errorf("conversation %d: a write failed: %s", m.conv, f)
		}
		for _, r := range m.readBad {
			t.Errorf("conversation %d (share %d): %s", m.conv, inproxy.Share(m.conv), r)
		}
		reads, updates = reads+m.reads, updates+m.updates
		checkAuthoritative(t, snap, servers, m)
	}
	t.Logf("%d pages checked, %d updates; before the rollback the proxies had counted %d reads on the target", reads, updates, onTarget)
}

// TestMigrationTwoShardsRunnerCrashAndPurge is the last of docs/design.md §5's
// drills, against real processes under live writes through two proxies:
//
//   - two shards of one physical table switch at once (two NEXTs sent
//     together): their switches take turns, so neither loses the route key
//     to the other after holding its writes (no "routes changed" abort);
//   - one conversation's seq row is locked on the source by another
//     session when the switch starts, so a Convoy write is blocked on a row
//     lock across the fence: it commits before the fence or fails, never
//     after it on the old side;
//   - the worker running both jobs exits right after its first route flip
//     and before saving `switched` (failpoint migrate/after-flip): the other
//     worker finds that shard's routes flipped and records the switch
//     without a second flip, and switches the other shard;
//   - the cleanup of both shards purges their rows from the shared source
//     table while a third shard of that table keeps writing there.
//
// Afterwards every acknowledged message of the moved shards is on the
// target once with the seq its client got (seqs contiguous) and none is
// left on the source; the third shard lost nothing and saw no error.
func TestMigrationTwoShardsRunnerCrashAndPurge(t *testing.T) {
	s := newStack(t)
	noJobs := "migration:\n  run_jobs: false"
	s.convoy.restartWith(t, noJobs)
	proxies := []*convoyProc{s.convoy, startConvoy(t, s.etcd.Endpoints(), noJobs)}
	ttl := "migration:\n  runner_ttl: 3s"
	crashing := startWorker(t, s.etcd.Endpoints(), ttl, "env:CONVOY_FAILPOINTS=migrate/after-flip=exit")
	admin := s.convoy.open(t, "convoy", "convoy", "im")

	moved := []router.Shard{5, 6}
	const control = router.Shard(7)
	snap := snapshotOf(t, s)
	msgTable := snap.Physical("conv_msg", control)
	for _, sh := range moved {
		if snap.Physical("conv_msg", sh) != msgTable || msgTable.Datasource != "ds0" {
			t.Fatalf("[BUG] shards %v and %s do not share a table on ds0", moved, control)
		}
	}
	seqTable := snap.Physical("im_conv_seq", control)
	srcMsg, srcSeq := msgTable.Database+"."+msgTable.Table, seqTable.Database+"."+seqTable.Table
	src := s.ds[0].Open(t, "")

	// Rows to purge, interleaved with the control shard's in the shared
	// table: 20 conversations of 100 messages on each shard, written on the
	// source directly.
	preloaded := map[uint64]bool{}
	var live, movedConvs, controlConvs []uint64
	for i, sh := range append(append([]router.Shard{}, moved...), control) {
		all := convsOn(sh, 22)
		var vals, seqs []string
		for _, c := range all[2:] {
			for seq := 1; seq <= 100; seq++ {
				id := 1<<40 + c*1000 + uint64(seq)
				preloaded[id] = true
				vals = append(vals, fmt.Sprintf("(%d, %d, %d, 7, 1, NOW(3))", c, seq, id))
			}
			seqs = append(seqs, fmt.Sprintf("(%d, 100, 2)", c))
		}
		s.ds[0].Exec(t,
			fmt.Sprintf("INSERT INTO %s (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES %s", srcMsg, strings.Join(vals, ",")),
			fmt.Sprintf("INSERT INTO %s (conv_id, max_seq, member_cnt) VALUES %s", srcSeq, strings.Join(seqs, ",")))
		for _, c := range all[:2] {
			mustExec(t, admin, "INSERT INTO im_conv_seq (conv_id, max_seq, member_cnt) VALUES (?, 0, 2)", c)
		}
		live = append(live, all[:2]...)
		if i < len(moved) {
			movedConvs = append(movedConvs, all...)
		} else {
			controlConvs = all
		}
	}
	var writers []*writer
	for _, p := range proxies {
		db := p.open(t, "app", "app secret", "im")
		db.SetMaxOpenConns(8)
		for _, c := range live {
			w := &writer{conv: c, proxy: len(writers) % len(proxies), db: db, next: uint64(len(writers)+1) << 32,
				every: 20 * time.Millisecond, stop: make(chan struct{}), done: make(chan struct{})}
			writers = append(writers, w)
			go w.run()
		}
	}
	haltAll := func() {
		for _, w := range writers {
			w.halt()
		}
	}
	t.Cleanup(haltAll)

	for _, sh := range moved {
		mustExec(t, admin, fmt.Sprintf("/*+ convoy MIGRATE SHARD %d TO ds1 DATABASE im_mig */", sh))
	}
	for _, sh := range moved {
		waitShardStep(t, admin, sh, "ready", 2*time.Minute)
	}
	// The crashing worker runs both jobs; the other starts now, to take
	// them over.
	for _, m := range showMigrations(t, admin) {
		if !strings.HasSuffix(m["runner"], fmt.Sprintf("-%d-worker", crashing.cmd.Process.Pid)) {
			t.Fatalf("job %v is not run by the only worker", m)
		}
	}
	survivor := startWorker(t, s.etcd.Endpoints(), ttl)

	// Another session locks the seq row of the first moved shard's first
	// live conversation on the source: that conversation's next Convoy
	// write blocks on it, across the switch's start.
	blocker, err := src.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := blocker.Exec("SELECT max_seq FROM "+srcSeq+" WHERE conv_id = ? FOR UPDATE", live[0]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	var nexts sync.WaitGroup
	for _, sh := range moved {
		nexts.Add(1)
		go func() {
			defer nexts.Done()
			if _, err := admin.Exec(fmt.Sprintf("/*+ convoy MIGRATION %d NEXT */", sh)); err != nil {
				t.Errorf("NEXT of shard %s: %v", sh, err)
			}
		}()
	}
	nexts.Wait()
	time.Sleep(time.Second)
	if err := blocker.Rollback(); err != nil {
		t.Logf("the blocking session: %v", err) // the fence may have killed it
	}
	select {
	case <-crashing.exited:
	case <-time.After(time.Minute):
		t.Fatalf("the worker did not exit at its first flip:\n%s", crashing.logTail())
	}
	if !strings.Contains(crashing.logTail(), "exiting at migrate/after-flip") {
		t.Fatalf("the worker exited, but not at the failpoint:\n%s", crashing.logTail())
	}
	for _, sh := range moved {
		waitShardStep(t, admin, sh, "switched", time.Minute)
	}
	byEarlier := 0
	for _, m := range showMigrations(t, admin) {
		if !strings.HasSuffix(m["runner"], fmt.Sprintf("-%d-worker", survivor.cmd.Process.Pid)) {
			t.Errorf("job %v is not run by the surviving worker", m)
		}
	}
	for _, sh := range moved {
		detail := queryRows(t, admin, fmt.Sprintf("/*+ convoy SHOW MIGRATION %d */", sh))
		if strings.Contains(fmt.Sprint(detail), "switched by an earlier runner") {
			byEarlier++
		}
	}
	if byEarlier != 1 {
		t.Errorf("%d switches recorded as done by an earlier runner, want 1 (the one the crash interrupted)", byEarlier)
	}
	logs := crashing.logTail() + survivor.logTail()
	if strings.Contains(logs, "routes changed") {
		t.Errorf("a switch lost the route key to the other:\n%s", logs)
	}
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, "switch aborted") {
			t.Logf("a worker logged: %s", l)
		}
	}
	snap = snapshotOf(t, s)
	for _, sh := range moved {
		if at := snap.Target(sh); at.Datasource != "ds1" || at.Database != "im_mig" {
			t.Fatalf("after the switches shard %s is on %+v", sh, at)
		}
	}

	// The end of both rollback windows (NEXT), then PURGE of both under
	// the writers' load: it deletes the moved shards' rows from the shared
	// source table around the control shard's.
	time.Sleep(500 * time.Millisecond)
	for _, sh := range moved {
		mustExec(t, admin, fmt.Sprintf("/*+ convoy MIGRATION %d NEXT */", sh))
	}
	allIn := func(cond func(map[string]string) bool) func() bool {
		return func() bool {
			ms := showMigrations(t, admin)
			for _, m := range ms {
				if !cond(m) {
					return false
				}
			}
			return len(ms) == len(moved)
		}
	}
	waitFor(t, "both jobs to be done", time.Minute, allIn(func(m map[string]string) bool { return m["step"] == "done" }))
	purgeStart := time.Now()
	for _, sh := range moved {
		mustExec(t, admin, fmt.Sprintf("/*+ convoy MIGRATION %d PURGE */", sh))
	}
	waitFor(t, "both purges to finish", 2*time.Minute, allIn(func(m map[string]string) bool {
		return strings.Contains(m["state"], "purged")
	}))
	purgeTook := time.Since(purgeStart)
	time.Sleep(300 * time.Millisecond)
	haltAll()

	for _, sh := range moved {
		if n := count(t, src, fmt.Sprintf("SELECT COUNT(*) FROM %s WHERE CRC32(conv_id) %% 1024 = ?", srcMsg), int(sh)); n != 0 {
			t.Errorf("%d messages of moved shard %s left on the source after the purge", n, sh)
		}
	}
	var controlWriters, movedWriters []*writer
	failed := 0
	for _, w := range writers {
		if slices.Contains(controlConvs, w.conv) {
			controlWriters = append(controlWriters, w)
			for _, a := range w.snapshot() {
				if a.err != nil {
					t.Errorf("a write of the control shard failed: %v", a.err)
				}
			}
			continue
		}
		movedWriters = append(movedWriters, w)
		for _, a := range w.snapshot() {
			if a.err != nil {
				failed++
			}
		}
	}
	// The blocked conversation's writes: one waited for the lock.
	var blocked time.Duration
	for _, w := range movedWriters {
		for _, a := range w.snapshot() {
			if w.conv == live[0] && a.took > blocked {
				blocked = a.took
			}
		}
	}
	if blocked < time.Second {
		t.Errorf("no write of conversation %d waited for the locked seq row (longest %s)", live[0], blocked)
	}
	dst := s.ds[1].Open(t, "")
	n := checkMessages(t, dst, "im_mig."+msgTable.Table, movedConvs, movedWriters, preloaded)
	c := checkMessages(t, src, srcMsg, controlConvs, controlWriters, preloaded)
	checkMessages(t, admin, "conv_msg", append(append([]uint64{}, movedConvs...), controlConvs...), writers, preloaded)
	t.Logf("the write blocked on the row lock took %s", blocked.Round(time.Millisecond))
	t.Logf("moved shards: %d messages on the target, %d writes failed (retryable) during the switches; control shard: %d messages on the source; purge of both shards under load took %s",
		n, failed, c, purgeTook.Round(time.Millisecond))
}
