package planner

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/convoy-im/convoy/coord"
	"github.com/convoy-im/convoy/router"
)

func seedInputs(t *testing.T, w Workload) Inputs {
	t.Helper()
	in, err := w.Inputs(SeedLimits(), 2000, 8)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

func find(ts []Trigger, name string) Trigger {
	for _, t := range ts {
		if t.Name == name {
			return t
		}
	}
	return Trigger{}
}

// TestSeedScale: the seed's fleet (400 M messages a day, 30 days stored,
// 8 servers of 4 TiB, 2 % of the traffic on 4 shards). Worked by hand:
//   - an even shard takes 400e6 x 0.98 / 1024 = 382,812.5 messages a day; a
//     hot one 2,000,000 more, so it holds 71.5 M rows: over the 50 M table
//     line already;
//   - ds0 holds 124 even and 4 hot shards: 57.0 M messages a day x 750 B =
//     42.75 GB a day, 1.28 TB stored: 29.2 % of 4 TiB, 60 % in
//     (0.6 x 4 TiB - 1.2825 TB) / 42.75 GB = 31.7 days;
//   - the busiest shard serves 2.38 M x 8 x 3 / 86400 = 662 QPS: far from 3000.
func TestSeedScale(t *testing.T) {
	in := seedInputs(t, SeedWorkload())
	ts := Evaluate(in)
	if ts[0].Name != "table_rows" || ts[0].In != 0 || ts[0].Scope != "shard 0000" {
		t.Fatalf("first trigger %v, want table_rows FIRED on a hot shard", ts[0])
	}
	disk := find(ts, "disk_percent")
	wantDays := (0.6*float64(int64(4)<<40) - 30*57_000_000*750) / (57_000_000 * 750)
	if math.Abs(disk.In.Hours()/24-wantDays) > 0.05 || disk.Scope != "datasource ds0" {
		t.Fatalf("disk %v, want ds0 in %.2f days", disk, wantDays)
	}
	if q := find(ts, "shard_qps"); q.In != Never || math.Abs(q.Value-2_382_812.5*8*3/86400) > 0.01 {
		t.Fatalf("qps %v", q)
	}

	p, err := Propose(in, ts)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(p.Why, "shard 0000's table reaches the table line") {
		t.Fatalf("the proposal does not say that a hot shard's table needs archiving: %s", p.Why)
	}
	if p.Kind != "split" || len(p.Moves.Moves) != 512 {
		t.Fatalf("proposal %s with %d moves, want a split moving 512 shards", p.Kind, len(p.Moves.Moves))
	}
	to, err := router.NewSnapshot(p.Routes)
	if err != nil {
		t.Fatal(err)
	}
	if len(to.Databases()) != 16 || len(to.Datasources()) != 16 {
		t.Fatalf("split layout: %d databases on %d servers, want 16 on 16", len(to.Databases()), len(to.Datasources()))
	}
	// Shards 0-63 stay in ds0/im_0, 64-127 go to ds0_b/im_8, each keeping
	// its physical table.
	if a, b := to.Target(63), to.Target(64); a != (router.Target{Datasource: "ds0", Database: "im_0", Table: 63}) ||
		b != (router.Target{Datasource: "ds0_b", Database: "im_8", Table: 64}) {
		t.Fatalf("targets of 63 and 64: %v %v", a, b)
	}
	// Copy time: the 512 moving shards, 4 of them hot (71.5 M x 2 rows), at
	// 2000 rows/s with 8 lanes: the hot ones are spread first, then the
	// even ones (11.5 M x 2 rows, 3.2 h each) fill the lanes.
	if d := p.Moves.Duration.Hours() / 24; d < 8 || d > 10 {
		t.Fatalf("copy time %.1f days, want about 9", d)
	}
}

// TestSplitPath: 8 x 128 -> 16 x 64 -> ... -> 1024 x 1, then no further.
func TestSplitPath(t *testing.T) {
	in := seedInputs(t, SeedWorkload())
	doc := in.Routes.Document()
	for _, want := range []int{16, 32, 64, 128, 256, 512, 1024} {
		var err error
		if doc, err = Split(doc); err != nil {
			t.Fatal(err)
		}
		snap, err := router.NewSnapshot(doc)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(snap.Databases()); n != want {
			t.Fatalf("after a split: %d databases, want %d", n, want)
		}
	}
	if _, err := Split(doc); err == nil || !strings.Contains(err.Error(), "cannot be split further") {
		t.Fatalf("split of 1024 x 1: %v", err)
	}
}

// TestHotShardsMove: a few shards over the QPS line, capacity far away:
// only they move, each to the least loaded server.
func TestHotShardsMove(t *testing.T) {
	w := SeedWorkload()
	// 3 shards take 1 M messages a day each (table lines 49 days away)
	// and 100 statements per message: 3472 QPS at peak.
	w.HistoryDays, w.HotShare, w.MessagesPerDay = 1, 0.3, 10e6
	w.StatementsPerMessage, w.HotShards = 100, 3
	in := seedInputs(t, w)
	ts := Evaluate(in)
	if q := find(ts, "shard_qps"); q.In != 0 {
		t.Fatalf("qps %v, want FIRED", q)
	}
	p, err := Propose(in, ts)
	if err != nil {
		t.Fatal(err)
	}
	if p.Kind != "hot" || len(p.Moves.Moves) != 3 {
		t.Fatalf("proposal %s with %d moves: %s", p.Kind, len(p.Moves.Moves), p.Why)
	}
	seen := map[string]bool{}
	for _, m := range p.Moves.Moves {
		if m.From.Datasource != "ds0" || m.To.Datasource == "ds0" || seen[m.To.Datasource] {
			t.Fatalf("move %+v: the three hot shards of ds0 should go to three other servers", m)
		}
		seen[m.To.Datasource] = true
	}
}

func TestNothingToDo(t *testing.T) {
	w := SeedWorkload()
	w.MessagesPerDay, w.HotShare, w.HistoryDays = 1e6, 0, 1
	in := seedInputs(t, w)
	ts := Evaluate(in)
	p, err := Propose(in, ts)
	if err != nil || p.Kind != "none" {
		t.Fatalf("proposal %+v, %v; want none", p, err)
	}
	if ts[0].In < 60*24*time.Hour {
		t.Fatalf("first trigger %v within 60 days at 1 M messages a day", ts[0])
	}
}

// TestMeasureGrowth: sizes now against a sample 10 days old give growth
// per day, and the table line is projected along it.
func TestMeasureGrowth(t *testing.T) {
	snap, err := router.NewSnapshot(must(router.DefaultLayout([]router.Datasource{{Name: "ds0", Addr: "10.0.0.1:3306", User: "c"}}, 8)))
	if err != nil {
		t.Fatal(err)
	}
	stats := func(_ context.Context, _ router.Datasource, _ string) (map[string]TableSize, error) {
		out := map[string]TableSize{}
		for i := range router.NumShards {
			out[router.PhysicalTableName("conv_msg", i)] = TableSize{Rows: 30_000_000, Bytes: 3 << 30}
		}
		return out, nil
	}
	old := coord.SizeSample{Taken: time.Now().Add(-10 * 24 * time.Hour)}
	for i := range router.NumShards {
		old.Shards[i] = [2]int64{20_000_000, 2 << 30}
		old.LargestRows[i], old.LargestBytes[i] = 20_000_000, 2<<30
	}
	var load [router.NumShards]Load
	load[5] = Load{QPS: 12, WriteP99: 3 * time.Millisecond}
	in, err := Measure(context.Background(), snap, stats, [][router.NumShards]Load{load, load}, map[string]int64{"ds0": 10 << 40}, []coord.SizeSample{old})
	if err != nil {
		t.Fatal(err)
	}
	in.Limits = SeedLimits()
	s := in.Shards[5]
	if s.QPS != 24 || s.WriteP99 != 3*time.Millisecond || math.Abs(s.TableRowsPerDay-1_000_000) > 1000 {
		t.Fatalf("shard 5: %+v", s)
	}
	rows := find(Evaluate(in), "table_rows")
	if d := rows.In.Hours() / 24; math.Abs(d-20) > 0.1 {
		t.Fatalf("table line in %.2f days, want 20 (30 M rows growing by 1 M a day)", d)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestProposeAtLeast: PLAN EXPANSION TO 20 DATASOURCES from 8 splits
// twice (8 -> 16 -> 32 servers) whatever the triggers say.
func TestProposeAtLeast(t *testing.T) {
	w := SeedWorkload()
	w.MessagesPerDay, w.HotShare, w.HistoryDays = 1e6, 0, 1
	in := seedInputs(t, w)
	in.MinDatasources = 20
	p, err := Propose(in, Evaluate(in))
	if err != nil {
		t.Fatal(err)
	}
	if p.Kind != "split" || len(p.Routes.Datasources) != 32 || len(p.Moves.Moves) != 768 {
		t.Fatalf("proposal %s: %d servers, %d moves; want a split to 32 servers moving 768 shards", p.Kind, len(p.Routes.Datasources), len(p.Moves.Moves))
	}
}
