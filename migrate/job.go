package migrate

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/convoy-im/convoy/binlog"
	"github.com/convoy-im/convoy/coord"
	"github.com/convoy-im/convoy/internal/ratelimit"
	"github.com/convoy-im/convoy/internal/sqlq"
	"github.com/convoy-im/convoy/migrate/inproxy"
	"github.com/convoy-im/convoy/migrate/internal/jobrec"
	"github.com/convoy-im/convoy/outbox"
	"github.com/convoy-im/convoy/router"
)

// The job state machine: one shard moving from (datasource, database) to
// (datasource, database), all five logical tables. coord.Job.Step is the
// last step reached, coord.Job.Intent what the runner is about to do
// (written before it acts), coord.Job.Progress a jobProgress: the DBA's
// commands and the runner's state. A runner that takes over reads the
// record and goes on from the step; an intent it finds says what may be
// half done, and the routes (the one truth about where the shard is) say
// whether a switch happened.
//
//	queued -> prepare -> backfill -> verify -> ready -(switch)-> switched -(cleanup)-> done
//
// ROLLBACK (or CANCEL) at any step before done: switch back if the routes
// moved, then remove the shard's rows the job wrote on the target (the
// target held none at prepare) and the job record.
//
// The steps and intents are named in package jobrec, with what each
// means: the proxies read them too.
const (
	StepQueued   = jobrec.StepQueued
	StepPrepare  = jobrec.StepPrepare
	StepBackfill = jobrec.StepBackfill
	StepVerify   = jobrec.StepVerify
	StepReady    = jobrec.StepReady
	StepSwitched = jobrec.StepSwitched
	StepDone     = jobrec.StepDone
)

// Intents, persisted before the runner acts on them (jobrec's).
const (
	IntentSwitch   = jobrec.IntentSwitch
	IntentCleanup  = jobrec.IntentCleanup
	IntentRollback = jobrec.IntentRollback
)

// The DBA's commands and the runner's status in the job record, and a
// shard's table placement: the proxies read them too (package jobrec).
type (
	Commands       = jobrec.Commands
	Status         = jobrec.Status
	TablePlacement = jobrec.TablePlacement
)

// jobState is the runner's persisted state.
type jobState struct {
	// Placement: Table and ToTable, where the shard's physical tables are
	// on each side (the proxies read them: jobrec.Progress).
	jobrec.Placement
	// Prepared: the target tables were checked empty of the shard, so a
	// rollback may delete the shard's rows there. Created lists the target
	// tables prepare created ("db.table"), which a rollback drops if empty.
	// Companions are the companion tables (router.CompanionTables) the
	// source database held at prepare, moved with the shard;
	// CompanionsChecked says prepare looked.
	Companions        []string                 `json:"companions,omitempty"`
	CompanionsChecked bool                     `json:"companions_checked,omitempty"`
	Prepared          bool                     `json:"prepared,omitempty"`
	Created           []string                 `json:"created,omitempty"`
	Refused           bool                     `json:"refused,omitempty"`
	Backfill          BackfillState            `json:"backfill"`
	Checksum          map[string]ChecksumState `json:"checksum,omitempty"`
	// ReverseFrom is the target's binlog position when the forward apply
	// stopped under the lock, saved before the flip: reverse replication
	// starts there.
	ReverseFrom binlog.Position `json:"reverse_from,omitempty"`
	// FencedAt is the source's fence marker of the switch, where the
	// breach watch starts (breach.go).
	FencedAt   binlog.Position `json:"fenced_at,omitempty"`
	SwitchedAt time.Time       `json:"switched_at,omitzero"`
	CleanupAt  time.Time       `json:"cleanup_at,omitzero"`
	Purged     bool            `json:"purged,omitempty"`
	PurgedUpTo purgePosition   `json:"purged_up_to,omitzero"`
	NextUsed   int             `json:"next_used,omitempty"`
	ResumeUsed int             `json:"resume_used,omitempty"`
	Status     Status          `json:"status"`
}

type jobProgress struct {
	Commands Commands `json:"commands"`
	State    jobState `json:"state"`
}

func decodeProgress(j coord.Job) (jobProgress, error) {
	var p jobProgress
	p.State.Status.Lag = -1
	err := jobrec.Unmarshal(j, &p)
	return p, err
}

func encodeProgress(p jobProgress) json.RawMessage {
	b, err := json.Marshal(p)
	if err != nil {
		panic(fmt.Sprintf("[BUG] migrate: job progress does not marshal: %v", err))
	}
	return b
}

// errJobGone: the record was deleted under the runner (a finished
// rollback, or a person): stop.
var errJobGone = errors.New("migrate: the job record is gone")

// endpoint is one side of a running job.
type endpoint struct {
	name string // datasource
	db   *sql.DB
	bl   binlog.Config
}

// jobRun runs one job for an elected runner.
type jobRun struct {
	m     *Manager
	r     *coord.Runner
	log   *zap.Logger
	shard router.Shard

	notify <-chan coord.Job

	// mu guards the record as last written or seen: job (Revision, Step,
	// Intent, LastError), cmds (from the record) and st (the runner's).
	mu   sync.Mutex
	job  coord.Job
	cmds Commands
	st   jobState

	src, dst endpoint
	moves    []TableMove
	mirror   *inproxy.Mirror // replays the proxies' dual-write failures

	bf        *Backfill
	bfTask    task
	thr       *throttle // the copy's throttle on harm, while backfilling
	thrTask   task
	rateMu    sync.Mutex
	rate      float64 // the copy rate set now (throttled included)
	rev       *Applier
	revTask   task
	watchTask task // the breach watch of the old side, while switched

	statusAt   time.Time
	lastStatus Status
}

// task is one background run of a job (the backfill, the reverse stream),
// owned by the job's loop, which starts it, starts it again restartDelay
// after it failed, and stops it.
type task struct {
	name   string
	cancel context.CancelFunc
	done   chan struct{}
	ended  time.Time // when the last run returned; read after done closed
}

