package engine

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/pingcap/tidb/pkg/parser/ast"

	"github.com/convoy-im/convoy/internal/sqlq"
	"github.com/convoy-im/convoy/outbox"
	"github.com/convoy-im/convoy/proxy/mysqlrow"
	"github.com/convoy-im/convoy/proxy/planbuilder"
	"github.com/convoy-im/convoy/proxy/sqlerr"
	"github.com/convoy-im/convoy/rewrite"
	"github.com/convoy-im/convoy/router"
)

// Introspection: clients see logical databases holding the logical tables,
// never the physical shard databases and tables behind them. GUI tools,
// ORMs (GORM's HasTable, SQLAlchemy's has_table and reflection) and
// migration tools ask through SHOW and information_schema; a wrong answer
// there makes AutoMigrate / create_all send CREATE TABLE for a table that
// exists (1050 on every physical table).
//
// The logical databases are the default datasource's databases except the
// physical shard databases and the system schemas below; the sharded tables
// are routed whatever the current database is, so each appears in every
// logical database, described by a representative physical table: the first
// shard's on the default datasource (then information_schema queries read
// it live, on the server they run on), else shard 0's (its rows are read
// there and sent to the default datasource as literals). Every physical
// table of a logical table has the same schema: DDL fans out to all.

// systemSchemas are the backend's own databases, hidden like the shard
// databases. information_schema stays visible, as on MariaDB.
var systemSchemas = []string{"mysql", "performance_schema", "sys"}

// sizesTTL bounds how stale the summed sizes of SHOW TABLE STATUS /
// information_schema.TABLES may be: reading them opens every physical table
// (one information_schema query per datasource), and they are estimates on
// InnoDB anyway.
const sizesTTL = 10 * time.Second

// introState caches what introspection learns from the backends.
type introState struct {
	mu sync.Mutex
	// cols: the columns of each known information_schema table, by
	// datasource address (the server's version decides them).
	cols map[string]map[string][]string
	// sizes of the logical tables, summed over their physical tables, for
	// route version sizesVersion, read at sizesAt; reset by DDL.
	sizes        map[string]rewrite.TableSizes
	sizesVersion int64
	sizesAt      time.Time
}

// schemaChanged drops what DDL fanned out through Convoy may have changed.
func (e *Engine) schemaChanged() {
	e.intro.mu.Lock()
	e.intro.sizes = nil
	e.intro.mu.Unlock()
	e.columns.reset()
}

// repShard is the shard whose physical tables describe the logical ones.
func repShard(snap *router.Snapshot) router.Shard {
	def := snap.DefaultDatasource()
	for sh := 0; sh < router.NumShards; sh++ {
		if snap.Target(router.Shard(sh)).Datasource == def {
			return router.Shard(sh)
		}
	}
	return 0
}

// logicalSchema describes the schema clients see; repDS is the datasource
// of the representative tables.
func logicalSchema(snap *router.Snapshot) (ls *rewrite.LogicalSchema, repDS string) {
	rep := repShard(snap)
	t := snap.Target(rep)
	ls = &rewrite.LogicalSchema{Hidden: hiddenDatabases(snap), RepDB: t.Database}
	for _, l := range router.ShardedTables() {
		ls.Tables = append(ls.Tables, rewrite.RepTable{Logical: l, Physical: router.PhysicalTableName(l, t.Table)})
	}
	return ls, t.Datasource
}

// hiddenDatabases are the physical shard databases (of every datasource: a
// database of that name on the default one is no logical database either),
// the system schemas and Convoy's own (the outbox's).
func hiddenDatabases(snap *router.Snapshot) []string {
	var out []string
	for _, d := range snap.Databases() {
		if !slices.Contains(out, d[1]) {
			out = append(out, d[1])
		}
	}
	return append(append(out, systemSchemas...), outbox.Database)
}

