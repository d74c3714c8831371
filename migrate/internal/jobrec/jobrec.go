// Package jobrec is what a shard migration's job record (coord.Job) says,
// in the terms every reader of it shares: its steps and intents, the
// DBA's commands and the runner's status in coord.Job.Progress, and where
// the shard's physical tables are on each side.
//
// The runner (package migrate) writes the record and keeps more of its own
// state there; every proxy (package migrate/inproxy) reads it to ramp
// reads and mirror writes (Decode); SHOW MIGRATIONS and the CLI read and
// command it (migrate.Admin). Keeping these pieces here lets the proxies'
// package read the record without importing the runner's.
package jobrec

import (
	"encoding/json"
	"fmt"

	"github.com/convoy-im/convoy/coord"
)

// The steps of a job (coord.Job.Step) and the intents its runner persists
// before acting (coord.Job.Intent); package migrate's job.go has the state
// machine.
const (
	// StepQueued: created, waiting for a slot of its MIGRATE SHARDS group.
	StepQueued = "queued"
	// StepPrepare: pre-checks and target tables (refused: LastError says
	// what to fix; RESUME checks again).
	StepPrepare = "prepare"
	// StepBackfill: copy, then binlog apply until caught up.
	StepBackfill = "backfill"
	// StepVerify: checksums while the apply goes on; a differing segment
	// blocks until NEXT repairs it.
	StepVerify = "verify"
	// StepReady: verified, the apply keeps the target current; NEXT (or
	// AUTO) switches.
	StepReady = "ready"
	// StepSwitched: the routes point at the target; reverse replication
	// keeps the source current for the rollback window.
	StepSwitched = "switched"
	// StepDone: the window ended (or NEXT); reverse replication stopped;
	// the source's tables are left in place.
	StepDone = coord.StepDone
)

// Intents, persisted before the runner acts on them.
const (
	IntentSwitch   = "switch"
	IntentCleanup  = "cleanup"
	IntentRollback = "rollback"
)

// Commands are the DBA's requests (directives, CLI), written into the job
// record by Admin and only read by the runner, so the two never overwrite
// each other's fields. NEXT and RESUME are counters: the runner remembers
// the last value it acted on.
type Commands struct {
	// Rate is the copy rate in rows/s: 0 the manager's default, < 0
	// unlimited.
	Rate   float64 `json:"rate,omitempty"`
	Paused bool    `json:"paused,omitempty"`
	// Resume counts RESUMEs: a refused prepare checks again.
	Resume int `json:"resume,omitempty"`
	// Next counts NEXTs: repair (verify), switch (ready), cleanup
	// (switched).
	Next     int  `json:"next,omitempty"`
	Rollback bool `json:"rollback,omitempty"`
	// ReadPercent is the share of the shard's conversations whose reads the
	// proxies send to the target while the job is ready (READ PERCENT).
	ReadPercent int `json:"read_percent,omitempty"`
	// Auto switches without waiting for NEXT.
	Auto bool `json:"auto,omitempty"`
	// Purge asks a done job to delete the shard's rows from the source's
	// tables (throttled at Rate).
	Purge bool `json:"purge,omitempty"`
	// Group and Parallel: MIGRATE SHARDS a-b PARALLEL p runs at most p of
	// the group's jobs' prepare, backfill and verify at once.
	Group    string `json:"group,omitempty"`
	Parallel int    `json:"parallel,omitempty"`
}

