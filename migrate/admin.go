package migrate

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/convoy-im/convoy/coord"
	"github.com/convoy-im/convoy/migrate/inproxy"
	"github.com/convoy-im/convoy/routecfg"
	"github.com/convoy-im/convoy/router"
)

// InputError is a migration command refused because of what it asked
// (unknown datasource, shard already there, a job exists, a command the
// job's step does not take). Callers show it to the person as is;
// InvalidInput lets the proxy map it to a MySQL error without importing
// this package.
type InputError struct{ Msg string }

func (e *InputError) Error() string { return e.Msg }

// InvalidInput marks the error as the client's.
func (e *InputError) InvalidInput() bool { return true }

func inputErr(format string, args ...any) error {
	return &InputError{Msg: fmt.Sprintf(format, args...)}
}

// Admin writes migration job records and commands for the directives and
// the CLI; the runners act on them. It needs etcd only, so it works in any
// process.
type Admin struct {
	cli    *clientv3.Client
	store  *coord.JobStore
	routes *routecfg.Store
}

// NewAdmin returns the admin of a cluster's migrations.
func NewAdmin(cli *clientv3.Client, cluster string) *Admin {
	return &Admin{cli: cli, store: coord.NewJobStore(cli, cluster), routes: routecfg.NewStore(cli, cluster)}
}

// Start creates one job per shard of from..to, moving it to datasource
// (database: "" keeps each shard's database name). rate is rows/s (0: the
// runner's default, < 0 unlimited); parallel > 0 makes the shards one group
// of which at most parallel run prepare, backfill and verify at once; auto
// switches without NEXT. Every shard is checked before any job is created.
// It returns the shards it created jobs for.
func (a *Admin) Start(ctx context.Context, from, to int, datasource, database string, rate float64, parallel int, auto bool) ([]int, error) {
	if from < 0 || to >= router.NumShards || from > to {
		return nil, inputErr("shards %d..%d: shards are 0..%d, the first not after the last", from, to, router.NumShards-1)
	}
	doc, err := a.routes.Get(ctx)
	if err != nil {
		return nil, err
	}
	snap, err := router.NewSnapshot(doc)
	if err != nil {
		return nil, err
	}
	if _, ok := snap.Datasource(datasource); !ok {
		return nil, inputErr("unknown datasource %q: add it to the route table first (convoy routes apply); SHOW DATASOURCES lists them", datasource)
	}
	byShard, err := a.jobsByShard(ctx)
	if err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	group := ""
	if parallel > 0 && to > from {
		group = fmt.Sprintf("shards %d-%d at %s", from, to, now.Format(time.RFC3339))
	}
	var jobs []coord.Job
	for sh := from; sh <= to; sh++ {
		at := snap.Target(router.Shard(sh))
		db := database
		if db == "" {
			db = at.Database
		}
		if at.Datasource == datasource && at.Database == db {
			return nil, inputErr("shard %d is already on %s.%s", sh, datasource, db)
		}
		if j, ok := byShard[sh]; ok && j.Step != StepDone {
			return nil, inputErr("shard %d already has a migration job (%s, step %s): ROLLBACK it or let it finish", sh, j.ID, j.Step)
		}
		jobs = append(jobs, newJob(doc, at, sh, coord.Endpoint{Datasource: datasource, Database: db}, nil,
			Commands{Rate: rate, Auto: auto, Group: group, Parallel: parallel}, now))
	}
	return a.createJobs(ctx, jobs, byShard)
}

// jobsByShard reads every job record, by shard.
func (a *Admin) jobsByShard(ctx context.Context) (map[int]coord.Job, error) {
	jobs, _, err := a.store.List(ctx)
	if err != nil {
		return nil, err
	}
	byShard := make(map[int]coord.Job, len(jobs))
	for _, j := range jobs {
		byShard[j.Shard] = j
	}
	return byShard, nil
}

// newJob is the record of a new job moving shard sh from at, where doc
// puts it, to to (in toTable, nil: the same physical table names), with
// the commands c (a job of a group starts queued).
func newJob(doc router.Document, at router.Target, sh int, to coord.Endpoint, toTable *TablePlacement, c Commands, now time.Time) coord.Job {
	p := jobProgress{Commands: c}
	p.State.Table = rangeTable(doc, sh)
	p.State.ToTable = toTable
	p.State.Status.Lag = -1
	step := StepPrepare
	if c.Group != "" {
		step = StepQueued
	}
	return coord.Job{
		ID:    fmt.Sprintf("s%04d-%s", sh, now.Format("20060102T150405.000")),
		Shard: sh, Step: step,
		From:     coord.Endpoint{Datasource: at.Datasource, Database: at.Database},
		To:       to,
		Progress: encodeProgress(p),
	}
}

