package engine

import (
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/convoy-im/convoy/proxy/sqlerr"
	"github.com/convoy-im/convoy/router"
)

// columnCache holds the column order of the sharded logical tables, learnt
// from the backends' own definitions: a positional INSERT (`INSERT INTO
// conv_msg VALUES (...)`, what ORMs and loaders send) needs it to find the
// shard key and to name the columns for the shards. It is read on first
// need, for the route version in force, dropped by every DDL Convoy fans
// out, and re-read after columnsTTL, which bounds how long a DDL sent to
// the backends around Convoy goes unseen.
type columnCache struct {
	mu      sync.Mutex
	version int64
	read    time.Time
	cols    map[string][]string // logical table -> column names in order
}

const columnsTTL = 30 * time.Second

func (c *columnCache) reset() {
	c.mu.Lock()
	c.cols = nil
	c.mu.Unlock()
}

// logicalColumns returns the columns of a sharded logical table in order,
// after checking that every physical table has the same ones: a table
// whose columns differ (a DDL fan-out that failed half way) would store
// the values of a positional INSERT in other columns than the client
// meant, so such an INSERT is refused until the schema agrees.
func (e *Engine) logicalColumns(table string) ([]string, error) {
	snap := e.routes.Current()
	c := &e.columns
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.version != snap.Version() || time.Since(c.read) > columnsTTL {
		c.cols, c.version, c.read = nil, snap.Version(), time.Now()
	}
	if cols, ok := c.cols[table]; ok {
		return cols, nil
	}
	cols, err := e.readColumns(snap, table)
	if err != nil {
		return nil, err
	}
	if c.cols == nil {
		c.cols = map[string][]string{}
	}
	c.cols[table] = cols
	return cols, nil
}

// readColumns asks each datasource once for the columns of all its
// physical tables of table.
func (e *Engine) readColumns(snap *router.Snapshot, table string) ([]string, error) {
	type phys struct{ db, table string }
	want := map[string]map[phys]bool{} // datasource -> its physical tables
	for _, g := range snap.AllPhysical(table) {
		if want[g.Datasource] == nil {
			want[g.Datasource] = map[phys]bool{}
		}
		want[g.Datasource][phys{g.Database, g.Table}] = true
	}
	dss := make([]string, 0, len(want))
	for ds := range want {
		dss = append(dss, ds)
	}
	sort.Strings(dss)
	var ref []string
	var refName string
	for _, ds := range dss {
		var dbs, tables []string
		for p := range want[ds] {
			if !slices.Contains(dbs, p.db) {
				dbs = append(dbs, p.db)
			}
			if !slices.Contains(tables, p.table) {
				tables = append(tables, p.table)
			}
		}
		_, rows, err := e.queryRows(ds, "SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA IN "+
			inList(dbs)+" AND TABLE_NAME IN "+inList(tables)+" ORDER BY TABLE_SCHEMA, TABLE_NAME, ORDINAL_POSITION")
		if err != nil {
			return nil, err
		}
		found := map[phys][]string{}
		var order []phys
		for _, r := range rows {
			if len(r) < 3 {
				return nil, sqlerr.Errorf(sqlerr.Internal, "datasource %s answered the column query with %d columns, want 3", ds, len(r))
			}
			p := phys{string(r[0]), string(r[1])}
			if !want[ds][p] {
				continue // another database's table of that name
			}
			if found[p] == nil {
				order = append(order, p)
			}
			found[p] = append(found[p], string(r[2]))
		}
		for _, p := range order {
			name := ds + ":" + p.db + "." + p.table
			if ref == nil {
				ref, refName = found[p], name
				continue
			}
			if !slices.Equal(ref, found[p]) {
				return nil, sqlerr.Errorf(sqlerr.NotSupported,
					"the physical tables of %s do not have the same columns (%s: %s; %s: %s): an INSERT without a column list cannot be sent until they agree; name the columns, or repeat the ALTER TABLE through Convoy",
					table, refName, strings.Join(ref, ", "), name, strings.Join(found[p], ", "))
			}
		}
	}
	if ref == nil {
		return nil, &mysql.MyError{Code: mysql.ER_NO_SUCH_TABLE, State: "42S02", Message: "Table '" + table + "' doesn't exist"}
	}
	return ref, nil
}
