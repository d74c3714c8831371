package migrate

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/convoy-im/convoy/binlog"
	"github.com/convoy-im/convoy/internal/ratelimit"
	"github.com/convoy-im/convoy/router"
)

// Phase is where a backfill stands.
type Phase string

// The phases of a backfill, in order.
const (
	// PhaseCopying: the tables are being copied; nothing is applied yet.
	PhaseCopying Phase = "copying"
	// PhaseApplying: every table is copied; the binlog is replayed from
	// the first snapshot's position.
	PhaseApplying Phase = "applying"
	// PhaseCaughtUp: the replay has reached the source's position at least
	// once (it goes on; CaughtUp says whether it still is).
	PhaseCaughtUp Phase = "caught-up"
)

// BackfillState is how far a backfill has come, JSON-serialisable: the job
// persists every state Run hands to its save callback and passes the last
// one back to resume.
type BackfillState struct {
	Phase Phase `json:"phase,omitempty"`
	// Start is P_min: the position of the copy's first snapshot, saved
	// before any row reaches the target; the replay starts there.
	Start *BinlogPosition `json:"start,omitempty"`
	// Copy holds each table's copy checkpoint, by source "database.table".
	Copy map[string]Checkpoint `json:"copy,omitempty"`
	// Applied is the apply checkpoint as last seen (the row in the target's
	// CheckpointTable is authoritative and at or after it), and SourceTime
	// the source commit time of the last transaction applied. For status;
	// resuming does not need them.
	Applied    binlog.Position `json:"applied,omitempty"`
	SourceTime time.Time       `json:"source_time,omitzero"`
}

func (s BackfillState) clone() BackfillState {
	s.Copy = maps.Clone(s.Copy)
	if s.Start != nil {
		p := *s.Start
		s.Start = &p
	}
	return s
}

// BackfillConfig says what one shard's backfill moves.
type BackfillConfig struct {
	// Job and Shard name the apply checkpoint (ApplierConfig).
	Job   string
	Shard router.Shard
	// Tables are the shard's physical tables, one source server and one
	// target server (ShardMoves builds the five of the IM schema).
	Tables []TableMove
	// Binlog is the source's replication connection (ApplierConfig.Binlog).
	Binlog binlog.Config
	// Rate is the copy's rows per second, shared by the tables: 0 means
	// DefaultRate, below 0 unlimited. SetRate changes it while running.
	// The binlog replay is not limited: it must keep up with the writes.
	Rate float64
	// ChunkRows and SnapshotMaxAge are the copiers' WithChunkRows and
	// WithSnapshotMaxAge.
	ChunkRows      int
	SnapshotMaxAge time.Duration
	// CheckpointDatabase is ApplierConfig.CheckpointDatabase.
	CheckpointDatabase string
}

// statePollEvery is how often the apply phase checks "caught up" and
// refreshes the state's apply position; stateSaveEvery bounds how often
// the latter alone is saved (an etcd write).
const (
	statePollEvery = 250 * time.Millisecond
	stateSaveEvery = 5 * time.Second
)

// Backfill is step 3 of a shard migration as one resumable unit: copy the
// shard's rows of every table from consistent snapshots (one Limiter for
// all of them), then replay the source's binlog from the first snapshot's
// position (P_min) until ctx ends, following the Copier's consistency
// model: the replay starts only after the last chunk is written, from a
// P_min saved before the first.
//
// A crash anywhere resumes from the last saved state: between chunks the
// copy goes on from its checkpoint in a new snapshot (one chunk may be
// copied twice, harmlessly); during the replay the Applier's checkpoint row
// on the target says where to go on. Progress, SetRate and CaughtUp may be
// called from any goroutine while Run runs; Run itself once at a time.
type Backfill struct {
	moves   []TableMove
	copiers []*Copier
	limiter *ratelimit.Limiter
	applier *Applier
	srcDB   *sql.DB

	mu       sync.Mutex
	phase    Phase
	caughtUp bool
}

// NewBackfill checks the tables (as NewCopier and NewApplier do) and
// returns a backfill. It creates the target's CheckpointTable.
func NewBackfill(ctx context.Context, cfg BackfillConfig) (*Backfill, error) {
	a, err := NewApplier(ctx, ApplierConfig{Job: cfg.Job, Shard: cfg.Shard, Tables: cfg.Tables, Binlog: cfg.Binlog,
		CheckpointDatabase: cfg.CheckpointDatabase})
	if err != nil {
		return nil, err
	}
	rate := cfg.Rate
	if rate == 0 {
		rate = DefaultRate
	}
	b := &Backfill{moves: cfg.Tables, limiter: ratelimit.New(rate), applier: a, srcDB: cfg.Tables[0].Source.DB}
	for _, m := range cfg.Tables {
		c, err := NewCopier(ctx, m.Source, m.Target, m.Filter, WithLimiter(b.limiter),
			WithChunkRows(cfg.ChunkRows), WithSnapshotMaxAge(cfg.SnapshotMaxAge))
		if err != nil {
			return nil, err
		}
		b.copiers = append(b.copiers, c)
	}
	return b, nil
}