// createJobs stores checked new jobs, replacing the finished job records
// of their shards (byShard); it returns the shards it created jobs for.
func (a *Admin) createJobs(ctx context.Context, jobs []coord.Job, byShard map[int]coord.Job) ([]int, error) {
	var created []int
	for _, j := range jobs {
		if old, ok := byShard[j.Shard]; ok {
			// A finished job's record is history; a new migration of the
			// shard replaces it.
			if err := a.store.Delete(ctx, old); err != nil {
				return created, fmt.Errorf("replace the finished job of shard %d: %w", j.Shard, err)
			}
		}
		if _, err := a.store.Create(ctx, j); err != nil {
			if errors.Is(err, coord.ErrJobExists) {
				return created, inputErr("shard %d already has a migration job (created concurrently)", j.Shard)
			}
			return created, err
		}
		created = append(created, j.Shard)
	}
	return created, nil
}

// rangeTable is the shared table index of the range holding shard (nil:
// the shard has tables of its own).
func rangeTable(doc router.Document, shard int) *int {
	for _, r := range doc.Shards {
		if r.From <= shard && shard <= r.To && r.Table != nil {
			idx := *r.Table
			return &idx
		}
	}
	return nil
}

// The verbs of Command.
const (
	VerbPause    = "PAUSE"
	VerbResume   = "RESUME"
	VerbNext     = "NEXT"
	VerbRollback = "ROLLBACK"
	VerbCancel   = "CANCEL"
	VerbRate     = "RATE"
	VerbPurge    = "PURGE"
	VerbRead     = "READ"
)

// Command records a DBA command for the shard's job: PAUSE, RESUME, NEXT,
// ROLLBACK, CANCEL (= ROLLBACK), RATE (rate rows/s, < 0 unlimited) or, once
// the job is done, PURGE (delete the shard's rows from the source).
func (a *Admin) Command(ctx context.Context, shard int, verb string, rate float64) error {
	if shard < 0 || shard >= router.NumShards {
		return inputErr("shard %d is not a shard number 0..%d", shard, router.NumShards-1)
	}
	verb = strings.ToUpper(verb)
	for attempt := 0; ; attempt++ {
		job, err := a.store.Get(ctx, shard)
		if errors.Is(err, coord.ErrJobNotFound) {
			return inputErr("shard %d has no migration job (SHOW MIGRATIONS lists them)", shard)
		}
		if err != nil {
			return err
		}
		p, err := decodeProgress(job)
		if err != nil {
			return err
		}
		c := &p.Commands
		if job.Step == StepDone && verb != VerbPurge && verb != VerbRate {
			return inputErr("the migration of shard %d is done (its rollback window ended); MIGRATE SHARD moves it again, PURGE removes its rows from the source", shard)
		}
		switch verb {
		case VerbPurge:
			if job.Step != StepDone {
				return inputErr("the job of shard %d is at step %s; PURGE removes the source's rows once the job is done", shard, job.Step)
			}
			c.Purge = true
		case VerbPause:
			if c.ReadPercent > 0 && job.Step == StepReady {
				// The dual-write's ACKs wait for the apply (inproxy's
				// applywait.go): paused, every write of the share would
				// wait out its deadline, and the reads would see a stale
				// target.
				return inputErr("the target of shard %d serves %d%% of its reads, and only its binlog apply keeps it current; set READ PERCENT 0 before PAUSE", shard, c.ReadPercent)
			}
			c.Paused = true
		case VerbResume:
			c.Paused = false
			c.Resume++
		case VerbNext:
			switch job.Step {
			case StepVerify, StepReady, StepSwitched:
			default:
				return inputErr("the job of shard %d is at step %s; NEXT acts in verify (repair), ready (switch) and switched (cleanup)", shard, job.Step)
			}
			c.Next++
		case VerbRollback, VerbCancel:
			c.Rollback = true
		case VerbRate:
			c.Rate = rate
		case VerbRead:
			// Reads may move only to a verified target the apply keeps
			// current: after the switch the routes send them there anyway.
			if job.Step != StepReady && rate > 0 {
				return inputErr("the job of shard %d is at step %s; READ PERCENT moves reads while it is ready (verified, the apply keeping the target current)", shard, job.Step)
			}
			if rate < 0 || rate > 100 {
				return inputErr("READ PERCENT %g is outside 0..100", rate)
			}
			if c.Paused && rate > 0 {
				return inputErr("the job of shard %d is paused: its binlog apply does not keep the target current; RESUME before READ PERCENT", shard)
			}
			c.ReadPercent = int(rate)
		default:
			return inputErr("unknown migration command %q (PAUSE, RESUME, NEXT, ROLLBACK, CANCEL, RATE r, READ PERCENT p, PURGE)", verb)
		}
		job.Progress = encodeProgress(p)
		_, err = a.store.Update(ctx, job)
		if errors.Is(err, coord.ErrJobConflict) && attempt < 10 {
			continue // the runner wrote meanwhile: read again
		}
		return err
	}
}

