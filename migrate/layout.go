package migrate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/convoy-im/convoy/coord"
	"github.com/convoy-im/convoy/migrate/internal/jobrec"
	"github.com/convoy-im/convoy/planner"
	"github.com/convoy-im/convoy/routecfg"
	"github.com/convoy-im/convoy/router"
)

// LayoutChange is a new route document checked against the live one for
// what migration jobs can carry out: every shard it places elsewhere
// becomes one job.
type LayoutChange struct {
	Live, Next *router.Snapshot
	// NewDatasources are defined in Next and not in Live: apply adds them
	// to the live document before it starts the jobs.
	NewDatasources []router.Datasource
	// Notes are differences the jobs leave alone.
	Notes []string
}

// CheckLayout validates next (router.NewSnapshot's rules) and refuses what
// the jobs cannot express: a datasource name at another address (a job
// moves between named datasources; the live document has one address per
// name), a datasource the moves leave dropped from next (the live
// document needs it until its shards have moved), and a shard placed in
// another table of the same database (a job tells its sides apart by
// datasource and database).
func CheckLayout(live, next router.Document) (*LayoutChange, error) {
	ls, err := router.NewSnapshot(live)
	if err != nil {
		return nil, fmt.Errorf("migrate: the live route document: %w", err)
	}
	ns, err := router.NewSnapshot(next)
	if err != nil {
		return nil, inputErr("the new route document is refused: %v", err)
	}
	c := &LayoutChange{Live: ls, Next: ns}
	for _, ds := range ns.Datasources() {
		old, ok := ls.Datasource(ds.Name)
		switch {
		case !ok:
			c.NewDatasources = append(c.NewDatasources, ds)
		case old.Addr != ds.Addr:
			return nil, inputErr("datasource %s is at %s in the live routes and at %s in the new document: a migration moves shards between named datasources, so give the new server a new name",
				ds.Name, old.Addr, ds.Addr)
		case old != ds:
			c.Notes = append(c.Notes, fmt.Sprintf("datasource %s has other settings (user, password source or TLS) in the new document: the jobs use the live ones; change them with convoy routes apply", ds.Name))
		}
	}
	if ls.DefaultDatasource() != ns.DefaultDatasource() {
		c.Notes = append(c.Notes, fmt.Sprintf("the default datasource (unsharded tables) is %s live and %s in the new document: migration jobs move shards only; change it with convoy routes apply",
			ls.DefaultDatasource(), ns.DefaultDatasource()))
	}
	dropped := map[string][]int{}
	var sameDB []int
	for sh := range router.Shard(router.NumShards) {
		from, to := ls.Target(sh), ns.Target(sh)
		if from == to {
			continue
		}
		if _, ok := ns.Datasource(from.Datasource); !ok {
			dropped[from.Datasource] = append(dropped[from.Datasource], int(sh))
		}
		if from.Datasource == to.Datasource && from.Database == to.Database {
			sameDB = append(sameDB, int(sh))
		}
	}
	var msgs []string
	for _, name := range sortedKeys(dropped) {
		msgs = append(msgs, fmt.Sprintf("the new document drops datasource %s, which shards %s move from: keep it in the document until they have moved, then remove it with convoy routes apply",
			name, ShardList(dropped[name])))
	}
	if len(sameDB) > 0 {
		sh := router.Shard(sameDB[0])
		msgs = append(msgs, fmt.Sprintf("shards %s move to another table of the same database (shard %d: %s -> %s): a migration moves a shard to another database; move them in two steps",
			ShardList(sameDB), sh, ls.Physical("conv_msg", sh), ns.Physical("conv_msg", sh)))
	}
	if len(msgs) > 0 {
		return nil, inputErr("the new route document is refused: %s", strings.Join(msgs, "; "))
	}
	return c, nil
}