// running reports whether a run goes on; a finished one is forgotten.
func (t *task) running() bool {
	if t.done == nil {
		return false
	}
	select {
	case <-t.done:
		t.done = nil
		return false
	default:
		return true
	}
}

// start waits out the restart delay, then runs f in the background; a
// failure (not a stop) is logged and recorded as the job's last error.
func (t *task) start(ctx context.Context, j *jobRun, f func(context.Context) error) error {
	if d := time.Until(t.ended.Add(restartDelay)); d > 0 {
		if err := j.backoff(ctx, d); err != nil {
			return err
		}
	}
	tctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	t.cancel, t.done = cancel, done
	go func() {
		defer close(done)
		err := f(tctx)
		t.ended = time.Now()
		if err != nil && tctx.Err() == nil {
			j.log.Warn(t.name+" stopped; restarting", zap.Error(err))
			_ = j.save(tctx, func(rec *coord.Job, _ *jobState) { rec.LastError = t.name + ": " + err.Error() })
		}
	}()
	return nil
}

// stop ends the run and waits until it has.
func (t *task) stop() {
	if t.done == nil {
		return
	}
	t.cancel()
	<-t.done
	t.done = nil
}

// restartDelay spaces restarts of a failed copy, apply or step, so a target
// that is down is retried, not hammered.
const restartDelay = 2 * time.Second

// statusEvery paces the status refreshes in the job record;
// rampStatusEvery while reads are ramped, so that the proxies learn of an
// apply lag over RampMaxLag within about a second (RampFresh bounds how
// long they trust a status).
const (
	statusEvery     = 2 * time.Second
	rampStatusEvery = 500 * time.Millisecond
)

// statusPeriod is the status refresh period now.
func (j *jobRun) statusPeriod(step string) time.Duration {
	if step == StepReady && j.poll().ReadPercent > 0 {
		return rampStatusEvery
	}
	return statusEvery
}

func newJobRun(m *Manager, r *coord.Runner, job coord.Job, notify <-chan coord.Job) (*jobRun, error) {
	p, err := decodeProgress(job)
	if err != nil {
		return nil, err
	}
	return &jobRun{m: m, r: r, shard: router.Shard(job.Shard), notify: notify, job: job, cmds: p.Commands, st: p.State,
		log:    m.log.With(zap.Int("shard", job.Shard), zap.String("job", job.ID)),
		bfTask: task{name: "backfill"}, revTask: task{name: "reverse replication"}}, nil
}

// save applies edit to the runner's copy of the record and writes it,
// fenced by the election. A directive's write in between (a conflict) is
// merged: its commands are taken, the runner's fields kept.
func (j *jobRun) save(ctx context.Context, edit func(*coord.Job, *jobState)) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if edit != nil {
		edit(&j.job, &j.st)
	}
	for attempt := 0; ; attempt++ {
		rec := j.job
		rec.Progress = encodeProgress(jobProgress{Commands: j.cmds, State: j.st})
		saved, err := j.r.SaveJob(ctx, rec)
		if err == nil {
			j.job = saved
			return nil
		}
		if !errors.Is(err, coord.ErrJobConflict) || attempt == 5 {
			return err
		}
		fresh, gerr := j.r.Job(ctx)
		if errors.Is(gerr, coord.ErrJobNotFound) {
			return errJobGone
		}
		if gerr != nil {
			return gerr
		}
		p, derr := decodeProgress(fresh)
		if derr != nil {
			return derr
		}
		j.cmds, j.job.Revision = p.Commands, fresh.Revision
	}
}

// seen takes a record from the watch: newer commands, same runner state.
func (j *jobRun) seen(rec coord.Job) {
	p, err := decodeProgress(rec)
	if err != nil {
		return
	}
	j.mu.Lock()
	if rec.Revision > j.job.Revision {
		j.job.Revision, j.cmds = rec.Revision, p.Commands
	}
	j.mu.Unlock()
}

func (j *jobRun) snapshot() (coord.Job, Commands, jobState) {
	j.mu.Lock()
	defer j.mu.Unlock()
	st := j.st
	st.Checksum = cloneMap(j.st.Checksum)
	return j.job, j.cmds, st
}

func cloneMap[K comparable, V any](m map[K]V) map[K]V {
	if m == nil {
		return nil
	}
	out := make(map[K]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// poll takes a pending change of the record without waiting, for long
// steps that look at the commands between pieces of work.
func (j *jobRun) poll() Commands {
	select {
	case rec := <-j.notify:
		j.seen(rec)
	default:
	}
	_, cmds, _ := j.snapshot()
	return cmds
}

// wait returns after d, on a change of the record, or when ctx ends.
func (j *jobRun) wait(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case rec, ok := <-j.notify:
		if !ok {
			return errJobGone
		}
		j.seen(rec)
	case <-t.C:
	}
	return nil
}

// backoff waits d after a failure. Unlike wait, a change of the record
// ends it early only if the DBA's commands changed: the runner's own save
// of the failure comes back through the watch at once, and taking that
// for news made every retry immediate (a switch back blocked by a dead
// proxy's registration held the shard's writes again 150 ms after each
// abort).
func (j *jobRun) backoff(ctx context.Context, d time.Duration) error {
	_, before, _ := j.snapshot()
	deadline := time.Now().Add(d)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return nil
		}
		if err := j.wait(ctx, left); err != nil {
			return err
		}
		if _, now, _ := j.snapshot(); now != before {
			return nil
		}
	}
}