// StatusColumns are the columns of SHOW MIGRATIONS and `convoy migrate
// status`.
// state says in one line where a job is, what it waits for and what went
// wrong last; the other columns are the figures behind it.
var StatusColumns = append([]string{"shard", "job", "from", "to", "step", "state", "rows", "rows_per_sec", "eta",
	"apply_lag", "dualwrite_failures", "dualwrite_backlog", "checksum", "switch", "runner", "last_error", "updated", "read_share"}, inproxy.RampColumns...)

// stateLine is a job's state column: where it is and what it waits for, in
// the words of the README's step table.
func stateLine(j coord.Job, p jobProgress) string {
	st, c, s := p.State, p.Commands, p.State.Status
	lag := func() string {
		if s.Lag < 0 {
			return "apply lag unknown"
		}
		return fmt.Sprintf("apply %ss behind", strconv.FormatFloat(s.Lag, 'f', -1, 64))
	}
	if j.Intent == IntentRollback || c.Rollback {
		if j.Step == StepSwitched {
			return "rolling back: switching the shard back to the source"
		}
		return "rolling back: waiting for the proxies to stop reading the target, then deleting the job's rows there"
	}
	if c.Paused && j.Intent == "" && j.Step != StepDone {
		return "paused: copy and forward apply stopped; RESUME goes on"
	}
	switch j.Step {
	case StepQueued:
		return fmt.Sprintf("waiting for a slot: at most %d jobs of group %s copy at once", c.Parallel, c.Group)
	case StepPrepare:
		if st.Refused {
			return "refused by the pre-checks (last_error says what to fix); RESUME checks again"
		}
		return "checking both servers, creating the target's tables and the storage fence"
	case StepBackfill:
		if st.Backfill.Phase == PhaseCopying || st.Backfill.Phase == "" {
			out := fmt.Sprintf("copying: %d of about %d rows", s.Rows, s.Estimate)
			if s.RowsPerSec > 0 {
				out += fmt.Sprintf(" at %.0f rows/s", s.RowsPerSec)
			}
			if s.ETA > 0 {
				out += fmt.Sprintf(", about %s left", (time.Duration(s.ETA) * time.Second).String())
			}
			if s.Throttle != "" {
				out += "; throttled: " + s.Throttle
			}
			return out + "; the binlog apply starts after the copy"
		}
		return "copied; replaying the source's binlog until caught up (" + lag() + ")"
	case StepVerify:
		if strings.HasPrefix(s.Checksum, "differs") {
			return "verify found differing segments (last_error names them); NEXT re-copies them"
		}
		return "comparing checksums (" + lag() + ")"
	case StepReady:
		if j.Intent == IntentSwitch {
			return "switching: every proxy holds the shard's writes"
		}
		out := "verified and current (" + lag() + ")"
		if c.ReadPercent > 0 {
			out += fmt.Sprintf(", reads of %d%% of the conversations on the target", min(c.ReadPercent, s.RampPercent))
			if s.RampPercent < c.ReadPercent {
				out += fmt.Sprintf(" (READ PERCENT %d being confirmed: read_share says what it waits for)", c.ReadPercent)
			}
		}
		if strings.HasPrefix(s.Switch, "aborted") {
			out += "; the last switch aborted (switch says why)"
		}
		if c.Auto {
			return out + "; AUTO switches by itself"
		}
		return out + "; waiting for NEXT to switch"
	case StepSwitched:
		if j.Intent == IntentCleanup {
			return "ending the rollback window: stopping reverse replication"
		}
		out := fmt.Sprintf("switched: the target is authoritative, the source fenced; reverse replication %s; ROLLBACK possible until %s (NEXT ends the window)",
			strings.TrimPrefix(lag(), "apply "), st.CleanupAt.UTC().Format(time.RFC3339))
		if s.Breaches > 0 {
			out = fmt.Sprintf("ALARM: %d write(s) of the shard reached the source past its fence, the last: %s; ", s.Breaches, s.Breach) + out
		}
		return out
	case StepDone:
		switch {
		case st.Purged:
			return "done; the source's rows are purged (its fence stays)"
		case c.Purge:
			return "done; purging the source's rows at the job's rate"
		}
		return "done; the source's rows stay, read-only, until PURGE"
	}
	return ""
}

