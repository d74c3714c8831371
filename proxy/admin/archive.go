package admin

import (
	"context"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/convoy-im/convoy/proxy/directive"
	"github.com/convoy-im/convoy/proxy/sqlerr"
	"github.com/convoy-im/convoy/router"
)

// ArchiveAdmin is what the archive directives need: like the migration
// directives they only read the archiver's records and write requests (the
// runners, in whichever Convoy processes win each shard's election, act on
// them), so every proxy answers them alike. archive.Admin satisfies it.
type ArchiveAdmin interface {
	// Status returns SHOW ARCHIVE: column names and one row per shard.
	Status(ctx context.Context) ([]string, [][]string, error)
	// Command records NOW (for shard), PAUSE or RESUME (every shard).
	Command(ctx context.Context, shard int, verb string) error
}

func (a *Admin) archive(d *directive.Directive) (*mysql.Result, error) {
	arc := a.c.Archive
	if arc == nil {
		return nil, sqlerr.Errorf(sqlerr.NotSupported, "%s is not available in this process (cold.enabled is off, or no etcd)", d.Kind)
	}
	ctx, cancel := context.WithTimeout(context.Background(), migrationTimeout)
	defer cancel()
	if d.Kind == directive.ShowArchive {
		cols, rows, err := arc.Status(ctx)
		if err != nil {
			return nil, migrationErr(d, err)
		}
		return textTable(cols, rows)
	}
	if err := arc.Command(ctx, d.Shard, d.Verb); err != nil {
		return nil, migrationErr(d, err)
	}
	if d.Verb == "NOW" {
		return table([]string{"shard", "command"}, [][]any{{router.Shard(d.Shard).String(), d.Verb}})
	}
	return table([]string{"command"}, [][]any{{d.Verb}})
}
