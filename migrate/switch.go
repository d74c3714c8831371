package migrate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/convoy-im/convoy/binlog"
	"github.com/convoy-im/convoy/coord"
	"github.com/convoy-im/convoy/router"
)

// The switch of a job, in both directions, under the per-shard migration
// lock (coord.Runner.Switch): while every live proxy holds the shard's
// writes, a fence marker is written on the side that was authoritative,
// the stream replaying that side is waited for until it passed the marker
// (proof that every change before the lock is applied, not "the lag looks
// small") and stopped, and the routes are flipped in the same etcd
// transaction that marks the lock switched.

// fence fences the shard on the side that was authoritative (database on
// db: setFence, which also ends or kills the transactions that wrote the
// shard there and are still open) and waits until the stream replaying that
// side (reached) has passed that update, the fence marker: every change
// of the shard there is then applied, and none can follow (the side
// refuses them, fence.go). The stream is stopped by the caller once the
// lock is released: it has nothing left to apply, and its stop (go-mysql
// kills the dump over a new connection and waits for its reader: up to
// 130 ms seen under load) is no longer part of the clients' pause. It must
// stop before the stream the other way starts (a loop would bring back
// older values).
func (j *jobRun) fence(ctx context.Context, db *sql.DB, database, movedTo string, reached func(binlog.Position) (bool, error)) (binlog.Position, error) {
	job, _, _ := j.snapshot()
	start := time.Now()
	pos, err := setFence(ctx, db, fenceChange{database: database, shard: j.shard, fenced: true, job: job.ID, movedTo: movedTo}, j.log)
	if err != nil {
		return "", err
	}
	written := time.Now()
	if err := waitReached(ctx, pos, reached); err != nil {
		return "", err
	}
	// The proxies hold the shard's writes meanwhile: the switch's share of
	// their pause, by part (docs/design.md §5's pause target).
	j.log.Info("the stream passed the fence marker", zap.String("database", database), zap.String("gtid", string(pos)),
		zap.Duration("fence_write", written.Sub(start)), zap.Duration("fence_wait", time.Since(written)))
	return pos, nil
}

// unfence lets the side that becomes authoritative take the shard's
// writes (database on db).
func (j *jobRun) unfence(ctx context.Context, db *sql.DB, database string) error {
	job, _, _ := j.snapshot()
	_, err := setFence(ctx, db, fenceChange{database: database, shard: j.shard, job: job.ID}, j.log)
	return err
}

// restoreFences puts the fences back as the routes left them after a
// switch that did not flip: the side the shard stays on (stay) writable,
// the other (away) fenced. Its own time bound: the switch's context may
// have ended, and until it runs, the shard's writes fail on stay.
func (j *jobRun) restoreFences(ctx context.Context, stay, away *endpoint, stayDB, awayDB, awayTo string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	job, _, _ := j.snapshot()
	_, aerr := setFence(ctx, away.db, fenceChange{database: awayDB, shard: j.shard, fenced: true, job: job.ID, movedTo: awayTo}, j.log)
	serr := j.unfence(ctx, stay.db, stayDB)
	if err := errors.Join(aerr, serr); err != nil {
		j.log.Error("the switch did not happen and the shard's fences could not be put back: its writes fail on the side it stays on until the job's next switch or rollback sets them", zap.Error(err))
	}
}

// fencePoll is how often a switch looks whether the applier passed the
// fence: the lock is held meanwhile, so often.
const fencePoll = 2 * time.Millisecond

// waitReached waits until reached(pos) holds or ctx ends.
func waitReached(ctx context.Context, pos binlog.Position, reached func(binlog.Position) (bool, error)) error {
	for {
		ok, err := reached(pos)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if err := sleep(ctx, fencePoll); err != nil {
			return fmt.Errorf("migrate: the applier did not pass the fence %s in time: %w", pos, err)
		}
	}
}