// Status is what SHOW MIGRATIONS shows of a running job, refreshed by its
// runner every few seconds.
type Status struct {
	Rows       int64   `json:"rows,omitempty"`
	Estimate   int64   `json:"estimate,omitempty"`
	RowsPerSec float64 `json:"rows_per_sec,omitempty"`
	ETA        float64 `json:"eta_seconds,omitempty"`
	// Lag is the apply lag in seconds (the reverse stream's once switched);
	// -1 unknown.
	Lag      float64 `json:"lag_seconds"`
	Checksum string  `json:"checksum,omitempty"`
	// Switch describes the last switch attempt.
	Switch string `json:"switch,omitempty"`
	// Backlog is the compensation queue's keys (dual-write failures not
	// replayed yet); Replayed counts the keys replayed from it. Both end
	// at the switch, when the fence proves the target exact.
	Backlog  int64 `json:"dualwrite_backlog,omitempty"`
	Replayed int64 `json:"dualwrite_replayed,omitempty"`
	// RampPercent is the READ PERCENT the runner confirmed: every serving
	// proxy mirrors that share, and the apply has passed the moment they
	// all did (inproxy's ramp.go). Proxies read no more than it from the
	// target.
	RampPercent int `json:"ramp_percent,omitempty"`
	// RampWait says what a READ PERCENT not confirmed yet waits for.
	RampWait string `json:"ramp_wait,omitempty"`
	// Breaches counts the writes of the shard the breach watch saw on the
	// old side after the switch (migrate's breach.go); Breach describes
	// the last.
	Breaches int64  `json:"breaches,omitempty"`
	Breach   string `json:"breach,omitempty"`
	// Throttle says why the copy runs below its rate (migrate's
	// throttle.go), "" when it does not.
	Throttle string `json:"throttle,omitempty"`
	// Beat changes at every status refresh while reads are ramped, so the
	// proxies see the runner alive and its lag fresh (inproxy's ramp.go):
	// without news they send the reads back to the source.
	Beat int64 `json:"beat,omitempty"`
}

// TablePlacement is a shard's physical table on one side: Shared is the
// shared table index of its range (nil: a table of its own), as
// router.ShardRange.Table.
type TablePlacement struct {
	Shared *int `json:"shared,omitempty"`
}

// Placement is where the shard's physical tables are on each side: part of
// the runner's persisted state (migrate's jobState embeds it).
type Placement struct {
	// Table is the shared physical table index of the shard's range when
	// the job was created (nil: the shard has tables of its own); the
	// target uses the same physical names unless ToTable says otherwise.
	Table *int `json:"table,omitempty"`
	// ToTable is the target's table placement when a layout change puts
	// the shard in another physical table there (nil: the target uses
	// Table's names).
	ToTable *TablePlacement `json:"to_table,omitempty"`
}

// Tables returns the shared table index of the shard's range on each side
// (nil: tables of its own), as router.MoveShard takes them.
func (st *Placement) Tables() (from, to *int) {
	if st.ToTable != nil {
		return st.Table, st.ToTable.Shared
	}
	return st.Table, st.Table
}

// TableIndex is the physical table index of shard on a side placed shared.
func TableIndex(shard int, shared *int) int {
	if shared != nil {
		return *shared
	}
	return shard
}

// Progress is what a proxy reads of a job's coord.Job.Progress: the DBA's
// commands and, of the runner's state, the placement and the status. The
// runner's own record (migrate's jobProgress) has these fields under the
// same names, and more.
type Progress struct {
	Commands Commands `json:"commands"`
	State    State    `json:"state"`
}

// State is the part of the runner's persisted state Progress reads.
type State struct {
	Placement
	Status Status `json:"status"`
}

// Decode reads a job record's Progress; a record without one is
// Progress's zero value with the lag unknown (-1).
func Decode(j coord.Job) (Progress, error) {
	var p Progress
	p.State.Status.Lag = -1
	err := Unmarshal(j, &p)
	return p, err
}

// Unmarshal decodes j's progress into v (a *Progress, or the runner's
// larger record); a record without progress leaves v as it is.
func Unmarshal(j coord.Job, v any) error {
	if len(j.Progress) == 0 {
		return nil
	}
	if err := json.Unmarshal(j.Progress, v); err != nil {
		return fmt.Errorf("migrate: job %s: progress: %w", j.ID, err)
	}
	return nil
}
