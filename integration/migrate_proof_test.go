package integration

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/convoy-im/convoy/coord"
	"github.com/convoy-im/convoy/internal/testsvc"
	"github.com/convoy-im/convoy/migrate"
	"github.com/convoy-im/convoy/router"
)

// convModel is what the clients of one conversation were told: its
// operations run one at a time (one goroutine per conversation, through
// the proxies in turn), so every acknowledged operation happened before
// the next one started and a read can be checked against all of them.
type convModel struct {
	conv uint64
	// live: acknowledged, not deleted: msg_id -> (seq, msg_type).
	live map[uint64][2]uint64
	// deleted: msg_id -> seq of acknowledged deletes.
	deleted map[uint64]uint64
	// unsure: messages whose last operation failed (outcome unknown to
	// the client): neither required nor forbidden anywhere.
	unsure  map[uint64]bool
	failed  []string
	reads   int
	updates int
	readBad []string
	// hold, when set and true, keeps the load idle (parked once its last
	// operation returned), so a test can compare both sides of a shard.
	hold   *atomic.Bool
	parked atomic.Bool
}

// TestMigrationLayoutUnderLoad proves a layout change through live
// proxies: a third MariaDB joins, and a new route document moves four
// shards (three from ds0, one from ds1; each into a physical table of its
// own, so the change regroups tables too) onto it, applied as
// `convoy migrate apply --to FILE AUTO` applies it (migrate.Admin.ApplyLayout),
// with a rollback window of a few seconds. Meanwhile three Convoy
// processes with the hot tier on serve a mixed load on the moving shards'
// conversations and on an unmoved one: seq-allocating inserts (RETURNING
// seq or LAST_INSERT_ID), msg_type updates and deletes by primary key, and
// history pages checked against what was acknowledged before each read
// started (no live message missing from the seq range a page covers, no
// deleted one shown, msg_type the last acknowledged). Afterwards the live
// routes place every shard as the document does and, on each
// conversation's authoritative side, every live message is stored once
// with its seq and msg_type, no deleted one is, the seqs stored and
// deleted are exactly 1..max_seq (a delete leaves its seq unused, a seq is
// never given twice), and im_conv_seq.max_seq is the last seq given. No
// write may fail: the switches hold writes well within hold_max_wait.
func TestMigrationLayoutUnderLoad(t *testing.T) {
	began := time.Now()
	at := func() string { return "at " + time.Since(began).Round(100*time.Millisecond).String() + ": " }
	s := newStack(t)
	r := testsvc.StartRedis(t)
	cfg := []string{hotTierYAML(r), "migration:\n  rollback_window: 3s"}
	// newStack's process starts again with the same settings as the
	// others: a runner with the default rollback window (7 days) would
	// keep its job switched. SIGTERM, so that it leaves the registry at
	// once rather than when its lease expires.
	first := s.convoy
	if err := first.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-first.exited
	f, err := os.OpenFile(first.cfgPath, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(strings.Join(cfg, "\n") + "\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	first.start(t)
	proxies := []*convoyProc{first, startConvoy(t, s.etcd.Endpoints(), cfg...), startConvoy(t, s.etcd.Endpoints(), cfg...)}
	admin := proxies[0].open(t, "convoy", "convoy", "im")
	t.Cleanup(func() {
		if t.Failed() {
			for i, p := range proxies {
				t.Logf("proxy %d log (warnings):\n%s", i+1, warnings(p))
			}
		}
	})
	cli, err := clientv3.New(clientv3.Config{Endpoints: s.etcd.Endpoints(), DialTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	waitFor(t, "three proxies to register", 20*time.Second, func() bool {
		ps, err := coord.ListProxies(ctx, cli, testCluster)
		return err == nil && len(ps) == 3
	})

	// The new server, binlog on like the others (testsvc's defaults), with
	// its own server id.
	ds2 := testsvc.StartMariaDB(t, testsvc.WithServerID(4))
	servers := map[string]*sql.DB{"ds0": s.ds[0].Open(t, ""), "ds1": s.ds[1].Open(t, ""), "ds2": ds2.Open(t, "")}

	moved := []int{5, 6, 9, 700}
	const still = 7 // shares ds0's table with 5, 6 and 9, never moves
	live := snapshotOf(t, s)
	if live.Physical("conv_msg", router.Shard(700)).Datasource != "ds1" || live.Physical("conv_msg", router.Shard(5)).Datasource != "ds0" {
		t.Fatalf("[BUG] the test layout changed: shard 5 on %+v, 700 on %+v", live.Physical("conv_msg", 5), live.Physical("conv_msg", 700))
	}
	doc, err := s.store.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	next := doc
	next.Datasources = append(next.Datasources, router.Datasource{Name: "ds2", Addr: ds2.Addr(), User: "root"})
	for _, sh := range moved {
		next = router.MoveShard(next, sh, "ds2", "im_5", nil)
	}

	// Conversations: two per moving shard, two of the unmoved one.
	var models []*convModel
	for _, sh := range append(append([]int{}, moved...), still) {
		for _, c := range convsOn(router.Shard(sh), 2) {
			models = append(models, &convModel{conv: c, live: map[uint64][2]uint64{}, deleted: map[uint64]uint64{}, unsure: map[uint64]bool{}})
			mustExec(t, admin, "INSERT INTO im_conv_seq (conv_id, max_seq, member_cnt) VALUES (?, 0, 2)", c)
		}
	}
	dbs := make([]*sql.DB, len(proxies))
	for i, p := range proxies {
		dbs[i] = p.open(t, "app", "app secret", "im")
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for n, m := range models {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runConvLoad(m, dbs, uint64(n+1)<<32, stop)
		}()
	}
	stopLoad := sync.OnceFunc(func() { close(stop); wg.Wait() })
	t.Cleanup(stopLoad)

	time.Sleep(time.Second) // load before the change
	res, err := migrate.NewAdmin(cli, testCluster).ApplyLayout(ctx, next, 0, 2, true)
	if err != nil || len(res.Added) != 1 || fmt.Sprint(res.Started) != fmt.Sprint(moved) {
		t.Fatalf("apply: %+v, %v", res, err)
	}
	t.Logf(at()+"applied: added %s, jobs for shards %v", res.Added[0].Name, res.Started)
	jobs := coord.NewJobStore(cli, testCluster)
	for deadline := time.Now().Add(90 * time.Second); ; {
		var pending []string
		for _, sh := range moved {
			j, err := jobs.Get(ctx, sh)
			if err != nil {
				t.Fatal(err)
			}
			if j.Step == "" || j.Intent == "rollback" {
				t.Fatalf("shard %d's job: %+v", sh, j)
			}
			if j.Step != migrate.StepDone {
				pending = append(pending, fmt.Sprintf("shard %d at %s (intent %q, last error %q)", sh, j.Step, j.Intent, j.LastError))
			}
		}
		if len(pending) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("jobs not done after 90 s: %v\nSHOW MIGRATIONS: %v", pending, showMigrations(t, admin))
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Log(at() + "every job done")
	for _, ms := range showMigrations(t, admin) {
		if ms["dualwrite_backlog"] != "0" && ms["dualwrite_backlog"] != "" {
			t.Errorf("SHOW MIGRATIONS: shard %s has dual-write backlog %s", ms["shard"], ms["dualwrite_backlog"])
		}
	}
	// The routes place every shard as the document does.
	want, err := router.NewSnapshot(next)
	if err != nil {
		t.Fatal(err)
	}
	got := snapshotOf(t, s)
	for sh := range router.Shard(router.NumShards) {
		if got.Target(sh) != want.Target(sh) {
			t.Fatalf("shard %d is at %+v, the new document puts it at %+v", sh, got.Target(sh), want.Target(sh))
		}
	}
	// Every proxy routes a moved conversation to the new server before
	// the load stops, so the last writes went there through each.
	waitFor(t, "every proxy to route the moved shards to ds2", 30*time.Second, func() bool {
		for _, p := range proxies {
			rows := queryRows(t, p.open(t, "convoy", "convoy", "im"), fmt.Sprintf("/*+ convoy SHOW SHARD FOR conv_id = %d */", models[0].conv))
			if rows[0][4] != "ds2" {
				return false
			}
		}
		return true
	})
	time.Sleep(time.Second) // load on the new layout
	stopLoad()

	reads, updates, deletes, stored := 0, 0, 0, 0
	for _, m := range models {
		reads, updates, deletes, stored = reads+m.reads, updates+m.updates, deletes+len(m.deleted), stored+len(m.live)
		for _, e := range m.failed {
			t.Errorf("conversation %d: %s", m.conv, e)
		}
		for _, e := range m.readBad[:min(3, len(m.readBad))] {
			t.Errorf("conversation %d: %s", m.conv, e)
		}
		checkAuthoritative(t, got, servers, m)
	}
	// The load did what it claims: pages served from the hot tier too,
	// updates and deletes acknowledged.
	hot := 0.0
	for _, p := range proxies {
		hot += metricValue(t, scrape(t, p.metrics), `convoy_statements_total{class="hot"}`)
	}
	if hot == 0 || updates == 0 || deletes == 0 {
		t.Errorf("the load was not mixed: %v pages from the hot tier, %d updates, %d deletes", hot, updates, deletes)
	}
	t.Logf(at()+"%d conversations: %d messages stored, %d updates, %d deletes acknowledged; %d history pages checked, %v served by the hot tier",
		len(models), stored, updates, deletes, reads, hot)
}

// runConvLoad runs operations on one conversation through the proxies in
// turn until stop: inserts, updates and deletes by primary key, history
// pages, each checked against (or recorded in) m.
func runConvLoad(m *convModel, dbs []*sql.DB, idBase uint64, stop chan struct{}) {
	rng := rand.New(rand.NewPCG(idBase, 1))
	var ids []uint64 // live messages, for picking
	next := idBase
	maxSeq := uint64(0)
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		if m.hold != nil && m.hold.Load() {
			m.parked.Store(true)
			time.Sleep(5 * time.Millisecond)
			continue
		}
		m.parked.Store(false)
		db := dbs[i%len(dbs)]
		op := rng.IntN(10)
		switch {
		case op < 5 || len(ids) < 3: // insert
			next++
			var seq uint64
			var err error
			if i%2 == 0 {
				err = db.QueryRow("INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (?, ?, 7, 1, NOW(3)) RETURNING seq", m.conv, next).Scan(&seq)
			} else {
				var r sql.Result
				if r, err = db.Exec("INSERT INTO conv_msg (conv_id, msg_id, sender_uid, msg_type, created_at) VALUES (?, ?, 7, 1, NOW(3))", m.conv, next); err == nil {
					var id int64
					id, err = r.LastInsertId()
					seq = uint64(id)
				}
			}
			if err != nil {
				m.unsure[next] = true
				m.failed = append(m.failed, fmt.Sprintf("insert of %d through proxy %d: %v", next, i%len(dbs)+1, err))
				continue
			}
			m.live[next] = [2]uint64{seq, 1}
			ids = append(ids, next)
			maxSeq = max(maxSeq, seq)
		case op < 7: // update msg_type
			id := ids[rng.IntN(len(ids))]
			v := m.live[id]
			typ := v[1] + 1
			if _, err := db.Exec("UPDATE conv_msg SET msg_type = ? WHERE conv_id = ? AND seq = ?", typ, m.conv, v[0]); err != nil {
				m.unsure[id] = true
				m.failed = append(m.failed, fmt.Sprintf("update of %d through proxy %d: %v", id, i%len(dbs)+1, err))
				continue
			}
			m.live[id] = [2]uint64{v[0], typ}
			m.updates++
		case op < 8: // delete
			k := rng.IntN(len(ids))
			id := ids[k]
			if _, err := db.Exec("DELETE FROM conv_msg WHERE conv_id = ? AND seq = ?", m.conv, m.live[id][0]); err != nil {
				m.unsure[id] = true
				m.failed = append(m.failed, fmt.Sprintf("delete of %d through proxy %d: %v", id, i%len(dbs)+1, err))
				continue
			}
			m.deleted[id] = m.live[id][0]
			delete(m.live, id)
			ids = append(ids[:k], ids[k+1:]...)
		default: // a history page below a random point
			below := uint64(rng.IntN(int(maxSeq)+2)) + 1
			m.reads++
			if err := checkPage(m, db, below); err != "" {
				m.readBad = append(m.readBad, fmt.Sprintf("page below seq %d through proxy %d: %s", below, i%len(dbs)+1, err))
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// checkPage reads the history page below seq `below` and checks it
// against m: the page covers seqs from its last row's (or from 1 when it
// is not full) up to below; every live message in that range is there
// with its seq and last msg_type, no deleted message is.
func checkPage(m *convModel, db *sql.DB, below uint64) string {
	rows, err := db.Query(firstScreen, m.conv, below)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	seen := map[uint64]bool{}
	lowest, n := below, 0
	for rows.Next() {
		var seq, msgID, sender, typ uint64
		var created []byte
		if err := rows.Scan(&seq, &msgID, &sender, &typ, &created); err != nil {
			return err.Error()
		}
		n++
		if seq >= lowest {
			return fmt.Sprintf("seq %d out of order or not below %d", seq, lowest)
		}
		lowest = seq
		seen[msgID] = true
		if m.unsure[msgID] {
			continue
		}
		if _, gone := m.deleted[msgID]; gone {
			return fmt.Sprintf("message %d shown after its delete was acknowledged", msgID)
		}
		if v, ok := m.live[msgID]; ok && (v[0] != seq || v[1] != typ) {
			return fmt.Sprintf("message %d shown as seq %d type %d, acknowledged as seq %d type %d", msgID, seq, typ, v[0], v[1])
		}
	}
	if err := rows.Err(); err != nil {
		return err.Error()
	}
	if n < 20 {
		lowest = 0 // the page reached the conversation's start
	}
	for id, v := range m.live {
		if v[0] > lowest && v[0] < below && !seen[id] && !m.unsure[id] {
			return fmt.Sprintf("acknowledged message %d (seq %d) missing from a page of %d rows covering seqs %d..%d", id, v[0], n, lowest+1, below-1)
		}
	}
	return ""
}

// checkAuthoritative checks m's conversation on the side the routes place
// it (writers stopped): every live message once with its seq and last
// msg_type, no deleted one, stored and deleted seqs exactly 1..max_seq
// when nothing failed, im_conv_seq.max_seq the last seq given.
func checkAuthoritative(t *testing.T, snap *router.Snapshot, servers map[string]*sql.DB, m *convModel) {
	t.Helper()
	sh := router.ShardOf(m.conv)
	msgT, seqT := snap.Physical("conv_msg", sh), snap.Physical("im_conv_seq", sh)
	db := servers[msgT.Datasource]
	rows, err := db.Query(fmt.Sprintf("SELECT seq, msg_id, msg_type FROM %s.%s WHERE conv_id = ? ORDER BY seq", msgT.Database, msgT.Table), m.conv)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	used := map[uint64]uint64{} // seq -> msg_id stored or deleted with it
	stored := map[uint64]bool{}
	for rows.Next() {
		var seq, id, typ uint64
		if err := rows.Scan(&seq, &id, &typ); err != nil {
			t.Fatal(err)
		}
		if stored[id] {
			t.Errorf("conversation %d (%s): message %d stored twice", m.conv, msgT.Datasource, id)
		}
		stored[id], used[seq] = true, id
		if m.unsure[id] {
			continue
		}
		if _, gone := m.deleted[id]; gone {
			t.Errorf("conversation %d (%s): deleted message %d stored", m.conv, msgT.Datasource, id)
		} else if v, ok := m.live[id]; !ok {
			t.Errorf("conversation %d (%s): message %d stored, never acknowledged", m.conv, msgT.Datasource, id)
		} else if v != [2]uint64{seq, typ} {
			t.Errorf("conversation %d (%s): message %d stored as seq %d type %d, acknowledged as seq %d type %d", m.conv, msgT.Datasource, id, seq, typ, v[0], v[1])
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	last := uint64(0)
	for id, v := range m.live {
		last = max(last, v[0])
		if !stored[id] && !m.unsure[id] {
			t.Errorf("conversation %d (%s): acknowledged message %d (seq %d) missing", m.conv, msgT.Datasource, id, v[0])
		}
	}
	for id, seq := range m.deleted {
		last = max(last, seq)
		if other, ok := used[seq]; ok && other != id {
			t.Errorf("conversation %d: the seq %d of deleted message %d was given again, to %d", m.conv, seq, id, other)
		}
		used[seq] = id
	}
	var maxSeq uint64
	if err := db.QueryRow(fmt.Sprintf("SELECT max_seq FROM %s.%s WHERE conv_id = ?", seqT.Database, seqT.Table), m.conv).Scan(&maxSeq); err != nil {
		t.Fatalf("conversation %d: seq counter on %s: %v", m.conv, seqT.Datasource, err)
	}
	if len(m.failed) == 0 {
		if maxSeq != last {
			t.Errorf("conversation %d: im_conv_seq.max_seq %d, the last seq given %d", m.conv, maxSeq, last)
		}
		for seq := uint64(1); seq <= maxSeq; seq++ {
			if _, ok := used[seq]; !ok {
				t.Errorf("conversation %d: seq %d neither stored nor deleted (max_seq %d)", m.conv, seq, maxSeq)
				break
			}
		}
	} else if maxSeq < last {
		t.Errorf("conversation %d: im_conv_seq.max_seq %d below the last seq given %d", m.conv, maxSeq, last)
	}
}

// warnings returns the last warning and error lines of p's log.
func warnings(p *convoyProc) string {
	b, _ := os.ReadFile(p.logPath)
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, `"level":"warn"`) || strings.Contains(l, `"level":"error"`) || strings.Contains(l, `"logger":"migrate"`) {
			out = append(out, l)
		}
	}
	return strings.Join(out[max(0, len(out)-30):], "\n")
}
