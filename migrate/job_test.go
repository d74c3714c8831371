package migrate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/convoy-im/convoy/binlog"
	"github.com/convoy-im/convoy/coord"
	"github.com/convoy-im/convoy/internal/testsvc"
	"github.com/convoy-im/convoy/migrate/inproxy"
	"github.com/convoy-im/convoy/outbox"
	"github.com/convoy-im/convoy/routecfg"
	"github.com/convoy-im/convoy/router"
)

// jobEnv is a source (ds0) and a target (ds1) MariaDB and an etcd shared by
// the subtests of TestJob; each subtest has a cluster (route document) and
// shards of its own. The layout is router.SharedLayout(2 databases, 4
// tables): shards 0..127 share table index 0 of im_0 on ds0, so every copy,
// apply and checksum must filter by shard.
type jobEnv struct {
	env
	etcd *testsvc.Etcd
	cli  *clientv3.Client
}

func newJobEnv(t *testing.T) *jobEnv {
	e := &jobEnv{env: *newEnv(t), etcd: testsvc.StartEtcd(t)}
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.etcd.Endpoints(), DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	e.cli = cli
	e.src.Exec(t, "CREATE DATABASE im_0")
	for _, logical := range router.ShardedTables() {
		e.src.Exec(t, imTable(t, logical, "im_0", router.PhysicalTableName(logical, 0)))
	}
	return e
}

func (e *jobEnv) datasources() []router.Datasource {
	return []router.Datasource{{Name: "ds0", Addr: e.src.Addr(), User: "root"}, {Name: "ds1", Addr: e.dst.Addr(), User: "root"}}
}

// cluster stores the route document of a new cluster and returns it.
func (e *jobEnv) cluster(t *testing.T, name string) router.Document {
	t.Helper()
	doc, err := router.SharedLayout(e.datasources(), 2, 4)
	if err != nil {
		t.Fatal(err)
	}
	if err := routecfg.NewStore(e.cli, name).Init(testCtx(t), doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

// connect is the Connector of the tests: root without a password.
func connect(_ context.Context, ds router.Datasource) (*sql.DB, binlog.Config, error) {
	db, err := sql.Open("mysql", "root@tcp("+ds.Addr+")/?collation=utf8mb4_general_ci&interpolateParams=false&timeout=5s")
	return db, binlog.Config{Addr: ds.Addr, User: ds.User}, err
}

func (e *jobEnv) manager(t *testing.T, cluster, id string, rate float64) *Manager {
	t.Helper()
	return e.managerWindow(t, cluster, id, rate, time.Hour)
}

func (e *jobEnv) managerWindow(t *testing.T, cluster, id string, rate float64, window time.Duration) *Manager {
	t.Helper()
	return e.managerWith(t, ManagerConfig{Cluster: cluster, ID: id, Rate: rate, RollbackWindow: window})
}

// managerWith starts a manager with the test's defaults under cfg.
func (e *jobEnv) managerWith(t *testing.T, cfg ManagerConfig) *Manager {
	t.Helper()
	cfg.Client, cfg.Connect, cfg.RunnerTTL, cfg.ChunkRows = e.cli, connect, time.Second, 100
	if cfg.ThrottleWriteP99 == 0 {
		// The throttle runs, but a loaded test machine's slow commits
		// must not stretch the copies these tests time (TestThrottle*
		// test it).
		cfg.ThrottleWriteP99 = 2 * time.Second
	}
	cfg.Log = zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)).Named(cfg.ID)
	m, err := NewManager(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// fenceSetUp reports the errors a client writing the source directly may
// get while prepare puts the storage fence's triggers on the tables (once
// per table): a metadata lock deadlock with the trigger's DDL (1213), or
// MariaDB's MDEV-26048 (a statement compiled before the trigger names the
// fence table missing: 1146). The statement did nothing; a client retries
// it. Convoy's own connections retry the 1146 themselves.
func fenceSetUp(err error) bool {
	n := mysqlErrno(err)
	return n == 1213 || n == 1146 && strings.Contains(err.Error(), "._convoy_")
}

// fill inserts n conversations' rows of shard sh into all five tables on
// the source, keys from `from`.
func (e *jobEnv) fill(t *testing.T, sh router.Shard, n int, from uint64) []uint64 {
	t.Helper()
	return e.fillAt(t, sh, n, from, "im_0", 0)
}

// fillAt is fill into the tables of index idx in database db.
func (e *jobEnv) fillAt(t *testing.T, sh router.Shard, n int, from uint64, db string, idx int) []uint64 {
	t.Helper()
	keys := keysOfShard(sh, n, from)
	var msg, content, seq, member, inbox [][]any
	for i, k := range keys {
		for s := 1; s <= 3; s++ {
			id := k*10 + uint64(s)
			msg = append(msg, []any{k, s, id, 7, 1, "2026-01-02 03:04:05.678"})
			content = append(content, []any{id, k, 7, 1, fmt.Sprintf("body %d/%d", k, s), "2026-01-02 03:04:05.678"})
			inbox = append(inbox, []any{k, uint64(i), s, id, "2026-01-02 03:04:05.678"})
		}
		seq = append(seq, []any{k, 3, 2})
		member = append(member, []any{k, uint64(i), 0, 0, "2026-01-02 03:04:05.678"})
	}
	at := func(logical string) string { return db + "." + router.PhysicalTableName(logical, idx) }
	insert(t, e.sdb, at("conv_msg"), []string{"conv_id", "seq", "msg_id", "sender_uid", "msg_type", "created_at"}, msg)
	insert(t, e.sdb, at("msg_content"), []string{"msg_id", "conv_id", "sender_uid", "msg_type", "content", "created_at"}, content)
	insert(t, e.sdb, at("im_conv_seq"), []string{"conv_id", "max_seq", "member_cnt"}, seq)
	insert(t, e.sdb, at("im_conv_member"), []string{"uid", "conv_id", "last_read_seq", "mute", "updated_at"}, member)
	insert(t, e.sdb, at("im_inbox"), []string{"uid", "conv_id", "seq", "msg_id", "send_time"}, inbox)
	return keys
}

// writer sends a mix of seq-allocating inserts, updates and deletes of
// shard sh (and of shard other, which shares the tables) to db until
// stopped; it returns how many statements it ran.
func writer(t *testing.T, db *sql.DB, database string, keys []uint64, other []uint64) (stop func() int64) {
	var n atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			k := keys[rand.IntN(len(keys))]
			if rand.IntN(3) == 0 {
				k = other[rand.IntN(len(other))]
			}
			var err error
			switch rand.IntN(4) {
			case 0, 1: // a message: seq allocated in the same transaction
				err = func() error {
					tx, err := db.BeginTx(ctx, nil)
					if err != nil {
						return err
					}
					defer tx.Rollback()
					var s uint64
					if err := tx.QueryRow("SELECT max_seq FROM "+database+".im_conv_seq_0000 WHERE conv_id = ? FOR UPDATE", k).Scan(&s); err != nil {
						return err
					}
					s++
					id := 1<<40 + k*10000 + s
					if _, err := tx.Exec("UPDATE "+database+".im_conv_seq_0000 SET max_seq = ? WHERE conv_id = ?", s, k); err != nil {
						return err
					}
					if _, err := tx.Exec("INSERT INTO "+database+".conv_msg_0000 VALUES (?, ?, ?, 7, 1, NOW(3))", k, s, id); err != nil {
						return err
					}
					if _, err := tx.Exec("INSERT INTO "+database+".msg_content_0000 VALUES (?, ?, 7, 1, ?, NOW(3))", id, k, fmt.Sprintf("live %d", s)); err != nil {
						return err
					}
					// The sender's inbox entry: the inbox grows as the
					// deletes below shrink it, so a long backfill on a
					// fast machine never empties it (the checks then
					// compare nothing).
					if _, err := tx.Exec("INSERT INTO "+database+".im_inbox_0000 VALUES (?, ?, ?, ?, NOW(3))", k, k, s, id); err != nil {
						return err
					}
					return tx.Commit()
				}()
			case 2:
				_, err = db.ExecContext(ctx, "UPDATE "+database+".im_conv_member_0000 SET last_read_seq = last_read_seq + 1, updated_at = NOW(3) WHERE uid = ?", k)
			case 3:
				_, err = db.ExecContext(ctx, "DELETE FROM "+database+".im_inbox_0000 WHERE uid = ? ORDER BY conv_id, seq LIMIT 1", k)
			}
			if fenceSetUp(err) {
				continue
			}
			if err != nil && ctx.Err() == nil {
				t.Errorf("writer: %v", err)
				return
			}
			n.Add(1)
		}
	}()
	stop = func() int64 {
		cancel()
		wg.Wait()
		return n.Load()
	}
	t.Cleanup(func() { stop() }) // a failed test stops it too
	return stop
}