// introspect answers the statements that list the schema: SHOW DATABASES,
// SHOW [FULL] TABLES, SHOW TABLE STATUS and SELECTs reading the
// information_schema tables that name databases and tables. ok=false: pl is
// none of these.
func (s *Session) introspect(pl *plan, args []any, binary bool) (r *mysql.Result, ok bool, err error) {
	a := pl.A
	if len(a.Sharded) > 0 {
		return nil, false, nil
	}
	switch a.Kind {
	case rewrite.KindSelect:
		if !planbuilder.ReadsInfoSchema(a, s.db) {
			return nil, false, nil // the common case, without a walk of the AST
		}
		names := rewrite.InfoSchemaRefs(a, s.db)
		if len(names) == 0 {
			return nil, false, nil
		}
		r, err = s.infoSchemaSelect(pl, names, args, binary)
	case rewrite.KindShow:
		st, _ := a.Stmt.(*ast.ShowStmt)
		if st == nil {
			return nil, false, nil
		}
		switch st.Tp {
		case ast.ShowDatabases:
			r, err = s.showDatabases(pl, args, binary)
		case ast.ShowTables, ast.ShowTableStatus:
			r, err = s.showTables(pl, st, args, binary)
		default:
			return nil, false, nil
		}
	default:
		return nil, false, nil
	}
	s.e.metrics.countStatement("unsharded")
	return r, true, err
}

// onDefault runs fn on a connection of the default datasource in the
// session's current database, outside any transaction of the session:
// metadata reads are not transactional on MariaDB either.
func (s *Session) onDefault(fn func(c Conn) (*mysql.Result, error)) (*mysql.Result, error) {
	c, err := s.acquire(s.e.routes.Current().DefaultDatasource())
	if err != nil {
		return nil, err
	}
	defer c.Release()
	if err := c.UseDB(s.db); err != nil {
		return nil, err
	}
	return fn(c)
}

// execAs sends sql (the client's statement, or Convoy's rewrite of it) as
// the client sent it: prepared with args, or as text.
func execAs(c Conn, sql string, args []any, binary bool) (*mysql.Result, error) {
	if binary {
		return c.ExecPrepared(sql, args)
	}
	return c.Exec(sql)
}

// infoSchemaSelect runs a SELECT on information_schema with each known
// table replaced by its logical view (rewrite.InfoSchemaView).
func (s *Session) infoSchemaSelect(pl *plan, names []string, args []any, binary bool) (*mysql.Result, error) {
	snap := s.e.routes.Current()
	ls, repDS := logicalSchema(snap)
	tmpl, err := rewrite.NewInfoSchemaTemplate(pl.A, s.db)
	if err != nil {
		return nil, err
	}
	if slices.Contains(names, "TABLES") && rewrite.ReadsAnyColumn(pl.A.Stmt, rewrite.SizeColumns) {
		if ls.Sizes, err = s.e.tableSizes(snap); err != nil {
			return nil, err
		}
	}
	def := snap.DefaultDatasource()
	return s.onDefault(func(c Conn) (*mysql.Result, error) {
		views := make(map[string]string, len(names))
		for _, n := range names {
			cols, err := s.e.infoColumns(c, snap, n)
			if err != nil {
				return nil, err
			}
			var rep [][]string
			if repDS != def {
				if rep, err = s.e.repRows(repDS, n, cols, ls); err != nil {
					return nil, err
				}
			}
			views[n] = rewrite.InfoSchemaView(n, cols, ls, rep)
		}
		sql := string(tmpl.FillViews(nil, func(n string) string { return views[n] }))
		return execAs(c, sql, tmpl.Bind(args), binary)
	})
}

// infoColumns returns the columns of information_schema table name on the
// server of c, learnt once per server.
func (e *Engine) infoColumns(c Conn, snap *router.Snapshot, name string) ([]string, error) {
	ds, _ := snap.Datasource(c.Datasource())
	e.intro.mu.Lock()
	cols, ok := e.intro.cols[ds.Addr]
	e.intro.mu.Unlock()
	if !ok {
		r, err := c.Exec("SELECT `TABLE_NAME`,`COLUMN_NAME` FROM `information_schema`.`COLUMNS` WHERE `TABLE_SCHEMA`='information_schema' AND `TABLE_NAME` IN " +
			inList(rewrite.InfoSchemaTables()) + " ORDER BY `TABLE_NAME`,`ORDINAL_POSITION`")
		if err != nil {
			return nil, err
		}
		rows, err := mysqlrow.TextRows(r)
		if err != nil {
			return nil, err
		}
		cols = map[string][]string{}
		for _, row := range rows {
			t := string(row[0])
			cols[t] = append(cols[t], string(row[1]))
		}
		e.intro.mu.Lock()
		if e.intro.cols == nil {
			e.intro.cols = map[string]map[string][]string{}
		}
		e.intro.cols[ds.Addr] = cols
		e.intro.mu.Unlock()
	}
	if len(cols[name]) == 0 {
		return nil, sqlerr.Errorf(sqlerr.Internal, "the backend's information_schema has no table %s", name)
	}
	return cols[name], nil
}

