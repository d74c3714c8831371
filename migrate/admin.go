package migrate

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

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
	store  *routecfg.JobStore
	routes *routecfg.Store
}

// NewAdmin returns the admin of a cluster's migrations.
func NewAdmin(cli *clientv3.Client, cluster string) *Admin {
	return &Admin{cli: cli, store: routecfg.NewJobStore(cli, cluster), routes: routecfg.NewStore(cli, cluster)}
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
	var jobs []routecfg.Job
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
		jobs = append(jobs, newJob(doc, at, sh, routecfg.Endpoint{Datasource: datasource, Database: db}, nil,
			Commands{Rate: rate, Auto: auto, Group: group, Parallel: parallel}, now))
	}
	return a.createJobs(ctx, jobs, byShard)
}

// jobsByShard reads every job record, by shard.
func (a *Admin) jobsByShard(ctx context.Context) (map[int]routecfg.Job, error) {
	jobs, _, err := a.store.List(ctx)
	if err != nil {
		return nil, err
	}
	byShard := make(map[int]routecfg.Job, len(jobs))
	for _, j := range jobs {
		byShard[j.Shard] = j
	}
	return byShard, nil
}

// newJob is the record of a new job moving shard sh from at, where doc
// puts it, to to (in toTable, nil: the same physical table names), with
// the commands c (a job of a group starts queued).
func newJob(doc router.Document, at router.Target, sh int, to routecfg.Endpoint, toTable *TablePlacement, c Commands, now time.Time) routecfg.Job {
	p := jobProgress{Commands: c}
	p.State.Table = rangeTable(doc, sh)
	p.State.ToTable = toTable
	p.State.Status.Lag = -1
	step := StepPrepare
	if c.Group != "" {
		step = StepQueued
	}
	return routecfg.Job{
		ID:    fmt.Sprintf("s%04d-%s", sh, now.Format("20060102T150405.000")),
		Shard: sh, Step: step,
		From:     routecfg.Endpoint{Datasource: at.Datasource, Database: at.Database},
		To:       to,
		Progress: encodeProgress(p),
	}
}

// createJobs stores checked new jobs, replacing the finished job records
// of their shards (byShard); it returns the shards it created jobs for.
func (a *Admin) createJobs(ctx context.Context, jobs []routecfg.Job, byShard map[int]routecfg.Job) ([]int, error) {
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
			if errors.Is(err, routecfg.ErrJobExists) {
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
		if errors.Is(err, routecfg.ErrJobNotFound) {
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
			c.ReadPercent = int(rate)
		default:
			return inputErr("unknown migration command %q (PAUSE, RESUME, NEXT, ROLLBACK, CANCEL, RATE r, READ PERCENT p, PURGE)", verb)
		}
		job.Progress = encodeProgress(p)
		_, err = a.store.Update(ctx, job)
		if errors.Is(err, routecfg.ErrJobConflict) && attempt < 10 {
			continue // the runner wrote meanwhile: read again
		}
		return err
	}
}

// StatusColumns are the columns of SHOW MIGRATIONS and `convoy migrate
// status`.
var StatusColumns = append([]string{"shard", "job", "from", "to", "step", "rows", "rows_per_sec", "eta",
	"apply_lag", "dualwrite_failures", "dualwrite_backlog", "checksum", "switch", "runner", "last_error", "updated", "read_share"}, RampColumns...)

// readShare describes the read ramp: the share of conversations read from
// the target, and whether the proxies honour it now (lag under the bound).
func readShare(step string, percent int, lag float64) string {
	switch {
	case step == StepSwitched || step == StepDone:
		return "100% (switched)"
	case percent == 0:
		return ""
	case step != StepReady:
		return fmt.Sprintf("%d%% (inactive at %s)", percent, step)
	case lag < 0 || lag >= RampMaxLag.Seconds():
		return fmt.Sprintf("%d%% (on the source: apply lag over %s)", percent, RampMaxLag)
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
	ramps, err := readRampTotals(ctx, a.cli, a.store.Cluster())
	if err != nil {
		return nil, nil, err
	}
	var rows [][]string
	for _, j := range jobs {
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
		runner, _, _ := routecfg.RunnerOf(ctx, a.cli, a.store.Cluster(), j.Shard)
		rows = append(rows, append([]string{
			router.Shard(j.Shard).String(), j.ID,
			j.From.Datasource + "." + j.From.Database, j.To.Datasource + "." + j.To.Database,
			step, rowsText, rps, eta, lagText, failures, backlog, s.Checksum, s.Switch, runner, j.LastError,
			j.UpdatedAt.UTC().Format(time.RFC3339), readShare(j.Step, p.Commands.ReadPercent, s.Lag),
		}, ramps.cells(j.Shard)...))
	}
	return StatusColumns, rows, nil
}
