package main

import (
	"fmt"
	"strings"
	"testing"
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