// repRows reads the rows of the representative tables in information_schema
// table name on their own datasource, as SQL expressions for InfoSchemaView.
func (e *Engine) repRows(ds, name string, cols []string, ls *rewrite.LogicalSchema) ([][]string, error) {
	marker := "cvy-schema-" + strconv.FormatUint(rand.Uint64(), 36)
	q := rewrite.InfoSchemaRepQuery(name, cols, ls, marker)
	if q == "" {
		return nil, nil
	}
	fields, rows, err := e.queryRows(ds, q)
	if err != nil {
		return nil, err
	}
	out := make([][]string, len(rows))
	for i, row := range rows {
		out[i] = make([]string, len(row))
		for j, v := range row {
			if v != nil && string(v) == marker {
				out[i][j] = rewrite.RepSchema
				continue
			}
			out[i][j] = rewrite.RepLiteral(v, v == nil, literalKind(fields[j]))
		}
	}
	return out, nil
}

func literalKind(f *mysql.Field) rewrite.LiteralKind {
	switch f.Type {
	case mysql.MYSQL_TYPE_TINY, mysql.MYSQL_TYPE_SHORT, mysql.MYSQL_TYPE_INT24, mysql.MYSQL_TYPE_LONG, mysql.MYSQL_TYPE_LONGLONG, mysql.MYSQL_TYPE_YEAR:
		if f.Flag&mysql.UNSIGNED_FLAG != 0 {
			return rewrite.LiteralUnsigned
		}
		return rewrite.LiteralSigned
	case mysql.MYSQL_TYPE_DECIMAL, mysql.MYSQL_TYPE_NEWDECIMAL, mysql.MYSQL_TYPE_FLOAT, mysql.MYSQL_TYPE_DOUBLE:
		return rewrite.LiteralDecimal
	case mysql.MYSQL_TYPE_DATETIME, mysql.MYSQL_TYPE_TIMESTAMP, mysql.MYSQL_TYPE_DATE:
		return rewrite.LiteralDatetime
	}
	return rewrite.LiteralString
}

