package migrate

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/convoy-im/convoy/binlog"
	"github.com/convoy-im/convoy/router"
)

// The fence's alarm (docs/design.md §5): after a switch, nothing but the reverse
// replication may write the moved shard's rows on the old side; the
// storage fence (fence.go) refuses everything else. A write there anyway
// passed the fence: a session that set the migration's variable, triggers
// dropped by hand, a tool writing with triggers off. It is not lost yet
// (the rollback window's reverse stream does not carry it to the new
// side, and the next rollback or PURGE would erase it, or it would
// resurrect an old row), but someone must look at once. So while a job is
// switched, its runner follows the old side's binlog from the fence marker
// and reports every transaction that wrote a row of the shard without the
// reverse apply's checkpoint row, which each of that apply's transactions
// writes (applier.go).

// breachWatch follows one side's binlog for writes of a fenced shard.
type breachWatch struct {
	shard router.Shard
	// tables are the shard's physical tables on the watched side, by
	// "database.table", with the shard key column.
	tables map[string]string
	// checkpoint is the reverse apply's checkpoint table ("database.table")
	// and own its job name: a transaction writing that row is the apply's.
	checkpoint, own string
}

// newBreachWatch watches moves' source side (the fenced old side) for
// writes of shard not made by the reverse apply of job revJob, whose
// checkpoint table is in database.
func newBreachWatch(shard router.Shard, moves []TableMove, database, revJob string) *breachWatch {
	w := &breachWatch{shard: shard, tables: map[string]string{}, checkpoint: database + "." + CheckpointTable, own: revJob}
	for _, m := range moves {
		w.tables[m.Source.Database+"."+m.Source.Table] = m.Filter.Column
	}
	return w
}

// filter is the binlog reader's table filter.
func (w *breachWatch) filter(schema, table string) bool {
	name := schema + "." + table
	_, ok := w.tables[name]
	return ok || name == w.checkpoint
}

// check returns a description of t's writes of the shard if t is not the
// reverse apply's, "" if it wrote none or is the apply's.
func (w *breachWatch) check(t binlog.Txn) string {
	var found []string
	for _, c := range t.Changes {
		name := c.Schema + "." + c.Table
		if name == w.checkpoint {
			if w.ownCheckpoint(c) {
				return ""
			}
			continue
		}
		col, ok := w.tables[name]
		if !ok {
			continue
		}
		i := slices.Index(c.Columns, col)
		for _, row := range [][]any{c.Before, c.After} {
			if row == nil || i < 0 || row[i] == nil {
				continue
			}
			k, err := router.KeyFromValue(row[i])
			if err != nil || router.ShardOf(k) != w.shard {
				continue
			}
			found = append(found, fmt.Sprintf("%s of %s %s=%v", c.Kind, name, col, row[i]))
			break
		}
	}
	if len(found) == 0 {
		return ""
	}
	if len(found) > 3 {
		found = append(found[:3], fmt.Sprintf("and %d more", len(found)-3))
	}
	return fmt.Sprintf("transaction %s at %s: %s", t.GTID, t.Time.UTC().Format("2006-01-02T15:04:05Z"), strings.Join(found, ", "))
}

// ownCheckpoint reports whether c writes the reverse apply's checkpoint
// row (its job column is the apply's name).
func (w *breachWatch) ownCheckpoint(c binlog.Change) bool {
	i := slices.Index(c.Columns, "job")
	if i < 0 {
		return false
	}
	for _, row := range [][]any{c.After, c.Before} {
		if row == nil {
			continue
		}
		switch v := row[i].(type) {
		case string:
			return v == w.own
		case []byte:
			return string(v) == w.own
		}
	}
	return false
}

// run follows the side's binlog (cfg: its reader, Filter replaced) from
// from until ctx ends, calling report for each breach.
func (w *breachWatch) run(ctx context.Context, cfg binlog.Config, from binlog.Position, report func(string)) error {
	cfg.Filter = w.filter
	return binlog.Stream(ctx, cfg, from, func(t binlog.Txn) error {
		if what := w.check(t); what != "" {
			report(what)
		}
		return nil
	})
}