// run drives the job until it is done, rolled back (deleted), the runner
// loses its election, or ctx ends.
func (j *jobRun) run(ctx context.Context) error {
	defer j.bfTask.stop()
	defer j.thrTask.stop()
	defer j.revTask.stop()
	defer j.watchTask.stop()
	defer j.m.cfg.Metrics.forget(j.shard)
	for {
		err := j.open(ctx)
		if err == nil {
			break
		}
		// A datasource missing from the routes or unreachable: say so in
		// the record and try again, rather than churn the election.
		j.log.Warn("opening the sides of a migration", zap.Error(err))
		if serr := j.save(ctx, func(rec *coord.Job, _ *jobState) { rec.LastError = err.Error() }); errors.Is(serr, coord.ErrNotRunner) || errors.Is(serr, errJobGone) {
			return serr
		}
		if err := j.backoff(ctx, restartDelay); err != nil {
			return err
		}
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		job, cmds, st := j.snapshot()
		j.applyRate(cmds)
		if j.bf != nil && (job.Step != StepReady || cmds.Rollback || job.Intent == IntentRollback) {
			_ = j.bf.SetSoleWriter(ctx, false) // see the ready step
		}
		var err error
		switch {
		case job.Step == StepDone && !purgePending(cmds, st):
			return nil
		case job.Step == StepDone:
			err = j.purge(ctx)
		case cmds.Rollback || job.Intent == IntentRollback:
			err = j.rollback(ctx) // errJobGone once done
		case cmds.Paused && job.Intent == "":
			// PAUSE stops the copy and the forward apply; the reverse
			// stream of a switched job goes on, it is the rollback's
			// safety net.
			j.bfTask.stop()
			j.refreshStatus(ctx) // replays the dual-write queue too
			err = j.wait(ctx, statusEvery)
		default:
			err = j.step(ctx, job, cmds, st)
		}
		if err == nil {
			j.refreshStatus(ctx)
			continue
		}
		if errors.Is(err, coord.ErrNotRunner) || errors.Is(err, errJobGone) || ctx.Err() != nil {
			return err
		}
		j.log.Warn("migration step failed; retrying", zap.String("step", job.Step), zap.Error(err))
		j.m.cfg.Metrics.failed(job.Step)
		if serr := j.save(ctx, func(rec *coord.Job, _ *jobState) { rec.LastError = err.Error() }); serr != nil &&
			(errors.Is(serr, coord.ErrNotRunner) || errors.Is(serr, errJobGone)) {
			return serr
		}
		if err := j.backoff(ctx, restartDelay); err != nil {
			return err
		}
	}
}

// step does one piece of work of the job's current step and returns; run
// calls it again.
func (j *jobRun) step(ctx context.Context, job coord.Job, cmds Commands, st jobState) error {
	switch job.Step {
	case StepQueued:
		ok, err := j.m.slotFree(ctx, job, cmds)
		if err != nil {
			return err
		}
		if !ok {
			return j.wait(ctx, restartDelay)
		}
		return j.save(ctx, func(rec *coord.Job, _ *jobState) { rec.Step = StepPrepare })

	case StepPrepare:
		if st.Refused && cmds.Resume <= st.ResumeUsed {
			return j.wait(ctx, time.Minute)
		}
		err := j.prepare(ctx)
		if errors.Is(err, ErrPrecheck) {
			j.log.Warn("migration refused", zap.Error(err))
			return j.save(ctx, func(rec *coord.Job, s *jobState) {
				rec.LastError, s.Refused, s.ResumeUsed = err.Error(), true, cmds.Resume
			})
		}
		if err != nil {
			return err
		}
		return j.save(ctx, func(rec *coord.Job, s *jobState) {
			rec.Step, rec.LastError = StepBackfill, ""
			s.Refused, s.Prepared, s.ResumeUsed = false, true, cmds.Resume
		})

	case StepBackfill:
		if err := j.ensureBackfill(ctx); err != nil {
			return err
		}
		if p := j.bf.Progress(); p.Phase == PhaseCaughtUp {
			j.thrTask.stop() // the copy is over
			return j.save(ctx, func(rec *coord.Job, _ *jobState) { rec.Step, rec.LastError = StepVerify, "" })
		}
		return j.wait(ctx, statePollEvery)

	case StepVerify:
		if err := j.ensureBackfill(ctx); err != nil {
			return err
		}
		if p := j.bf.Progress(); !p.CaughtUp {
			return j.wait(ctx, statePollEvery)
		}
		return j.verify(ctx, cmds, st)

	case StepReady:
		if err := j.ensureBackfill(ctx); err != nil {
			return err
		}
		// Verified: no repair runs any more, the proxies' dual-write waits
		// for the apply and the queue's replay only confirms, so the apply
		// is the target's only writer and writes the binlog's images (a
		// third of the round trips a ramped write waits for). Before any
		// ramp is confirmed: see Applier.SetSoleWriter.
		if err := j.bf.SetSoleWriter(ctx, true); err != nil {
			return err
		}
		if job.Intent != IntentSwitch && cmds.ReadPercent != st.Status.RampPercent {
			return j.confirmRamp(ctx, cmds.ReadPercent)
		}
		if job.Intent != IntentSwitch {
			if !cmds.Auto && cmds.Next <= st.NextUsed {
				return j.wait(ctx, j.statusPeriod(job.Step))
			}
			if err := j.save(ctx, func(rec *coord.Job, s *jobState) { rec.Intent, s.NextUsed = IntentSwitch, cmds.Next }); err != nil {
				return err
			}
		}
		return j.switchForward(ctx)

	case StepSwitched:
		if job.Intent != IntentCleanup {
			if cmds.Next <= st.NextUsed && time.Now().Before(st.CleanupAt) {
				if err := j.ensureReverse(ctx); err != nil {
					return err
				}
				if err := j.ensureWatch(ctx); err != nil {
					return err
				}
				return j.wait(ctx, min(statusEvery, time.Until(st.CleanupAt)+time.Millisecond))
			}
			if err := j.save(ctx, func(rec *coord.Job, s *jobState) { rec.Intent, s.NextUsed = IntentCleanup, cmds.Next }); err != nil {
				return err
			}
		}
		// The reverse stream stops; the source's rows of the shard stay
		// in place until PURGE, and the source refuses their writes (its
		// fence is up since the switch: fence.go).
		j.revTask.stop()
		j.watchTask.stop()
		j.log.Info("migration done: reverse replication stopped; the source's rows of the shard stay, read-only, until PURGE")
		return j.save(ctx, func(rec *coord.Job, s *jobState) {
			rec.Step, rec.Intent, rec.LastError = StepDone, "", ""
			s.Status.Lag = -1
		})
	}
	return fmt.Errorf("migrate: [BUG] job %s at unknown step %q", job.ID, job.Step)
}