// readShare describes the read ramp: the share of conversations read from
// the target, and whether the proxies honour it now (lag under the bound).
func readShare(step string, percent int, s Status) string {
	switch {
	case step == StepSwitched || step == StepDone:
		return "100% (switched)"
	case percent == 0:
		return ""
	case step != StepReady:
		return fmt.Sprintf("%d%% (inactive at %s)", percent, step)
	case s.Lag < 0 || s.Lag >= inproxy.RampMaxLag.Seconds():
		return fmt.Sprintf("%d%% (on the source: apply lag over %s)", percent, inproxy.RampMaxLag)
	case s.RampPercent < percent:
		wait := s.RampWait
		if wait == "" {
			wait = "the proxies to mirror it and the apply to pass them"
		}
		return fmt.Sprintf("%d%% (confirming, reads at %d%%: waiting for %s)", percent, s.RampPercent, wait)
	}
	return fmt.Sprintf("%d%%", percent)
}

// Status returns StatusColumns and one row per job, values as text (""
// for unknown).
func (a *Admin) Status(ctx context.Context) ([]string, [][]string, error) {
	jobs, _, err := a.store.List(ctx)
	if err != nil {
		return nil, nil, err
	}
	ramps, err := inproxy.ReadRampTotals(ctx, a.cli, a.store.Cluster())
	if err != nil {
		return nil, nil, err
	}
	names := a.runnerNames(ctx)
	var rows [][]string
	for _, j := range jobs {
		rows = append(rows, a.statusRow(ctx, j, ramps, names))
	}
	return StatusColumns, rows, nil
}

// runnerNames maps the ids of the runners that are proxies (convoy serve
// runs jobs under its proxy id) to their registered addresses, as the
// switch names proxies; a `convoy migrate` worker has none and keeps its
// id.
func (a *Admin) runnerNames(ctx context.Context) map[string]string {
	names := map[string]string{}
	if ps, err := coord.ListProxies(ctx, a.cli, a.store.Cluster()); err == nil {
		for _, p := range ps {
			names[p.ID] = p.Name()
		}
	}
	return names
}

