package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/convoy-im/convoy/migrate"
	"github.com/convoy-im/convoy/routecfg"
	"github.com/convoy-im/convoy/router"
)

// layoutPlan is `convoy migrate plan --to FILE [--rate R] [--parallel P]`:
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
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 || *to == "" {
		return fmt.Errorf("migrate plan: wrong arguments\n%s", migrateUsage)
	}
	next, err := routecfg.ReadDocFile(*to)
	if err != nil {
		return err
	}
	c, p, err := admin.PlanLayout(ctx, next, migrate.InformationSchemaStats, rate, *parallel)
	if err != nil {
		return err
	}
	writeLayoutChange(w, c)
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
		return fmt.Errorf("migrate apply: %w\n%s", err, migrateUsage)
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
		if len(res.Running) > 0 {
			fmt.Fprintf(w, "skipped %d shards whose job already moves them there: %s\n", len(res.Running), migrate.ShardList(res.Running))
		}
		fmt.Fprintf(w, "skipped %d shards the live routes already place as the new document does\n", res.Placed)
		if err == nil && len(res.Started)+len(res.Running) > 0 {
			hint := "convoy migrate status shows them; each waits at ready for NEXT"
			if auto {
				hint = "convoy migrate status shows them; they switch on their own (AUTO)"
			}
			fmt.Fprintln(w, hint)
		}
	}
	return err
}

// jobOptions reads MIGRATE SHARDS's job options, RATE r (0: unlimited),
// PARALLEL p and AUTO, with the meaning the directive gives them (rate 0
// when absent: the configured rate; < 0 unlimited).
func jobOptions(args []string) (rate float64, parallel int, auto bool, err error) {
	seen := map[string]bool{}
	for i := 0; i < len(args); i++ {
		word := strings.ToUpper(args[i])
		if seen[word] {
			return 0, 0, false, fmt.Errorf("%s given twice", word)
		}
		seen[word] = true
		switch word {
		case "AUTO":
			auto = true
			continue
		case "RATE", "PARALLEL":
		default:
			return 0, 0, false, fmt.Errorf("unknown option %q (RATE r, PARALLEL p, AUTO)", args[i])
		}
		if i+1 == len(args) {
			return 0, 0, false, fmt.Errorf("%s needs a number", word)
		}
		i++
		n, perr := strconv.Atoi(args[i])
		switch {
		case word == "RATE" && (perr != nil || n < 0 || n > 1e9):
			return 0, 0, false, fmt.Errorf("RATE %q: want rows per second 0..1000000000 (0: unlimited)", args[i])
		case word == "RATE" && n == 0:
			rate = -1
		case word == "RATE":
			rate = float64(n)
		case perr != nil || n < 1 || n > router.NumShards:
			return 0, 0, false, fmt.Errorf("PARALLEL %q: want 1..%d shards copying at once", args[i], router.NumShards)
		default:
			parallel = n
		}
	}
	return rate, parallel, auto, nil
}