func appendNew(list, add []string) []string {
	for _, s := range add {
		if !slices.Contains(list, s) {
			list = append(list, s)
		}
	}
	return list
}

// open connects to both sides and lists the shard's tables.
func (j *jobRun) open(ctx context.Context) error {
	doc, err := j.m.routes.Get(ctx)
	if err != nil {
		return err
	}
	job, _, st := j.snapshot()
	find := func(name string) (router.Datasource, error) {
		for _, ds := range doc.Datasources {
			if ds.Name == name {
				return ds, nil
			}
		}
		return router.Datasource{}, fmt.Errorf("migrate: datasource %s of job %s is not in the route table", name, job.ID)
	}
	for _, side := range []struct {
		ep  *endpoint
		end coord.Endpoint
		dir string
	}{{&j.src, job.From, "forward"}, {&j.dst, job.To, "reverse"}} {
		ds, err := find(side.end.Datasource)
		if err != nil {
			return err
		}
		db, bl, err := j.m.pool(ctx, ds)
		if err != nil {
			return err
		}
		bl.ServerID = readerID(job.ID + "/" + side.dir)
		bl.Log = j.log.Named(side.dir)
		*side.ep = endpoint{name: ds.Name, db: db, bl: bl}
	}
	from, to := st.Tables()
	j.moves, err = ShardMoves(j.shard, j.src.db, router.Target{Database: job.From.Database, Table: jobrec.TableIndex(job.Shard, from)},
		j.dst.db, router.Target{Database: job.To.Database, Table: jobrec.TableIndex(job.Shard, to)})
	if err != nil {
		return err
	}
	tables := make([]inproxy.MirrorTable, 0, len(j.moves))
	for i, logical := range router.ShardedTables() { // ShardMoves' order
		tables = append(tables, inproxy.MirrorTable{Logical: logical, Source: j.moves[i].Source, Target: j.moves[i].Target})
	}
	j.addCompanions(st.Companions)
	j.mirror, err = inproxy.NewMirror(ctx, job.ID, int(j.shard), tables)
	return err
}

// addCompanions adds the moves of the companion tables (router's: the
// cold tier's per-database tables) the job carries: copied, replayed,
// checksummed and rolled back like the logical tables, never mirrored
// (the binlog apply brings them) and never made read-only or dropped (one
// table serves every shard of its database).
func (j *jobRun) addCompanions(names []string) {
	job, _, _ := j.snapshot()
	for _, name := range names {
		f := &ShardFilter{Column: router.CompanionKey, Shard: j.shard}
		j.moves = append(j.moves, TableMove{
			Source: Side{DB: j.src.db, Database: job.From.Database, Table: name},
			Target: Side{DB: j.dst.db, Database: job.To.Database, Table: name}, Filter: f})
	}
}

// isCompanion: m moves a companion table (shared by every shard of its
// database whatever the layout).
func isCompanion(m TableMove) bool { return slices.Contains(router.CompanionTables(), m.Source.Table) }

// companionsOn lists the companion tables the source database holds: the
// ones the archiver created there. A table created after prepare holds no
// row of this shard (the archiver skips a migrating shard, and the engine
// writes tombstones only for archived rows), so prepare decides once.
func companionsOn(ctx context.Context, db *sql.DB, database string) ([]string, error) {
	var out []string
	for _, name := range router.CompanionTables() {
		var n int
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?", database, name).Scan(&n); err != nil {
			return nil, fmt.Errorf("migrate: look for %s.%s: %w", database, name, err)
		}
		if n > 0 {
			out = append(out, name)
		}
	}
	return out, nil
}

// replay syncs the dual-write failures the proxies queued (until the
// switch: after it the target is authoritative and the queue is moot) and
// counts them into s.
func (j *jobRun) replay(ctx context.Context, step, intent string, s *Status) {
	if j.mirror == nil || intent != "" || (step != StepBackfill && step != StepVerify && step != StepReady) {
		return
	}
	// Drain what is queued (bounded: the status must go on), batch by
	// batch, until a batch comes back short or fails.
	for deadline := time.Now().Add(replayFor); ; {
		// Fenced by the election: see inproxy.Mirror.Replay.
		n, err := j.mirror.Replay(ctx, replayBatch, j.r.Elected)
		s.Replayed += int64(n)
		if errors.Is(err, coord.ErrNotRunner) {
			j.log.Warn("compensation replay stopped: this runner is no longer elected", zap.Error(err))
			return
		}
		if err != nil {
			j.log.Debug("compensation replay: the target still fails", zap.Error(err))
			break
		}
		if n < replayBatch || time.Now().After(deadline) {
			break
		}
	}
	if b, err := j.mirror.Backlog(ctx); err == nil {
		s.Backlog = b
	}
}

// replayBatch is one read of the queue; replayFor bounds one status
// refresh's replay.
const (
	replayBatch = 500
	replayFor   = 5 * time.Second
)

// dropQueue empties the job's compensation queue (after the switch's fence
// or a rollback: the binlog decides, the queued keys are moot).
func (j *jobRun) dropQueue(ctx context.Context) {
	if j.mirror == nil {
		return
	}
	if err := j.mirror.DropQueue(ctx); err != nil && mysqlErrno(err) != 1146 {
		j.log.Warn("emptying the dual-write compensation queue", zap.Error(err))
	}
}

// readerID is the replica server id of one binlog reader of a job: stable
// across restarts (a new runner's reader replaces the dead one's
// registration), distinct per job and direction, and far above the ids
// servers are usually given.
func readerID(name string) uint32 { return 1<<30 + crc32.ChecksumIEEE([]byte(name))%(1<<30) }