// statusRow is one job's SHOW MIGRATIONS row; names is runnerNames.
func (a *Admin) statusRow(ctx context.Context, j coord.Job, ramps inproxy.RampTotals, names map[string]string) []string {
	p, _ := decodeProgress(j)
	s := p.State.Status
	step := j.Step
	switch {
	case p.State.Purged:
		step += " (source purged)"
	case purgePending(p.Commands, p.State):
		step += " -> purge"
	case j.Intent != "":
		step += " -> " + j.Intent
	case p.Commands.Rollback:
		step += " -> rollback"
	case p.State.Refused:
		step += " (refused)"
	case p.Commands.Paused:
		step += " (paused)"
	}
	rowsText := ""
	if s.Rows > 0 || s.Estimate > 0 {
		rowsText = fmt.Sprintf("%d/%d", s.Rows, s.Estimate)
	}
	eta, lagText, rps := "", "", ""
	if s.ETA > 0 {
		eta = (time.Duration(s.ETA) * time.Second).String()
	}
	if s.Lag >= 0 && (j.Step == StepBackfill || j.Step == StepVerify || j.Step == StepReady || j.Step == StepSwitched) {
		lagText = strconv.FormatFloat(s.Lag, 'f', -1, 64) + "s"
	}
	if s.RowsPerSec > 0 {
		rps = strconv.FormatFloat(s.RowsPerSec, 'f', 0, 64)
	}
	// Failures: keys queued since the job began (replayed or waiting);
	// the backlog ends at the switch (the fence makes it moot).
	failures, backlog := "", ""
	if s.Replayed+s.Backlog > 0 || j.Step == StepBackfill || j.Step == StepVerify || j.Step == StepReady {
		failures, backlog = strconv.FormatInt(s.Replayed+s.Backlog, 10), strconv.FormatInt(s.Backlog, 10)
	}
	runner, _, _ := coord.RunnerOf(ctx, a.cli, a.store.Cluster(), j.Shard)
	if name, ok := names[runner]; ok {
		runner = name
	}
	return append([]string{
		router.Shard(j.Shard).String(), j.ID,
		j.From.Datasource + "." + j.From.Database, j.To.Datasource + "." + j.To.Database,
		step, stateLine(j, p), rowsText, rps, eta, lagText, failures, backlog, s.Checksum, s.Switch, runner, j.LastError,
		j.UpdatedAt.UTC().Format(time.RFC3339), readShare(j.Step, p.Commands.ReadPercent, s),
	}, ramps.Cells(j.Shard)...)
}

// DetailColumns are SHOW MIGRATION n's columns: one row per field.
var DetailColumns = []string{"field", "value"}

// Detail returns one job in detail (SHOW MIGRATION n, `convoy migrate
// status N`): its SHOW MIGRATIONS columns, one row each, then what the
// summary leaves out: the intent, the commands in force, each table's
// checksum, the switch and rollback window times.
func (a *Admin) Detail(ctx context.Context, shard int) ([]string, [][]string, error) {
	j, err := a.store.Get(ctx, shard)
	if errors.Is(err, coord.ErrJobNotFound) {
		return nil, nil, &InputError{Msg: fmt.Sprintf("no migration job for shard %d", shard)}
	}
	if err != nil {
		return nil, nil, err
	}
	ramps, err := inproxy.ReadRampTotals(ctx, a.cli, a.store.Cluster())
	if err != nil {
		return nil, nil, err
	}
	var rows [][]string
	for i, v := range a.statusRow(ctx, j, ramps, a.runnerNames(ctx)) {
		rows = append(rows, []string{StatusColumns[i], v})
	}
	p, _ := decodeProgress(j)
	c, st := p.Commands, p.State
	add := func(field, value string) { rows = append(rows, []string{field, value}) }
	add("intent", j.Intent)
	rate := "default"
	switch {
	case c.Rate < 0:
		rate = "unlimited"
	case c.Rate > 0:
		rate = strconv.FormatFloat(c.Rate, 'f', -1, 64) + " rows/s"
	}
	add("rate", rate)
	add("auto", strconv.FormatBool(c.Auto))
	add("paused", strconv.FormatBool(c.Paused))
	add("read_percent", strconv.Itoa(c.ReadPercent))
	if c.Group != "" {
		add("group", fmt.Sprintf("%s (parallel %d)", c.Group, c.Parallel))
	}
	add("backfill_phase", string(st.Backfill.Phase))
	keys := slices.Sorted(maps.Keys(st.Checksum))
	for _, k := range keys {
		cs := st.Checksum[k]
		v := fmt.Sprintf("%d segments, %d source rows, %d target rows (each segment counted at its own moment)", cs.Segments, cs.SourceRows, cs.TargetRows)
		switch {
		case !cs.Done:
			v = "running: " + v
		case len(cs.Differing) > 0:
			v = fmt.Sprintf("%d segments differ: %s", len(cs.Differing), v)
		case len(cs.SampleDiffs) > 0:
			v = fmt.Sprintf("sampled rows differ (%s): %s", strings.Join(cs.SampleDiffs, "; "), v)
		default:
			v = "equal: " + v
		}
		add("checksum "+k, v)
	}
	if !st.SwitchedAt.IsZero() {
		add("switched_at", st.SwitchedAt.UTC().Format(time.RFC3339))
		add("rollback_window_ends", st.CleanupAt.UTC().Format(time.RFC3339))
	}
	add("created", j.CreatedAt.UTC().Format(time.RFC3339))
	return DetailColumns, rows, nil
}
