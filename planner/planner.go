// Package planner is Convoy's capacity planner (docs/design.md §11): from
// measured (or simulated) shard sizes, growth and load it says which of the
// expansion triggers fires first and when, and proposes the next layout as a
// route document the migration commands execute, with the moves it takes and
// their duration at the migration rate.
//
// The triggers (docs/design.md §7; seed 001: "扩容触发线"): any database server's
// disk over 60 %, any shard's write P99 over 50 ms, any shard over 3000 QPS;
// and the table capacity ("容量口径"): 50 M rows or 100 GB in one physical table.
// Disk and table size are projected along the measured growth; QPS and P99
// fire when measured over the line (load is not extrapolated: it follows
// users, not time).
package planner

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/convoy-im/convoy/router"
)

// Limits are the trigger lines.
type Limits struct {
	DiskPercent float64
	WriteP99    time.Duration
	ShardQPS    float64
	TableRows   int64
	TableBytes  int64
}

// SeedLimits are seed 001's figures (docs/design.md §7).
func SeedLimits() Limits {
	return Limits{DiskPercent: 60, WriteP99: 50 * time.Millisecond, ShardQPS: 3000, TableRows: 50_000_000, TableBytes: 100 << 30}
}

// Shard is one logical shard's measurements.
type Shard struct {
	// TableRows and TableBytes are the shard's largest physical table
	// (conv_msg in the IM schema): what the table limit applies to.
	TableRows, TableBytes int64
	// Rows and Bytes are the shard's five tables together: what a move
	// copies and what occupies disk.
	Rows, Bytes int64
	// Growth per day of the largest table (rows, bytes) and of all five
	// tables (bytes).
	TableRowsPerDay, TableBytesPerDay, BytesPerDay float64
	QPS                                            float64
	WriteP99                                       time.Duration
}

// Datasource is one database server's disk.
type Datasource struct {
	Capacity int64 // bytes usable by the databases (0: unknown, no disk trigger)
	Used     int64 // bytes the shards' databases use now
}

// Inputs is everything the model needs.
type Inputs struct {
	Routes      *router.Snapshot
	Shards      [router.NumShards]Shard
	Datasources map[string]Datasource
	Limits      Limits
	// Rate (rows/s per shard) and Parallel (shards at once) of the moves.
	Rate     float64
	Parallel int
	// MinDatasources asks for a layout on at least this many servers
	// (PLAN EXPANSION TO n DATASOURCES): splits until it is reached,
	// whatever the triggers say. 0: as the triggers say.
	MinDatasources int
}

// Trigger is one trigger line and when it is crossed.
type Trigger struct {
	Name  string // disk_percent, write_p99_ms, shard_qps, table_rows, table_bytes
	Scope string // "datasource ds0", "shard 0441"
	Value float64
	Limit float64
	// In is how long until it fires: 0 means it has fired; Never that it
	// does not at the measured growth.
	In time.Duration
}

// Never is Trigger.In for a line the measured growth never reaches.
const Never = time.Duration(math.MaxInt64)

func (t Trigger) String() string {
	when := "FIRED"
	switch {
	case t.In == Never && (t.Name == "shard_qps" || t.Name == "write_p99_ms"):
		when = "below the line (load is not projected)"
	case t.In == Never:
		when = "not at the measured growth"
	case t.In > 0:
		when = "in " + days(t.In)
	}
	return fmt.Sprintf("%-12s %-16s %14s / %-14s %s", t.Name, t.Scope, num(t.Value), num(t.Limit), when)
}

func days(d time.Duration) string {
	if d < 48*time.Hour {
		return d.Round(time.Minute).String()
	}
	return strconv.FormatFloat(d.Hours()/24, 'f', 1, 64) + " days"
}

func num(v float64) string {
	switch {
	case v >= 1e12:
		return strconv.FormatFloat(v/(1<<40), 'f', 1, 64) + " TiB"
	case v >= 1e9 && v == math.Trunc(v) && v > 1e10:
		return strconv.FormatFloat(v/(1<<30), 'f', 1, 64) + " GiB"
	}
	return strconv.FormatFloat(math.Round(v*100)/100, 'f', -1, 64)
}