// ShardMoves lists the physical tables of one shard's five logical tables
// (router.ShardedTables) from where it is, on src, to where it goes, on
// dst, each filtered by the shard (tables shared by several shards need
// it; for the others it costs a CRC32 per row).
func ShardMoves(shard router.Shard, src *sql.DB, from router.Target, dst *sql.DB, to router.Target) ([]TableMove, error) {
	var out []TableMove
	for _, logical := range router.ShardedTables() {
		f, err := FilterFor(logical, shard)
		if err != nil {
			return nil, err
		}
		out = append(out, TableMove{
			Source: Side{DB: src, Database: from.Database, Table: router.PhysicalTableName(logical, from.Table)},
			Target: Side{DB: dst, Database: to.Database, Table: router.PhysicalTableName(logical, to.Table)},
			Filter: f,
		})
	}
	return out, nil
}

// SetRate changes the copy rate (rows per second, <= 0 unlimited) at once.
func (b *Backfill) SetRate(rowsPerSec float64) { b.limiter.SetRate(rowsPerSec) }

// SetSoleWriter is Applier.SetSoleWriter for the backfill's apply.
func (b *Backfill) SetSoleWriter(ctx context.Context, on bool) error {
	return b.applier.SetSoleWriter(ctx, on)
}

// CaughtUp is the Applier's: every source transaction committed before the
// call is applied. False while copying.
func (b *Backfill) CaughtUp(ctx context.Context) (bool, error) {
	if !b.applying() {
		return false, nil
	}
	return b.applier.CaughtUp(ctx)
}

// Reached is the Applier's: every source transaction up to pos is applied.
// False while copying.
func (b *Backfill) Reached(pos binlog.Position) (bool, error) {
	if !b.applying() {
		return false, nil
	}
	return b.applier.Reached(pos)
}

func (b *Backfill) applying() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.phase == PhaseApplying || b.phase == PhaseCaughtUp
}

// TableProgress is one table's copy progress.
type TableProgress struct {
	Source string // database.table
	Progress
}

// BackfillProgress is a backfill's state for SHOW MIGRATIONS.
type BackfillProgress struct {
	Phase  Phase
	Tables []TableProgress
	// Rows, Estimate, RowsPerSec and ETA sum the tables' copies.
	Rows, Estimate int64
	RowsPerSec     float64
	ETA            time.Duration
	Apply          ApplierStats
	// CaughtUp is the apply phase's last check (four times a second).
	CaughtUp bool
}

// Progress returns the current progress.
func (b *Backfill) Progress() BackfillProgress {
	b.mu.Lock()
	p := BackfillProgress{Phase: b.phase, CaughtUp: b.caughtUp}
	b.mu.Unlock()
	for i, c := range b.copiers {
		tp := TableProgress{Source: b.moves[i].Source.String(), Progress: c.Progress()}
		p.Tables = append(p.Tables, tp)
		p.Rows += tp.Rows
		p.Estimate += tp.Estimate
		p.RowsPerSec += tp.RowsPerSec
	}
	if p.Phase == PhaseCopying && p.RowsPerSec > 0 && p.Estimate > p.Rows {
		p.ETA = time.Duration(float64(p.Estimate-p.Rows) / p.RowsPerSec * float64(time.Second))
	}
	p.Apply = b.applier.Stats()
	return p
}

func (b *Backfill) setPhase(p Phase, caughtUp bool) {
	b.mu.Lock()
	b.phase, b.caughtUp = p, caughtUp
	b.mu.Unlock()
}

