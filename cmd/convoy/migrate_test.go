package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/convoy-im/convoy/migrate"
)

func TestCLIDirective(t *testing.T) {
	for _, c := range []struct {
		cmd  string
		args []string
		want string // kind shard-last ds db rate parallel auto verb
	}{
		{"start", []string{"441", "ds2"}, "MIGRATE SHARD 441-441 ds2  rate=0 parallel=0 auto=false "},
		{"start", []string{"441", "to", "ds2", "database", "im_9", "RATE", "0", "auto"}, "MIGRATE SHARD 441-441 ds2 im_9 rate=-1 parallel=0 auto=true "},
		{"start", []string{"512-1023", "ds2", "PARALLEL", "4", "RATE", "2000"}, "MIGRATE SHARD 512-1023 ds2  rate=2000 parallel=4 auto=false "},
		{"next", []string{"441"}, "MIGRATION 441--1   rate=0 parallel=0 auto=false NEXT"},
		{"rollback", []string{"7"}, "MIGRATION 7--1   rate=0 parallel=0 auto=false ROLLBACK"},
		{"rate", []string{"7", "500"}, "MIGRATION 7--1   rate=500 parallel=0 auto=false RATE"},
	} {
		d, err := cliDirective(c.cmd, c.args)
		if err != nil {
			t.Fatalf("%s %v: %v", c.cmd, c.args, err)
		}
		got := fmt.Sprintf("%s %d-%d %s %s rate=%g parallel=%d auto=%v %s", d.Kind, d.Shard, d.LastShard, d.Datasource, d.Database,
			d.MigrationRate(), d.Parallel, d.Auto, d.Verb)
		if got != c.want {
			t.Errorf("%s %v = %q, want %q", c.cmd, c.args, got, c.want)
		}
	}
	for _, c := range []struct {
		cmd  string
		args []string
		want string
	}{
		{"start", []string{"441"}, "wrong arguments"},
		{"next", nil, "wrong arguments"},
		{"frob", []string{"1"}, "expected PAUSE, RESUME"},
		{"start", []string{"441", "ds2", "SPEED", "3"}, `unexpected "SPEED"`},
		{"rate", []string{"1", "fast"}, "RATE takes a whole number"},
	} {
		if _, err := cliDirective(c.cmd, c.args); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %v: %v, want an error saying %q", c.cmd, c.args, err, c.want)
		}
	}
}

func TestJobOptions(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "rate=0 parallel=0 auto=false"},
		{[]string{"RATE", "500", "parallel", "4", "AUTO"}, "rate=500 parallel=4 auto=true"},
		{[]string{"rate", "0"}, "rate=-1 parallel=0 auto=false"},
		{[]string{"DATABASE", "im_9"}, "DATABASE: the new document places each shard"},
		{[]string{"SPEED", "3"}, `unexpected "SPEED"`},
	} {
		rate, parallel, auto, err := jobOptions(c.args)
		got := fmt.Sprintf("rate=%g parallel=%d auto=%v", rate, parallel, auto)
		if err != nil {
			got = err.Error()
		}
		if !strings.Contains(got, c.want) {
			t.Errorf("jobOptions(%q) = %q, want %q", c.args, got, c.want)
		}
	}
}

// statusSeq is a recording fake of Admin.Status: each call answers the
// next step of the job of shard 441 (nil: no job).
type statusSeq struct {
	steps []string
	calls int
}

func (s *statusSeq) status(context.Context) ([]string, [][]string, error) {
	i := min(s.calls, len(s.steps)-1)
	s.calls++
	if s.steps[i] == "" {
		return migrate.StatusColumns, nil, nil
	}
	row := make([]string, len(migrate.StatusColumns))
	for c, name := range migrate.StatusColumns {
		switch name {
		case "shard":
			row[c] = "0441"
		case "step":
			row[c] = s.steps[i]
		case "rows":
			row[c] = fmt.Sprintf("%d/300", 100*i)
		case "rows_per_sec":
			row[c] = "2000"
		case "eta":
			row[c] = "3s"
		case "from", "to":
			row[c] = name + "-side"
		}
	}
	return migrate.StatusColumns, [][]string{row, {"0007"}}, nil
}

func TestWatchMigration(t *testing.T) {
	for _, c := range []struct {
		name  string
		steps []string
		tty   bool
		lines int    // progress lines printed
		last  string // in the final line
	}{
		// start --watch: through the copy to ready, then the hint.
		{"to ready", []string{"queued", "backfill", "backfill", "verify", "ready", "ready"}, false, 5, "migrate next 441"},
		// next --watch: from ready to switched.
		{"to switched", []string{"ready", "ready", "switched"}, false, 3, "migrate rollback 441"},
		{"done", []string{"switched", "done"}, false, 2, "migration done"},
		{"gone", []string{"backfill", ""}, false, 1, "has no migration job"},
		// On a terminal the line is rewritten in place.
		{"tty", []string{"backfill", "ready"}, true, 2, "migrate next 441"},
	} {
		t.Run(c.name, func(t *testing.T) {
			seq := &statusSeq{steps: c.steps}
			var out bytes.Buffer
			if err := watchMigration(context.Background(), seq.status, 441, &out, c.tty, time.Millisecond); err != nil {
				t.Fatal(err)
			}
			text := out.String()
			if n := strings.Count(text, "shard 0441 from-side -> to-side"); n != c.lines {
				t.Errorf("%d progress lines, want %d:\n%s", n, c.lines, text)
			}
			if c.tty != strings.Contains(text, "\r\033[K") {
				t.Errorf("tty %v, output %q", c.tty, text)
			}
			if !c.tty && strings.Count(text, "\n") != c.lines+1 {
				t.Errorf("want one line per refresh and the last:\n%s", text)
			}
			lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
			if !strings.Contains(lines[len(lines)-1], c.last) {
				t.Errorf("last line %q, want it to say %q", lines[len(lines)-1], c.last)
			}
			if strings.Contains(text, "0007") {
				t.Errorf("another shard's job in the output:\n%s", text)
			}
			if !strings.Contains(text, "rows 100/300  2000 rows/s  eta 3s") && c.lines > 1 {
				t.Errorf("no rows, rate and ETA in:\n%s", text)
			}
		})
	}
	// A status error ends the watch with it.
	failing := func(context.Context) ([]string, [][]string, error) { return nil, nil, errors.New("etcd: no leader") }
	if err := watchMigration(context.Background(), failing, 441, io.Discard, false, time.Millisecond); err == nil || !strings.Contains(err.Error(), "no leader") {
		t.Errorf("watch with a failing status: %v", err)
	}
	// status --watch: the table until no job is left.
	seq := &statusSeq{steps: []string{"backfill", "ready", ""}}
	var out bytes.Buffer
	if err := watchStatus(context.Background(), seq.status, &out, false, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out.String(), "job(s)"); n != 3 || !strings.Contains(out.String(), "0 job(s)") {
		t.Errorf("status --watch printed %d tables:\n%s", n, out.String())
	}
}

func TestWatchFlag(t *testing.T) {
	args, w := watchFlag([]string{"441", "--watch", "ds2"})
	if !w || strings.Join(args, " ") != "441 ds2" {
		t.Errorf("watchFlag: %v %v", args, w)
	}
	if args, w := watchFlag([]string{"441"}); w || len(args) != 1 {
		t.Errorf("watchFlag without the flag: %v %v", args, w)
	}
}