// until is how long a value growing by perDay takes to pass limit.
func until(value, limit, perDay float64) time.Duration {
	if value > limit {
		return 0
	}
	days := (limit - value) / perDay
	if perDay <= 0 || days > 100*365 {
		return Never // a century out is not a plan
	}
	return time.Duration(days * float64(24*time.Hour))
}

// Evaluate lists, for each trigger line, its earliest crossing (the worst
// shard or server), sorted soonest first.
func Evaluate(in Inputs) []Trigger {
	l := in.Limits
	worst := map[string]Trigger{}
	consider := func(t Trigger) {
		w, ok := worst[t.Name]
		if !ok || t.In < w.In || (t.In == w.In && t.Value/t.Limit > w.Value/w.Limit) {
			worst[t.Name] = t
		}
	}
	for i, s := range in.Shards {
		scope := "shard " + router.Shard(i).String()
		consider(Trigger{"table_rows", scope, float64(s.TableRows), float64(l.TableRows), until(float64(s.TableRows), float64(l.TableRows), s.TableRowsPerDay)})
		consider(Trigger{"table_bytes", scope, float64(s.TableBytes), float64(l.TableBytes), until(float64(s.TableBytes), float64(l.TableBytes), s.TableBytesPerDay)})
		consider(Trigger{"shard_qps", scope, s.QPS, l.ShardQPS, until(s.QPS, l.ShardQPS, 0)})
		p99 := float64(s.WriteP99.Microseconds()) / 1000
		consider(Trigger{"write_p99_ms", scope, p99, float64(l.WriteP99.Microseconds()) / 1000, until(p99, float64(l.WriteP99.Microseconds())/1000, 0)})
	}
	growth := map[string]float64{}
	for i, s := range in.Shards {
		growth[in.Routes.Target(router.Shard(i)).Datasource] += s.BytesPerDay
	}
	for name, ds := range in.Datasources {
		if ds.Capacity <= 0 {
			continue
		}
		pct := 100 * float64(ds.Used) / float64(ds.Capacity)
		consider(Trigger{"disk_percent", "datasource " + name, math.Round(pct*100) / 100, l.DiskPercent,
			until(pct, l.DiskPercent, 100*growth[name]/float64(ds.Capacity))})
	}
	out := make([]Trigger, 0, len(worst))
	for _, t := range worst {
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b Trigger) int {
		return cmp.Or(cmp.Compare(a.In, b.In), cmp.Compare(a.Name, b.Name))
	})
	return out
}

// Proposal is the next layout and what it takes to get there.
type Proposal struct {
	// Kind is "split" (every database halves: the seed's 8 x 128 -> 16 x 64
	// -> 32 x 32 path, the moving halves on new servers), "hot" (only the
	// shards over a load line move to the least loaded server) or "none".
	Kind   string
	Why    string
	Routes router.Document
	Moves  *MovePlan
}

// hotShare: when at most this share of the shards is over a load line and
// no capacity line is near, moving those shards beats splitting everything.
const hotShare = 0.05

// horizon: a capacity line crossed within this time asks for the change
// now. A split of the seed's fleet copies for 8 to 9 days before checksums
// and read ramps, and new servers take weeks to arrive: two months.
const horizon = 60 * 24 * time.Hour