// caughtUpFor waits up to d for the apply to be caught up before the lock
// is taken, so the lock is held for the fence's few milliseconds, not for a
// backlog.
func caughtUpFor(ctx context.Context, d time.Duration, caughtUp func(context.Context) (bool, error)) error {
	deadline := time.Now().Add(d)
	for {
		ok, err := caughtUp(ctx)
		if err == nil && ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("migrate: the apply is not caught up after %s (%v); not switching", d, err)
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}

// switchForward switches the shard to the target under the migration
// lock (IntentSwitch is persisted).
func (j *jobRun) switchForward(ctx context.Context) error {
	job, cmds, _ := j.snapshot()
	at, err := j.m.endpoint(ctx, job.Shard)
	if err != nil {
		return err
	}
	if at == job.To {
		// A runner that died after the flip: it happened.
		return j.switched(ctx, "switched by an earlier runner")
	}
	if err := caughtUpFor(ctx, 30*time.Second, j.bf.CaughtUp); err != nil {
		// Not a failed switch: nothing was held. The intent stays, so the
		// step retries (last_error says why) until the apply catches up or
		// the DBA rolls back; under a write burst that can take a while.
		return err
	}
	restore := func() { j.restoreFences(ctx, &j.src, &j.dst, job.From.Database, job.To.Database, job.From.String()) }
	res, err := j.r.Switch(ctx, j.m.cfg.Switch, func(fctx context.Context, tx *coord.SwitchTx) error {
		err := func() error {
			fenced, err := j.fence(fctx, j.src.db, job.From.Database, job.To.String(), j.bf.Reached)
			if err != nil {
				return err
			}
			rev, err := binlog.CurrentPosition(fctx, j.dst.db)
			if err != nil {
				return fmt.Errorf("migrate: the target's binlog position: %w", err)
			}
			if err := j.save(fctx, func(_ *coord.Job, s *jobState) { s.ReverseFrom, s.FencedAt = rev, fenced }); err != nil {
				return err
			}
			return j.unfence(fctx, j.dst.db, job.To.Database)
		}()
		if err != nil {
			// Before the lock goes: the proxies then release into a
			// writable source.
			restore()
			return err
		}
		return tx.FlipRoutes(fctx, router.MoveShard(tx.Routes(), job.Shard, job.To.Datasource, job.To.Database, j.tables(false)))
	})
	desc := fmt.Sprintf("%s: held %s, %d proxies acked", time.Now().UTC().Format(time.RFC3339), res.Held.Round(time.Millisecond), len(res.Acked))
	if res.Flipped {
		if err != nil {
			j.log.Warn("switched, with an error after the flip", zap.Error(err))
		}
		j.m.cfg.afterFlip()
		return j.switched(ctx, desc)
	}
	if errors.Is(err, coord.ErrFlipUnknown) {
		// The intent stays: the next attempt reads the routes. The fences
		// stay as the flip left them meanwhile (both sides refuse the
		// shard's writes until then): wrong either way would lose writes.
		return err
	}
	restore() // the flip itself failed (routes or lock changed): idempotent otherwise
	return j.switchFailed(ctx, cmds, fmt.Errorf("%s: %w", desc, err))
}

// tables is the shard's shared table index on the source (from) or the
// target, for the route edit.
func (j *jobRun) tables(from bool) *int {
	j.mu.Lock()
	defer j.mu.Unlock()
	src, dst := j.st.Tables()
	if from {
		return src
	}
	return dst
}

// switched records a completed switch and starts the rollback window.
func (j *jobRun) switched(ctx context.Context, desc string) error {
	// The forward stream stops before reverse replication can start (a
	// loop would bring older values back to the target): after the lock
	// (see fence), and also when a dead runner's switch is found done,
	// since this runner's StepReady started the stream again.
	j.bfTask.stop()
	now := time.Now().UTC()
	j.log.Info("shard switched to the target; reverse replication starts", zap.String("switch", desc))
	j.dropQueue(ctx)
	return j.save(ctx, func(rec *coord.Job, s *jobState) {
		rec.Step, rec.Intent, rec.LastError = StepSwitched, "", ""
		s.Status.Backlog = 0
		if s.SwitchedAt.IsZero() {
			s.SwitchedAt, s.CleanupAt = now, now.Add(j.m.cfg.RollbackWindow)
		}
		s.Status.Switch = desc
	})
}

// switchFailed records an aborted switch: the routes are unchanged, the
// job stays ready (an AUTO job tries again after a pause).
func (j *jobRun) switchFailed(ctx context.Context, cmds Commands, cause error) error {
	j.log.Warn("switch aborted; the shard stays on the source", zap.Error(cause))
	if err := j.save(ctx, func(rec *coord.Job, s *jobState) {
		rec.Intent, rec.LastError = "", "switch: "+cause.Error()
		s.Status.Switch = "aborted: " + cause.Error()
	}); err != nil {
		return err
	}
	if cmds.Auto {
		return j.backoff(ctx, 5*time.Second)
	}
	return nil
}

// switchBack moves the shard back to the source under the migration lock:
// fence on the target, the reverse stream past it, routes flipped back.
func (j *jobRun) switchBack(ctx context.Context) error {
	job, _, _ := j.snapshot()
	if err := j.ensureReverse(ctx); err != nil {
		return err
	}
	if err := caughtUpFor(ctx, 30*time.Second, j.rev.CaughtUp); err != nil {
		return err
	}
	// The source is about to take the shard's writes again; the watch's
	// stop (a dump killed over a new connection) stays out of the pause.
	j.watchTask.stop()
	restore := func() { j.restoreFences(ctx, &j.dst, &j.src, job.To.Database, job.From.Database, job.To.String()) }
	res, err := j.r.Switch(ctx, j.m.cfg.Switch, func(fctx context.Context, tx *coord.SwitchTx) error {
		_, err := j.fence(fctx, j.dst.db, job.To.Database, job.From.String(), j.rev.Reached)
		if err == nil {
			err = j.unfence(fctx, j.src.db, job.From.Database)
		}
		if err != nil {
			restore()
			return err
		}
		return tx.FlipRoutes(fctx, router.MoveShard(tx.Routes(), job.Shard, job.From.Datasource, job.From.Database, j.tables(true)))
	})
	if !res.Flipped {
		if !errors.Is(err, coord.ErrFlipUnknown) {
			restore()
		}
		return fmt.Errorf("migrate: switch back: %w", err)
	}
	j.revTask.stop() // after the lock (fence)
	j.log.Info("shard switched back to the source", zap.Duration("held", res.Held))
	return nil
}
