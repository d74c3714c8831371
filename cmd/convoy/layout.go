package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/convoy-im/convoy/migrate"
	"github.com/convoy-im/convoy/planner"
	"github.com/convoy-im/convoy/routecfg"
)

// layoutPlan is `convoy migrate plan --to FILE [--rate R] [--parallel P]
// [--each]`:
// the shard moves from the live routes to the document in FILE, their
// sizes and copy time. rate is the configured migration rate (<= 0: the
// default).
func layoutPlan(ctx context.Context, admin *migrate.Admin, args []string, rate float64, w io.Writer) error {
	if rate <= 0 {
		rate = migrate.DefaultRate
	}
	fs := flag.NewFlagSet("migrate plan", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	to := fs.String("to", "", "")
	fs.Float64Var(&rate, "rate", rate, "")
	parallel := fs.Int("parallel", 8, "")
	each := fs.Bool("each", false, "")
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 || *to == "" {
		return fmt.Errorf("migrate plan: wrong arguments\n%s", migrateUsage)
	}
	next, err := routecfg.ReadDocFile(*to)
	if err != nil {
		return err
	}
	c, p, err := admin.PlanLayout(ctx, next, planner.InformationSchemaStats, rate, *parallel)
	if err != nil {
		return err
	}
	writeLayoutChange(w, c)
	if *each {
		return p.WriteEach(w)
	}
	return p.Write(w)
}

func writeLayoutChange(w io.Writer, c *migrate.LayoutChange) {
	for _, ds := range c.NewDatasources {
		fmt.Fprintf(w, "new datasource %s at %s: apply adds it to the live routes\n", ds.Name, ds.Addr)
	}
	for _, n := range c.Notes {
		fmt.Fprintln(w, "note: "+n)
	}
	if len(c.NewDatasources)+len(c.Notes) > 0 {
		fmt.Fprintln(w)
	}
}

// layoutApply is `convoy migrate apply --to FILE [RATE r] [PARALLEL p]
// [AUTO]`: the options are MIGRATE SHARDS's words.
func layoutApply(ctx context.Context, admin *migrate.Admin, args []string, w io.Writer) error {
	fs := flag.NewFlagSet("migrate apply", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	to := fs.String("to", "", "")
	if err := fs.Parse(args); err != nil || *to == "" {
		return fmt.Errorf("migrate apply: wrong arguments\n%s", migrateUsage)
	}
	rate, parallel, auto, err := jobOptions(fs.Args())
	if err != nil {
		return fmt.Errorf("migrate apply: %w", err)
	}
	next, err := routecfg.ReadDocFile(*to)
	if err != nil {
		return err
	}
	res, err := admin.ApplyLayout(ctx, next, rate, parallel, auto)
	if res != nil && res.Change != nil {
		for _, n := range res.Change.Notes {
			fmt.Fprintln(w, "note: "+n)
		}
		for _, ds := range res.Added {
			fmt.Fprintf(w, "added datasource %s at %s to the live routes (version %d)\n", ds.Name, ds.Addr, res.Version)
		}
		if len(res.Started) > 0 {
			fmt.Fprintf(w, "started %d migration jobs: shards %s\n", len(res.Started), migrate.ShardList(res.Started))
		}
		if err != nil {
			return err // refused, or stopped part way: the counts below would mislead
		}
		if len(res.Running) > 0 {
			fmt.Fprintf(w, "skipped %d shards whose job already moves them there: %s\n", len(res.Running), migrate.ShardList(res.Running))
		}
		fmt.Fprintf(w, "skipped %d shards the live routes already place as the new document does\n", res.Placed)
		if len(res.Started)+len(res.Running) > 0 {
			hint := "convoy migrate status shows them; each waits at ready for NEXT"
			if auto {
				hint = "convoy migrate status shows them; they switch on their own (AUTO)"
			}
			fmt.Fprintln(w, hint)
		}
	}
	return err
}

// jobOptions reads the job options RATE r, PARALLEL p and AUTO with
// MIGRATE SHARDS's grammar (cliDirective), so they mean what they mean
// there; DATABASE is the document's to say.
func jobOptions(args []string) (rate float64, parallel int, auto bool, err error) {
	d, err := cliDirective("start", append([]string{"0-1", "layout"}, args...))
	if err != nil {
		return 0, 0, false, err
	}
	if d.Database != "" {
		return 0, 0, false, errors.New("DATABASE: the new document places each shard")
	}
	return d.MigrationRate(), d.Parallel, d.Auto, nil
}
