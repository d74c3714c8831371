package planner

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/convoy-im/convoy/internal/testsvc"
	"github.com/convoy-im/convoy/router"
)

// snapper validates documents made by a layout function.
func snapper(t *testing.T) func(router.Document, error) *router.Snapshot {
	return func(doc router.Document, err error) *router.Snapshot {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		s, err := router.NewSnapshot(doc)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
}

func dss(names ...string) []router.Datasource {
	var out []router.Datasource
	for i, n := range names {
		out = append(out, router.Datasource{Name: n, Addr: "10.0.0." + string(rune('1'+i)) + ":3306", User: "convoy"})
	}
	return out
}

// perShard gives every conv_msg physical table rows rows (and 100 bytes a
// row), the other tables nothing.
func perShard(rows int64) TableStats {
	return func(_ context.Context, _ router.Datasource, _ string) (map[string]TableSize, error) {
		out := map[string]TableSize{}
		for i := range router.NumShards {
			out[router.PhysicalTableName("conv_msg", i)] = TableSize{Rows: rows, Bytes: rows * 100}
		}
		return out, nil
	}
}

// TestPlanSeedScale reproduces seed 001's figure (docs/design.md §11): 1024
// shards of 5 M rows at 2000 rows/s per shard take 2500 s each; moving all of
// them with 8 in parallel takes 1024 / 8 x 2500 s = 3.7 days ("3-5 天").
func TestPlanSeedScale(t *testing.T) {
	from := snapper(t)(router.DefaultLayout(dss("ds0", "ds1"), 8))
	toDoc, err := router.DefaultLayout(dss("ds0", "ds1"), 8)
	if err != nil {
		t.Fatal(err)
	}
	for i := range toDoc.Datasources {
		toDoc.Datasources[i].Addr = "10.0.1.1:3306" // new servers under the same names
	}
	p, err := PlanMoves(context.Background(), from, snapper(t)(toDoc, nil), perShard(5_000_000), 2000, 8)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Moves) != 1024 || p.Rows != 1024*5_000_000 {
		t.Fatalf("moves %d rows %d, want 1024 and 5.12e9", len(p.Moves), p.Rows)
	}
	if want := 128 * 2500 * time.Second; p.Duration != want {
		t.Fatalf("duration %s, want %s", p.Duration, want)
	}
	var out bytes.Buffer
	if err := p.Write(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "(3.7 days)") || !strings.Contains(out.String(), "0000-0127") {
		t.Fatalf("plan text:\n%s", out.String())
	}
}

// TestPlanLayoutChange: 8 x 128 on two servers -> 16 x 64 on four. A shard
// moves when its database or server changes; each keeps its table index.
func TestPlanLayoutChange(t *testing.T) {
	from := snapper(t)(router.DefaultLayout(dss("ds0", "ds1"), 8))
	to := snapper(t)(router.DefaultLayout(dss("ds0", "ds1", "ds2", "ds3"), 16))
	p, err := PlanMoves(context.Background(), from, to, perShard(1000), 2000, 4)
	if err != nil {
		t.Fatal(err)
	}
	moved := map[router.Shard]ShardMove{}
	for _, m := range p.Moves {
		moved[m.Shard] = m
	}
	for sh := range router.Shard(router.NumShards) {
		a, b := from.Target(sh), to.Target(sh)
		_, ok := moved[sh]
		if ok != (a != b) {
			t.Fatalf("shard %s: %v -> %v, listed as moving: %v", sh, a, b, ok)
		}
	}
	m := moved[64]
	if m.From.Database != "im_0" || m.To.Database != "im_1" || m.Rows != 1000 || m.Bytes != 100_000 {
		t.Fatalf("shard 64: %+v", m)
	}
	if _, ok := moved[0]; ok {
		t.Fatal("shard 0 stays in ds0/im_0 and must not move")
	}
}

// TestPlanSharedTables: in a small layout a physical table holds many
// shards; each shard is charged its share.
func TestPlanSharedTables(t *testing.T) {
	from := snapper(t)(router.SharedLayout(dss("ds0"), 2, 4)) // 8 tables of 128 shards
	to := snapper(t)(router.SharedLayout(dss("ds0", "ds1"), 2, 4))
	stats := func(_ context.Context, _ router.Datasource, _ string) (map[string]TableSize, error) {
		out := map[string]TableSize{}
		for _, g := range from.AllPhysical("conv_msg") {
			out[g.Table] = TableSize{Rows: 128_000}
		}
		for _, g := range from.AllPhysical("im_inbox") {
			out[g.Table] = TableSize{Rows: 1280}
		}
		return out, nil
	}
	p, err := PlanMoves(context.Background(), from, to, stats, 100, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Moves) != 512 || p.Moves[0].Rows != 1000+10 {
		t.Fatalf("moves %d, first %+v", len(p.Moves), p.Moves[0])
	}
	// 512 equal copies of 10.1 s on 2 lanes.
	if want := time.Duration(256 * 10.1 * float64(time.Second)); (p.Duration - want).Abs() > time.Millisecond {
		t.Fatalf("duration %s, want %s", p.Duration, want)
	}
}

func TestScheduleLongestFirst(t *testing.T) {
	var moves []ShardMove
	for _, r := range []int64{7, 5, 4, 3, 3, 2} {
		moves = append(moves, ShardMove{Rows: r})
	}
	// Longest first on 2 lanes: [7 3 2] and [5 4 3]: 12.
	if got := schedule(moves, 1, 2); got != 12*time.Second {
		t.Fatalf("makespan %s, want 12s", got)
	}
	if got := schedule(moves, 1, 10); got != 7*time.Second {
		t.Fatalf("makespan with spare lanes %s, want 7s", got)
	}
	if _, err := PlanMoves(context.Background(), nil, nil, nil, 0, 1); err == nil {
		t.Fatal("a zero rate was accepted")
	}
}

// TestInformationSchemaStats reads a real server's statistics.
func TestInformationSchemaStats(t *testing.T) {
	m := testsvc.StartMariaDB(t)
	m.Exec(t, "CREATE DATABASE im_0", "CREATE TABLE im_0.conv_msg_0000 (id INT PRIMARY KEY, b VARCHAR(100))",
		"INSERT INTO im_0.conv_msg_0000 SELECT seq, REPEAT('x', 100) FROM im_0.seq_1_to_3000", "ANALYZE TABLE im_0.conv_msg_0000")
	got, err := InformationSchemaStats(context.Background(), router.Datasource{Name: "ds0", Addr: m.Addr(), User: "root"}, "im_0")
	if err != nil {
		t.Fatal(err)
	}
	ts := got["conv_msg_0000"]
	if ts.Rows < 2000 || ts.Rows > 4000 || ts.Bytes < 300_000 {
		t.Fatalf("stats %+v, want about 3000 rows and over 300 KB", ts)
	}
}