// waitJob polls the shard's job until cond holds and returns it.
func waitJob(t *testing.T, store *coord.JobStore, shard int, within time.Duration, what string, cond func(coord.Job, jobProgress) bool) coord.Job {
	t.Helper()
	deadline := time.Now().Add(within)
	var last coord.Job
	for time.Now().Before(deadline) {
		j, err := store.Get(context.Background(), shard)
		if err == nil {
			last = j
			p, err := decodeProgress(j)
			if err != nil {
				t.Fatal(err)
			}
			if cond(j, p) {
				return j
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("after %s: %s; last record: step %q intent %q error %q progress %s", within, what, last.Step, last.Intent, last.LastError, last.Progress)
	return last
}

func waitGone(t *testing.T, store *coord.JobStore, shard int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		j, err := store.Get(context.Background(), shard)
		if err != nil && strings.Contains(err.Error(), "no migration job") {
			return
		}
		if err == nil && j.LastError != "" {
			t.Logf("rollback: %s", j.LastError)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("the job of shard %d is still there after %s", shard, within)
}

// sides is the five table pairs of a shard between two databases.
func (e *jobEnv) sides(t *testing.T, sh router.Shard, srcDB, dstDB string) []TableMove {
	moves, err := ShardMoves(sh, e.sdb, router.Target{Database: srcDB, Table: 0}, e.ddb, router.Target{Database: dstDB, Table: 0})
	if err != nil {
		t.Fatal(err)
	}
	return moves
}

// equalSides checks both sides' rows of the shard: a full sorted dump and a
// checksum, per table. It returns the dumps of the target.
func equalSides(t *testing.T, ctx context.Context, moves []TableMove) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, m := range moves {
		a, b := dump(t, m.Source.DB, m.Source.String(), m.Filter), dump(t, m.Target.DB, m.Target.String(), m.Filter)
		if len(a) == 0 {
			t.Fatalf("%s holds no row of shard %d: the test checks nothing", m.Source, m.Filter.Shard)
		}
		sameDump(t, m.Source.String()+" vs "+m.Target.String(), a, b)
		c, err := NewChecksummer(ctx, m.Source, m.Target, m.Filter, fast)
		if err != nil {
			t.Fatal(err)
		}
		if st := checksum(t, ctx, c); !st.Equal() {
			t.Fatalf("%s: checksum differs: %+v", m.Target, st.Differing)
		}
		out[m.Target.String()] = b
	}
	return out
}

// eventuallyEqual waits until both sides' dumps of every table agree.
func eventuallyEqual(t *testing.T, moves []TableMove, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		equal := true
		for _, m := range moves {
			if !reflect.DeepEqual(dump(t, m.Source.DB, m.Source.String(), m.Filter), dump(t, m.Target.DB, m.Target.String(), m.Filter)) {
				equal = false
				break
			}
		}
		if equal {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sides still differ after %s", within)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestJob(t *testing.T) {
	e := newJobEnv(t)
	for _, c := range []struct {
		name string
		f    func(*testing.T, *jobEnv)
	}{
		{"SwitchAndRollback", testJobSwitchAndRollback},
		{"Takeover", func(t *testing.T, e *jobEnv) { testJobTakeover(t, e, false) }},
		{"TakeoverLeaseExpiry", func(t *testing.T, e *jobEnv) { testJobTakeover(t, e, true) }},
		{"TakeoverAfterFlip", testJobTakeoverAfterFlip},
		{"RollbackMidCopy", testJobRollbackMidCopy},
		{"Refused", testJobRefused},
		{"SwitchRetrySpacing", testJobSwitchRetrySpacing},
		{"PauseRate", testJobPauseRate},
		{"Lag", testJobLag},
		{"Cleanup", testJobCleanup},
		{"ReadOnlyOwnTables", testJobReadOnlyOwnTables},
		{"Companions", testJobCompanions},
		{"Parallel", testJobParallel},
		{"RollbackWaitsForRamps", testJobRollbackWaitsForRamps},
		{"BreachAlarm", testJobBreachAlarm},
	} {
		t.Run(c.name, func(t *testing.T) { c.f(t, e) })
	}
}

// A job runs prepare -> backfill -> verify with writes flowing on the
// source, switches on NEXT (routes flipped, target equal to source), is
// taken over by another manager, takes writes on the new side (reverse
// replication brings them back), and rolls back: routes as before, the
// source holds every row, the target's tables the job created are gone.
func testJobSwitchAndRollback(t *testing.T, e *jobEnv) {
	ctx := testCtx(t)
	const cluster, shard = "swr", 5
	orig := e.cluster(t, cluster)
	keys := e.fill(t, shard, 200, 1)
	other := e.fill(t, 6, 50, 1)
	m := e.manager(t, cluster, "m1", -1)
	admin := NewAdmin(e.cli, cluster)
	store := coord.NewJobStore(e.cli, cluster)

	stop := writer(t, e.sdb, "im_0", keys, other)
	if _, err := admin.Start(ctx, shard, shard, "ds1", "im_9", 0, 0, false); err != nil {
		t.Fatal(err)
	}
	ready := waitJob(t, store, shard, time.Minute, "job ready", func(j coord.Job, _ jobProgress) bool { return j.Step == StepReady })
	if n := stop(); n < 10 {
		t.Fatalf("the writer ran only %d statements during the backfill", n)
	}
	// Verify compared sampled rows of every table besides the segments,
	// under the writer's load, and found none differing.
	// (Every logical table, and the outbox's applied markers: a companion
	// table every migration carries.)
	if p, err := decodeProgress(ready); err != nil || len(p.State.Checksum) != len(router.ShardedTables())+1 {
		t.Fatalf("checksum states %+v, %v", p.State.Checksum, err)
	} else {
		for table, cs := range p.State.Checksum {
			if !cs.Equal() || !cs.Sampled || len(cs.SampleDiffs) > 0 {
				t.Errorf("%s: %+v, want equal and sampled", table, cs)
			}
		}
	}
	_, rows, err := admin.Status(ctx)
	if err != nil || len(rows) != 1 || !strings.HasPrefix(rows[0][slices.Index(StatusColumns, "checksum")], "equal") ||
		rows[0][slices.Index(StatusColumns, "runner")] != "m1" || rows[0][slices.Index(StatusColumns, "dualwrite_backlog")] != "0" {
		t.Fatalf("Status = %q, %v", rows, err)
	}
	if err := admin.Command(ctx, shard, VerbNext, 0); err != nil {
		t.Fatal(err)
	}
	j := waitJob(t, store, shard, 30*time.Second, "job switched", func(j coord.Job, _ jobProgress) bool { return j.Step == StepSwitched })
	if p, _ := decodeProgress(j); !strings.Contains(p.State.Status.Switch, "held") {
		t.Fatalf("no switch description: %+v", p.State.Status)
	} else {
		t.Logf("switch: %s", p.State.Status.Switch)
	}
	at, err := routesLocation(ctx, routecfg.NewStore(e.cli, cluster), shard)
	if err != nil || at != (router.Target{Datasource: "ds1", Database: "im_9", Table: 0}) {
		t.Fatalf("shard %d is at %+v (%v) after the switch", shard, at, err)
	}
	moves := e.sides(t, shard, "im_0", "im_9")
	equalSides(t, ctx, moves)
	// Another shard of the shared tables stayed where it was, untouched
	// on the target.
	if n := count(t, e.ddb, "SELECT COUNT(*) FROM im_9.conv_msg_0000 WHERE CRC32(conv_id) % 1024 <> ?", shard); n != 0 {
		t.Fatalf("the target holds %d rows of other shards", n)
	}

	// Another process takes the switched job over (the reverse stream
	// resumes from its checkpoint row); writes now go to the new side and
	// the reverse stream brings them back.
	m.Close()
	m = e.manager(t, cluster, "m2", -1)
	stop = writer(t, e.ddb, "im_9", keys, keys)
	time.Sleep(time.Second)
	stop()
	eventuallyEqual(t, moves, 10*time.Second)
	want := equalSides(t, ctx, moves)

	if err := admin.Command(ctx, shard, VerbRollback, 0); err != nil {
		t.Fatal(err)
	}
	waitGone(t, store, shard, 30*time.Second)
	doc, err := routecfg.NewStore(e.cli, cluster).Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(doc.Shards, orig.Shards) || doc.Version != orig.Version+2 {
		t.Fatalf("routes after the rollback: version %d %+v, want version %d %+v", doc.Version, doc.Shards, orig.Version+2, orig.Shards)
	}
	for _, mv := range moves {
		sameDump(t, mv.Source.String()+" after the rollback", dump(t, e.sdb, mv.Source.String(), mv.Filter), want[mv.Target.String()])
		if n := count(t, e.ddb, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'im_9' AND TABLE_NAME = ?", mv.Target.Table); n != 0 {
			t.Fatalf("%s, created by the job, is still there after the rollback", mv.Target)
		}
	}
	if got := m.Running(); len(got) != 0 {
		t.Fatalf("the manager still runs %v", got)
	}
}

// The runner is stopped mid-backfill, the other manager takes over from the
// persisted checkpoint: the copy never goes back and the replay's start
// stays the same. Either its manager is closed (the runner resigns: the
// other takes over at once) or, abrupt, its etcd client is closed as if the
// process died (the lease is not revoked: the other takes over when it
// expires).
func testJobTakeover(t *testing.T, e *jobEnv, abrupt bool) {
	ctx := testCtx(t)
	cluster, shard := "takeover", 9
	if abrupt {
		cluster, shard = "expiry", 10
	}
	e.cluster(t, cluster)
	e.fill(t, router.Shard(shard), 300, 1) // 300 x 9 rows, at 1500 rows/s: ~2 s
	cli1, err := clientv3.New(clientv3.Config{Endpoints: e.etcd.Endpoints(), DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli1.Close()
	m1, err := NewManager(ManagerConfig{Client: cli1, Cluster: cluster, ID: "m1", Connect: connect,
		Log: zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel)), RunnerTTL: time.Second, Rate: 1500, ChunkRows: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer m1.Close()
	store := coord.NewJobStore(e.cli, cluster)
	if _, err := NewAdmin(e.cli, cluster).Start(ctx, shard, shard, "ds1", "im_8"+cluster, 0, 0, true); err != nil {
		t.Fatal(err)
	}
	j := waitJob(t, store, shard, 30*time.Second, "copy under way", func(_ coord.Job, p jobProgress) bool { return copied(p) >= 300 })
	p0, _ := decodeProgress(j)
	if got := m1.Running(); len(got) != 1 || got[0] != shard {
		t.Fatalf("m1 runs %v", got)
	}
	m2 := e.manager(t, cluster, "m2", 1500)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events := store.Watch(wctx, j.Revision)
	if abrupt {
		cli1.Close()
	} else {
		m1.Close()
	}
	runner := ""
	for ev := range events {
		if ev.Err != nil || ev.Job == nil {
			t.Fatalf("watch: %+v", ev)
		}
		p, err := decodeProgress(*ev.Job)
		if err != nil {
			t.Fatal(err)
		}
		if got := copied(p); got < copied(p0) {
			t.Fatalf("the copy went back from %d to %d rows after the takeover", copied(p0), got)
		}
		if *p.State.Backfill.Start != *p0.State.Backfill.Start {
			t.Fatalf("the replay start moved from %+v to %+v", p0.State.Backfill.Start, p.State.Backfill.Start)
		}
		if runner == "" {
			runner, _, _ = coord.RunnerOf(ctx, e.cli, cluster, shard)
		}
		if ev.Job.Step == StepSwitched { // AUTO: no NEXT needed
			break
		}
	}
	cancel()
	if runner != "m2" || len(m2.Running()) != 1 {
		t.Fatalf("runner after the takeover: %q, m2 runs %v", runner, m2.Running())
	}
	equalSides(t, ctx, e.sides(t, router.Shard(shard), "im_0", "im_8"+cluster))
}

// The runner dies between the route flip and recording the switch: its
// successor finds the routes flipped, records the switch ("switched by an
// earlier runner") without a second flip, and runs the reverse
// replication from the position the dead runner saved before flipping.
func testJobTakeoverAfterFlip(t *testing.T, e *jobEnv) {
	ctx := testCtx(t)
	const cluster, shard = "afterflip", 26
	e.cluster(t, cluster)
	keys := e.fill(t, shard, 20, 1)
	cli1, err := clientv3.New(clientv3.Config{Endpoints: e.etcd.Endpoints(), DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli1.Close()
	died := make(chan struct{})
	m1, err := NewManager(ManagerConfig{Client: cli1, Cluster: cluster, ID: "m1", Connect: connect,
		Log: zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel)), RunnerTTL: time.Second, Rate: -1, ChunkRows: 100, RollbackWindow: time.Hour,
		afterFlip: func() { cli1.Close(); close(died) }})
	if err != nil {
		t.Fatal(err)
	}
	defer m1.Close()
	store := coord.NewJobStore(e.cli, cluster)
	routes := routecfg.NewStore(e.cli, cluster)
	if _, err := NewAdmin(e.cli, cluster).Start(ctx, shard, shard, "ds1", "im_12", 0, 0, true); err != nil {
		t.Fatal(err)
	}
	// Meanwhile the forward stream is seen registered on the source (so
	// the check below can see one).
	seenForward := false
	for waiting := true; waiting; {
		select {
		case <-died:
			waiting = false
		case <-time.After(20 * time.Millisecond):
			if j, err := store.Get(ctx, shard); err == nil && !seenForward {
				seenForward = replicaRegistered(t, e.sdb, readerID(j.ID+"/forward"))
			}
		}
	}
	if !seenForward {
		t.Fatal("the job's forward binlog reader was never seen in SHOW SLAVE HOSTS on the source")
	}
	before, err := routes.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if j, err := store.Get(ctx, shard); err != nil || j.Step != StepReady || j.Intent != IntentSwitch {
		t.Fatalf("the job as the dead runner left it: %+v, %v", j, err)
	}
	e.manager(t, cluster, "m2", -1)
	j := waitJob(t, store, shard, 30*time.Second, "switched by the successor", func(j coord.Job, _ jobProgress) bool { return j.Step == StepSwitched })
	if p, _ := decodeProgress(j); p.State.Status.Switch != "switched by an earlier runner" {
		t.Errorf("switch %q", p.State.Status.Switch)
	}
	if after, err := routes.Get(ctx); err != nil || after.Version != before.Version {
		t.Fatalf("the successor changed the routes again: version %d -> %d (%v)", before.Version, after.Version, err)
	}
	if runner, _, _ := coord.RunnerOf(ctx, e.cli, cluster, shard); runner != "m2" {
		t.Fatalf("runner %q", runner)
	}
	// The successor's ready step had started the forward stream again; it
	// must be gone before reverse replication runs (a loop would bring
	// older values back): no binlog reader of the job's forward id is
	// registered on the source any more.
	// (The server may list a dump thread briefly after its reader went.)
	forward := readerID(j.ID + "/forward")
	time.Sleep(500 * time.Millisecond)
	for deadline := time.Now().Add(1500 * time.Millisecond); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if replicaRegistered(t, e.sdb, forward) {
			t.Fatal("the forward binlog stream runs on the source after the successor recorded the switch")
		}
	}
	// Reverse replication runs: a write on the new side reaches the old.
	e.dst.Exec(t, fmt.Sprintf("UPDATE im_12.im_conv_seq_0000 SET member_cnt = 42 WHERE conv_id = %d", keys[0]))
	deadline := time.Now().Add(20 * time.Second)
	for count(t, e.sdb, "SELECT member_cnt FROM im_0.im_conv_seq_0000 WHERE conv_id = ?", keys[0]) != 42 {
		if time.Now().After(deadline) {
			t.Fatal("a write on the new side did not reach the old one")
		}
		time.Sleep(50 * time.Millisecond)
	}
	equalSides(t, ctx, e.sides(t, shard, "im_0", "im_12"))
}

// replicaRegistered reports whether a binlog reader with server id id is
// registered on db (SHOW SLAVE HOSTS: its dump thread is running).
func replicaRegistered(t *testing.T, db *sql.DB, id uint32) bool {
	t.Helper()
	rows, err := db.Query("SHOW SLAVE HOSTS")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	for rows.Next() {
		vals := make([]sql.RawBytes, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		if string(vals[0]) == fmt.Sprint(id) { // Server_id
			return true
		}
	}
	return false
}

// ROLLBACK while the copy runs: the job's target rows and the tables it
// created are gone, the apply checkpoint too, the routes never changed and
// the source still holds every row.
func testJobRollbackMidCopy(t *testing.T, e *jobEnv) {
	ctx := testCtx(t)
	const cluster, shard = "rbcopy", 27
	e.cluster(t, cluster)
	e.fill(t, shard, 100, 1) // 900 rows at 300 rows/s: 3 s
	srcRows := dump(t, e.sdb, "im_0.conv_msg_0000", &ShardFilter{Column: "conv_id", Shard: shard})
	e.manager(t, cluster, "m1", 300)
	store := coord.NewJobStore(e.cli, cluster)
	routes := routecfg.NewStore(e.cli, cluster)
	before, err := routes.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	admin := NewAdmin(e.cli, cluster)
	if _, err := admin.Start(ctx, shard, shard, "ds1", "im_13", 0, 0, false); err != nil {
		t.Fatal(err)
	}
	waitJob(t, store, shard, 30*time.Second, "copy under way", func(j coord.Job, p jobProgress) bool {
		return j.Step == StepBackfill && copied(p) >= 100
	})
	if err := admin.Command(ctx, shard, VerbRollback, 0); err != nil {
		t.Fatal(err)
	}
	waitGone(t, store, shard, 30*time.Second)
	if n := count(t, e.ddb, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'im_13' AND TABLE_NAME NOT LIKE '\\_convoy%'"); n != 0 {
		t.Errorf("%d tables the job created are left on the target", n)
	}
	if n := count(t, e.ddb, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'im_13' AND TABLE_NAME = ?", CheckpointTable); n > 0 {
		if rows := count(t, e.ddb, "SELECT COUNT(*) FROM im_13."+CheckpointTable+" WHERE shard = ?", shard); rows != 0 {
			t.Errorf("%d apply checkpoint rows left", rows)
		}
	}
	if after, err := routes.Get(ctx); err != nil || after.Version != before.Version {
		t.Errorf("the routes changed: %d -> %d (%v)", before.Version, after.Version, err)
	}
	sameDump(t, "the source after the rollback", srcRows, dump(t, e.sdb, "im_0.conv_msg_0000", &ShardFilter{Column: "conv_id", Shard: shard}))
}

// A switch that a registered proxy never acknowledges (a dead one whose
// registration has not expired yet) aborts; the retries are spaced (AUTO:
// 5 s, a ROLLBACK's switch back: restartDelay), not back to back, since
// each attempt holds the shard's writes for the acknowledgement timeout.
// Once the registration is gone the switch completes.
func testJobSwitchRetrySpacing(t *testing.T, e *jobEnv) {
	ctx := testCtx(t)
	const cluster, shard = "spacing", 16
	e.cluster(t, cluster)
	e.fill(t, shard, 20, 1)
	e.managerWith(t, ManagerConfig{Cluster: cluster, ID: "m1", Rate: -1, RollbackWindow: time.Hour,
		Switch: coord.SwitchOptions{AckTimeout: 300 * time.Millisecond, MaxHold: 300 * time.Millisecond}})
	store := coord.NewJobStore(e.cli, cluster)
	ghost := func() *coord.Registration {
		r, err := coord.Register(ctx, e.cli, cluster, coord.ProxyInfo{ID: "ghost"})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	// attempts counts the locks taken within d from now.
	attempts := func(d time.Duration) int {
		wctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		n := 0
		for resp := range e.cli.Watch(wctx, coord.LocksPrefix(cluster), clientv3.WithPrefix()) {
			for _, ev := range resp.Events {
				if ev.Type == clientv3.EventTypePut && ev.Kv.Version == 1 {
					n++
				}
			}
		}
		return n
	}
	reg := ghost()
	if _, err := NewAdmin(e.cli, cluster).Start(ctx, shard, shard, "ds1", "im_4", 0, 0, true); err != nil {
		t.Fatal(err)
	}
	waitJob(t, store, shard, time.Minute, "a switch aborted", func(j coord.Job, _ jobProgress) bool {
		return strings.Contains(j.LastError, "no acknowledgement")
	})
	// 300 ms per attempt: back to back, 8 in 2.5 s; spaced by 5 s, 1.
	if n := attempts(2500 * time.Millisecond); n > 2 {
		t.Errorf("AUTO: %d switch attempts in 2.5 s while a proxy does not acknowledge", n)
	}
	reg.Close()
	waitJob(t, store, shard, 30*time.Second, "switched once the proxy is gone", func(j coord.Job, _ jobProgress) bool { return j.Step == StepSwitched })

	reg = ghost()
	defer reg.Close()
	if err := NewAdmin(e.cli, cluster).Command(ctx, shard, VerbRollback, 0); err != nil {
		t.Fatal(err)
	}
	waitJob(t, store, shard, 30*time.Second, "a switch back aborted", func(j coord.Job, _ jobProgress) bool {
		return strings.Contains(j.LastError, "switch back") && strings.Contains(j.LastError, "no acknowledgement")
	})
	// Back to back, 8 in 2.5 s; spaced by restartDelay, at most 2.
	if n := attempts(2500 * time.Millisecond); n > 2 {
		t.Errorf("ROLLBACK: %d switch attempts in 2.5 s while a proxy does not acknowledge", n)
	}
	reg.Close()
	waitGone(t, store, shard, 30*time.Second)
}

// A target already holding rows of the shard is refused with a message
// that says what to fix; RESUME after the fix goes on; CANCEL removes the
// copied rows (the table was not the job's, so it stays).
func testJobRefused(t *testing.T, e *jobEnv) {
	ctx := testCtx(t)
	const cluster, shard = "refused", 11
	e.cluster(t, cluster)
	keys := e.fill(t, shard, 20, 1)
	e.dst.Exec(t, "CREATE DATABASE im_7", imTable(t, "im_conv_seq", "im_7", "im_conv_seq_0000"),
		fmt.Sprintf("INSERT INTO im_7.im_conv_seq_0000 VALUES (%d, 1, 1)", keys[0]))
	e.manager(t, cluster, "m1", -1)
	admin := NewAdmin(e.cli, cluster)
	store := coord.NewJobStore(e.cli, cluster)
	if _, err := admin.Start(ctx, shard, shard, "ds1", "im_7", 0, 0, false); err != nil {
		t.Fatal(err)
	}
	j := waitJob(t, store, shard, 30*time.Second, "refused", func(_ coord.Job, p jobProgress) bool { return p.State.Refused })
	for _, want := range []string{"im_7.im_conv_seq_0000", "already holds rows of shard 11", "DELETE FROM im_7.im_conv_seq_0000 WHERE CRC32(`conv_id`) % 1024 = 11"} {
		if !strings.Contains(j.LastError, want) {
			t.Fatalf("refusal %q does not say %q", j.LastError, want)
		}
	}
	// Input errors of the admin commands.
	for _, c := range []struct {
		err  error
		want string
	}{
		{func() error { _, err := admin.Start(ctx, shard, shard, "ds1", "", 0, 0, false); return err }(), "already has a migration job"},
		{func() error { _, err := admin.Start(ctx, 12, 12, "ds9", "", 0, 0, false); return err }(), `unknown datasource "ds9"`},
		{func() error { _, err := admin.Start(ctx, 12, 12, "ds0", "", 0, 0, false); return err }(), "already on ds0.im_0"},
		{admin.Command(ctx, 13, VerbPause, 0), "shard 13 has no migration job"},
		{admin.Command(ctx, shard, VerbNext, 0), "NEXT acts in verify"},
	} {
		var ie *InputError
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) || !errors.As(c.err, &ie) {
			t.Fatalf("got %v, want an InputError saying %q", c.err, c.want)
		}
	}

	// The server checks, each refusal saying what to set.
	const week = 7 * 24 * time.Hour
	if err := checkServers(ctx, e.sdb, e.ddb, "ds0", "ds1", week); err != nil {
		t.Fatalf("two alike servers refused: %v", err)
	}
	e.dst.Exec(t, "SET GLOBAL sql_mode = 'STRICT_TRANS_TABLES'", "SET GLOBAL collation_server = 'utf8mb4_unicode_ci'",
		"SET GLOBAL binlog_expire_logs_seconds = 172800")
	e.src.Exec(t, "SET GLOBAL binlog_format = 'STATEMENT'", "SET GLOBAL binlog_row_image = 'MINIMAL'", "SET GLOBAL binlog_expire_logs_seconds = 3600")
	err := checkServers(ctx, e.sdb, e.ddb, "ds0", "ds1", week)
	// Retention as long as asked is fine (a two-day window, ten days on the
	// source).
	e.dst.Exec(t, "SET GLOBAL sql_mode = DEFAULT", "SET GLOBAL collation_server = 'utf8mb4_general_ci'")
	e.src.Exec(t, "SET GLOBAL binlog_format = 'ROW'", "SET GLOBAL binlog_row_image = 'FULL'", "SET GLOBAL binlog_expire_logs_seconds = 864000")
	if err := checkServers(ctx, e.sdb, e.ddb, "ds0", "ds1", 48*time.Hour); err != nil {
		t.Errorf("retention at the window refused: %v", err)
	}
	e.src.Exec(t, "SET GLOBAL binlog_expire_logs_seconds = 0")
	e.dst.Exec(t, "SET GLOBAL binlog_expire_logs_seconds = 0")
	for _, want := range []string{"migration refused", `target ds1 has sql_mode="STRICT_TRANS_TABLES"`, "collation_server=utf8mb4_unicode_ci",
		"source ds0: binlog_format is STATEMENT (SET GLOBAL binlog_format=ROW)", "binlog_row_image is MINIMAL",
		"source ds0 keeps binary logs 1h0m0s (expire_logs_days): the backfill's apply reads them from the copy's start; keep them at least 24h0m0s",
		"target ds1 keeps binary logs 48h0m0s (expire_logs_days), less than the rollback window 168h0m0s"} {
		if !errors.Is(err, ErrPrecheck) || !strings.Contains(err.Error(), want) {
			t.Fatalf("checkServers = %v; want it to say %q", err, want)
		}
	}

	e.dst.Exec(t, "DELETE FROM im_7.im_conv_seq_0000")
	if err := admin.Command(ctx, shard, VerbResume, 0); err != nil {
		t.Fatal(err)
	}
	waitJob(t, store, shard, 30*time.Second, "verified", func(j coord.Job, _ jobProgress) bool { return j.Step == StepReady })
	if err := admin.Command(ctx, shard, VerbCancel, 0); err != nil {
		t.Fatal(err)
	}
	waitGone(t, store, shard, 30*time.Second)
	if n := count(t, e.ddb, "SELECT COUNT(*) FROM im_7.im_conv_seq_0000"); n != 0 {
		t.Fatalf("the cancelled job left %d rows", n)
	}
	if n := count(t, e.ddb, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'im_7' AND TABLE_NAME NOT LIKE '\\_convoy%'"); n != 1 {
		t.Fatalf("im_7 holds %d tables after the cancel, want only the one that was there", n)
	}
}

// copied sums the persisted copy checkpoints.
func copied(p jobProgress) (n int64) {
	for _, ck := range p.State.Backfill.Copy {
		n += ck.Rows
	}
	return n
}

// PAUSE stops the copy where it is (the persisted checkpoint stops moving
// although the rate would copy hundreds of rows meanwhile); RATE lifts the
// limit of the job and RESUME goes on from the checkpoint to the end.
// The apply lag in the status is measured, not guessed from the binlog's
// whole-second times: a ready job whose target table is locked while the
// source takes writes shows a lag that grows past the read ramp's bound,
// and 0 again soon after the lock is gone.
func testJobLag(t *testing.T, e *jobEnv) {
	ctx := testCtx(t)
	const cluster, shard = "lag", 24
	e.cluster(t, cluster)
	keys := e.fill(t, shard, 20, 1)
	other := e.fill(t, 25, 5, 1)
	e.manager(t, cluster, "m1", -1)
	admin := NewAdmin(e.cli, cluster)
	store := coord.NewJobStore(e.cli, cluster)
	if _, err := admin.Start(ctx, shard, shard, "ds1", "im_11", 0, 0, false); err != nil {
		t.Fatal(err)
	}
	lagOf := func(j coord.Job) float64 {
		p, err := decodeProgress(j)
		if err != nil {
			t.Fatal(err)
		}
		return p.State.Status.Lag
	}
	waitJob(t, store, shard, time.Minute, "ready with no lag", func(j coord.Job, _ jobProgress) bool { return j.Step == StepReady && lagOf(j) == 0 })
	stop := writer(t, e.sdb, "im_0", keys, other)
	defer stop()
	lock, err := e.ddb.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if _, err := lock.ExecContext(ctx, "LOCK TABLES im_11.conv_msg_0000 WRITE"); err != nil {
		t.Fatal(err)
	}
	locked := time.Now()
	j := waitJob(t, store, shard, 20*time.Second, "a lag over 1 s", func(j coord.Job, _ jobProgress) bool { return lagOf(j) > inproxy.RampMaxLag.Seconds() })
	// Seen at a status refresh (2 s apart) some time after it passed 1 s;
	// never more than the time the apply has been blocked.
	if l, since := lagOf(j), time.Since(locked).Seconds(); l > since+0.3 {
		t.Errorf("lag %.1f s after %.1f s of a blocked apply", l, since)
	}
	if _, err := lock.ExecContext(ctx, "UNLOCK TABLES"); err != nil {
		t.Fatal(err)
	}
	stop()
	waitJob(t, store, shard, 20*time.Second, "the lag back to 0", func(j coord.Job, _ jobProgress) bool { return lagOf(j) == 0 })
	if err := admin.Command(ctx, shard, VerbCancel, 0); err != nil {
		t.Fatal(err)
	}
	waitGone(t, store, shard, 30*time.Second)
}

func testJobPauseRate(t *testing.T, e *jobEnv) {
	ctx := testCtx(t)
	const cluster, shard = "pause", 13
	e.cluster(t, cluster)
	e.fill(t, shard, 200, 1) // 1800 rows at 300 rows/s: 6 s
	metrics, err := NewMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	e.managerWith(t, ManagerConfig{Cluster: cluster, ID: "m1", Rate: 300, Metrics: metrics})
	admin := NewAdmin(e.cli, cluster)
	store := coord.NewJobStore(e.cli, cluster)
	if _, err := admin.Start(ctx, shard, shard, "ds1", "im_6", 0, 0, false); err != nil {
		t.Fatal(err)
	}
	waitJob(t, store, shard, 30*time.Second, "copy under way", func(_ coord.Job, p jobProgress) bool { return copied(p) >= 150 })
	time.Sleep(statusEvery + 500*time.Millisecond) // a status refresh
	if v := gaugeValue(t, metrics.rows.WithLabelValues("0013")); v < 150 {
		t.Fatalf("%s = %v during the copy", MetricRowsCopied, v)
	}
	if v := gaugeValue(t, metrics.step.WithLabelValues("0013", "backfill")); v != 1 {
		t.Fatalf("%s{step=backfill} = %v", MetricJobStep, v)
	}
	if err := admin.Command(ctx, shard, VerbPause, 0); err != nil {
		t.Fatal(err)
	}
	_, rows, err := admin.Status(ctx)
	if err != nil || !strings.HasSuffix(rows[0][slices.Index(StatusColumns, "step")], "(paused)") {
		t.Fatalf("status while paused: %q, %v", rows, err)
	}
	time.Sleep(time.Second) // the pause takes effect at the next chunk
	j, _ := store.Get(ctx, shard)
	p, _ := decodeProgress(j)
	before := copied(p)
	time.Sleep(1500 * time.Millisecond) // 450 rows at the job's rate
	j, _ = store.Get(ctx, shard)
	p, _ = decodeProgress(j)
	if after := copied(p); after != before || j.Step != StepBackfill {
		t.Fatalf("paused, the copy went from %d to %d rows (step %s)", before, after, j.Step)
	}
	if err := admin.Command(ctx, shard, VerbRate, -1); err != nil {
		t.Fatal(err)
	}
	if err := admin.Command(ctx, shard, VerbResume, 0); err != nil {
		t.Fatal(err)
	}
	j = waitJob(t, store, shard, 30*time.Second, "verified after RESUME", func(j coord.Job, _ jobProgress) bool { return j.Step == StepReady })
	if p, _ := decodeProgress(j); copied(p) < 1800 || p.Commands.Rate != -1 {
		t.Fatalf("after RESUME: %d rows copied, rate %g", copied(p), p.Commands.Rate)
	}
	equalSides(t, ctx, e.sides(t, shard, "im_0", "im_6"))
	if err := admin.Command(ctx, shard, VerbCancel, 0); err != nil {
		t.Fatal(err)
	}
	waitGone(t, store, shard, 30*time.Second)
	deadline := time.Now().Add(5 * time.Second)
	for series(metrics.rows)+series(metrics.step) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the removed job's series are still exported")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func gaugeValue(t *testing.T, g prometheus.Gauge) float64 {
	t.Helper()
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}

// series counts what a collector exports now.
func series(c prometheus.Collector) int {
	ch := make(chan prometheus.Metric, 64)
	go func() { c.Collect(ch); close(ch) }()
	n := 0
	for range ch {
		n++
	}
	return n
}

// After the switch, NEXT ends the rollback window at once and the window's
// end does it by itself: reverse replication stops (a write on the new side
// no longer reaches the old one), the routes stay on the target, the record
// stays as history (done), refuses ROLLBACK, PURGE removes the shard's rows
// from the source, and a new MIGRATE of the shard replaces the record.
func testJobCleanup(t *testing.T, e *jobEnv) {
	ctx := testCtx(t)
	const cluster = "cleanup"
	e.cluster(t, cluster)
	shards := []router.Shard{15, 17}
	keys := map[router.Shard][]uint64{}
	for _, sh := range shards {
		keys[sh] = e.fill(t, sh, 20, 1)
	}
	// The window outlasts the time both jobs take to switch on a loaded
	// machine (AUTO retries a failed switch 5 s later), so both are seen
	// switched before either ends it by itself.
	e.managerWindow(t, cluster, "m1", -1, 12*time.Second)
	admin := NewAdmin(e.cli, cluster)
	store := coord.NewJobStore(e.cli, cluster)
	for _, sh := range shards {
		if _, err := admin.Start(ctx, int(sh), int(sh), "ds1", "im_5", 0, 0, true); err != nil {
			t.Fatal(err)
		}
	}
	for _, sh := range shards {
		waitJob(t, store, int(sh), 30*time.Second, "switched", func(j coord.Job, _ jobProgress) bool { return j.Step == StepSwitched })
	}
	if err := admin.Command(ctx, 15, VerbNext, 0); err != nil {
		t.Fatal(err)
	}
	waitJob(t, store, 15, 3*time.Second, "done on NEXT", func(j coord.Job, _ jobProgress) bool { return j.Step == StepDone })
	j := waitJob(t, store, 17, 30*time.Second, "done when the window ends", func(j coord.Job, _ jobProgress) bool { return j.Step == StepDone })
	if p, _ := decodeProgress(j); j.UpdatedAt.Before(p.State.CleanupAt) {
		t.Fatalf("shard 17 done at %s, before its window's end %s", j.UpdatedAt, p.State.CleanupAt)
	}
	for _, sh := range shards {
		at, err := routesLocation(ctx, routecfg.NewStore(e.cli, cluster), int(sh))
		if err != nil || at.Datasource != "ds1" || at.Database != "im_5" {
			t.Fatalf("shard %d is at %+v (%v) after the cleanup", sh, at, err)
		}
		// Reverse replication has stopped.
		k := keys[sh][0]
		e.dst.Exec(t, fmt.Sprintf("UPDATE im_5.im_conv_seq_0000 SET member_cnt = 99 WHERE conv_id = %d", k))
	}
	time.Sleep(500 * time.Millisecond) // the reverse stream applied a change in ~1 ms when it ran
	for _, sh := range shards {
		if n := count(t, e.sdb, "SELECT member_cnt FROM im_0.im_conv_seq_0000 WHERE conv_id = ?", keys[sh][0]); n == 99 {
			t.Fatalf("shard %d: a write on the new side reached the old one after the cleanup", sh)
		}
	}
	var ie *InputError
	if err := admin.Command(ctx, 15, VerbRollback, 0); !errors.As(err, &ie) || !strings.Contains(err.Error(), "is done") {
		t.Fatalf("ROLLBACK of a done job: %v", err)
	}

	// The shared source tables carry the storage fence (fence.go): the
	// moved shards' rows are read-only there, a live shard of the same
	// tables writes as before.
	// (The logical tables and the outbox's applied markers.)
	if n := count(t, e.sdb, "SELECT COUNT(*) FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = 'im_0'"); n != int64(3*(len(router.ShardedTables())+1)) {
		t.Errorf("%d fence triggers on the shared source tables, want 3 per table", n)
	}
	if _, err := e.sdb.ExecContext(ctx, "UPDATE im_0.im_conv_seq_0000 SET member_cnt = 98 WHERE conv_id = ?", keys[15][1]); mysqlErrno(err) != 1036 {
		t.Errorf("a direct write of a moved shard on the old side: %v, want 1036", err)
	}
	live := keysOfShard(16, 1, 1<<41)[0]
	if _, err := e.sdb.ExecContext(ctx, "INSERT INTO im_0.im_conv_seq_0000 (conv_id, max_seq, member_cnt) VALUES (?, 0, 2)", live); err != nil {
		t.Errorf("a write of a live shard of the fenced tables: %v", err)
	}

	// PURGE deletes the shard's rows from the source's (shared) tables,
	// and only that shard's, at the job's rate: 220 rows at 100 rows/s
	// take at least 2.2 s (the limiter starts empty).
	if err := admin.Command(ctx, 17, VerbRate, 100); err != nil {
		t.Fatal(err)
	}
	purgeStart := time.Now()
	if err := admin.Command(ctx, 17, VerbPurge, 0); err != nil {
		t.Fatal(err)
	}
	waitJob(t, store, 17, 30*time.Second, "purged", func(_ coord.Job, p jobProgress) bool { return p.State.Purged })
	if took := time.Since(purgeStart); took < 2200*time.Millisecond {
		t.Errorf("the purge of 220 rows at 100 rows/s took %v", took)
	}
	for _, logical := range router.ShardedTables() {
		col, _ := router.ShardKeyColumn(logical)
		table := "im_0." + router.PhysicalTableName(logical, 0)
		if n := count(t, e.sdb, "SELECT COUNT(*) FROM "+table+" WHERE CRC32("+col+") % 1024 = 17"); n != 0 {
			t.Fatalf("%s still holds %d rows of the purged shard", table, n)
		}
		if n := count(t, e.sdb, "SELECT COUNT(*) FROM "+table+" WHERE CRC32("+col+") % 1024 = 15"); n == 0 {
			t.Fatalf("%s lost the rows of shard 15 in the purge of shard 17", table)
		}
	}
	if _, rows, err := admin.Status(ctx); err != nil || rows[1][4] != "done (source purged)" {
		t.Fatalf("status after the purge: %q, %v", rows, err)
	}
	if _, err := admin.Start(ctx, 15, 15, "ds0", "im_4", 0, 0, false); err != nil {
		t.Fatalf("MIGRATE over a done job: %v", err)
	}
	j, err := store.Get(ctx, 15)
	if err != nil || j.Step != StepPrepare || j.From != (coord.Endpoint{Datasource: "ds1", Database: "im_5"}) {
		t.Fatalf("the new job: %+v, %v", j, err)
	}
	if err := admin.Command(ctx, 15, VerbPurge, 0); !errors.As(err, &ie) || !strings.Contains(err.Error(), "once the job is done") {
		t.Fatalf("PURGE before done: %v", err)
	}
	if err := admin.Command(ctx, 15, VerbCancel, 0); err != nil {
		t.Fatal(err)
	}
	waitGone(t, store, 15, 30*time.Second)
}

// A done shard that had tables of its own on the source (a layout of one
// shard per table): its old tables are read-only, a direct insert, update
// or delete gets 1036 naming where the shard went; PURGE drops them.
func testJobReadOnlyOwnTables(t *testing.T, e *jobEnv) {
	ctx := testCtx(t)
	const cluster, shard = "readonly", 28
	doc, err := router.SharedLayout(e.datasources(), 2, 4)
	if err != nil {
		t.Fatal(err)
	}
	doc = router.MoveShard(doc, shard, "ds0", "im_own", nil)
	if err := routecfg.NewStore(e.cli, cluster).Init(ctx, doc); err != nil {
		t.Fatal(err)
	}
	e.src.Exec(t, "CREATE DATABASE im_own")
	for _, logical := range router.ShardedTables() {
		e.src.Exec(t, imTable(t, logical, "im_own", router.PhysicalTableName(logical, shard)))
	}
	keys := e.fillAt(t, shard, 10, 1, "im_own", shard)
	e.managerWindow(t, cluster, "m1", -1, time.Second)
	admin := NewAdmin(e.cli, cluster)
	store := coord.NewJobStore(e.cli, cluster)
	if _, err := admin.Start(ctx, shard, shard, "ds1", "im_14", 0, 0, true); err != nil {
		t.Fatal(err)
	}
	waitJob(t, store, shard, time.Minute, "done", func(j coord.Job, _ jobProgress) bool { return j.Step == StepDone })
	for _, stmt := range []string{
		fmt.Sprintf("UPDATE im_own.im_conv_seq_0028 SET member_cnt = 7 WHERE conv_id = %d", keys[0]),
		fmt.Sprintf("DELETE FROM im_own.conv_msg_0028 WHERE conv_id = %d", keys[1]),
		fmt.Sprintf("INSERT INTO im_own.conv_msg_0028 (conv_id, seq, msg_id, sender_uid, msg_type, created_at) VALUES (%d, 99, 1, 7, 1, NOW(3))", keys[2]),
		fmt.Sprintf("INSERT INTO im_own.im_conv_seq_0028 (conv_id, max_seq, member_cnt) VALUES (%d, 1, 2) ON DUPLICATE KEY UPDATE max_seq = max_seq + 1", keys[3]),
	} {
		_, err := e.sdb.ExecContext(ctx, stmt)
		if mysqlErrno(err) != 1036 || !strings.Contains(err.Error(), "Table 'im_own.") || !strings.Contains(err.Error(), "is read only for shard 28: Convoy moved it to ds1:im_14;") {
			t.Errorf("%s on a done shard's own source table: %v, want 1036 naming the target", stmt, err)
		}
	}
	if n := count(t, e.sdb, "SELECT COUNT(*) FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = 'im_own'"); n != int64(3*(len(router.ShardedTables())+1)) {
		t.Errorf("%d fence triggers on im_own, want 3 per table", n)
	}
	if err := admin.Command(ctx, shard, VerbPurge, 0); err != nil {
		t.Fatal(err)
	}
	waitJob(t, store, shard, 30*time.Second, "purged", func(_ coord.Job, p jobProgress) bool { return p.State.Purged })
	if n := count(t, e.sdb, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'im_own' AND TABLE_NAME NOT LIKE '\\_convoy%'"); n != 0 {
		t.Errorf("%d of the shard's own tables left after the purge", n)
	}
	// The shard stays fenced there: a table created again by mistake
	// would still refuse its writes.
	if n := count(t, e.sdb, "SELECT COUNT(*) FROM im_own."+FenceTable+" WHERE shard = 28 AND fenced = 1"); n != 1 {
		t.Errorf("the purged source's fence of shard 28: %d fenced rows, want 1", n)
	}
}

// The cold tier's companion tables (one per database, rows keyed by
// conv_id) move with the shard: the rows of the shard the source's tables
// held at prepare, and those written there during the job (a tombstone of
// an archived message deleted meanwhile), are on the target at the switch
// and only those; other shards' rows stay; a rollback removes the job's.
func testJobCompanions(t *testing.T, e *jobEnv) {
	ctx := testCtx(t)
	const cluster, shard, other = "companions", 29, 30
	e.cluster(t, cluster)
	keys := e.fill(t, shard, 10, 1)
	otherKeys := e.fill(t, other, 3, 1)
	// The archiver's definitions (archive/source.go), by hand: migrate
	// cannot import archive.
	e.src.Exec(t, "CREATE TABLE IF NOT EXISTS im_0."+router.ColdRangesTable+` (
  conv_id BIGINT UNSIGNED NOT NULL, min_seq BIGINT UNSIGNED NOT NULL, max_seq BIGINT UNSIGNED NOT NULL,
  updated_at DATETIME(3) NOT NULL, PRIMARY KEY (conv_id)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`,
		"CREATE TABLE IF NOT EXISTS im_0."+router.ColdTombstoneTable+` (
  conv_id BIGINT UNSIGNED NOT NULL, tbl VARCHAR(16) NOT NULL, seq BIGINT UNSIGNED NOT NULL, msg_id BIGINT UNSIGNED NOT NULL,
  deleted_at DATETIME(3) NOT NULL, PRIMARY KEY (conv_id, tbl, seq), KEY by_msg (conv_id, tbl, msg_id)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`,
		"CREATE TABLE IF NOT EXISTS im_0."+router.ColdFilesTable+` (
  conv_id BIGINT UNSIGNED NOT NULL, file VARCHAR(512) NOT NULL, min_seq BIGINT UNSIGNED NOT NULL, max_seq BIGINT UNSIGNED NOT NULL,
  min_msg_id BIGINT UNSIGNED NOT NULL, max_msg_id BIGINT UNSIGNED NOT NULL, n_rows BIGINT UNSIGNED NOT NULL,
  updated_at DATETIME(3) NOT NULL, PRIMARY KEY (conv_id, file)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`,
		"CREATE TABLE IF NOT EXISTS im_0."+router.ColdErasureTable+` (
  conv_id BIGINT UNSIGNED NOT NULL, tbl VARCHAR(16) NOT NULL, min_seq BIGINT UNSIGNED NOT NULL, max_seq BIGINT UNSIGNED NOT NULL,
  requested_at DATETIME(3) NOT NULL, erased_at DATETIME(3) NULL, PRIMARY KEY (conv_id, tbl, min_seq, max_seq)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`,
		outbox.AppliedDDL("im_0"))
	for _, k := range append(append([]uint64{}, keys...), otherKeys...) {
		e.src.Exec(t, fmt.Sprintf("INSERT INTO im_0.%s VALUES (%d, 1, 2, NOW(3))", router.ColdRangesTable, k),
			fmt.Sprintf("INSERT INTO im_0.%s VALUES (%d, 'conv_msg', 1, %d, NOW(3))", router.ColdTombstoneTable, k, k*10+1),
			fmt.Sprintf("INSERT INTO im_0.%s VALUES (%d, 'cold/%04d/20260101/part-0000.parquet', 1, 2, %d, %d, 2, NOW(3))", router.ColdFilesTable, k, router.ShardOf(k), k*10+1, k*10+2),
			fmt.Sprintf("INSERT INTO im_0.%s VALUES (%d, 'conv_msg', 1, 1, NOW(3), NULL)", router.ColdErasureTable, k),
			fmt.Sprintf("INSERT INTO im_0.%s VALUES (%d, 'ds9', 3, %d, NOW(3))", router.OutboxAppliedTable, k, k))
	}
	e.manager(t, cluster, "m1", -1)
	admin := NewAdmin(e.cli, cluster)
	store := coord.NewJobStore(e.cli, cluster)
	if _, err := admin.Start(ctx, shard, shard, "ds1", "im_15", 0, 0, false); err != nil {
		t.Fatal(err)
	}
	j := waitJob(t, store, shard, time.Minute, "ready", func(j coord.Job, _ jobProgress) bool { return j.Step == StepReady })
	if p, _ := decodeProgress(j); fmt.Sprint(p.State.Companions) != fmt.Sprint(router.CompanionTables()) {
		t.Fatalf("companions recorded %v", p.State.Companions)
	}
	// Written during the job: the binlog apply carries it.
	e.src.Exec(t, fmt.Sprintf("INSERT INTO im_0.%s VALUES (%d, 'conv_msg', 2, %d, NOW(3))", router.ColdTombstoneTable, keys[0], keys[0]*10+2))
	if err := admin.Command(ctx, shard, VerbNext, 0); err != nil {
		t.Fatal(err)
	}
	waitJob(t, store, shard, 30*time.Second, "switched", func(j coord.Job, _ jobProgress) bool { return j.Step == StepSwitched })
	for _, table := range router.CompanionTables() {
		f := &ShardFilter{Column: router.CompanionKey, Shard: shard}
		src, dst := dump(t, e.sdb, "im_0."+table, f), dump(t, e.ddb, "im_15."+table, f)
		want := len(keys)
		if table == router.ColdTombstoneTable {
			want++
		}
		if len(src) != want {
			t.Fatalf("%s: %d rows of the shard on the source, want %d", table, len(src), want)
		}
		sameDump(t, table, src, dst)
		if n := count(t, e.ddb, "SELECT COUNT(*) FROM im_15."+table+" WHERE CRC32(conv_id) % 1024 <> ?", shard); n != 0 {
			t.Errorf("%s: %d rows of other shards on the target", table, n)
		}
	}
	if err := admin.Command(ctx, shard, VerbRollback, 0); err != nil {
		t.Fatal(err)
	}
	waitGone(t, store, shard, 30*time.Second)
	for _, table := range router.CompanionTables() {
		if n := count(t, e.ddb, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'im_15' AND TABLE_NAME = ?", table); n != 0 {
			if rows := count(t, e.ddb, "SELECT COUNT(*) FROM im_15."+table); rows != 0 {
				t.Errorf("%s: %d rows left on the target after the rollback", table, rows)
			}
		}
		if n := count(t, e.sdb, "SELECT COUNT(*) FROM im_0."+table+" WHERE CRC32(conv_id) % 1024 = ?", other); n != int64(len(otherKeys)) {
			t.Errorf("%s: the other shard's rows on the source: %d", table, n)
		}
	}
}

// MIGRATE SHARDS a-b PARALLEL 2: four jobs into one shared target table,
// never more than two of them preparing, copying or verifying at once, all
// ready in the end; cancelling them one by one removes each one's rows of
// the shared target table and no other's.
func testJobParallel(t *testing.T, e *jobEnv) {
	ctx := testCtx(t)
	const cluster = "parallel"
	e.cluster(t, cluster)
	for sh := 20; sh <= 23; sh++ {
		// 810 rows at 300 rows/s: about three seconds each, long enough
		// for two to be seen copying at once on a loaded machine (at one
		// second each, CI once saw them only one after the other).
		e.fill(t, router.Shard(sh), 90, 1)
	}
	e.manager(t, cluster, "m1", 300)
	admin := NewAdmin(e.cli, cluster)
	store := coord.NewJobStore(e.cli, cluster)
	_, rev, err := store.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events := store.Watch(wctx, rev)
	created, err := admin.Start(ctx, 20, 23, "ds1", "im_3", 0, 2, false)
	if err != nil || len(created) != 4 {
		t.Fatalf("Start = %v, %v", created, err)
	}
	steps := map[int]string{}
	most := 0
	for ev := range events {
		if ev.Err != nil || ev.Job == nil {
			t.Fatalf("watch: %+v", ev)
		}
		steps[ev.Shard] = ev.Job.Step
		active, ready := 0, 0
		for _, st := range steps {
			switch st {
			case StepPrepare, StepBackfill, StepVerify:
				active++
			case StepReady:
				ready++
			}
		}
		most = max(most, active)
		if active > 2 {
			t.Fatalf("%d jobs active at once: %v", active, steps)
		}
		if ready == 4 {
			break
		}
	}
	if most != 2 {
		t.Fatalf("at most %d jobs ran at once, want 2", most)
	}
	for sh := 20; sh <= 23; sh++ {
		if err := admin.Command(ctx, sh, VerbCancel, 0); err != nil {
			t.Fatal(err)
		}
		waitGone(t, store, sh, 30*time.Second)
		// The job that created the shared table did not drop it while
		// other shards' rows were in it; the others did not create it.
		if n := count(t, e.ddb, "SELECT COUNT(*) FROM im_3.conv_msg_0000 WHERE CRC32(conv_id) % 1024 BETWEEN 20 AND ?", sh); n != 0 {
			t.Fatalf("after cancelling shards 20..%d the shared target table holds %d of their rows", sh, n)
		}
		if sh < 23 && count(t, e.ddb, "SELECT COUNT(*) FROM im_3.conv_msg_0000 WHERE CRC32(conv_id) % 1024 = 23") == 0 {
			t.Fatalf("cancelling shard %d removed shard 23's rows", sh)
		}
	}
}

// A rollback deletes nothing on the target while a proxy may still read
// the shard there (its ramping key, coord.RampingKey, is left): reads
// ramped to the target would find rows missing, then tables gone. Once the
// key goes, the rollback completes.
func testJobRollbackWaitsForRamps(t *testing.T, e *jobEnv) {
	ctx := testCtx(t)
	const cluster, shard = "rampwait", 18
	e.cluster(t, cluster)
	e.fill(t, shard, 20, 1)
	e.manager(t, cluster, "m1", -1)
	store := coord.NewJobStore(e.cli, cluster)
	admin := NewAdmin(e.cli, cluster)
	if _, err := admin.Start(ctx, shard, shard, "ds1", "im_8", 0, 0, false); err != nil {
		t.Fatal(err)
	}
	waitJob(t, store, shard, time.Minute, "ready", func(j coord.Job, _ jobProgress) bool { return j.Step == StepReady })
	onTarget := func() int64 {
		return count(t, e.ddb, "SELECT COUNT(*) FROM im_8.conv_msg_0000 WHERE CRC32(conv_id) % 1024 = ?", shard)
	}
	if n := onTarget(); n == 0 {
		t.Fatal("[BUG] the ready job copied nothing: the test checks nothing")
	}
	// A proxy that ramps the shard's reads.
	lease, err := e.cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	key := coord.RampingKey(cluster, shard, "p1")
	if _, err := e.cli.Put(ctx, key, "", clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	if err := admin.Command(ctx, shard, VerbRollback, 0); err != nil {
		t.Fatal(err)
	}
	waitJob(t, store, shard, 10*time.Second, "the rollback intent", func(j coord.Job, _ jobProgress) bool { return j.Intent == IntentRollback })
	time.Sleep(1500 * time.Millisecond)
	if n := onTarget(); n == 0 {
		t.Fatal("the rollback deleted the target's rows while a proxy still ramped reads there")
	}
	if _, err := e.cli.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	waitGone(t, store, shard, 30*time.Second)
	if n := count(t, e.ddb, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'im_8' AND TABLE_NAME = 'conv_msg_0000'"); n != 0 {
		if rows := onTarget(); rows != 0 {
			t.Fatalf("%d rows of the shard left on the target after the rollback", rows)
		}
	}
}

// The fence's alarm: once the shard is switched, the reverse apply's writes
// of it on the old side raise nothing; a write there that passed the
// storage fence (a session with the migration's variable) is seen in the
// old side's binlog and shown in the job's state.
func testJobBreachAlarm(t *testing.T, e *jobEnv) {
	ctx := testCtx(t)
	const cluster, shard = "breach", 19
	e.cluster(t, cluster)
	keys := e.fill(t, shard, 10, 1)
	e.manager(t, cluster, "m1", -1)
	store := coord.NewJobStore(e.cli, cluster)
	if _, err := NewAdmin(e.cli, cluster).Start(ctx, shard, shard, "ds1", "im_6", 0, 0, true); err != nil {
		t.Fatal(err)
	}
	waitJob(t, store, shard, time.Minute, "switched", func(j coord.Job, _ jobProgress) bool { return j.Step == StepSwitched })
	// A write on the new side comes back to the old one: the apply's.
	e.dst.Exec(t, fmt.Sprintf("UPDATE im_6.im_conv_seq_0000 SET member_cnt = 41 WHERE conv_id = %d", keys[0]))
	for deadline := time.Now().Add(20 * time.Second); count(t, e.sdb, fmt.Sprintf("SELECT member_cnt FROM im_0.im_conv_seq_0000 WHERE conv_id = %d", keys[0])) != 41; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the new side's write did not come back to the old side")
		}
	}
	time.Sleep(500 * time.Millisecond)
	if j, _ := store.Get(ctx, shard); j.Step == StepSwitched {
		if p, _ := decodeProgress(j); p.State.Status.Breaches != 0 {
			t.Fatalf("the reverse apply's own write raised the alarm: %q", p.State.Status.Breach)
		}
	}
	// Past the fence by hand.
	c, err := e.sdb.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, q := range []string{"SET @convoy_migration = 1", fmt.Sprintf("UPDATE im_0.conv_msg_0000 SET msg_type = 9 WHERE conv_id = %d AND seq = 1", keys[1])} {
		if _, err := c.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	j := waitJob(t, store, shard, 20*time.Second, "the alarm", func(_ coord.Job, p jobProgress) bool { return p.State.Status.Breaches > 0 })
	p, _ := decodeProgress(j)
	if want := fmt.Sprintf("update of im_0.conv_msg_0000 conv_id=%d", keys[1]); !strings.Contains(p.State.Status.Breach, want) {
		t.Fatalf("the alarm says %q, want it to name %q", p.State.Status.Breach, want)
	}
	if st := stateLine(j, p); !strings.HasPrefix(st, "ALARM: 1 write(s) of the shard reached the source past its fence") {
		t.Fatalf("state %q does not raise the alarm", st)
	}
}
