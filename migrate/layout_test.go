package migrate

import (
	"bytes"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/convoy-im/convoy/coord"
	"github.com/convoy-im/convoy/planner"
	"github.com/convoy-im/convoy/routecfg"
	"github.com/convoy-im/convoy/router"
)

func seedLayout(t *testing.T, dbs int) router.Document {
	t.Helper()
	doc, err := router.DefaultLayout([]router.Datasource{{Name: "ds0", Addr: "10.0.0.1:3306", User: "c"}, {Name: "ds1", Addr: "10.0.0.2:3306", User: "c"}}, dbs)
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// TestCheckLayout: the seed's 8 x 128 -> 16 x 64 is accepted (every
// moved shard keeps its table), and each document the jobs could not carry
// out is refused with the reason and the shards it concerns.
func TestCheckLayout(t *testing.T) {
	live := seedLayout(t, 8)
	c, err := CheckLayout(live, seedLayout(t, 16))
	if err != nil || len(c.NewDatasources) != 0 || len(c.Notes) != 0 {
		t.Fatalf("8x128 -> 16x64: %+v, %v", c, err)
	}

	grown := seedLayout(t, 8)
	grown.Datasources = append(grown.Datasources, router.Datasource{Name: "ds2", Addr: "10.0.0.3:3306", User: "c"})
	grown.DefaultDatasource = "ds2"
	grown.Datasources[0].User = "admin"
	for sh := 500; sh <= 511; sh++ {
		grown = router.MoveShard(grown, sh, "ds2", "im_3", nil)
	}
	c, err = CheckLayout(live, grown)
	if err != nil || len(c.NewDatasources) != 1 || c.NewDatasources[0].Name != "ds2" || len(c.Notes) != 2 ||
		!strings.Contains(c.Notes[0], "datasource ds0 has other settings") || !strings.Contains(c.Notes[1], "default datasource") {
		t.Fatalf("a new datasource: %+v, %v", c, err)
	}

	// A shard regrouped into a shared table on its way to another
	// database: the job copies into that table.
	shared := 7
	if _, err := CheckLayout(live, router.MoveShard(seedLayout(t, 8), 5, "ds1", "im_9", &shared)); err != nil {
		t.Fatalf("a regrouped shard: %v", err)
	}

	moved := seedLayout(t, 8)
	moved.Datasources[1].Addr = "10.0.0.9:3306"
	dropped := seedLayout(t, 8)
	dropped.Datasources = dropped.Datasources[:1]
	for i := range dropped.Shards {
		dropped.Shards[i].Datasource = "ds0"
	}
	reindexed := router.MoveShard(seedLayout(t, 8), 5, "ds0", "im_0", &shared)
	invalid := seedLayout(t, 8)
	invalid.Shards = invalid.Shards[1:]
	for _, c := range []struct {
		name string
		doc  router.Document
		want string
	}{
		{"address", moved, "datasource ds1 is at 10.0.0.2:3306 in the live routes and at 10.0.0.9:3306"},
		{"dropped", dropped, "drops datasource ds1, which shards 0512-1023 move from"},
		{"table", reindexed, "shards 0005 move to another table of the same database (shard 5: ds0:im_0.conv_msg_0005 -> ds0:im_0.conv_msg_0007)"},
		{"invalid", invalid, "shard 0 is not mapped"},
	} {
		_, err := CheckLayout(live, c.doc)
		var ie *InputError
		if !errors.As(err, &ie) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an input error containing %q", c.name, err, c.want)
		}
	}
}

func TestShardList(t *testing.T) {
	if got := ShardList([]int{1, 30, 31, 32, 40, 41}); got != "0001, 0030-0032, 0040-0041" {
		t.Fatalf("ShardList = %q", got)
	}
}

// shardRows counts shard sh's rows in the five tables of index idx in
// database dbName.
func shardRows(t *testing.T, db *sql.DB, dbName string, idx int, sh int) int64 {
	t.Helper()
	var n int64
	for _, logical := range router.ShardedTables() {
		f, err := FilterFor(logical, router.Shard(sh))
		if err != nil {
			t.Fatal(err)
		}
		n += count(t, db, "SELECT COUNT(*) FROM "+dbName+"."+router.PhysicalTableName(logical, idx)+" WHERE "+shardPredicate(f), sh)
	}
	return n
}

