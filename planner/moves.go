package planner

import (
	"cmp"
	"container/heap"
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/convoy-im/convoy/proxy/backend"
	"github.com/convoy-im/convoy/router"
)

// ShardMove is one shard whose tables live elsewhere in the new layout.
type ShardMove struct {
	Shard    router.Shard
	From, To router.Target
	// FromShared, ToShared: the physical tables on that side hold other
	// shards too.
	FromShared, ToShared bool
	// Rows and Bytes estimate the shard's share of its five physical tables
	// (the backends' own statistics; a table shared by n shards counts 1/n
	// for each).
	Rows, Bytes int64
}

// MovePlan is what it takes to go from one route document to another: the
// shards that move and how long their copies take.
type MovePlan struct {
	Moves       []ShardMove
	Rows, Bytes int64
	// Rate is one shard's copy rate (rows/s; each migrating shard has its
	// own limiter), Parallel how many shards copy at once.
	Rate     float64
	Parallel int
	// Duration is the copy time with the moves scheduled longest first on
	// Parallel lanes. Checksums, the read ramp and the switches come on top.
	Duration time.Duration
}

// TableSize is one physical table's statistics.
type TableSize struct{ Rows, Bytes int64 }

// TableStats returns the statistics of every table of database db on ds.
type TableStats func(ctx context.Context, ds router.Datasource, db string) (map[string]TableSize, error)

// PlanMoves lists the shards whose place differs between from and to, with
// their sizes from stats (read from the side they leave), and schedules
// their copies at rate rows/s per shard, parallel at a time.
func PlanMoves(ctx context.Context, from, to *router.Snapshot, stats TableStats, rate float64, parallel int) (*MovePlan, error) {
	if rate <= 0 || parallel <= 0 {
		return nil, fmt.Errorf("migrate: plan needs a positive rate and parallelism (got %g rows/s, %d)", rate, parallel)
	}
	moving := func(sh router.Shard) bool {
		a, b := from.Target(sh), to.Target(sh)
		return a != b || !sameServer(from, to, a.Datasource)
	}
	sizes, err := ShardSizes(ctx, from, stats, moving)
	if err != nil {
		return nil, err
	}
	shares := make(map[router.Shard]TableSize, len(sizes))
	for sh, sz := range sizes {
		shares[sh] = sz.TableSize
	}
	return MovesWithSizes(from, to, shares, rate, parallel), nil
}

// MovesWithSizes is PlanMoves with the shards' sizes known (measured or
// projected): rate and parallel must be positive.
func MovesWithSizes(from, to *router.Snapshot, sizes map[router.Shard]TableSize, rate float64, parallel int) *MovePlan {
	p := &MovePlan{Rate: rate, Parallel: parallel}
	fromN, toN := tableShards(from), tableShards(to)
	for sh := range router.Shard(router.NumShards) {
		a, b := from.Target(sh), to.Target(sh)
		if a == b && sameServer(from, to, a.Datasource) {
			continue
		}
		m := ShardMove{Shard: sh, From: a, To: b, FromShared: fromN[a] > 1, ToShared: toN[b] > 1,
			Rows: sizes[sh].Rows, Bytes: sizes[sh].Bytes}
		p.Moves = append(p.Moves, m)
		p.Rows += m.Rows
		p.Bytes += m.Bytes
	}
	p.Duration = schedule(p.Moves, rate, parallel)
	return p
}

// tableShards counts the shards of each placement (physical tables).
func tableShards(snap *router.Snapshot) map[router.Target]int {
	n := map[router.Target]int{}
	for sh := range router.Shard(router.NumShards) {
		n[snap.Target(sh)]++
	}
	return n
}

// ShardSize is one shard's size: its share of its five physical tables
// (a table shared by n shards counts 1/n), and the largest of those tables
// whole (what a per-table capacity line applies to).
type ShardSize struct {
	TableSize
	Largest TableSize
}

