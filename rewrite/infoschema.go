package rewrite

import (
	"errors"
	"slices"
	"strconv"
	"strings"

	"github.com/pingcap/tidb/pkg/parser/ast"

	"github.com/convoy-im/convoy/internal/sqlq"
)

// Introspection: GUI tools, ORMs and migration tools learn the schema from
// information_schema, and a sharded logical table exists there only as its
// physical tables (conv_msg_0000 .. conv_msg_1023 in im_0 .. im_7). The
// rewrite below replaces each reference to one of the information_schema
// tables that name tables with a derived table of the same alias and
// columns: the backend's own rows minus those of the hidden databases, UNION
// ALL the rows of each sharded table's representative physical table under
// the logical names, once per logical database. The client's WHERE, joins,
// ORDER BY and aggregates then run on the backend as they would on MariaDB
// (which pushes the client's conditions into the union's branches, so a
// lookup by schema and table name still opens no other table).

// infoSpec says how an information_schema table names databases and tables.
type infoSpec struct {
	schemaCol string // the column naming the row's database
	tables    bool   // rows describe tables (TABLE_NAME): the logical tables get rows
}

var infoSpecs = map[string]infoSpec{
	"SCHEMATA":                {schemaCol: "SCHEMA_NAME"},
	"TABLES":                  {schemaCol: "TABLE_SCHEMA", tables: true},
	"COLUMNS":                 {schemaCol: "TABLE_SCHEMA", tables: true},
	"STATISTICS":              {schemaCol: "TABLE_SCHEMA", tables: true},
	"KEY_COLUMN_USAGE":        {schemaCol: "TABLE_SCHEMA", tables: true},
	"TABLE_CONSTRAINTS":       {schemaCol: "TABLE_SCHEMA", tables: true},
	"REFERENTIAL_CONSTRAINTS": {schemaCol: "CONSTRAINT_SCHEMA", tables: true},
	"CHECK_CONSTRAINTS":       {schemaCol: "CONSTRAINT_SCHEMA", tables: true},
	"PARTITIONS":              {schemaCol: "TABLE_SCHEMA", tables: true},
}