// TestLayout: a layout change of four shards to a datasource the new
// document introduces, as one command, regrouping tables on the way:
// shard 30 keeps a table of its own, 31 and 32 leave theirs for one shared
// table, 33 leaves the shared table of its range for one of its own. The
// plan's moves and rows are what the source holds; apply adds the
// datasource and starts the jobs; run again it starts nothing; with AUTO
// and a short rollback window every job finishes, and then the live routes
// place every shard as the new document does, with the rows on the new
// side.
func TestLayout(t *testing.T) {
	e := newJobEnv(t)
	ctx := testCtx(t)
	const cluster = "layout"
	shards := []int{30, 31, 32, 33}
	live, err := router.SharedLayout(e.datasources(), 2, 4)
	if err != nil {
		t.Fatal(err)
	}
	next := live
	next.Datasources = append(next.Datasources, router.Datasource{Name: "ds2", Addr: e.dst.Addr(), User: "root"})
	shared := 31
	toShared := map[int]*int{30: nil, 31: &shared, 32: &shared, 33: nil}
	fromIdx := map[int]int{30: 30, 31: 31, 32: 32, 33: 0}
	want := map[int]int64{} // rows of each shard, all five tables
	for i, sh := range shards {
		next = router.MoveShard(next, sh, "ds2", "im_5", toShared[sh])
		if sh == 33 {
			e.fill(t, router.Shard(sh), 40, 1) // the range's shared table
		} else {
			live = router.MoveShard(live, sh, "ds0", "im_0", nil)
			for _, logical := range router.ShardedTables() {
				e.src.Exec(t, imTable(t, logical, "im_0", router.PhysicalTableName(logical, sh)))
			}
			e.fillAt(t, router.Shard(sh), 10*(i+1), 1, "im_0", sh)
		}
		want[sh] = shardRows(t, e.sdb, "im_0", fromIdx[sh], sh)
	}
	// The plan reads InnoDB's statistics, estimates until analysed; a
	// shared table counts 1/128 for each of its shards.
	var est33 int64
	for _, logical := range router.ShardedTables() {
		for _, idx := range []int{0, 30, 31, 32} {
			e.src.Exec(t, "ANALYZE TABLE im_0."+router.PhysicalTableName(logical, idx))
		}
		est33 += count(t, e.sdb, "SELECT COUNT(*) FROM im_0."+router.PhysicalTableName(logical, 0)) / 128
	}
	if err := routecfg.NewStore(e.cli, cluster).Init(ctx, live); err != nil {
		t.Fatal(err)
	}
	admin := NewAdmin(e.cli, cluster)

	c, p, err := admin.PlanLayout(ctx, next, planner.InformationSchemaStats, 100, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.NewDatasources) != 1 || c.NewDatasources[0].Name != "ds2" || len(p.Moves) != len(shards) {
		t.Fatalf("plan: new datasources %+v, moves %+v", c.NewDatasources, p.Moves)
	}
	var total int64
	for i, m := range p.Moves {
		sh := shards[i]
		rows := want[sh]
		if sh == 33 {
			rows = est33
		}
		from := router.Target{Datasource: "ds0", Database: "im_0", Table: fromIdx[sh]}
		to := router.Target{Datasource: "ds2", Database: "im_5", Table: sh}
		if toShared[sh] != nil {
			to.Table = *toShared[sh]
		}
		if int(m.Shard) != sh || m.From != from || m.To != to || m.Rows != rows {
			t.Errorf("move %d = %+v, want shard %d %+v -> %+v, %d rows", i, m, sh, from, to, rows)
		}
		total += rows
	}
	// Two lanes, longest first: 32 (330 rows) on one, 31 (220) then 30
	// (110) on the other, then 33 (its estimate) after either.
	copyTime := time.Duration(float64(want[32]+est33) / 100 * float64(time.Second))
	if p.Rows != total || p.Duration != copyTime {
		t.Errorf("plan totals: %d rows, %s; want %d rows, %s", p.Rows, p.Duration, total, copyTime)
	}
	var out bytes.Buffer
	if err := p.Write(&out); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		fmt.Sprintf("0030         ds0/im_0                  ds2/im_5                  %12d", want[30]),
		fmt.Sprintf("0031-0032    ds0/im_0                  ds2/im_5/_0031            %12d", want[31]+want[32]),
		fmt.Sprintf("0033         ds0/im_0/_0000            ds2/im_5                  %12d", est33),
	} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("plan output lacks %q:\n%s", line, out.String())
		}
	}
	t.Logf("plan:\n%s", out.String())

	m1 := e.managerWindow(t, cluster, "m1", -1, time.Second)
	res, err := admin.ApplyLayout(ctx, next, 0, 2, true)
	if err != nil || len(res.Added) != 1 || res.Added[0].Name != "ds2" || fmt.Sprint(res.Started) != fmt.Sprint(shards) || res.Placed != router.NumShards-len(shards) {
		t.Fatalf("apply: %+v, %v", res, err)
	}
	// Again: nothing new; every moving shard is reported with its job (or
	// placed, if its job switched meanwhile).
	res, err = admin.ApplyLayout(ctx, next, 0, 2, true)
	if err != nil || len(res.Added) != 0 || len(res.Started) != 0 || len(res.Running)+res.Placed != router.NumShards {
		t.Fatalf("apply again: %+v, %v", res, err)
	}
	// A document placing a shard elsewhere than its job takes it is
	// refused whole.
	other := router.MoveShard(next, 31, "ds1", "im_6", nil)
	zero := 0 // shard 40 keeps its shared table index
	other = router.MoveShard(other, 40, "ds1", "im_6", &zero)
	if res, err := admin.ApplyLayout(ctx, other, 0, 0, true); err == nil || !strings.Contains(err.Error(), "shard 31 has migration job") || res == nil || len(res.Started) != 0 {
		t.Fatalf("apply of a conflicting document: %+v, %v", res, err)
	}

	store := coord.NewJobStore(e.cli, cluster)
	for _, sh := range shards {
		waitJob(t, store, sh, 45*time.Second, "job done", func(j coord.Job, _ jobProgress) bool { return j.Step == StepDone })
	}
	doc, err := routecfg.NewStore(e.cli, cluster).Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got, err := router.NewSnapshot(doc)
	if err != nil {
		t.Fatal(err)
	}
	wantSnap, _ := router.NewSnapshot(next)
	for sh := range router.Shard(router.NumShards) {
		if got.Target(sh) != wantSnap.Target(sh) {
			t.Fatalf("shard %d is at %+v, the new document puts it at %+v", sh, got.Target(sh), wantSnap.Target(sh))
		}
	}
	for _, sh := range shards {
		at := wantSnap.Target(router.Shard(sh))
		if n := shardRows(t, e.ddb, "im_5", at.Table, sh); n != want[sh] {
			t.Errorf("shard %d: %d rows in im_5's tables of index %d, %d on the source", sh, n, at.Table, want[sh])
		}
	}
	res, err = admin.ApplyLayout(ctx, next, 0, 0, true)
	if err != nil || len(res.Started)+len(res.Running) != 0 || res.Placed != router.NumShards {
		t.Fatalf("apply once done: %+v, %v", res, err)
	}

	// A regrouped shard switched and rolled back (a manager with a long
	// rollback window): shard 34 leaves its range's shared table for one of
	// its own and comes back; the routes return to their shape, the table
	// the job created on the target is gone.
	m1.Close()
	e.managerWindow(t, cluster, "m2", -1, time.Hour)
	rows34 := e.fill(t, 34, 20, 1)
	before := doc
	res, err = admin.ApplyLayout(ctx, router.MoveShard(next, 34, "ds2", "im_6", nil), 0, 0, false)
	if err != nil || fmt.Sprint(res.Started) != "[34]" {
		t.Fatalf("apply of shard 34: %+v, %v", res, err)
	}
	waitJob(t, store, 34, 30*time.Second, "job ready", func(j coord.Job, _ jobProgress) bool { return j.Step == StepReady })
	if err := admin.Command(ctx, 34, VerbNext, 0); err != nil {
		t.Fatal(err)
	}
	waitJob(t, store, 34, 30*time.Second, "job switched", func(j coord.Job, _ jobProgress) bool { return j.Step == StepSwitched })
	at, err := routesLocation(ctx, routecfg.NewStore(e.cli, cluster), 34)
	if err != nil || at != (router.Target{Datasource: "ds2", Database: "im_6", Table: 34}) {
		t.Fatalf("shard 34 is at %+v (%v) after the switch", at, err)
	}
	if n, want := shardRows(t, e.ddb, "im_6", 34, 34), shardRows(t, e.sdb, "im_0", 0, 34); n != want || n == 0 {
		t.Fatalf("shard 34: %d rows in im_6's own tables, %d on the source (%d conversations)", n, want, len(rows34))
	}
	if err := admin.Command(ctx, 34, VerbRollback, 0); err != nil {
		t.Fatal(err)
	}
	waitGone(t, store, 34, 30*time.Second)
	after, err := routecfg.NewStore(e.cli, cluster).Get(ctx)
	if err != nil || !reflect.DeepEqual(after.Shards, before.Shards) {
		t.Fatalf("routes after the rollback: %+v (%v), want %+v", after.Shards, err, before.Shards)
	}
	if n := count(t, e.ddb, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'im_6' AND TABLE_NAME = 'conv_msg_0034'"); n != 0 {
		t.Fatal("im_6.conv_msg_0034, created by the job, is still there after the rollback")
	}
}
