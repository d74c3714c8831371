package inproxy

import (
	"context"
	"database/sql"
	"sync"
	"time"

	"github.com/convoy-im/convoy/binlog"
	"github.com/convoy-im/convoy/internal/sqlq"
	"github.com/convoy-im/convoy/migrate/internal/physical"
)

// applyWatch lets a proxy wait until the binlog apply of a job's shard has
// applied a source transaction: the dual-write's ACK waits on it (Mirror.
// Write). The apply (package migrate's Applier) moves its checkpoint row
// (physical.CheckpointTable, in the target database) in the same target
// transaction as the rows it applies, so a checkpoint position that
// reaches a transaction's GTID proves the target's rows show that
// transaction.
//
// Why wait for the apply rather than write the rows to the target from the
// proxy: a second writer of the target's rows competes with the apply for
// the same row and gap locks. New messages insert at the end of a
// conversation's index, where both writers lock the same gap before
// inserting into it, so they deadlock with each other all the time
// (1,213 deadlocks and 466 queued writes in one benchmark's read ramps,
// the migrating shard's write p99 7.6 times its idle value). Waiting adds
// the apply's latency and no lock: the apply stays the target's only
// writer until the switch.
//
// One poller per watch reads the checkpoint row while anyone waits (every
// pollEvery), so the cost is one primary-key read per poll whatever the
// number of waiting writes, and nothing while nobody waits. The read takes
// the row's shared lock: the apply moves the checkpoint first in each
// batch's transaction, so a read that comes while a batch is being applied
// waits for its COMMIT and returns the new position at once, instead of
// the old one and a pause (a wake-up on the apply's commit, without a
// channel between the runner's process and the proxies'). The lock is
// held for the read only (autocommit), and a lock wait longer than a
// second (a stalled apply) ends the read, not the connection.
type applyWatch struct {
	db    *sql.DB
	query string
	args  []any

	mu      sync.Mutex
	waiters []*applyWaiter
	polling bool
}

type applyWaiter struct {
	pos  binlog.Position
	done chan struct{}
}

// applyPollEvery is the pause between two reads of the checkpoint row
// while writes wait, when a read found no batch under way (one that is
// under way wakes the read at its COMMIT): a millisecond, against an apply
// that takes about two to show a write; one primary-key read a
// millisecond per proxy and migrating shard, only while writes wait.
const applyPollEvery = time.Millisecond

func newApplyWatch(db *sql.DB, database, job string, shard int) *applyWatch {
	return &applyWatch{db: db,
		query: "SET STATEMENT innodb_lock_wait_timeout = 1 FOR SELECT position FROM " + sqlq.Ident(database) + "." + sqlq.Ident(physical.CheckpointTable) +
			" WHERE job = ? AND shard = ? LOCK IN SHARE MODE",
		args: []any{job, uint64(shard)}}
}

// wait returns once the checkpoint reaches pos, or ctx's error.
func (w *applyWatch) wait(ctx context.Context, pos binlog.Position) error {
	wt := &applyWaiter{pos: pos, done: make(chan struct{})}
	w.mu.Lock()
	w.waiters = append(w.waiters, wt)
	if !w.polling {
		w.polling = true
		go w.poll()
	}
	w.mu.Unlock()
	select {
	case <-wt.done:
		return nil
	case <-ctx.Done():
		w.mu.Lock()
		for i, o := range w.waiters {
			if o == wt {
				w.waiters = append(w.waiters[:i], w.waiters[i+1:]...)
				break
			}
		}
		w.mu.Unlock()
		return ctx.Err()
	}
}

// poll reads the checkpoint until nobody waits. A read that fails (the
// target down, the row not created yet) wakes nobody: the waiters' own
// deadlines end their wait.
func (w *applyWatch) poll() {
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		var at string
		err := w.db.QueryRowContext(ctx, w.query, w.args...).Scan(&at)
		cancel()
		w.mu.Lock()
		if err == nil {
			kept := w.waiters[:0]
			for _, wt := range w.waiters {
				if ok, perr := binlog.Position(at).Reached(wt.pos); perr == nil && ok {
					close(wt.done)
				} else {
					kept = append(kept, wt)
				}
			}
			clear(w.waiters[len(kept):])
			w.waiters = kept
		}
		if len(w.waiters) == 0 {
			w.polling = false
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
		time.Sleep(applyPollEvery)
	}
}
