package migrate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/convoy-im/convoy/binlog"
	"github.com/convoy-im/convoy/routecfg"
	"github.com/convoy-im/convoy/router"
)

// The switch of a job, in both directions, under the per-shard migration
// lock (routecfg.Runner.Switch): while every live proxy holds the shard's
// writes, a fence marker is written on the side that was authoritative,
// the stream replaying that side is waited for until it passed the marker
// (proof that every change before the lock is applied, not "the lag looks
// small") and stopped, and the routes are flipped in the same etcd
// transaction that marks the lock switched.

// FenceTable is the table, in both sides' databases, where a switch writes
// its fence marker: a row whose binlog event the applier must have passed
// before the routes flip, proof that every earlier change is applied.
const FenceTable = "_convoy_migration_fence"

const fenceDDL = `CREATE TABLE IF NOT EXISTS %s (
  job        VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  shard      SMALLINT UNSIGNED NOT NULL,
  token      BIGINT UNSIGNED NOT NULL,
  written_at DATETIME(6) NOT NULL,
  PRIMARY KEY (job, shard)
) ENGINE=InnoDB COMMENT='Convoy shard migration: switch fence markers'`

// writeFence writes the job's fence marker in database on db and returns
// the GTID of that transaction.
func writeFence(ctx context.Context, db *sql.DB, database, job string, shard router.Shard) (binlog.Position, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_, err = conn.ExecContext(ctx, "INSERT INTO "+quoteIdent(database)+"."+quoteIdent(FenceTable)+
		" (job, shard, token, written_at) VALUES (?, ?, 1, NOW(6)) ON DUPLICATE KEY UPDATE token = token + 1, written_at = NOW(6)",
		job, uint64(shard))
	if err != nil {
		return "", fmt.Errorf("migrate: write the fence marker in %s: %w", database, err)
	}
	var gtid string
	if err := conn.QueryRowContext(ctx, "SELECT @@last_gtid").Scan(&gtid); err != nil || gtid == "" {
		return "", fmt.Errorf("migrate: the GTID of the fence marker in %s: %q, %v", database, gtid, err)
	}
	return binlog.ParsePosition(gtid)
}

// fence writes the job's fence marker in database on db (the side whose
// writes the migration lock holds) and waits until the stream replaying
// that side (reached) has passed it: every change written before the lock
// is then applied. The stream is stopped by the caller once the lock is
// released: nothing of the shard reaches the fenced side after the marker
// (its writes are held, then routed to the other side), so the stream has
// nothing left to apply, and its stop (go-mysql kills the dump over a new
// connection and waits for its reader: up to 130 ms seen under load) is
// no longer part of the clients' pause. It must stop before the stream the
// other way starts (a loop would bring back older values).
func (j *jobRun) fence(ctx context.Context, db *sql.DB, database string, reached func(binlog.Position) (bool, error)) error {
	job, _, _ := j.snapshot()
	start := time.Now()
	pos, err := writeFence(ctx, db, database, job.ID, j.shard)
	if err != nil {
		return err
	}
	written := time.Now()
	if err := waitReached(ctx, pos, reached); err != nil {
		return err
	}
	// The proxies hold the shard's writes meanwhile: the switch's share of
	// their pause, by part (issue 14's pause target).
	j.log.Info("the stream passed the fence marker", zap.String("database", database), zap.String("gtid", string(pos)),
		zap.Duration("fence_write", written.Sub(start)), zap.Duration("fence_wait", time.Since(written)))
	return nil
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
		return j.switchFailed(ctx, cmds, err)
	}
	res, err := j.r.Switch(ctx, j.m.cfg.Switch, func(fctx context.Context, tx *routecfg.SwitchTx) error {
		if err := j.fence(fctx, j.src.db, job.From.Database, j.bf.Reached); err != nil {
			return err
		}
		rev, err := binlog.CurrentPosition(fctx, j.dst.db)
		if err != nil {
			return fmt.Errorf("migrate: the target's binlog position: %w", err)
		}
		if err := j.save(fctx, func(_ *routecfg.Job, s *jobState) { s.ReverseFrom = rev }); err != nil {
			return err
		}
		return tx.FlipRoutes(fctx, router.MoveShard(tx.Routes(), job.Shard, job.To.Datasource, job.To.Database, j.tables(false)))
	})
	desc := fmt.Sprintf("%s: held %s, %d proxies acked", time.Now().UTC().Format(time.RFC3339), res.Held.Round(time.Millisecond), len(res.Acked))
	if res.Flipped {
		if err != nil {
			j.log.Warn("switched, with an error after the flip", zap.Error(err))
		}
		if j.m.cfg.afterFlip != nil {
			j.m.cfg.afterFlip()
		}
		return j.switched(ctx, desc)
	}
	if errors.Is(err, routecfg.ErrFlipUnknown) {
		return err // the intent stays: the next attempt reads the routes
	}
	return j.switchFailed(ctx, cmds, fmt.Errorf("%s: %w", desc, err))
}

// tables is the shard's shared table index on the source (from) or the
// target, for the route edit.
func (j *jobRun) tables(from bool) *int {
	j.mu.Lock()
	defer j.mu.Unlock()
	src, dst := j.st.tables()
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
	return j.save(ctx, func(rec *routecfg.Job, s *jobState) {
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
	if err := j.save(ctx, func(rec *routecfg.Job, s *jobState) {
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
	res, err := j.r.Switch(ctx, j.m.cfg.Switch, func(fctx context.Context, tx *routecfg.SwitchTx) error {
		if err := j.fence(fctx, j.dst.db, job.To.Database, j.rev.Reached); err != nil {
			return err
		}
		return tx.FlipRoutes(fctx, router.MoveShard(tx.Routes(), job.Shard, job.From.Datasource, job.From.Database, j.tables(true)))
	})
	if !res.Flipped {
		return fmt.Errorf("migrate: switch back: %w", err)
	}
	j.revTask.stop() // after the lock (fence)
	j.log.Info("shard switched back to the source", zap.Duration("held", res.Held))
	return nil
}