// prepare runs the pre-checks and creates the target tables (recorded in
// the state's Created).
func (j *jobRun) prepare(ctx context.Context) error {
	job, _, _ := j.snapshot()
	at, err := j.m.endpoint(ctx, job.Shard)
	if err != nil {
		return err
	}
	if at != job.From {
		return fmt.Errorf("%w: the routes put shard %d on %s.%s, not on %s.%s where the job moves it from; ROLLBACK this job and MIGRATE again",
			ErrPrecheck, job.Shard, at.Datasource, at.Database, job.From.Datasource, job.From.Database)
	}
	if err := checkServers(ctx, j.src.db, j.dst.db, j.src.name, j.dst.name, j.m.cfg.RollbackWindow); err != nil {
		return err
	}
	if _, _, st := j.snapshot(); !st.CompanionsChecked {
		// The outbox's applied markers may be written while the shard
		// moves (a delivery to it): their table must be on the list.
		if err := outbox.EnsureApplied(ctx, j.src.db, job.From.Database); err != nil {
			return err
		}
		names, err := companionsOn(ctx, j.src.db, job.From.Database)
		if err != nil {
			return err
		}
		if err := j.save(ctx, func(_ *coord.Job, s *jobState) { s.Companions, s.CompanionsChecked = names, true }); err != nil {
			return err
		}
		j.addCompanions(names)
	}
	for _, m := range j.moves {
		name := m.Target.String()
		// Intent first: a crash right after the CREATE still leaves the
		// table recorded as the job's.
		err := prepareTable(ctx, m, j.dst.name, func() error {
			return j.save(ctx, func(_ *coord.Job, s *jobState) { s.Created = appendNew(s.Created, []string{name}) })
		})
		if err != nil {
			return err
		}
	}
	// The storage fence (fence.go) is in place before the switch, so no
	// DDL runs under the lock: the tables and triggers on both sides, the
	// source writable (the routes put the shard there). The target is
	// left as it is (fenced only if the shard once moved away from it):
	// nothing routes the shard's writes there before the switch, which
	// lifts its fence.
	if err := ensureFenceTable(ctx, j.src.db, job.From.Database); err != nil {
		return err
	}
	if err := ensureFenceTable(ctx, j.dst.db, job.To.Database); err != nil {
		return err
	}
	for _, m := range j.moves {
		for _, s := range []Side{m.Source, m.Target} {
			if err := installFence(ctx, s, m.Filter); err != nil {
				return err
			}
		}
	}
	if err := j.unfence(ctx, j.src.db, job.From.Database); err != nil {
		return err
	}
	_, _, st := j.snapshot()
	j.log.Info("migration prepared", zap.Strings("created", st.Created))
	return nil
}

// ensureBackfill starts the copy-then-apply if it is not running (again
// restartDelay after a failure).
func (j *jobRun) ensureBackfill(ctx context.Context) error {
	if j.bfTask.running() {
		return nil
	}
	job, cmds, st := j.snapshot()
	if j.bf == nil {
		bf, err := NewBackfill(ctx, BackfillConfig{Job: job.ID, Shard: j.shard, Tables: j.moves, Binlog: j.src.bl,
			Rate: j.m.rate(cmds.Rate), ChunkRows: j.m.cfg.ChunkRows, SnapshotMaxAge: j.m.cfg.SnapshotMaxAge})
		if err != nil {
			return err
		}
		j.bf = bf
		j.applyRate(cmds)
	}
	if err := j.ensureThrottle(ctx); err != nil {
		return err
	}
	return j.bfTask.start(ctx, j, func(ctx context.Context) error {
		_, err := j.bf.Run(ctx, st.Backfill, func(s BackfillState) error {
			return j.save(ctx, func(_ *coord.Job, js *jobState) { js.Backfill = s })
		})
		return err
	})
}

// applyRate sets the copy's rate: the job's (or the manager's default),
// times the throttle's factor while a side is hurt. An unlimited copy that
// must slow down starts from the rate it was making.
func (j *jobRun) applyRate(cmds Commands) {
	if j.bf == nil {
		return
	}
	rate := j.m.rate(cmds.Rate)
	if j.thr != nil {
		if f, _ := j.thr.state(); f < 1 {
			if rate <= 0 {
				rate = max(j.bf.Progress().RowsPerSec, DefaultRate)
			}
			rate *= f
		}
	}
	j.rateMu.Lock()
	defer j.rateMu.Unlock()
	if rate != j.rate {
		j.rate = rate
		j.bf.SetRate(rate)
	}
}

// ensureThrottle runs the copy's throttle on harm (throttle.go) while the
// job backfills, unless the manager disabled it.
func (j *jobRun) ensureThrottle(ctx context.Context) error {
	limit := j.m.cfg.ThrottleWriteP99
	if limit < 0 || j.thrTask.running() {
		return nil
	}
	if limit == 0 {
		limit = DefaultThrottleWriteP99
	}
	job, _, _ := j.snapshot()
	if j.thr == nil {
		for _, s := range []struct {
			db       *sql.DB
			database string
		}{{j.src.db, job.From.Database}, {j.dst.db, job.To.Database}} {
			if _, err := s.db.ExecContext(ctx, fmt.Sprintf(heartbeatDDL, sqlq.Ident(s.database)+"."+sqlq.Ident(HeartbeatTable))); err != nil {
				return fmt.Errorf("migrate: create %s.%s: %w", s.database, HeartbeatTable, err)
			}
		}
		j.thr = newThrottle(limit, heartbeat(j.src.db, job.From.Database, job.ID, "source"), heartbeat(j.dst.db, job.To.Database, job.ID, "target"))
	}
	return j.thrTask.start(ctx, j, func(ctx context.Context) error {
		j.thr.run(ctx, func() {
			_, cmds, _ := j.snapshot()
			j.applyRate(cmds)
			f, why := j.thr.state()
			j.log.Info("copy throttle", zap.Float64("factor", f), zap.String("reason", why))
		})
		return nil
	})
}

// rampConfirmWait bounds one attempt to confirm a read ramp's share: a
// proxy that has not announced it by then is cut off from etcd, or stuck;
// the step goes around and tries again.
const rampConfirmWait = 30 * time.Second