// ShardSizes estimates the size of each wanted shard (nil: every shard)
// from stats of the databases holding its tables.
func ShardSizes(ctx context.Context, snap *router.Snapshot, stats TableStats, want func(router.Shard) bool) (map[router.Shard]ShardSize, error) {
	sharers := map[router.Physical]int64{}
	for _, logical := range router.ShardedTables() {
		for _, g := range snap.AllPhysical(logical) {
			sharers[g.Physical] = int64(len(g.Shards))
		}
	}
	dbStats := map[[2]string]map[string]TableSize{}
	out := map[router.Shard]ShardSize{}
	for sh := range router.Shard(router.NumShards) {
		if want != nil && !want(sh) {
			continue
		}
		t := snap.Target(sh)
		key := [2]string{t.Datasource, t.Database}
		tables, ok := dbStats[key]
		if !ok {
			ds, _ := snap.Datasource(t.Datasource)
			var err error
			if tables, err = stats(ctx, ds, t.Database); err != nil {
				return nil, fmt.Errorf("migrate: sizes of %s/%s: %w", t.Datasource, t.Database, err)
			}
			dbStats[key] = tables
		}
		var size ShardSize
		for _, logical := range router.ShardedTables() {
			ph := snap.Physical(logical, sh)
			ts := tables[ph.Table]
			size.Rows += ts.Rows / sharers[ph]
			size.Bytes += ts.Bytes / sharers[ph]
			size.Largest.Rows = max(size.Largest.Rows, ts.Rows)
			size.Largest.Bytes = max(size.Largest.Bytes, ts.Bytes)
		}
		out[sh] = size
	}
	return out, nil
}

// sameServer: a datasource of one name at another address in the new
// document is another server, so its shards move too.
func sameServer(from, to *router.Snapshot, name string) bool {
	a, _ := from.Datasource(name)
	b, _ := to.Datasource(name)
	return a.Addr == b.Addr
}

// schedule is the makespan of the moves' copies on parallel lanes, longest
// first onto the lane that frees up first (within 4/3 of the optimum).
func schedule(moves []ShardMove, rate float64, parallel int) time.Duration {
	secs := make([]float64, len(moves))
	for i, m := range moves {
		secs[i] = float64(m.Rows) / rate
	}
	slices.SortFunc(secs, func(a, b float64) int { return cmp.Compare(b, a) })
	lanes := make(laneHeap, min(parallel, max(len(secs), 1)))
	heap.Init(&lanes)
	for _, s := range secs {
		lanes[0] += s
		heap.Fix(&lanes, 0)
	}
	end := 0.0
	for _, l := range lanes {
		end = max(end, l)
	}
	return time.Duration(end * float64(time.Second))
}

type laneHeap []float64

func (h laneHeap) Len() int           { return len(h) }
func (h laneHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h laneHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *laneHeap) Push(x any)        { *h = append(*h, x.(float64)) }
func (h *laneHeap) Pop() any          { old := *h; x := old[len(old)-1]; *h = old[:len(old)-1]; return x }

// Write prints the plan for a person: consecutive shards with the same
// source and target placement as one line, then the totals. A side whose
// shards live in one shared physical table shows its index
// (ds2/im_5/_0031); tables named by their shard's number show none.
func (p *MovePlan) Write(w io.Writer) error {
	if len(p.Moves) == 0 {
		_, err := fmt.Fprintln(w, "no shard moves: the two documents place every shard alike")
		return err
	}
	fmt.Fprintf(w, "%-11s  %-24s  %-24s  %12s  %10s  %9s\n", "shards", "from", "to", "rows", "bytes", "copy time")
	for i := 0; i < len(p.Moves); {
		first := p.Moves[i]
		from, to := runOf(first.Shard, first.From, first.FromShared), runOf(first.Shard, first.To, first.ToShared)
		j := i + 1
		var rows, bytes int64 = first.Rows, first.Bytes
		for ; j < len(p.Moves) && p.Moves[j].Shard == first.Shard+router.Shard(j-i); j++ {
			f, okFrom := from.with(p.Moves[j].Shard, p.Moves[j].From, p.Moves[j].FromShared)
			t, okTo := to.with(p.Moves[j].Shard, p.Moves[j].To, p.Moves[j].ToShared)
			if !okFrom || !okTo {
				break
			}
			from, to = f, t
			rows += p.Moves[j].Rows
			bytes += p.Moves[j].Bytes
		}
		span := first.Shard.String()
		if j-i > 1 {
			span += "-" + p.Moves[j-1].Shard.String()
		}
		// Each shard of a group copies on its own lane: its time is that of
		// its largest shard when lanes suffice.
		fmt.Fprintf(w, "%-11s  %-24s  %-24s  %12d  %10s  %9s\n", span, from, to,
			rows, humanBytes(bytes), roundDuration(schedule(p.Moves[i:j], p.Rate, p.Parallel)))
		i = j
	}
	return p.writeTotals(w)
}