// Run copies, then applies, from state `from` (the zero state: from the
// start), and returns when ctx ends or something fails, with the last state
// reached. save gets a copy of the state whenever the backfill must not
// forget it: P_min before any write, each copy chunk, the switch to
// applying, reaching caught-up, and the apply position now and then; a
// save error stops Run. Run with the last saved state to resume.
func (b *Backfill) Run(ctx context.Context, from BackfillState, save func(BackfillState) error) (BackfillState, error) {
	st := from.clone()
	if st.Phase == "" {
		st.Phase = PhaseCopying
	}
	if st.Copy == nil {
		st.Copy = map[string]Checkpoint{}
	}
	if err := b.check(st); err != nil {
		return st, err
	}
	persist := func() error {
		if save == nil {
			return nil
		}
		if err := save(st.clone()); err != nil {
			return fmt.Errorf("migrate: save backfill state: %w", err)
		}
		return nil
	}
	for i, c := range b.copiers {
		if ck := st.Copy[b.moves[i].Source.String()]; ck.Done {
			_, _ = c.Run(ctx, nil, ck, nil) // shows it as done in Progress
		}
	}
	b.setPhase(st.Phase, false)

	if st.Phase == PhaseCopying {
		if err := b.copy(ctx, &st, persist); err != nil {
			return st, err
		}
		// A fresh replay: whatever the checkpoint row says is from an
		// earlier attempt. Reset before the phase is saved, so a crash in
		// between resets again.
		if err := b.applier.Reset(ctx, binlog.Position(st.Start.GTID)); err != nil {
			return st, err
		}
		st.Phase = PhaseApplying
		b.setPhase(st.Phase, false)
		if err := persist(); err != nil {
			return st, err
		}
	}
	return b.apply(ctx, &st, persist)
}

// check refuses a state that does not fit this backfill's tables.
func (b *Backfill) check(st BackfillState) error {
	known := map[string]bool{}
	for _, m := range b.moves {
		known[m.Source.String()] = true
	}
	for k := range st.Copy {
		if !known[k] {
			return fmt.Errorf("migrate: the backfill state copies %s, which is not one of this backfill's tables", k)
		}
	}
	switch st.Phase {
	case PhaseCopying:
		return nil
	case PhaseApplying, PhaseCaughtUp:
		if st.Start == nil {
			return fmt.Errorf("migrate: backfill state in phase %s without a start position", st.Phase)
		}
		for k := range known {
			if !st.Copy[k].Done {
				return fmt.Errorf("migrate: backfill state in phase %s but the copy of %s is not done", st.Phase, k)
			}
		}
		return nil
	}
	return fmt.Errorf("migrate: unknown backfill phase %q", st.Phase)
}

// copy copies every table to its end: one snapshot for as many tables as
// it lasts (WithSnapshotMaxAge rotates it), P_min saved before the first
// chunk.
func (b *Backfill) copy(ctx context.Context, st *BackfillState, persist func() error) error {
	var snap *Snapshot
	defer func() {
		if snap != nil {
			snap.Close()
		}
	}()
	for i, c := range b.copiers {
		key := b.moves[i].Source.String()
		for ck := st.Copy[key]; !ck.Done; {
			if snap == nil {
				var err error
				if snap, err = OpenSnapshot(ctx, b.srcDB); err != nil {
					return err
				}
				if st.Start == nil {
					p := snap.Position
					st.Start = &p
					if err := persist(); err != nil {
						return err
					}
				} else if st.Start.ServerID != snap.Position.ServerID {
					return fmt.Errorf("migrate: the backfill started on server %d, the source is now server %d: start again",
						st.Start.ServerID, snap.Position.ServerID)
				}
			}
			var err error
			ck, err = c.Run(ctx, snap, ck, func(ck Checkpoint) error {
				st.Copy[key] = ck
				return persist()
			})
			if err != nil {
				return err
			}
			if !ck.Done { // the snapshot grew old: a new one
				snap.Close()
				snap = nil
			}
		}
	}
	return nil
}

// apply runs the Applier from P_min (resuming from its checkpoint row) and
// watches it: caught up, the apply position for the state.
func (b *Backfill) apply(ctx context.Context, st *BackfillState, persist func() error) (BackfillState, error) {
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- b.applier.Run(actx, binlog.Position(st.Start.GTID)) }()
	tick := time.NewTicker(statePollEvery)
	defer tick.Stop()
	lastSave := time.Now()
	refresh := func() bool {
		s := b.applier.Stats()
		if s.Saved == "" || s.Saved == st.Applied {
			return false
		}
		st.Applied, st.SourceTime = s.Saved, s.SourceTime
		return true
	}
	for {
		select {
		case err := <-done:
			if refresh() {
				if serr := persist(); err == nil {
					err = serr
				}
			}
			return *st, err
		case <-tick.C:
		}
		changed := refresh()
		// A failed check (the source unreachable) is not the backfill's
		// failure: the reader retries its connection meanwhile.
		caught, err := b.applier.CaughtUp(ctx)
		caught = caught && err == nil
		force := caught && st.Phase != PhaseCaughtUp
		if force {
			st.Phase = PhaseCaughtUp
		}
		b.setPhase(st.Phase, caught)
		if force || changed && time.Since(lastSave) >= stateSaveEvery {
			if err := persist(); err != nil {
				cancel()
				<-done
				return *st, err
			}
			lastSave = time.Now()
		}
	}
}