// confirmRamp moves the confirmed read share (Status.RampPercent, what the
// proxies read from the target) to p, the DBA's READ PERCENT (inproxy's
// ramp.go): at once when p is lower, else once every serving proxy
// announced it mirrors p and the apply passed the source's position noted
// right after.
func (j *jobRun) confirmRamp(ctx context.Context, p int) error {
	_, _, st := j.snapshot()
	set := func(confirmed int, wait string) error {
		return j.save(ctx, func(_ *coord.Job, s *jobState) { s.Status.RampPercent, s.Status.RampWait = confirmed, wait })
	}
	if p < st.Status.RampPercent {
		return set(p, "")
	}
	wctx, cancel := context.WithTimeout(ctx, rampConfirmWait)
	defer cancel()
	missing, err := j.unmirrored(wctx, p)
	for err == nil && len(missing) > 0 {
		if serr := j.save(ctx, func(_ *coord.Job, s *jobState) {
			s.Status.RampWait = "proxies not mirroring the share yet: " + strings.Join(missing, ", ")
		}); serr != nil {
			return serr
		}
		if err = sleep(wctx, 100*time.Millisecond); err == nil {
			missing, err = j.unmirrored(wctx, p)
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return j.wait(ctx, time.Second) // the step tries again; RampWait says why
	}
	pos, err := binlog.CurrentPosition(wctx, j.src.db)
	if err != nil {
		return err
	}
	if err := waitReached(wctx, pos, j.bf.Reached); err != nil {
		_ = j.save(ctx, func(_ *coord.Job, s *jobState) {
			s.Status.RampWait = "the apply has not reached the source's position yet"
		})
		return j.wait(ctx, time.Second)
	}
	// A proxy that registered meanwhile must mirror too.
	if missing, err := j.unmirrored(wctx, p); err != nil || len(missing) > 0 {
		return err
	}
	j.log.Info("read ramp confirmed: every proxy mirrors the share and the apply passed it", zap.Int("percent", p))
	return set(p, "")
}

// unmirrored lists the serving proxies that have not announced mirroring
// at least p percent of the shard (coord.RampingKey's value), by name.
func (j *jobRun) unmirrored(ctx context.Context, p int) ([]string, error) {
	cli, cluster := j.m.cfg.Client, j.m.cfg.Cluster
	proxies, err := coord.ListProxies(ctx, cli, cluster)
	if err != nil {
		return nil, err
	}
	prefix := coord.RampingPrefix(cluster, int(j.shard))
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	share := map[string]int{}
	for _, kv := range resp.Kvs {
		n, _ := strconv.Atoi(string(kv.Value))
		share[strings.TrimPrefix(string(kv.Key), prefix)] = n
	}
	var missing []string
	for _, px := range proxies {
		if share[px.ID] < p {
			missing = append(missing, px.Name())
		}
	}
	return missing, nil
}

// ensureReverse starts the reverse replication (target -> source) of a
// switched job if it is not running.
func (j *jobRun) ensureReverse(ctx context.Context) error {
	if j.revTask.running() {
		return nil
	}
	job, _, st := j.snapshot()
	if st.ReverseFrom == "" {
		return fmt.Errorf("migrate: [BUG] job %s is switched without a reverse replication start position", job.ID)
	}
	if j.rev == nil {
		var back []TableMove
		for _, m := range j.moves {
			back = append(back, TableMove{Source: m.Target, Target: m.Source, Filter: m.Filter})
		}
		a, err := NewApplier(ctx, ApplierConfig{Job: job.ID + "-rev", Shard: j.shard, Tables: back, Binlog: j.dst.bl,
			CheckpointDatabase: job.From.Database})
		if err != nil {
			return err
		}
		j.rev = a
	}
	return j.revTask.start(ctx, j, func(ctx context.Context) error { return j.rev.Run(ctx, st.ReverseFrom) })
}

// ensureWatch starts the breach watch of the old side (breach.go) of a
// switched job if it is not running.
func (j *jobRun) ensureWatch(ctx context.Context) error {
	if j.watchTask.running() {
		return nil
	}
	job, _, st := j.snapshot()
	from := st.FencedAt
	if from == "" {
		// Switched before fence markers were recorded: from now on.
		pos, err := binlog.CurrentPosition(ctx, j.src.db)
		if err != nil {
			return err
		}
		from = pos
	}
	w := newBreachWatch(j.shard, j.moves, job.From.Database, job.ID+"-rev")
	cfg := j.src.bl
	cfg.ServerID = readerID(job.ID + "/watch")
	cfg.Log = j.log.Named("watch")
	return j.watchTask.start(ctx, j, func(ctx context.Context) error {
		return w.run(ctx, cfg, from, func(what string) {
			j.m.cfg.Metrics.breach(j.shard)
			j.log.Error("ALARM: a write of the moved shard reached the old side past its storage fence (a session with the migration's variable, a trigger dropped by hand?): it is on no side Convoy reads, and a ROLLBACK or PURGE would erase it",
				zap.String("write", what))
			_ = j.save(ctx, func(_ *coord.Job, s *jobState) {
				s.Status.Breaches++
				s.Status.Breach = what
			})
		})
	})
}

// verify checksums every table (resumably) and, on NEXT, repairs the
// differing segments.
func (j *jobRun) verify(ctx context.Context, cmds Commands, st jobState) error {
	if st.Checksum == nil {
		st.Checksum = map[string]ChecksumState{}
	}
	var differing []string
	for _, m := range j.moves {
		if c := j.poll(); c.Rollback || c.Paused {
			return nil // run acts on it; the checksums done so far are saved
		}
		key := m.Source.String()
		// One quick recheck, then the settled one: it is exact, and its
		// locks last milliseconds, less than the default rechecks' 1.4 s
		// per segment that a busy shard keeps differing.
		c, err := NewChecksummer(ctx, m.Source, m.Target, m.Filter, WithRecheck(1, 100*time.Millisecond), WithSettledRecheck(j.settle))
		if err != nil {
			return err
		}
		cs := st.Checksum[key]
		if !cs.Done {
			cs, err = c.Run(ctx, cs, func(s ChecksumState) error {
				return j.save(ctx, func(_ *coord.Job, js *jobState) {
					js.setChecksum(key, s)
					js.Status.Checksum = fmt.Sprintf("running: %s", key)
				})
			})
			if err != nil {
				return err
			}
		}
		if len(cs.Differing) > 0 && cmds.Next > st.NextUsed {
			cs, err = j.repair(ctx, c, m, cs)
			if err != nil {
				return err
			}
		}
		if len(cs.SampleDiffs) > 0 && cmds.Next > st.NextUsed {
			// Equal segments with differing rows: the digest missed what
			// the column compare saw. Compare the table again from scratch
			// (its segments, then a new sample).
			cs = ChecksumState{}
			st.Checksum[key] = cs
			return j.save(ctx, func(_ *coord.Job, js *jobState) {
				js.setChecksum(key, cs)
				js.NextUsed = cmds.Next
			})
		}
		if cs.Equal() && !cs.Sampled {
			// Seed 001's sampled comparison: rows drawn at random, column
			// by column, beside the aggregate checksums.
			res, err := c.Sample(ctx, verifySample)
			if err != nil {
				return err
			}
			cs.Sampled = true
			for _, d := range res.Diffs {
				cs.SampleDiffs = append(cs.SampleDiffs, d.String())
			}
			j.log.Info("sampled rows compared", zap.String("table", key), zap.Int("rows", res.Compared), zap.Int("differing", len(res.Diffs)))
			if err := j.save(ctx, func(_ *coord.Job, js *jobState) { js.setChecksum(key, cs) }); err != nil {
				return err
			}
		}
		st.Checksum[key] = cs
		for _, seg := range cs.Differing {
			differing = append(differing, m.Target.String()+" "+seg.String())
		}
		for _, d := range cs.SampleDiffs {
			differing = append(differing, m.Target.String()+" sampled row "+d)
		}
	}
	var rows int64
	for _, cs := range st.Checksum {
		rows += cs.SourceRows
	}
	if len(differing) > 0 {
		msg := fmt.Sprintf("verify: %d segment(s) or sampled row(s) differ after rechecks: %s; NEXT re-copies the segments (a table with differing sampled rows is compared again)", len(differing), strings.Join(differing, ", "))
		if err := j.save(ctx, func(rec *coord.Job, js *jobState) {
			js.Checksum, js.NextUsed = st.Checksum, cmds.Next
			js.Status.Checksum = fmt.Sprintf("differs: %d segment(s)", len(differing))
			rec.LastError = msg
		}); err != nil {
			return err
		}
		return j.wait(ctx, time.Minute)
	}
	j.log.Info("verified: every segment equal", zap.Int64("rows", rows))
	return j.save(ctx, func(rec *coord.Job, js *jobState) {
		rec.Step, rec.LastError = StepReady, ""
		js.Checksum, js.NextUsed = st.Checksum, max(js.NextUsed, cmds.Next)
		js.Status.Checksum = fmt.Sprintf("equal (%d rows)", rows)
	})
}

// setChecksum records a table's checksum state.
func (s *jobState) setChecksum(key string, cs ChecksumState) {
	if s.Checksum == nil {
		s.Checksum = map[string]ChecksumState{}
	}
	s.Checksum[key] = cs
}

// verifySample is how many rows of each table verify compares column by
// column once its segments are equal.
const verifySample = 1000

// settleTimeout bounds how long a settled recheck holds its source locks
// waiting for the apply.
const settleTimeout = 5 * time.Second

// settle waits until the forward apply has applied the source up to pos
// (the checksummer's settled recheck).
func (j *jobRun) settle(ctx context.Context, pos binlog.Position) error {
	ctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	return waitReached(ctx, pos, j.bf.Reached)
}

// repair re-copies each differing segment and compares it again; the ones
// now equal leave the list.
func (j *jobRun) repair(ctx context.Context, c *Checksummer, m TableMove, cs ChecksumState) (ChecksumState, error) {
	var still []Segment
	for _, seg := range cs.Differing {
		res, err := c.RepairSegment(ctx, seg)
		if err != nil {
			return cs, err
		}
		cmp, err := c.CompareSegment(ctx, seg)
		if err != nil {
			return cs, err
		}
		j.log.Info("repaired segment", zap.String("table", m.Target.String()), zap.String("segment", seg.String()),
			zap.Int64("written", res.Written), zap.Int64("deleted", res.Deleted), zap.Bool("equal", cmp.Equal))
		if !cmp.Equal {
			still = append(still, seg)
		}
	}
	cs.Differing = still
	return cs, nil
}

// purgePending: a done job was asked to remove the source's rows and has
// not yet.
func purgePending(c Commands, st jobState) bool { return c.Purge && !st.Purged }

// purge deletes the shard's rows from the source's tables of a done job,
// throttled at the job's rate, and drops the tables that held that shard
// alone. The routes must put the shard on the target.
func (j *jobRun) purge(ctx context.Context) error {
	job, cmds, st := j.snapshot()
	at, err := j.m.endpoint(ctx, job.Shard)
	if err != nil {
		return err
	}
	if at != job.To {
		return fmt.Errorf("migrate: purge of job %s: the routes put shard %d on %s.%s, not on the target; not deleting the source's rows",
			job.ID, job.Shard, at.Datasource, at.Database)
	}
	lim := ratelimit.New(j.m.rate(cmds.Rate))
	// From where an earlier run got to: the tables before its table are
	// done, that one goes on after its key.
	moves, after := j.moves, Key(nil)
	if i := slices.IndexFunc(moves, func(m TableMove) bool { return m.Source.String() == st.PurgedUpTo.Table }); i >= 0 {
		moves, after = moves[i:], st.PurgedUpTo.After
	}
	for _, m := range moves {
		p := &shardPurge{side: m.Source, filter: m.Filter, lim: lim, drop: st.Table == nil && !isCompanion(m),
			saved: func(k Key) error {
				return j.save(ctx, func(_ *coord.Job, s *jobState) { s.PurgedUpTo = purgePosition{Table: m.Source.String(), After: k} })
			}}
		if err := p.run(ctx, after); err != nil {
			return err
		}
		after = nil
	}
	j.log.Info("the source's rows of the shard are removed")
	return j.save(ctx, func(rec *coord.Job, s *jobState) {
		rec.LastError, s.Purged, s.PurgedUpTo = "", true, purgePosition{}
	})
}

// rollback returns the shard to the source (switching back if needed),
// removes what the job wrote on the target, and deletes the record.
func (j *jobRun) rollback(ctx context.Context) error {
	job, cmds, st := j.snapshot()
	if job.Intent != IntentRollback {
		if err := j.save(ctx, func(rec *coord.Job, _ *jobState) { rec.Intent = IntentRollback }); err != nil {
			return err
		}
	}
	at, err := j.m.endpoint(ctx, job.Shard)
	if err != nil {
		return err
	}
	switch {
	case at == job.To:
		if err := j.switchBack(ctx); err != nil {
			return err
		}
	case at != job.From:
		return fmt.Errorf("migrate: rollback of job %s: the routes put shard %d on %s.%s, neither side of the job; fix the routes by hand",
			job.ID, job.Shard, at.Datasource, at.Database)
	}
	j.bfTask.stop()
	j.revTask.stop()
	j.dropQueue(ctx)
	if st.Prepared {
		// The shard stays on the source: its writes go there (a switch
		// that died between its fence and its flip may have left it
		// fenced). The target keeps refusing them.
		if err := j.unfence(ctx, j.src.db, job.From.Database); err != nil {
			return err
		}
	}
	// Reads ramped to the target would find rows missing, then tables
	// gone: no row goes before every proxy has stopped (inproxy's ramp.go).
	if err := j.waitRampsDropped(ctx); err != nil {
		return err
	}
	lim := ratelimit.New(j.m.rate(cmds.Rate))
	for _, m := range j.moves {
		// Before prepare checked the target empty of the shard, its rows
		// there (if any) are not the job's: only tables the job created
		// are touched.
		created := slices.Contains(st.Created, m.Target.String())
		if !st.Prepared && !created {
			continue
		}
		if err := deleteShard(ctx, m.Target, m.Filter, lim, created); err != nil {
			return err
		}
	}
	j.deleteCheckpoint(ctx, j.dst.db, job.To.Database, job.ID)
	j.deleteCheckpoint(ctx, j.src.db, job.From.Database, job.ID+"-rev")
	j.mu.Lock()
	rec := j.job
	j.mu.Unlock()
	if err := j.r.DeleteJob(ctx, rec); err != nil {
		return err
	}
	j.log.Info("migration rolled back; job removed")
	return errJobGone
}

// rampsDropWait bounds one wait for the proxies to stop ramping reads: a
// proxy that keeps its key longer is cut off from etcd (its key goes with
// its lease), and the rollback step is retried.
const rampsDropWait = 30 * time.Second

// waitRampsDropped waits until no proxy announces a read ramp of the
// shard (coord.RampingKey): each withdrew its key, or its registration
// expired.
func (j *jobRun) waitRampsDropped(ctx context.Context) error {
	prefix := coord.RampingPrefix(j.m.cfg.Cluster, int(j.shard))
	deadline := time.Now().Add(rampsDropWait)
	for {
		resp, err := j.m.cfg.Client.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err == nil && len(resp.Kvs) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			var left []string
			if err == nil {
				for _, kv := range resp.Kvs {
					left = append(left, strings.TrimPrefix(string(kv.Key), prefix))
				}
			}
			return fmt.Errorf("migrate: rollback waits for proxies to stop reading the shard on the target (ramping: %v, %v)", left, err)
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// deleteCheckpoint removes an applier's checkpoint row (best effort: a
// leftover row only matters to a job of the same id).
func (j *jobRun) deleteCheckpoint(ctx context.Context, db *sql.DB, database, job string) {
	_, err := db.ExecContext(ctx, "DELETE FROM "+sqlq.Ident(database)+"."+sqlq.Ident(CheckpointTable)+" WHERE job = ? AND shard = ?", job, uint64(j.shard))
	if err != nil && mysqlErrno(err) != 1146 {
		j.log.Warn("removing an apply checkpoint row", zap.String("database", database), zap.Error(err))
	}
}

// refreshStatus writes the live progress into the record, at most every
// statusEvery and only when it changed.
func (j *jobRun) refreshStatus(ctx context.Context) {
	j.mu.Lock()
	s, step, intent := j.st.Status, j.job.Step, j.job.Intent
	j.mu.Unlock()
	if time.Since(j.statusAt) < j.statusPeriod(step) {
		return
	}
	j.replay(ctx, step, intent, &s)
	s.Lag = -1
	s.Throttle = ""
	if j.thr != nil && j.thrTask.done != nil {
		_, s.Throttle = j.thr.state()
	}
	if j.bf != nil && j.bfTask.done != nil {
		p := j.bf.Progress()
		s.Rows, s.Estimate, s.RowsPerSec, s.ETA = p.Rows, p.Estimate, p.RowsPerSec, p.ETA.Seconds()
		if p.Phase != PhaseCopying {
			s.Lag = lagSeconds(p.Apply.Lag)
		}
	}
	if j.rev != nil && j.revTask.done != nil {
		_, _ = j.rev.CaughtUp(ctx) // a sample of the reverse stream's lag
		s.Lag = lagSeconds(j.rev.Stats().Lag)
	}
	j.statusAt = time.Now()
	j.m.cfg.Metrics.observe(j.shard, step, s)
	if c := j.poll(); step == StepReady && intent == "" && c.ReadPercent > 0 && !c.Rollback {
		s.Beat = j.lastStatus.Beat + 1
	}
	if s == j.lastStatus {
		return
	}
	if err := j.save(ctx, func(_ *coord.Job, js *jobState) { js.Status = s }); err == nil {
		j.lastStatus = s
	}
}

// lagSeconds is an applier's lag for the status: seconds in tenths (the
// read ramp compares it with a 1 s bound), -1 unknown.
func lagSeconds(d time.Duration) float64 {
	if d < 0 {
		return -1
	}
	return d.Round(100 * time.Millisecond).Seconds()
}
