package admin

import (
	"context"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/convoy-im/convoy/proxy/directive"
	"github.com/convoy-im/convoy/proxy/sqlerr"
)

// OutboxAdmin answers the outbox directives (the engine's outbox and the
// delivery workers' elections, wired by cmd/convoy).
type OutboxAdmin interface {
	// Status: one row per datasource (pending and dead entries, the
	// oldest pending one's age, the elected worker); Dead: the dead
	// letters. Column names and rows (nil: NULL).
	Status(ctx context.Context) ([]string, [][]any, error)
	Dead(ctx context.Context) ([]string, [][]any, error)
	// Retry makes the dead letter id pending again (tries reset); Discard
	// deletes it. Either fails when id names no dead letter.
	Retry(ctx context.Context, id string) error
	Discard(ctx context.Context, id string) error
}

// outbox answers SHOW OUTBOX [DEAD] and OUTBOX RETRY | DISCARD 'id'.
func (a *Admin) outbox(d *directive.Directive) (*mysql.Result, error) {
	if a.c.Outbox == nil {
		return nil, sqlerr.Errorf(sqlerr.NotSupported, "%s: the outbox is not available in this process", d.Kind)
	}
	ctx, cancel := context.WithTimeout(context.Background(), migrationTimeout)
	defer cancel()
	var cols []string
	var rows [][]any
	var err error
	switch {
	case d.Kind == directive.ShowOutbox && d.Verb == "DEAD":
		cols, rows, err = a.c.Outbox.Dead(ctx)
	case d.Kind == directive.ShowOutbox:
		cols, rows, err = a.c.Outbox.Status(ctx)
	case d.Verb == "RETRY":
		err = a.c.Outbox.Retry(ctx, d.Entry)
	default:
		err = a.c.Outbox.Discard(ctx, d.Entry)
	}
	if err != nil {
		if _, ok := err.(*sqlerr.Error); ok {
			return nil, err
		}
		return nil, sqlerr.Errorf(sqlerr.BackendUnavailable, "%s: %v", d.Kind, err)
	}
	if d.Kind == directive.OutboxCommand {
		return &mysql.Result{AffectedRows: 1}, nil
	}
	return table(cols, rows)
}