// Propose picks the next layout from the triggers.
func Propose(in Inputs, triggers []Trigger) (*Proposal, error) {
	if in.Rate <= 0 || in.Parallel <= 0 {
		return nil, fmt.Errorf("planner: the migration rate and parallelism must be positive")
	}
	diskSoon, tableSoon, loadFired := false, "", false
	for _, t := range triggers {
		switch t.Name {
		case "disk_percent":
			diskSoon = diskSoon || t.In <= horizon
		case "table_rows", "table_bytes":
			if t.In <= horizon && tableSoon == "" {
				tableSoon = t.Scope
			}
		default:
			loadFired = loadFired || t.In == 0
		}
	}
	// A shard is the unit of placement: no layout shrinks one shard's
	// table. Only moving old history out (the cold tier) does.
	tableNote := ""
	if tableSoon != "" {
		tableNote = "; " + tableSoon + "'s table reaches the table line: no layout change shrinks a shard's table, archive its old history (cold tier) instead"
	}
	sizes := map[router.Shard]TableSize{}
	for i, s := range in.Shards {
		sizes[router.Shard(i)] = TableSize{Rows: s.Rows, Bytes: s.Bytes}
	}
	var hot []router.Shard
	for i, s := range in.Shards {
		if s.QPS > in.Limits.ShardQPS || s.WriteP99 > in.Limits.WriteP99 {
			hot = append(hot, router.Shard(i))
		}
	}
	var doc router.Document
	var p Proposal
	switch have := len(in.Routes.Datasources()); {
	case in.MinDatasources > have:
		d := in.Routes.Document()
		for len(d.Datasources) < in.MinDatasources {
			var err error
			if d, err = Split(d); err != nil {
				return nil, err
			}
		}
		doc, p.Kind = d, "split"
		p.Why = fmt.Sprintf("asked for at least %d servers (%d now): the seed's path, every database halved per step, %d servers", in.MinDatasources, have, len(d.Datasources)) + tableNote
	case diskSoon || (loadFired && float64(len(hot)) > hotShare*router.NumShards):
		d, err := Split(in.Routes.Document())
		if err != nil {
			return nil, err
		}
		doc, p.Kind = d, "split"
		p.Why = "a disk line is crossed within " + days(horizon) + " or the load is over the line on many shards: halve every database onto new servers" + tableNote
	case loadFired:
		doc, p.Kind = moveHot(in, hot), "hot"
		p.Why = fmt.Sprintf("%d shard(s) over a load line and no disk line near: move them to the least loaded server", len(hot)) + tableNote
	default:
		why := "no layout change is needed within " + days(horizon) + tableNote
		return &Proposal{Kind: "none", Why: why, Routes: in.Routes.Document()}, nil
	}
	to, err := router.NewSnapshot(doc)
	if err != nil {
		return nil, fmt.Errorf("planner: the proposed layout is invalid: %w", err)
	}
	p.Routes, p.Moves = doc, MovesWithSizes(in.Routes, to, sizes, in.Rate, in.Parallel)
	return &p, nil
}

// Split halves every database of doc: the lower half of its shards stays,
// the upper half moves to a new database on a new server (one new server per
// existing one, named after it, whose address the DBA fills in). 8 x 128 on
// two servers becomes 16 x 64 on four, as in docs/design.md §2.
func Split(doc router.Document) (router.Document, error) {
	snap, err := router.NewSnapshot(doc)
	if err != nil {
		return doc, err
	}
	type dbKey struct{ ds, db string }
	shards := map[dbKey][]int{}
	var order []dbKey
	for sh := range router.NumShards {
		t := snap.Target(router.Shard(sh))
		k := dbKey{t.Datasource, t.Database}
		if _, ok := shards[k]; !ok {
			order = append(order, k)
		}
		shards[k] = append(shards[k], sh)
	}
	for _, k := range order {
		if len(shards[k]) < 2 {
			return doc, fmt.Errorf("planner: database %s/%s holds one shard; it cannot be split further (1024 databases is the end of the path)", k.ds, k.db)
		}
	}
	next := 0
	for _, k := range order {
		if n, ok := strings.CutPrefix(k.db, "im_"); ok {
			if i, err := strconv.Atoi(n); err == nil && i >= next {
				next = i + 1
			}
		}
	}
	twin := map[string]string{}
	taken := map[string]bool{}
	for _, ds := range doc.Datasources {
		taken[ds.Name] = true
	}
	out := router.Document{Version: doc.Version, DefaultDatasource: doc.DefaultDatasource, Datasources: append([]router.Datasource(nil), doc.Datasources...)}
	for _, ds := range doc.Datasources {
		name := freeName(ds.Name, taken)
		twin[ds.Name] = name
		host, port, ok := strings.Cut(ds.Addr, ":")
		if !ok {
			port = "3306"
		}
		out.Datasources = append(out.Datasources, router.Datasource{Name: name, Addr: "NEW-" + host + ":" + port, User: ds.User,
			PasswordEnv: ds.PasswordEnv, PasswordFile: ds.PasswordFile, TLS: ds.TLS})
	}
	tables := map[int]int{}
	for sh := range router.NumShards {
		tables[sh] = snap.Target(router.Shard(sh)).Table
	}
	for _, k := range order {
		list := shards[k]
		half := len(list) / 2
		newDB := "im_" + strconv.Itoa(next)
		next++
		for i, sh := range list {
			ds, db := k.ds, k.db
			if i >= half {
				ds, db = twin[k.ds], newDB
			}
			idx := tables[sh]
			out.Shards = appendRange(out.Shards, router.ShardRange{From: sh, To: sh, Datasource: ds, Database: db, Table: &idx}, sh == idx)
		}
	}
	return out, nil
}

