package admin

import (
	"context"
	"errors"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/convoy-im/convoy/proxy/directive"
	"github.com/convoy-im/convoy/proxy/sqlerr"
	"github.com/convoy-im/convoy/router"
)

// MigrationAdmin is what the migration directives need: they only write
// job records and commands (the runners, in whichever Convoy process won
// each job's election, act on them), so every proxy answers them alike.
// migrate.Admin satisfies it.
type MigrationAdmin interface {
	// Start creates one job per shard of from..to (rate: rows/s, 0 the
	// default, < 0 unlimited; parallel: 0 all at once) and returns the
	// shards it created jobs for.
	Start(ctx context.Context, from, to int, datasource, database string, rate float64, parallel int, auto bool) ([]int, error)
	// Command records PAUSE, RESUME, NEXT, ROLLBACK, CANCEL, RATE (value:
	// rows/s) or READ (value: the percentage of conversations read from the
	// new side).
	Command(ctx context.Context, shard int, verb string, value float64) error
	// Status returns SHOW MIGRATIONS: column names and one row per job.
	Status(ctx context.Context) ([]string, [][]string, error)
	// Detail returns SHOW MIGRATION n: one job's fields, one row each.
	Detail(ctx context.Context, shard int) ([]string, [][]string, error)
}

// invalidInput is how a MigrationAdmin marks an error as the client's
// (unknown datasource, a job exists, a command the job's step refuses).
type invalidInput interface{ InvalidInput() bool }

// migrationTimeout bounds a migration directive: a few etcd reads and
// writes.
const migrationTimeout = 10 * time.Second

func (a *Admin) migration(d *directive.Directive) (*mysql.Result, error) {
	m := a.c.Migrations
	if m == nil {
		return nil, sqlerr.Errorf(sqlerr.NotSupported, "%s is not available in this process (no etcd)", d.Kind)
	}
	ctx, cancel := context.WithTimeout(context.Background(), migrationTimeout)
	defer cancel()
	switch d.Kind {
	case directive.ShowMigrations:
		cols, rows, err := m.Status(ctx)
		if err != nil {
			return nil, migrationErr(d, err)
		}
		return textTable(cols, rows)
	case directive.ShowMigration:
		cols, rows, err := m.Detail(ctx, d.Shard)
		if err != nil {
			return nil, migrationErr(d, err)
		}
		return textTable(cols, rows)
	case directive.MigrateShard:
		shards, err := m.Start(ctx, d.Shard, d.LastShard, d.Datasource, d.Database, d.MigrationRate(), d.Parallel, d.Auto)
		if err != nil {
			return nil, migrationErr(d, err)
		}
		rows := make([][]any, len(shards))
		for i, sh := range shards {
			rows[i] = []any{router.Shard(sh).String(), "created"}
		}
		return table([]string{"shard", "job"}, rows)
	case directive.MigrationCommand:
		value := d.MigrationRate()
		if d.Verb == "READ" {
			value = float64(d.Percent)
		}
		if err := m.Command(ctx, d.Shard, d.Verb, value); err != nil {
			return nil, migrationErr(d, err)
		}
		return table([]string{"shard", "command"}, [][]any{{router.Shard(d.Shard).String(), d.Verb}})
	}
	return nil, sqlerr.Errorf(sqlerr.Internal, "[BUG] %s is not a migration directive", d.Kind)
}

func migrationErr(d *directive.Directive, err error) error {
	var in invalidInput
	if errors.As(err, &in) && in.InvalidInput() {
		return sqlerr.Errorf(sqlerr.WrongArguments, "%s: %v", d.Kind, err)
	}
	return sqlerr.Errorf(sqlerr.BackendUnavailable, "%s: %v", d.Kind, err)
}