// jobTarget is where the job puts its shard.
func jobTarget(j coord.Job) router.Target {
	p, _ := decodeProgress(j)
	_, to := p.State.Tables()
	return router.Target{Datasource: j.To.Datasource, Database: j.To.Database, Table: jobrec.TableIndex(j.Shard, to)}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// ShardList writes sorted shard numbers as ranges: "0030-0032, 0040".
func ShardList(shards []int) string {
	var b strings.Builder
	for i := 0; i < len(shards); {
		j := i
		for j+1 < len(shards) && shards[j+1] == shards[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		b.WriteString(router.Shard(shards[i]).String())
		if j > i {
			b.WriteString("-" + router.Shard(shards[j]).String())
		}
		i = j + 1
	}
	return b.String()
}

// PlanLayout checks next against the live routes and plans its shard
// moves (planner.PlanMoves: sizes from stats of the servers the shards leave,
// copies at rate rows/s per shard, parallel at a time).
func (a *Admin) PlanLayout(ctx context.Context, next router.Document, stats planner.TableStats, rate float64, parallel int) (*LayoutChange, *planner.MovePlan, error) {
	live, err := a.routes.Get(ctx)
	if err != nil {
		return nil, nil, err
	}
	c, err := CheckLayout(live, next)
	if err != nil {
		return nil, nil, err
	}
	p, err := planner.PlanMoves(ctx, c.Live, c.Next, stats, rate, parallel)
	return c, p, err
}

// LayoutApplied is what ApplyLayout did.
type LayoutApplied struct {
	Change *LayoutChange
	// Added: the datasources added to the live routes (Version: the
	// document version that holds them; 0 when none was added).
	Added   []router.Datasource
	Version int64
	// Started: shards whose jobs were created. Running: shards whose job,
	// created earlier, moves them where the new document places them.
	// Placed: how many shards the live routes already place alike.
	Started, Running []int
	Placed           int
}

// ApplyLayout makes the live layout next's: it adds the datasources next
// introduces to the live routes (as `convoy routes apply` would store
// them), then creates one job per shard next places elsewhere, moving it
// to next's datasource, database and physical table (the commands rate, parallel (one
// group of all the jobs) and auto as MIGRATE SHARDS takes them). When
// every job has switched the live routes place every shard as next does.
// Running it again skips the shards already placed or with such a job;
// a shard whose unfinished job moves it anywhere else refuses the whole
// change before any job is created.
func (a *Admin) ApplyLayout(ctx context.Context, next router.Document, rate float64, parallel int, auto bool) (*LayoutApplied, error) {
	out := &LayoutApplied{}
	var live router.Document
	for attempt := 0; ; attempt++ {
		var err error
		if live, err = a.routes.Get(ctx); err != nil {
			return nil, err
		}
		if out.Change, err = CheckLayout(live, next); err != nil {
			return nil, err
		}
		if len(out.Change.NewDatasources) == 0 {
			break
		}
		for _, ds := range out.Change.NewDatasources {
			// The planner's documents name new servers NEW-host:port until
			// someone fills in the real address.
			if strings.HasPrefix(ds.Addr, "NEW-") {
				return nil, inputErr("datasource %s has the placeholder address %s: put the new server's address in the document first", ds.Name, ds.Addr)
			}
		}
		live.Datasources = append(live.Datasources, out.Change.NewDatasources...)
		v, err := a.routes.Apply(ctx, live)
		if errors.Is(err, routecfg.ErrVersionConflict) && attempt < 5 {
			continue // a switch flipped the routes meanwhile: read again
		}
		if err != nil {
			return nil, fmt.Errorf("migrate: add datasources to the live routes: %w", err)
		}
		out.Added, out.Version = out.Change.NewDatasources, v
	}
	// After an add the loop read the document again: live and snap are
	// the stored one, which the jobs' source ranges come from.
	snap := out.Change.Live
	byShard, err := a.jobsByShard(ctx)
	if err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	var moving []int
	var conflicts []string
	for sh := range router.Shard(router.NumShards) {
		at, want := snap.Target(sh), out.Change.Next.Target(sh)
		j, hasJob := byShard[int(sh)]
		hasJob = hasJob && j.Step != StepDone
		switch {
		case hasJob && jobTarget(j) != want:
			got := jobTarget(j)
			conflicts = append(conflicts, fmt.Sprintf("shard %d has migration job %s (step %s) to %s:%s.%s, not to %s:%s.%s",
				sh, j.ID, j.Step, got.Datasource, got.Database, router.PhysicalTableName("conv_msg", got.Table),
				want.Datasource, want.Database, router.PhysicalTableName("conv_msg", want.Table)))
		case at == want:
			out.Placed++
		case hasJob:
			out.Running = append(out.Running, int(sh))
		default:
			moving = append(moving, int(sh))
		}
	}
	if len(conflicts) > 0 {
		const most = 5
		more := ""
		if len(conflicts) > most {
			more = fmt.Sprintf(" (and %d more)", len(conflicts)-most)
			conflicts = conflicts[:most]
		}
		return out, inputErr("%s%s: ROLLBACK those jobs or let them finish, then apply again", strings.Join(conflicts, "; "), more)
	}
	group := ""
	if parallel > 0 && len(moving) > 1 {
		group = fmt.Sprintf("layout v%d at %s", next.Version, now.Format(time.RFC3339))
	}
	jobs := make([]coord.Job, 0, len(moving))
	for _, sh := range moving {
		at, want := snap.Target(router.Shard(sh)), out.Change.Next.Target(router.Shard(sh))
		var toTable *TablePlacement
		if want.Table != at.Table {
			// The new document regroups the shard's tables: the job
			// copies into, and routes to, the new document's table.
			toTable = &TablePlacement{Shared: rangeTable(next, sh)}
		}
		jobs = append(jobs, newJob(live, at, sh, coord.Endpoint{Datasource: want.Datasource, Database: want.Database}, toTable,
			Commands{Rate: rate, Auto: auto, Group: group, Parallel: parallel}, now))
	}
	out.Started, err = a.createJobs(ctx, jobs, byShard)
	return out, err
}