// freeName names the new twin of server base: base_b, or the next free
// letter after a split of a split (ds0_b -> ds0_c).
func freeName(base string, taken map[string]bool) string {
	root := base
	if i := strings.LastIndex(base, "_"); i > 0 && len(base)-i == 2 {
		root = base[:i]
	}
	for c := 'b'; ; c++ {
		name := root + "_" + string(c)
		if c > 'z' {
			name = root + "_" + strconv.Itoa(int(c-'a'))
		}
		if !taken[name] {
			taken[name] = true
			return name
		}
	}
}

// appendRange adds a one-shard range, merged into the previous range when
// it continues it (consecutive shard, same place, and both either one table
// per shard, which leaves Table unset, or the same shared table).
func appendRange(rs []router.ShardRange, r router.ShardRange, ownTable bool) []router.ShardRange {
	if ownTable {
		r.Table = nil
	}
	if n := len(rs); n > 0 {
		last := &rs[n-1]
		sameTable := (last.Table == nil && r.Table == nil) || (last.Table != nil && r.Table != nil && *last.Table == *r.Table)
		if last.To+1 == r.From && last.Datasource == r.Datasource && last.Database == r.Database && sameTable {
			last.To = r.To
			return rs
		}
	}
	return append(rs, r)
}

// moveHot moves each hot shard to the server with the least QPS, in the
// database of the same name there.
func moveHot(in Inputs, hot []router.Shard) router.Document {
	doc := in.Routes.Document()
	load := map[string]float64{}
	for _, ds := range doc.Datasources {
		load[ds.Name] = 0
	}
	for i, s := range in.Shards {
		load[in.Routes.Target(router.Shard(i)).Datasource] += s.QPS
	}
	dest := map[router.Shard]string{}
	for _, sh := range hot {
		from := in.Routes.Target(sh).Datasource
		best := ""
		for name, q := range load {
			if name != from && (best == "" || q < load[best] || (q == load[best] && name < best)) {
				best = name
			}
		}
		if best == "" {
			continue // one server: nowhere to move to; the split is the answer
		}
		dest[sh] = best
		load[best] += in.Shards[sh].QPS
		load[from] -= in.Shards[sh].QPS
	}
	var out []router.ShardRange
	for sh := range router.NumShards {
		t := in.Routes.Target(router.Shard(sh))
		ds := t.Datasource
		if d, ok := dest[router.Shard(sh)]; ok {
			ds = d
		}
		idx := t.Table
		out = appendRange(out, router.ShardRange{From: sh, To: sh, Datasource: ds, Database: t.Database, Table: &idx}, sh == idx)
	}
	doc.Shards = out
	return doc
}