// tableSizes sums the sizes of every logical table over its physical
// tables: one information_schema query per datasource, cached (sizesTTL).
func (e *Engine) tableSizes(snap *router.Snapshot) (map[string]rewrite.TableSizes, error) {
	e.intro.mu.Lock()
	defer e.intro.mu.Unlock() // one reader at a time: the others wait for its answer
	if e.intro.sizes != nil && e.intro.sizesVersion == snap.Version() && time.Since(e.intro.sizesAt) < sizesTTL {
		return e.intro.sizes, nil
	}
	type phys struct{ db, table string }
	logical := map[phys]string{}
	dbs := map[string][]string{} // datasource -> its physical databases
	for _, l := range router.ShardedTables() {
		for _, g := range snap.AllPhysical(l) {
			logical[phys{g.Database, g.Table}] = l
			if !slices.Contains(dbs[g.Datasource], g.Database) {
				dbs[g.Datasource] = append(dbs[g.Datasource], g.Database)
			}
		}
	}
	var names []string
	for ds := range dbs {
		names = append(names, ds)
	}
	slices.Sort(names)
	results := make([][][][]byte, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, ds := range names {
		// One branch per database: MariaDB then lists only that database's
		// tables (an IN list would make it walk every database).
		parts := make([]string, len(dbs[ds]))
		for j, db := range dbs[ds] {
			parts[j] = "SELECT `TABLE_SCHEMA`,`TABLE_NAME`,`TABLE_ROWS`,`DATA_LENGTH`,`INDEX_LENGTH`,`DATA_FREE` FROM `information_schema`.`TABLES` WHERE `TABLE_SCHEMA`=" + rewrite.QuoteString(db)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, results[i], errs[i] = e.queryRows(ds, strings.Join(parts, " UNION ALL "))
		}()
	}
	wg.Wait()
	sizes := map[string]rewrite.TableSizes{}
	for i, rows := range results {
		if errs[i] != nil {
			return nil, errs[i]
		}
		for _, row := range rows {
			l, ok := logical[phys{string(row[0]), string(row[1])}]
			if !ok {
				continue
			}
			z := sizes[l]
			z.Rows += atou(row[2])
			z.DataLength += atou(row[3])
			z.IndexLength += atou(row[4])
			z.DataFree += atou(row[5])
			sizes[l] = z
		}
	}
	e.intro.sizes, e.intro.sizesVersion, e.intro.sizesAt = sizes, snap.Version(), time.Now()
	return sizes, nil
}

func atou(b []byte) uint64 {
	n, _ := strconv.ParseUint(string(b), 10, 64) // NULL and junk count as 0
	return n
}

func inList(vals []string) string {
	q := make([]string, len(vals))
	for i, v := range vals {
		q[i] = rewrite.QuoteString(v)
	}
	return "(" + strings.Join(q, ",") + ")"
}

// showDatabases answers SHOW DATABASES without the hidden databases.
func (s *Session) showDatabases(pl *plan, args []any, binary bool) (*mysql.Result, error) {
	r, err := s.onDefault(func(c Conn) (*mysql.Result, error) { return execAs(c, pl.SQL, args, binary) })
	if err != nil || r == nil || r.Resultset == nil || len(r.Fields) == 0 {
		return r, err
	}
	hidden := hiddenDatabases(s.e.routes.Current())
	kept := r.RowDatas[:0]
	for _, row := range r.RowDatas {
		name, err := firstValue(row, r.Fields, binary)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(hidden, name) {
			kept = append(kept, row)
		}
	}
	r.RowDatas, r.Values = kept, nil
	return r, nil
}

func firstValue(row mysql.RowData, fields []*mysql.Field, binary bool) (string, error) {
	vals, err := row.Parse(fields, binary, nil)
	if err != nil {
		return "", err
	}
	return string(vals[0].AsString()), nil
}

// showTables answers SHOW [FULL] TABLES and SHOW TABLE STATUS of a logical
// database: the backend's answer for the database's own tables, plus a row
// for each logical table that exists (its representative does), filtered by
// the statement's LIKE / WHERE (evaluated by the backend), in name order.
func (s *Session) showTables(pl *plan, st *ast.ShowStmt, args []any, binary bool) (*mysql.Result, error) {
	snap := s.e.routes.Current()
	db := st.DBName
	if db == "" {
		db = s.db
	}
	ls, repDS := logicalSchema(snap)
	return s.onDefault(func(c Conn) (*mysql.Result, error) {
		r, err := execAs(c, pl.SQL, args, binary)
		if err != nil || r == nil || r.Resultset == nil || len(r.Fields) == 0 ||
			db == "" || slices.Contains(ls.Hidden, db) || strings.EqualFold(db, "information_schema") {
			return r, err
		}
		var extra [][][]byte
		if st.Tp == ast.ShowTableStatus {
			extra, err = s.logicalStatus(snap, ls, repDS, r.Fields)
		} else {
			extra, err = s.e.logicalTables(ls, repDS, len(r.Fields))
		}
		if err != nil {
			return nil, err
		}
		if extra, err = s.filterRows(c, st, r.Fields, extra, args); err != nil {
			return nil, err
		}
		return mergeTables(r, extra, ls, binary)
	})
}

// logicalTables lists the logical tables whose representative exists, as
// SHOW [FULL] TABLES rows (name, and 'BASE TABLE' for FULL).
func (e *Engine) logicalTables(ls *rewrite.LogicalSchema, repDS string, ncols int) ([][][]byte, error) {
	_, rows, err := e.queryRows(repDS, "SELECT `TABLE_NAME` FROM `information_schema`.`TABLES` WHERE `TABLE_SCHEMA`="+
		rewrite.QuoteString(ls.RepDB)+" AND `TABLE_NAME` IN "+repTables(ls))
	if err != nil {
		return nil, err
	}
	var out [][][]byte
	for _, t := range ls.Tables {
		for _, row := range rows {
			if string(row[0]) == t.Physical {
				row := [][]byte{[]byte(t.Logical), []byte("BASE TABLE")}
				out = append(out, row[:min(ncols, 2)])
			}
		}
	}
	return out, nil
}

// statusSizes are the SHOW TABLE STATUS columns summed over physical tables.
var statusSizes = map[string]string{"Rows": "TABLE_ROWS", "Avg_row_length": "AVG_ROW_LENGTH", "Data_length": "DATA_LENGTH", "Index_length": "INDEX_LENGTH", "Data_free": "DATA_FREE"}

// logicalStatus reads SHOW TABLE STATUS of the representative tables and
// renames them, with their sizes summed over every physical table, in the
// columns of fields.
func (s *Session) logicalStatus(snap *router.Snapshot, ls *rewrite.LogicalSchema, repDS string, fields []*mysql.Field) ([][][]byte, error) {
	sizes, err := s.e.tableSizes(snap)
	if err != nil {
		return nil, err
	}
	repFields, rows, err := s.e.queryRows(repDS, "SHOW TABLE STATUS FROM "+sqlq.Ident(ls.RepDB)+" WHERE `Name` IN "+repTables(ls))
	if err != nil {
		return nil, err
	}
	col := map[string]int{}
	for i, f := range repFields {
		col[string(f.Name)] = i
	}
	var out [][][]byte
	for _, t := range ls.Tables {
		for _, row := range rows {
			if string(row[0]) != t.Physical {
				continue
			}
			z := sizes[t.Logical]
			o := make([][]byte, len(fields))
			for i, f := range fields {
				j, ok := col[string(f.Name)]
				switch {
				case i == 0:
					o[i] = []byte(t.Logical)
				case statusSizes[string(f.Name)] != "":
					o[i] = []byte(strconv.FormatUint(z.Column(statusSizes[string(f.Name)]), 10))
				case ok:
					o[i] = row[j]
				}
			}
			out = append(out, o)
		}
	}
	return out, nil
}

// filterRows keeps the rows the SHOW's LIKE / WHERE accepts, asking the
// backend (c) to evaluate the condition over them.
func (s *Session) filterRows(c Conn, st *ast.ShowStmt, fields []*mysql.Field, rows [][][]byte, args []any) ([][][]byte, error) {
	if len(rows) == 0 {
		return rows, nil
	}
	cond, err := rewrite.ShowCondition(st, string(fields[0].Name))
	if err != nil || cond == "" {
		return rows, err
	}
	cols := make([]string, len(fields))
	for i, f := range fields {
		cols[i] = string(f.Name)
	}
	lits := make([][]string, len(rows))
	for i, row := range rows {
		lits[i] = make([]string, len(row))
		for j, v := range row {
			lits[i][j] = rewrite.RepLiteral(v, v == nil, literalKind(fields[j]))
		}
	}
	q := rewrite.RowsQuery(cols, lits, cond)
	prepared := len(args) > 0 // a WHERE with placeholders
	var r *mysql.Result
	if prepared {
		r, err = c.ExecPrepared(q, args)
	} else {
		r, err = c.Exec(q)
	}
	if err != nil {
		return nil, err
	}
	var out [][][]byte
	for _, row := range r.RowDatas {
		vals, err := row.Parse(r.Fields, prepared, nil)
		if err != nil {
			return nil, err
		}
		if i := vals[0].AsInt64(); i >= 0 && i < int64(len(rows)) {
			out = append(out, rows[i])
		}
	}
	return out, nil
}

// mergeTables adds the logical rows to a SHOW TABLES / TABLE STATUS answer
// in name order (MariaDB sorts names byte for byte), dropping any table of
// the database that has a logical table's name (Convoy routes that name to
// the shards, so the plain table is unreachable).
func mergeTables(r *mysql.Result, extra [][][]byte, ls *rewrite.LogicalSchema, binary bool) (*mysql.Result, error) {
	type named struct {
		name string
		row  mysql.RowData
	}
	var rows []named
	for _, row := range r.RowDatas {
		name, err := firstValue(row, r.Fields, binary)
		if err != nil {
			return nil, err
		}
		if !slices.ContainsFunc(ls.Tables, func(t rewrite.RepTable) bool { return t.Logical == name }) {
			rows = append(rows, named{name, row})
		}
	}
	added := &mysql.Resultset{Fields: r.Fields}
	for _, e := range extra {
		added.RowDatas = append(added.RowDatas, mysqlrow.TextRow(e))
	}
	if binary && !mysqlrow.TextToBinary(added) {
		return nil, sqlerr.Errorf(sqlerr.Internal, "[BUG] a SHOW TABLES row has no binary form")
	}
	for i, e := range extra {
		rows = append(rows, named{string(e[0]), added.RowDatas[i]})
	}
	slices.SortStableFunc(rows, func(a, b named) int { return strings.Compare(a.name, b.name) })
	r.RowDatas, r.Values = r.RowDatas[:0], nil
	for _, n := range rows {
		r.RowDatas = append(r.RowDatas, n.row)
	}
	return r, nil
}

// showSharded answers SHOW COLUMNS / DESCRIBE, SHOW CREATE TABLE and SHOW
// INDEX of a logical table from its representative physical table, with
// every physical name in the answer (and in an error) renamed.
func (s *Session) showSharded(pl *plan, args []any, binary bool) (*mysql.Result, error) {
	st, _ := pl.A.Stmt.(*ast.ShowStmt)
	if ex, ok := pl.A.Stmt.(*ast.ExplainStmt); ok {
		st, _ = ex.Stmt.(*ast.ShowStmt)
	}
	if st == nil || st.Table == nil {
		return nil, sqlerr.Errorf(sqlerr.NotSupported, "this SHOW statement is not supported on the sharded table %s", pl.A.Sharded[0])
	}
	logical := pl.A.Sharded[0]
	db := s.db
	switch {
	case st.Table.Schema.O != "":
		db = st.Table.Schema.O
	case st.DBName != "":
		db = st.DBName
	}
	tmpl := pl.Tmpl
	if st.DBName != "" {
		// SHOW COLUMNS FROM t FROM db: the physical name carries the
		// database; a second one would override it.
		saved := st.DBName
		st.DBName = ""
		t, err := rewrite.NewTemplate(pl.A)
		st.DBName = saved
		if err != nil {
			return nil, err
		}
		tmpl = t
	}
	snap := s.e.routes.Current()
	sh := repShard(snap)
	phys := snap.Physical(logical, sh)
	var sql string
	if len(args) > 0 {
		// Printed inline: the answer is rewritten as text rows.
		b, ok := tmpl.RenderInline(s.buf[:0], func(l string) (string, string) {
			p := snap.Physical(l, sh)
			return p.Database, p.Table
		}, args)
		if !ok {
			return nil, sqlerr.Errorf(sqlerr.NotSupported, "this placeholder value is not supported in a SHOW statement on the sharded table %s", logical)
		}
		s.buf, sql = b, string(b)
	} else {
		sql = renderTemplate(s, tmpl, snap, sh)
	}
	s.e.metrics.countStatement("sharded")
	start := time.Now()
	c, err := s.acquire(phys.Datasource)
	if err != nil {
		s.e.observeRefused(sh, phys.Datasource, false, start, err)
		return nil, err
	}
	defer c.Release()
	start = time.Now()
	r, err := c.Exec(sql)
	s.e.observe(sh, phys.Datasource, false, start, err)
	rename := func(b []byte) []byte {
		b = bytes.ReplaceAll(b, []byte(phys.Database+"."+phys.Table), []byte(db+"."+logical))
		for _, t := range router.ShardedTables() {
			p := snap.Physical(t, sh).Table
			b = bytes.ReplaceAll(b, []byte("`"+p+"`"), []byte("`"+t+"`"))
			b = bytes.ReplaceAll(b, []byte("'"+p+"'"), []byte("'"+t+"'"))
		}
		return b
	}
	if err != nil {
		if me, ok := err.(*mysql.MyError); ok {
			return nil, &mysql.MyError{Code: me.Code, State: me.State, Message: string(rename([]byte(me.Message)))}
		}
		return nil, err
	}
	if r.Resultset != nil && st.Tp != ast.ShowColumns {
		rows, err := mysqlrow.TextRows(r)
		if err != nil {
			return nil, err
		}
		for i, row := range rows {
			for j, f := range r.Fields {
				switch string(f.Name) {
				case "Table":
					if row[j] != nil {
						row[j] = []byte(logical)
					}
				case "Create Table":
					row[j] = rename(row[j])
				}
			}
			r.RowDatas[i] = mysqlrow.TextRow(row)
		}
		r.Values = nil
	}
	if binary && r.Resultset != nil && !mysqlrow.TextToBinary(r.Resultset) {
		return nil, sqlerr.Errorf(sqlerr.Internal, "[BUG] a SHOW answer has no binary form")
	}
	fixFields(r, db)
	return r, nil
}

// repTables lists the representative physical tables for an IN.
func repTables(ls *rewrite.LogicalSchema) string {
	phys := make([]string, len(ls.Tables))
	for i, t := range ls.Tables {
		phys[i] = t.Physical
	}
	return inList(phys)
}

// queryRows runs one of Convoy's own statements on a datasource and
// returns its columns and text rows.
func (e *Engine) queryRows(ds, sql string) ([]*mysql.Field, [][][]byte, error) {
	c, err := e.acquire(ds)
	if err != nil {
		return nil, nil, err
	}
	defer c.Release()
	r, err := c.Exec(sql)
	if err != nil {
		return nil, nil, err
	}
	rows, err := mysqlrow.TextRows(r)
	if err != nil || r.Resultset == nil {
		return nil, rows, err
	}
	return r.Fields, rows, nil
}
