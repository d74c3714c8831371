package migrate

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/convoy-im/convoy/coord"
	"github.com/convoy-im/convoy/migrate/internal/jobrec"
)

// TestStateLine: SHOW MIGRATIONS' state column says in words where a job
// is, what it waits for, and points at the column that says more.
func TestStateLine(t *testing.T) {
	at := time.Date(2026, 12, 10, 8, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name, step, intent string
		edit               func(*jobProgress)
		want               []string
	}{
		{"queued", StepQueued, "", func(p *jobProgress) { p.Commands.Group, p.Commands.Parallel = "g1", 2 }, []string{"at most 2 jobs of group g1"}},
		{"refused", StepPrepare, "", func(p *jobProgress) { p.State.Refused = true }, []string{"refused", "RESUME"}},
		{"copying", StepBackfill, "", func(p *jobProgress) {
			p.State.Backfill.Phase = PhaseCopying
			p.State.Status = Status{Rows: 1200, Estimate: 5000, RowsPerSec: 2000, ETA: 2, Lag: -1}
		}, []string{"copying: 1200 of about 5000 rows at 2000 rows/s, about 2s left", "apply starts after the copy"}},
		{"applying", StepBackfill, "", func(p *jobProgress) { p.State.Backfill.Phase = PhaseApplying; p.State.Status.Lag = 0.5 }, []string{"replaying", "0.5s behind"}},
		{"ready, aborted", StepReady, "", func(p *jobProgress) { p.State.Status.Switch = "aborted: no acknowledgement" }, []string{"verified", "last switch aborted", "waiting for NEXT"}},
		{"ramped, auto", StepReady, "", func(p *jobProgress) {
			p.Commands.ReadPercent, p.State.Status.RampPercent, p.Commands.Auto = 10, 10, true
		}, []string{"10% of the conversations on the target", "AUTO"}},
		{"ramp confirming", StepReady, "", func(p *jobProgress) { p.Commands.ReadPercent, p.State.Status.RampPercent = 50, 10 }, []string{"reads of 10% of the conversations", "READ PERCENT 50 being confirmed"}},
		{"switching", StepReady, IntentSwitch, nil, []string{"every proxy holds"}},
		{"switched", StepSwitched, "", func(p *jobProgress) { p.State.CleanupAt = at }, []string{"source fenced", "until 2026-12-10T08:00:00Z"}},
		{"rollback asked", StepReady, "", func(p *jobProgress) { p.Commands.Rollback = true }, []string{"rolling back", "stop reading the target"}},
		{"rollback after switch", StepSwitched, IntentRollback, nil, []string{"switching the shard back"}},
		{"paused", StepBackfill, "", func(p *jobProgress) { p.Commands.Paused = true }, []string{"paused", "RESUME"}},
		{"done", StepDone, "", nil, []string{"read-only, until PURGE"}},
		{"purged", StepDone, "", func(p *jobProgress) { p.State.Purged = true }, []string{"purged", "fence stays"}},
	} {
		p := jobProgress{}
		p.State.Status.Lag = -1
		if c.edit != nil {
			c.edit(&p)
		}
		got := stateLine(coord.Job{Step: c.step, Intent: c.intent}, p)
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: state %q, want it to say %q", c.name, got, w)
			}
		}
	}
}

// TestProgressView: the proxies read a job record through jobrec.Decode,
// a view of the runner's larger record; they read what the runner wrote
// (READ PERCENT, ROLLBACK, the confirmed share, the lag, the table
// placement), and an unknown lag when there is no progress yet.
func TestProgressView(t *testing.T) {
	shared, to := 3, 5
	p := jobProgress{Commands: Commands{Rate: 100, ReadPercent: 40, Rollback: true, Group: "g1", Parallel: 2}}
	p.State.Table = &shared
	p.State.ToTable = &TablePlacement{Shared: &to}
	p.State.Prepared = true
	p.State.Backfill.Phase = PhaseApplying
	p.State.Status = Status{Rows: 10, Lag: 0.25, RampPercent: 30, RampWait: "proxies", Backlog: 2, Beat: 7}
	v, err := jobrec.Decode(coord.Job{ID: "j", Progress: encodeProgress(p)})
	if err != nil {
		t.Fatal(err)
	}
	if v.Commands != p.Commands || v.State.Status != p.State.Status || !reflect.DeepEqual(v.State.Placement, p.State.Placement) {
		t.Fatalf("the proxies read %+v of the runner's %+v", v, p)
	}
	none := coord.Job{ID: "j"}
	rp, _ := decodeProgress(none)
	vp, _ := jobrec.Decode(none)
	if rp.State.Status.Lag != -1 || vp.State.Status.Lag != -1 || vp.State.Table != nil {
		t.Fatalf("a record without progress: the runner reads lag %v, the proxies %+v", rp.State.Status.Lag, vp)
	}
}