func (p *MovePlan) writeTotals(w io.Writer) error {
	_, err := fmt.Fprintf(w, "\n%d shards move, %d rows (%s); at %g rows/s per shard, %d in parallel: copy %s (%.1f days); checksums, read ramps and switches come on top\n",
		len(p.Moves), p.Rows, humanBytes(p.Bytes), p.Rate, p.Parallel, roundDuration(p.Duration), p.Duration.Hours()/24)
	return err
}

// WriteEach prints one line a move, each side with its table index
// (ds0/im_0/_0064: the tables conv_msg_0064, msg_content_0064, ...), then
// the totals as Write does.
func (p *MovePlan) WriteEach(w io.Writer) error {
	fmt.Fprintf(w, "%-5s  %-24s  %-24s  %12s  %10s\n", "shard", "from", "to", "rows", "bytes")
	for _, m := range p.Moves {
		fmt.Fprintf(w, "%-5s  %-24s  %-24s  %12d  %10s\n", m.Shard,
			fmt.Sprintf("%s/%s/_%04d", m.From.Datasource, m.From.Database, m.From.Table),
			fmt.Sprintf("%s/%s/_%04d", m.To.Datasource, m.To.Database, m.To.Table), m.Rows, humanBytes(m.Bytes))
	}
	return p.writeTotals(w)
}

// placementRun is one side of consecutive moves printed as one line: one
// database, and either every shard in a table of its own named by its
// number, or all in one shared table.
type placementRun struct {
	first router.Target
	own   bool
}

func runOf(sh router.Shard, t router.Target, shared bool) placementRun {
	return placementRun{first: t, own: !shared && t.Table == int(sh)}
}

// with is the run continued by shard sh at t, if t continues it.
func (r placementRun) with(sh router.Shard, t router.Target, shared bool) (placementRun, bool) {
	if r.own {
		return r, t.Datasource == r.first.Datasource && t.Database == r.first.Database && !shared && t.Table == int(sh)
	}
	return r, shared && t == r.first
}

func (r placementRun) String() string {
	s := r.first.Datasource + "/" + r.first.Database
	if !r.own {
		s += fmt.Sprintf("/_%04d", r.first.Table)
	}
	return s
}

func roundDuration(d time.Duration) time.Duration {
	switch {
	case d >= time.Hour:
		return d.Round(time.Minute)
	case d >= time.Minute:
		return d.Round(time.Second)
	}
	return d.Round(time.Millisecond)
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// InformationSchemaStats reads TABLE_ROWS and DATA_LENGTH + INDEX_LENGTH
// from the datasource's information_schema: InnoDB's estimates, cheap and
// within some tens of percent, which is what a plan needs.
func InformationSchemaStats(ctx context.Context, ds router.Datasource, db string) (map[string]TableSize, error) {
	h, err := backend.OpenSQL(ds, "")
	if err != nil {
		return nil, err
	}
	defer h.Close()
	rows, err := h.QueryContext(ctx, "SELECT TABLE_NAME, COALESCE(TABLE_ROWS, 0), COALESCE(DATA_LENGTH, 0) + COALESCE(INDEX_LENGTH, 0) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ?", db)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]TableSize{}
	for rows.Next() {
		var name string
		var ts TableSize
		if err := rows.Scan(&name, &ts.Rows, &ts.Bytes); err != nil {
			return nil, err
		}
		out[name] = ts
	}
	return out, rows.Err()
}