// InfoSchemaTables lists the information_schema tables the rewrite knows,
// upper-case, sorted.
func InfoSchemaTables() []string {
	out := make([]string, 0, len(infoSpecs))
	for n := range infoSpecs {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// SizeColumns are the columns of information_schema.TABLES that describe a
// table's size; for a logical table they are sums over its physical tables.
var SizeColumns = []string{"TABLE_ROWS", "AVG_ROW_LENGTH", "DATA_LENGTH", "INDEX_LENGTH", "DATA_FREE"}

const infoSchemaDB = "information_schema"

// infoRef reports the upper-case information_schema table a table name
// refers to, if it is one the rewrite knows. An unqualified name refers to
// information_schema only while that is the current database.
func infoRef(tn *ast.TableName, currentDB string) (string, bool) {
	switch {
	case tn.Schema.L == infoSchemaDB:
	case tn.Schema.L == "" && strings.EqualFold(currentDB, infoSchemaDB):
	default:
		return "", false
	}
	up := strings.ToUpper(tn.Name.O)
	_, ok := infoSpecs[up]
	return up, ok
}

// InfoSchemaRefs returns the known information_schema tables a SELECT (or
// set operation) reads, distinct, in order of first appearance; nil for any
// other statement.
func InfoSchemaRefs(a *Analysis, currentDB string) []string {
	switch a.Stmt.(type) {
	case *ast.SelectStmt, *ast.SetOprStmt:
	default:
		return nil
	}
	f := infoFinder{db: currentDB}
	a.Stmt.Accept(&f)
	return f.names
}

type infoFinder struct {
	db    string
	names []string
}

func (f *infoFinder) Enter(n ast.Node) (ast.Node, bool) {
	if ts, ok := n.(*ast.TableSource); ok {
		if tn, ok := ts.Source.(*ast.TableName); ok {
			if up, ok := infoRef(tn, f.db); ok && !slices.Contains(f.names, up) {
				f.names = append(f.names, up)
			}
		}
	}
	return n, false
}

func (f *infoFinder) Leave(n ast.Node) (ast.Node, bool) { return n, true }

// ReadsAnyColumn reports whether a statement may read one of the named
// columns (upper-case): it names one, or selects a wildcard.
func ReadsAnyColumn(stmt ast.StmtNode, cols []string) bool {
	v := columnFinder{cols: cols}
	stmt.Accept(&v)
	return v.found
}

type columnFinder struct {
	cols  []string
	found bool
}

func (v *columnFinder) Enter(n ast.Node) (ast.Node, bool) {
	switch x := n.(type) {
	case *ast.ColumnName:
		v.found = v.found || slices.Contains(v.cols, strings.ToUpper(x.Name.O))
	case *ast.SelectField:
		v.found = v.found || x.WildCard != nil
	}
	return n, v.found
}

func (v *columnFinder) Leave(n ast.Node) (ast.Node, bool) { return n, true }

// NewInfoSchemaTemplate restores a SELECT with a hole for every reference to
// a known information_schema table (see InfoSchemaRefs); FillViews puts a
// derived table there. Each reference keeps its alias, or gets its own name
// as alias, so qualified columns still resolve; a schema qualifier
// `information_schema` on a column or wildcard is dropped (the derived table
// has no schema). Placeholders are holes too, so Bind orders the arguments
// as the restored text prints them.
func NewInfoSchemaTemplate(a *Analysis, currentDB string) (*Template, error) {
	names := InfoSchemaRefs(a, currentDB)
	if len(names) == 0 {
		return nil, errors.New("[BUG] rewrite: NewInfoSchemaTemplate on a statement without information_schema tables")
	}
	undo := keepSourceForms(a.Stmt)
	defer undo()
	return restoreWithHoles(a.Stmt, names, a.params, func(token string) sentinels {
		return &infoRenamer{token: token, db: currentDB, names: names}
	})
}

// infoRenamer installs the sentinels of NewInfoSchemaTemplate.
type infoRenamer struct {
	token     string
	db        string
	names     []string
	installed int
	undoLog
}

func (r *infoRenamer) count() int { return r.installed }

func (r *infoRenamer) Enter(n ast.Node) (ast.Node, bool) {
	switch x := n.(type) {
	case *ast.TableSource:
		tn, ok := x.Source.(*ast.TableName)
		if !ok {
			break
		}
		up, ok := infoRef(tn, r.db)
		if !ok {
			break
		}
		if x.AsName.O == "" {
			r.set(&x.AsName, tn.Name)
		}
		r.set(&tn.Schema, ast.CIStr{})
		r.set(&tn.Name, ast.NewCIStr(r.token+"_"+strconv.Itoa(slices.Index(r.names, up))))
		r.installed++
		return n, true
	case *ast.ColumnName:
		if x.Schema.L == infoSchemaDB {
			r.set(&x.Schema, ast.CIStr{})
		}
	case *ast.SelectField:
		// SelectField.Accept does not visit its WildCardField.
		if w := x.WildCard; w != nil && w.Schema.L == infoSchemaDB {
			r.set(&w.Schema, ast.CIStr{})
		}
	}
	return n, false
}

func (r *infoRenamer) Leave(n ast.Node) (ast.Node, bool) { return n, true }

// FillViews prints the template with each information_schema hole filled
// by view(name) (a parenthesised derived table) and placeholders as `?`.
func (t *Template) FillViews(dst []byte, view func(name string) string) []byte {
	for i, h := range t.holes {
		dst = append(dst, t.parts[i]...)
		if h < 0 {
			dst = append(dst, '?')
			continue
		}
		dst = append(dst, view(t.logicals[h])...)
	}
	return append(dst, t.parts[len(t.parts)-1]...)
}

// LogicalSchema is the schema clients may see, for the derived tables.
type LogicalSchema struct {
	// Hidden are the databases clients never see: the physical shard
	// databases and the backend's system schemas.
	Hidden []string
	// RepDB is the database of the representative physical tables.
	RepDB string
	// Tables are the sharded tables with their representative physical
	// table (every physical table of a logical table has its schema: DDL
	// fans out to all of them).
	Tables []RepTable
	// Sizes, by logical table, replace the representative's SizeColumns in
	// TABLES (nil: the representative's own values).
	Sizes map[string]TableSizes
}

// RepTable is a logical table and its representative physical table.
type RepTable struct{ Logical, Physical string }

// TableSizes are a logical table's sizes summed over its physical tables.
type TableSizes struct{ Rows, DataLength, IndexLength, DataFree uint64 }

// Column is the value of one of SizeColumns (AVG_ROW_LENGTH derived).
func (z TableSizes) Column(col string) uint64 {
	switch col {
	case "TABLE_ROWS":
		return z.Rows
	case "AVG_ROW_LENGTH":
		if z.Rows == 0 {
			return 0
		}
		return z.DataLength / z.Rows
	case "DATA_LENGTH":
		return z.DataLength
	case "INDEX_LENGTH":
		return z.IndexLength
	}
	return z.DataFree
}

// RepSchema is the expression that names the logical database in a row of
// a representative table (see InfoSchemaView).
const RepSchema = "`d`.`SCHEMA_NAME`"

// InfoSchemaView returns the derived table standing for information_schema
// table name (upper-case; cols are its columns in order, as the backend
// lists them). rep holds the rows of the representative tables as SQL
// expressions, one slice per row (see InfoSchemaRepQuery): for a
// representative on another server than the one the statement runs on. nil:
// they are read from the same server's information_schema.
func InfoSchemaView(name string, cols []string, ls *LogicalSchema, rep [][]string) string {
	spec := infoSpecs[name]
	var b strings.Builder
	b.WriteString("(SELECT ")
	for i, c := range cols {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(sqlq.AppendIdent(nil, c))
	}
	b.WriteString(" FROM `information_schema`.")
	b.Write(sqlq.AppendIdent(nil, name))
	b.WriteString(" WHERE ")
	b.Write(sqlq.AppendIdent(nil, spec.schemaCol))
	b.WriteString(" NOT IN ")
	b.WriteString(stringList(ls.Hidden))
	if spec.tables && len(ls.Tables) > 0 {
		dbs := "(SELECT `SCHEMA_NAME` FROM `information_schema`.`SCHEMATA` WHERE `SCHEMA_NAME` NOT IN " +
			stringList(append(slices.Clone(ls.Hidden), infoSchemaDB)) + ") AS `d`"
		if rep == nil {
			for _, t := range ls.Tables {
				b.WriteString(" UNION ALL SELECT ")
				b.WriteString(strings.Join(repColumns(name, cols, ls, t, RepSchema), ","))
				b.WriteString(" FROM `information_schema`.")
				b.Write(sqlq.AppendIdent(nil, name))
				b.WriteString(" AS `t` JOIN ")
				b.WriteString(dbs)
				b.WriteString(repWhere(spec, ls, t))
			}
		}
		for _, row := range rep {
			b.WriteString(" UNION ALL SELECT ")
			b.WriteString(strings.Join(row, ","))
			b.WriteString(" FROM ")
			b.WriteString(dbs)
		}
	}
	b.WriteByte(')')
	return b.String()
}

// InfoSchemaRepQuery reads the rows of the representative tables for
// InfoSchemaView on their own server: mapped as InfoSchemaView maps them,
// with marker where the logical database goes (the caller turns each value
// into a literal, and marker into RepSchema). "" for a table without
// logical rows.
func InfoSchemaRepQuery(name string, cols []string, ls *LogicalSchema, marker string) string {
	spec := infoSpecs[name]
	if !spec.tables || len(ls.Tables) == 0 {
		return ""
	}
	m := string(appendQuoted(nil, []byte(marker)))
	parts := make([]string, len(ls.Tables))
	for i, t := range ls.Tables {
		parts[i] = "SELECT " + strings.Join(repColumns(name, cols, ls, t, m), ",") +
			" FROM `information_schema`." + string(sqlq.AppendIdent(nil, name)) + " AS `t`" + repWhere(spec, ls, t)
	}
	return strings.Join(parts, " UNION ALL ")
}

func repWhere(spec infoSpec, ls *LogicalSchema, t RepTable) string {
	return " WHERE `t`." + string(sqlq.AppendIdent(nil, spec.schemaCol)) + "=" + string(appendQuoted(nil, []byte(ls.RepDB))) +
		" AND `t`.`TABLE_NAME`=" + string(appendQuoted(nil, []byte(t.Physical)))
}

// repColumns maps the columns of a representative table's row: database
// columns name the logical database (schema), table names the logical
// table, references to a sibling physical table its logical table.
func repColumns(name string, cols []string, ls *LogicalSchema, t RepTable, schema string) []string {
	out := make([]string, len(cols))
	for i, c := range cols {
		col := "`t`." + string(sqlq.AppendIdent(nil, c))
		switch c {
		case infoSpecs[name].schemaCol, "TABLE_SCHEMA", "INDEX_SCHEMA", "CONSTRAINT_SCHEMA":
			out[i] = schema
		case "TABLE_NAME":
			out[i] = utf8Literal(t.Logical)
		case "REFERENCED_TABLE_SCHEMA", "UNIQUE_CONSTRAINT_SCHEMA":
			out[i] = "IF(" + col + "=" + string(appendQuoted(nil, []byte(ls.RepDB))) + "," + schema + "," + col + ")"
		case "REFERENCED_TABLE_NAME":
			var b strings.Builder
			b.WriteString("CASE " + col)
			for _, o := range ls.Tables {
				b.WriteString(" WHEN " + string(appendQuoted(nil, []byte(o.Physical))) + " THEN " + utf8Literal(o.Logical))
			}
			b.WriteString(" ELSE " + col + " END")
			out[i] = b.String()
		default:
			out[i] = col
			if z, ok := ls.Sizes[t.Logical]; ok && name == "TABLES" && slices.Contains(SizeColumns, c) {
				out[i] = "CAST(" + strconv.FormatUint(z.Column(c), 10) + " AS UNSIGNED)"
			}
		}
	}
	return out
}

// utf8Literal is a string literal in information_schema's own character set,
// so a union with its columns keeps their type.
func utf8Literal(s string) string { return "_utf8" + string(appendQuoted(nil, []byte(s))) }

func stringList(vals []string) string {
	b := []byte{'('}
	for i, v := range vals {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendQuoted(b, []byte(v))
	}
	return string(append(b, ')'))
}

// LiteralKind says how RepLiteral types a value.
type LiteralKind int

// Literal kinds, from the column type of the value.
const (
	LiteralString LiteralKind = iota
	LiteralSigned
	LiteralUnsigned
	LiteralDecimal
	LiteralDatetime
)

// RepLiteral prints one value read by InfoSchemaRepQuery as an SQL
// expression of its column's type (a union of literals with the live
// columns keeps the columns' types).
func RepLiteral(v []byte, null bool, kind LiteralKind) string {
	if null {
		// MariaDB types a union of BIGINT UNSIGNED and a bare NULL as
		// DECIMAL: a typed NULL keeps the column's type.
		switch kind {
		case LiteralSigned:
			return "CAST(NULL AS SIGNED)"
		case LiteralUnsigned:
			return "CAST(NULL AS UNSIGNED)"
		case LiteralDatetime:
			return "CAST(NULL AS DATETIME)"
		}
		return "NULL"
	}
	switch kind {
	case LiteralSigned, LiteralUnsigned, LiteralDecimal:
		if _, err := strconv.ParseFloat(string(v), 64); err != nil {
			break // not a number after all: keep the text
		}
		switch kind {
		case LiteralSigned:
			return "CAST(" + string(v) + " AS SIGNED)"
		case LiteralUnsigned:
			return "CAST(" + string(v) + " AS UNSIGNED)"
		}
		return string(v)
	case LiteralDatetime:
		return "CAST(" + string(appendQuoted(nil, v)) + " AS DATETIME)"
	}
	return utf8Literal(string(v))
}

// RowsQuery is a SELECT of literal rows (SQL expressions) under the column
// names cols, each row numbered by its position in an extra first column,
// returning the numbers of the rows for which cond (SQL over cols) holds:
// the backend evaluates a SHOW's LIKE or WHERE over rows Convoy adds.
func RowsQuery(cols []string, rows [][]string, cond string) string {
	var b strings.Builder
	b.WriteString("SELECT `cvy_row` FROM (")
	for i, row := range rows {
		if i > 0 {
			b.WriteString(" UNION ALL ")
		}
		b.WriteString("SELECT " + strconv.Itoa(i))
		if i == 0 {
			b.WriteString(" AS `cvy_row`")
		}
		for j, v := range row {
			b.WriteString("," + v)
			if i == 0 {
				b.WriteString(" AS " + string(sqlq.AppendIdent(nil, cols[j])))
			}
		}
	}
	b.WriteString(") AS `cvy_rows` WHERE " + cond)
	return b.String()
}

// ShowCondition is the filter of SHOW ... LIKE / WHERE as a condition over
// the SHOW's columns (first is its first column): LIKE compares names
// byte for byte, as MariaDB matches table names (lower_case_table_names=0).
// "" when the SHOW has no filter.
func ShowCondition(show *ast.ShowStmt, first string) (string, error) {
	switch {
	case show.Pattern != nil && show.Pattern.Pattern != nil:
		p, err := Restore(show.Pattern.Pattern)
		if err != nil {
			return "", err
		}
		return "CAST(" + sqlq.Ident(first) + " AS BINARY) LIKE " + p, nil
	case show.Where != nil:
		return Restore(show.Where)
	}
	return "", nil
}

// QuoteString prints a single-quoted string literal with backslash escapes.
func QuoteString(s string) string { return string(appendQuoted(nil, []byte(s))) }

// IsProcessList reports whether table (as an Analysis lists it: schema.name
// or name, currentDB the session's) is information_schema.PROCESSLIST,
// which Convoy answers with its own client connections.
func IsProcessList(table, currentDB string) bool {
	schema, name, ok := strings.Cut(table, ".")
	if !ok {
		schema, name = currentDB, table
	}
	return strings.EqualFold(strings.Trim(schema, "`"), infoSchemaDB) && strings.EqualFold(strings.Trim(name, "`"), "processlist")
}

// RestoreWithProcessList prints stmt with every reference to
// information_schema.PROCESSLIST replaced by derived (a query of the same
// columns), under the reference's alias or name, so that the statement's
// conditions, joins and ordering run on the backend as written. stmt is
// left as it was.
func RestoreWithProcessList(stmt ast.StmtNode, currentDB string, derived ast.ResultSetNode) (string, error) {
	v := &processListSwap{db: currentDB, derived: derived}
	stmt.Accept(v)
	defer func() {
		for _, s := range v.swapped {
			s.ts.Source, s.ts.AsName = s.tn, s.as
		}
	}()
	return Restore(stmt)
}

type processListSwap struct {
	db      string
	derived ast.ResultSetNode
	swapped []struct {
		ts *ast.TableSource
		tn *ast.TableName
		as ast.CIStr
	}
}

func (v *processListSwap) Enter(n ast.Node) (ast.Node, bool) {
	ts, ok := n.(*ast.TableSource)
	if !ok {
		return n, false
	}
	tn, ok := ts.Source.(*ast.TableName)
	if !ok || !IsProcessList(tableText(tn), v.db) {
		return n, false
	}
	v.swapped = append(v.swapped, struct {
		ts *ast.TableSource
		tn *ast.TableName
		as ast.CIStr
	}{ts, tn, ts.AsName})
	ts.Source = v.derived
	if ts.AsName.L == "" {
		ts.AsName = tn.Name
	}
	return n, true
}

func (v *processListSwap) Leave(n ast.Node) (ast.Node, bool) { return n, true }

func tableText(tn *ast.TableName) string {
	if tn.Schema.O != "" {
		return tn.Schema.O + "." + tn.Name.O
	}
	return tn.Name.O
}
