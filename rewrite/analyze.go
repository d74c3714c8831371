package rewrite

import (
	"cmp"
	"encoding/binary"
	"slices"
	"strconv"
	"strings"

	"github.com/pingcap/tidb/pkg/parser/ast"
	"github.com/pingcap/tidb/pkg/parser/opcode"
	"github.com/pingcap/tidb/pkg/parser/test_driver"

	"github.com/convoy-im/convoy/router"
)

// Kind classifies a statement for routing.
type Kind int

// Statement kinds. Anything not listed is KindOther: passthrough to the
// default datasource (the engine should still look at Analysis.Sharded).
const (
	KindOther       Kind = iota // anything not listed below
	KindSelect                  // SELECT / UNION / TABLE / VALUES (incl. SELECT ... FOR UPDATE)
	KindInsert                  // INSERT and REPLACE (incl. ON DUPLICATE KEY UPDATE)
	KindUpdate                  // UPDATE
	KindDelete                  // DELETE
	KindDDL                     // CREATE TABLE [LIKE], ALTER TABLE, DROP TABLE, TRUNCATE TABLE, CREATE/DROP INDEX
	KindBegin                   // BEGIN, START TRANSACTION [...]
	KindCommit                  // COMMIT
	KindRollback                // ROLLBACK (not ROLLBACK TO SAVEPOINT, which is KindSavepoint)
	KindSet                     // SET variables, SET NAMES, SET CHARACTER SET, SET TRANSACTION
	KindUse                     // USE db
	KindShow                    // SHOW ..., DESCRIBE tbl
	KindEmpty                   // comments only: MariaDB answers OK (see OnlyComments)
	KindSavepoint               // SAVEPOINT, ROLLBACK TO [SAVEPOINT], RELEASE SAVEPOINT (see Analysis.Savepoint)
	KindMaintenance             // ANALYZE TABLE, OPTIMIZE TABLE (see Analysis.Maintenance)
	KindLoadData                // LOAD DATA LOCAL INFILE (see Analysis.Load)
)

var kindNames = [...]string{"other", "select", "insert", "update", "delete", "ddl", "begin", "commit", "rollback", "set", "use", "show", "empty", "savepoint", "maintenance", "load data"}

// Maintenance is a table maintenance statement: run on each of its tables
// (every physical table of a sharded one), one result row set per table.
type Maintenance struct {
	Op      string // "analyze", "optimize", "check", "repair" or "checksum", as MariaDB's Op column says it
	Local   bool   // NO_WRITE_TO_BINLOG / LOCAL
	Tables  []*ast.TableName
	Options string // what follows the tables (CHECK TABLE t EXTENDED), as written
}

func (k Kind) String() string {
	if k >= 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Value is a shard-key value found in a statement.
type Value struct {
	// Param >= 0 is the 0-based index of the `?` placeholder (textual order);
	// -1 means Lit holds a literal.
	Param int
	// Lit is the literal as a Go value: nil (NULL), int64, uint64, float64,
	// router.Decimal, string or []byte. Hex and bit literals are uint64 when
	// they fit in 8 bytes, else []byte. A minus over a number is folded
	// (-1 -> int64(-1), -1.5 -> router.Decimal("-1.5")). router.KeyFromValue
	// decides which of these are acceptable keys.
	Lit any
}

// SetVar is one assignment of a SET statement.
type SetVar struct {
	Name   string `json:"name"`             // lower-case; "names" for SET NAMES, "character_set" for SET CHARACTER SET
	Global bool   `json:"global,omitempty"` // SET GLOBAL / @@global.
	User   bool   `json:"user,omitempty"`   // @user variable
	// Value is the value expression restored as SQL (`'utf8mb4'`, `0`,
	// `DEFAULT`); for SET NAMES / SET CHARACTER SET it is the bare charset name.
	Value   string `json:"value"`
	Collate string `json:"collate,omitempty"` // SET NAMES ... COLLATE x
	// NextTx marks SET TRANSACTION ... without SESSION/GLOBAL, which
	// applies to the next transaction only (Name is "tx_isolation" or
	// "tx_read_only").
	NextTx bool `json:"next_tx,omitempty"`
}

// SavepointOp is what a KindSavepoint statement does.
type SavepointOp uint8

// Savepoint operations.
const (
	SavepointSet      SavepointOp = iota // SAVEPOINT name
	SavepointRollback                    // ROLLBACK [WORK] TO [SAVEPOINT] name
	SavepointRelease                     // RELEASE SAVEPOINT name
)

// Savepoint is a KindSavepoint statement; Name is as written (savepoint
// names compare case-insensitively).
type Savepoint struct {
	Op   SavepointOp `json:"op"`
	Name string      `json:"name"`
}

// Analysis holds the routing facts of one statement.
type Analysis struct {
	Stmt       ast.StmtNode
	Kind       Kind
	ParamCount int      // number of `?` placeholders
	Sharded    []string // distinct logical sharded tables (lower-case), in order of first appearance
	KeyColumn  string   // shard key column shared by all of Sharded ("conv_id" or "uid")
	Unsharded  []string // other tables, as written (schema.table or table), distinct
	HasKey     bool     // SELECT/UPDATE/DELETE: a shard-key restriction was found
	Keys       []Value  // values of that restriction: one for `=`, many for IN
	// OtherKeys are the shard-key restrictions of the statement's other
	// table references: another sharded table of its FROM, subqueries and
	// derived tables (each reference's first). Each reads the physical
	// table the statement is sent to, so all of them must live there: the
	// engine refuses the statement otherwise (it would silently find
	// nothing of a conversation kept on another shard). A statement with no
	// restriction of its own (SELECT EXISTS (SELECT ... WHERE conv_id = ?))
	// is routed by them (RoutedByNested).
	OtherKeys   [][]Value
	Maintenance Maintenance // KindMaintenance
	Load        *LoadData   // KindLoadData
	// RoutedByNested: the statement's own block names no sharded table
	// (SELECT EXISTS (...), a FROM of derived tables only) and its nested
	// blocks are restricted: OtherKeys say where it runs.
	RoutedByNested bool
	InsertRows     []Value // INSERT/REPLACE into a sharded table: the key value of each row
	// InsertHasKey is true for an INSERT/REPLACE into a sharded table (the key
	// column is always in its column list: anything else is refused).
	InsertHasKey bool
	SetVars      []SetVar  // KindSet
	UseDB        string    // KindUse
	TxReadOnly   bool      // START TRANSACTION READ ONLY (informative)
	Savepoint    Savepoint // KindSavepoint
	// SessionRefs are the session values the statement reads (see
	// SessionTemplate).
	SessionRefs SessionRefs
	// Returning is the select list of a RETURNING clause the caller cut off
	// before parsing (SplitReturning); templates print it back at the end.
	Returning string
	// values prints the session's values into templates (WithSessionValues).
	values func(SessionRef) SessionValue

	params map[*test_driver.ParamMarkerExpr]int // placeholder -> index
}

// Analyze classifies one statement and extracts routing facts. Refusals are
// *UnsupportedError (see errors.go). Analyze does not modify stmt.
func Analyze(stmt ast.StmtNode) (*Analysis, error) { return analyze(stmt, false) }

// AnalyzeOnShard is Analyze for a statement the caller runs on one shard it
// names (a DBA's /*+ convoy shard=N */): sharded tables of both shard keys
// may meet in it, since each shard's database holds its share of every
// sharded table. KeyColumn is then the first table's.
func AnalyzeOnShard(stmt ast.StmtNode) (*Analysis, error) { return analyze(stmt, true) }

func analyze(stmt ast.StmtNode, oneShard bool) (*Analysis, error) {
	a := &Analysis{Stmt: stmt}
	c := collector{a: a, mixedKeys: oneShard}
	if o, ok := stmt.(*ast.OptimizeTableStmt); ok {
		c.tables = o.Tables // its Accept does not visit them
	}
	stmt.Accept(&c)
	if err := c.finish(); err != nil {
		return nil, err
	}
	switch s := stmt.(type) {
	case *ast.SelectStmt:
		a.Kind = KindSelect
		if len(a.Sharded) > 0 {
			a.findKey(s.From, s.Where)
			a.findOtherKeys(s)
		}
	case *ast.SetOprStmt:
		// Each branch has its own WHERE: the statement runs whole on one
		// shard only when every branch is restricted to it (its branches
		// are nested blocks: OtherKeys, RoutedByNested); else the engine
		// scatters it, which refuses set operations.
		a.Kind = KindSelect
		if len(a.Sharded) > 0 {
			a.findOtherKeys(s)
		}
	case *ast.InsertStmt:
		a.Kind = KindInsert
		if err := a.analyzeInsert(s); err != nil {
			return nil, err
		}
	case *ast.UpdateStmt:
		a.Kind = KindUpdate
		if len(a.Sharded) > 0 {
			for _, as := range s.List {
				if as.Column.Name.L == a.KeyColumn {
					return nil, unsupportedAs(ErrShardKeyUpdate,
						"UPDATE cannot assign the shard key column %s of sharded table %s: the row would move to another shard",
						a.KeyColumn, strings.Join(a.Sharded, ", "))
				}
			}
			a.findKey(s.TableRefs, s.Where)
			a.findOtherKeys(s)
		}
	case *ast.DeleteStmt:
		a.Kind = KindDelete
		if len(a.Sharded) > 0 {
			a.findKey(s.TableRefs, s.Where)
			a.findOtherKeys(s)
		}
	case *ast.CreateTableStmt, *ast.AlterTableStmt, *ast.TruncateTableStmt,
		*ast.CreateIndexStmt, *ast.DropIndexStmt:
		a.Kind = KindDDL
	case *ast.DropTableStmt:
		if !s.IsView {
			a.Kind = KindDDL
		}
	case *ast.BeginStmt:
		a.Kind = KindBegin
		a.TxReadOnly = s.ReadOnly
	case *ast.CommitStmt:
		a.Kind = KindCommit
	case *ast.RollbackStmt:
		a.Kind = KindRollback
		if s.SavepointName != "" {
			a.Kind, a.Savepoint = KindSavepoint, Savepoint{Op: SavepointRollback, Name: s.SavepointName}
		}
	case *ast.SavepointStmt:
		a.Kind, a.Savepoint = KindSavepoint, Savepoint{Op: SavepointSet, Name: s.Name}
	case *ast.ReleaseSavepointStmt:
		a.Kind, a.Savepoint = KindSavepoint, Savepoint{Op: SavepointRelease, Name: s.Name}
	case *ast.SetStmt:
		a.Kind = KindSet
		vars, err := setVars(s)
		if err != nil {
			return nil, err
		}
		a.SetVars = vars
	case *ast.UseStmt:
		a.Kind = KindUse
		a.UseDB = s.DBName
	case *ast.LoadDataStmt:
		if s.FileLocRef == ast.FileLocClient {
			// Convoy reads the client's file itself and writes its rows
			// as INSERTs: no backend is ever asked to read a client file.
			l, err := analyzeLoadData(s)
			if err != nil {
				return nil, err
			}
			a.Kind, a.Load = KindLoadData, l
			break
		}
		if s.Table != nil {
			if _, sharded := router.ShardKeyColumn(logicalName(s.Table.Name)); sharded {
				return nil, unsupported("LOAD DATA INFILE into sharded table %s is not supported: the server reads the file and cannot route its rows; send them as multi-row INSERT statements", s.Table.Name.O)
			}
		}
	case *ast.AnalyzeTableStmt:
		if len(s.PartitionNames) == 0 && len(s.IndexNames) == 0 && len(s.ColumnNames) == 0 && len(s.AnalyzeOpts) == 0 && !s.IndexFlag && !s.Incremental && s.HistogramOperation == ast.HistogramOperationNop {
			a.Kind, a.Maintenance = KindMaintenance, Maintenance{Op: "analyze", Local: s.NoWriteToBinLog, Tables: s.TableNames}
		}
	case *ast.OptimizeTableStmt:
		a.Kind, a.Maintenance = KindMaintenance, Maintenance{Op: "optimize", Local: s.NoWriteToBinLog, Tables: s.Tables}
	case *ast.ShowStmt:
		a.Kind = KindShow
	case *ast.ExplainStmt:
		if _, ok := s.Stmt.(*ast.ShowStmt); ok { // DESCRIBE / DESC / EXPLAIN tbl
			a.Kind = KindShow
		}
	}
	return a, nil
}

// collector walks the whole statement once: tables, CTE names, placeholders.
type collector struct {
	a       *Analysis
	tables  []*ast.TableName
	ctes    map[string]bool
	markers []*test_driver.ParamMarkerExpr
	// mixedKeys admits sharded tables of both shard keys (AnalyzeOnShard).
	mixedKeys bool
}

func (c *collector) Enter(n ast.Node) (ast.Node, bool) {
	switch x := n.(type) {
	case *test_driver.ParamMarkerExpr:
		c.markers = append(c.markers, x)
	case *ast.DeleteTableList:
		// The targets of a multi-table DELETE name tables (or aliases)
		// that its FROM clause already lists.
		return n, true
	case *ast.CommonTableExpression:
		if c.ctes == nil {
			c.ctes = map[string]bool{}
		}
		c.ctes[x.Name.L] = true
	case *ast.TableName:
		c.tables = append(c.tables, x)
	default:
		if r, ok := sessionRef(n); ok {
			c.a.SessionRefs |= 1 << r
		}
	}
	return n, false
}

func (c *collector) Leave(n ast.Node) (ast.Node, bool) { return n, true }

func (c *collector) finish() error {
	a := c.a
	a.ParamCount = len(c.markers)
	if len(c.markers) > 0 {
		slices.SortStableFunc(c.markers, func(x, y *test_driver.ParamMarkerExpr) int { return cmp.Compare(x.Offset, y.Offset) })
		a.params = make(map[*test_driver.ParamMarkerExpr]int, len(c.markers))
		for i, m := range c.markers {
			a.params[m] = i
		}
	}
	for _, tn := range c.tables {
		if tn.Schema.L == "" && c.ctes[tn.Name.L] {
			continue // a CTE reference, not a table
		}
		if col, ok := router.ShardKeyColumn(logicalName(tn.Name)); ok {
			if !slices.Contains(a.Sharded, tn.Name.L) {
				a.Sharded = append(a.Sharded, tn.Name.L)
			}
			if a.KeyColumn == "" {
				a.KeyColumn = col
			} else if a.KeyColumn != col && !c.mixedKeys {
				return unsupportedAs(ErrMixedTables,
					"statement mixes sharded tables with different shard keys (%s by %s, %s by %s): they live on different shards",
					a.Sharded[0], a.KeyColumn, tn.Name.L, col)
			}
			continue
		}
		name := tn.Name.O
		if tn.Schema.O != "" {
			name = tn.Schema.O + "." + name
		}
		if !slices.Contains(a.Unsharded, name) {
			a.Unsharded = append(a.Unsharded, name)
		}
	}
	if len(a.Sharded) > 0 && len(a.Unsharded) > 0 {
		return unsupportedAs(ErrMixedTables,
			"statement mixes sharded table %s with unsharded table %s: they live in different databases",
			a.Sharded[0], a.Unsharded[0])
	}
	return nil
}

// findKey looks for the first shard-key restriction among the top-level AND
// conjuncts of WHERE and of the ON conditions of inner joins whose rows are
// not null-extended by an outer join.
func (a *Analysis) findKey(from *ast.TableRefsClause, where ast.ExprNode) {
	var refs []string // qualifiers that name a sharded table of this FROM
	var ons []ast.ExprNode
	if from != nil && from.TableRefs != nil {
		walkJoin(from.TableRefs, true, &refs, &ons)
	}
	var conj []ast.ExprNode
	conj = conjuncts(where, conj)
	for _, on := range ons {
		conj = conjuncts(on, conj)
	}
	for _, e := range conj {
		if keys, ok := a.keyRestriction(e, refs); ok {
			a.HasKey, a.Keys = true, keys
			return
		}
	}
}

// restriction is the first shard-key restriction of one table reference.
type restriction struct {
	ref  string
	keys []Value
}

// blockRestrictions are the first key restriction of each sharded table
// reference of one query block (its FROM, WHERE and inner-join ONs), in
// order of appearance.
func (a *Analysis) blockRestrictions(from *ast.TableRefsClause, where ast.ExprNode) (out []restriction, shardedRefs int) {
	var refs []string
	var ons []ast.ExprNode
	if from != nil && from.TableRefs != nil {
		walkJoin(from.TableRefs, true, &refs, &ons)
	}
	if len(refs) == 0 {
		return nil, 0
	}
	conj := conjuncts(where, nil)
	for _, on := range ons {
		conj = conjuncts(on, conj)
	}
	seen := map[string]bool{}
	for _, e := range conj {
		for _, ref := range refs {
			if seen[ref] {
				continue
			}
			if keys, ok := a.keyRestriction(e, []string{ref}); ok {
				seen[ref] = true
				out = append(out, restriction{ref, keys})
				break
			}
		}
	}
	return out, len(refs)
}

// findOtherKeys fills OtherKeys: the restrictions of the outer block's
// references other than the one Keys restricts, and every restriction of
// the query blocks nested in stmt (subqueries, derived tables, the
// branches of a set operation inside it).
func (a *Analysis) findOtherKeys(stmt ast.StmtNode) {
	var outer []restriction
	var outerRefs int
	switch s := stmt.(type) {
	case *ast.SelectStmt:
		outer, outerRefs = a.blockRestrictions(s.From, s.Where)
	case *ast.UpdateStmt:
		outer, outerRefs = a.blockRestrictions(s.TableRefs, s.Where)
	case *ast.DeleteStmt:
		outer, outerRefs = a.blockRestrictions(s.TableRefs, s.Where)
	}
	for i, r := range outer {
		if i == 0 && a.HasKey {
			continue // Keys itself (findKey takes the same first restriction)
		}
		a.OtherKeys = append(a.OtherKeys, r.keys)
	}
	v := nestedSelects{top: stmt}
	stmt.Accept(&v)
	allRestricted := true
	for _, sel := range v.found {
		rs, n := a.blockRestrictions(sel.From, sel.Where)
		allRestricted = allRestricted && len(rs) == n
		for _, r := range rs {
			a.OtherKeys = append(a.OtherKeys, r.keys)
		}
	}
	// Routed by its nested blocks only if each of their sharded references
	// is restricted: an unrestricted one would read one shard's rows where
	// MariaDB reads all.
	a.RoutedByNested = !a.HasKey && outerRefs == 0 && len(a.OtherKeys) > 0 && allRestricted
}

// nestedSelects collects the SELECT blocks below top.
type nestedSelects struct {
	top   ast.Node
	found []*ast.SelectStmt
}

func (v *nestedSelects) Enter(n ast.Node) (ast.Node, bool) {
	if s, ok := n.(*ast.SelectStmt); ok && n != v.top {
		v.found = append(v.found, s)
	}
	return n, false
}

func (v *nestedSelects) Leave(n ast.Node) (ast.Node, bool) { return n, true }

func walkJoin(n ast.ResultSetNode, preserved bool, refs *[]string, ons *[]ast.ExprNode) {
	switch x := n.(type) {
	case *ast.Join:
		if x.Right == nil {
			walkJoin(x.Left, preserved, refs, ons)
			return
		}
		switch x.Tp {
		case ast.LeftJoin:
			walkJoin(x.Left, preserved, refs, ons)
			walkJoin(x.Right, false, refs, ons)
		case ast.RightJoin:
			walkJoin(x.Left, false, refs, ons)
			walkJoin(x.Right, preserved, refs, ons)
		default:
			walkJoin(x.Left, preserved, refs, ons)
			walkJoin(x.Right, preserved, refs, ons)
			if preserved && x.On != nil {
				*ons = append(*ons, x.On.Expr)
			}
		}
	case *ast.TableSource:
		tn, ok := x.Source.(*ast.TableName)
		if !ok {
			return
		}
		if _, sharded := router.ShardKeyColumn(logicalName(tn.Name)); !sharded {
			return
		}
		if x.AsName.L != "" {
			*refs = append(*refs, x.AsName.L)
		} else {
			*refs = append(*refs, tn.Name.L)
		}
	}
}

func unparen(e ast.ExprNode) ast.ExprNode {
	for {
		p, ok := e.(*ast.ParenthesesExpr)
		if !ok {
			return e
		}
		e = p.Expr
	}
}

func conjuncts(e ast.ExprNode, dst []ast.ExprNode) []ast.ExprNode {
	if e == nil {
		return dst
	}
	e = unparen(e)
	if b, ok := e.(*ast.BinaryOperationExpr); ok && b.Op == opcode.LogicAnd {
		dst = conjuncts(b.L, dst)
		return conjuncts(b.R, dst)
	}
	return append(dst, e)
}

func (a *Analysis) isKeyColumn(e ast.ExprNode, refs []string) bool {
	c, ok := unparen(e).(*ast.ColumnNameExpr)
	if !ok || c.Name.Name.L != a.KeyColumn {
		return false
	}
	return c.Name.Table.L == "" || slices.Contains(refs, c.Name.Table.L)
}

func (a *Analysis) keyRestriction(e ast.ExprNode, refs []string) ([]Value, bool) {
	switch x := e.(type) {
	case *ast.BinaryOperationExpr:
		if x.Op != opcode.EQ {
			return nil, false
		}
		// (conv_id, seq) = (?, ?): the key's value sits at the key's place.
		if l, r := rowOf(x.L), rowOf(x.R); l != nil && r != nil && len(l.Values) == len(r.Values) {
			for i := range l.Values {
				if a.isKeyColumn(l.Values[i], refs) {
					if v, ok := a.value(r.Values[i]); ok {
						return []Value{v}, true
					}
				}
				if a.isKeyColumn(r.Values[i], refs) {
					if v, ok := a.value(l.Values[i]); ok {
						return []Value{v}, true
					}
				}
			}
			return nil, false
		}
		if a.isKeyColumn(x.L, refs) {
			if v, ok := a.value(x.R); ok {
				return []Value{v}, true
			}
		}
		if a.isKeyColumn(x.R, refs) {
			if v, ok := a.value(x.L); ok {
				return []Value{v}, true
			}
		}
	case *ast.PatternInExpr:
		if x.Not || x.Sel != nil || len(x.List) == 0 {
			return nil, false
		}
		if row := rowOf(x.Expr); row != nil {
			return a.rowInRestriction(row, x.List, refs)
		}
		if !a.isKeyColumn(x.Expr, refs) {
			return nil, false
		}
		vals := make([]Value, 0, len(x.List))
		for _, item := range x.List {
			v, ok := a.value(item)
			if !ok {
				return nil, false
			}
			vals = append(vals, v)
		}
		return vals, true
	}
	return nil, false
}

// rowInRestriction reads (conv_id, seq) IN ((?, ?), (?, ?)), as ORMs delete
// by composite primary key: the key's values are those at the key's place
// of every row.
func (a *Analysis) rowInRestriction(row *ast.RowExpr, list []ast.ExprNode, refs []string) ([]Value, bool) {
	at := -1
	for i, c := range row.Values {
		if a.isKeyColumn(c, refs) {
			at = i
			break
		}
	}
	if at < 0 {
		return nil, false
	}
	vals := make([]Value, 0, len(list))
	for _, item := range list {
		r := rowOf(item)
		if r == nil || len(r.Values) != len(row.Values) {
			return nil, false
		}
		v, ok := a.value(r.Values[at])
		if !ok {
			return nil, false
		}
		vals = append(vals, v)
	}
	return vals, true
}

func rowOf(e ast.ExprNode) *ast.RowExpr {
	r, _ := unparen(e).(*ast.RowExpr)
	return r
}

// value extracts a literal, a placeholder or a negated numeric literal.
func (a *Analysis) value(e ast.ExprNode) (Value, bool) {
	switch x := unparen(e).(type) {
	case *test_driver.ParamMarkerExpr: // before ValueExpr: it embeds one
		i, ok := a.params[x]
		return Value{Param: i}, ok
	case *test_driver.ValueExpr:
		lit, ok := literal(x)
		return Value{Param: -1, Lit: lit}, ok
	case *ast.UnaryOperationExpr:
		if x.Op != opcode.Minus {
			return Value{}, false
		}
		v, ok := unparen(x.V).(*test_driver.ValueExpr)
		if !ok {
			return Value{}, false
		}
		lit, ok := negate(v)
		return Value{Param: -1, Lit: lit}, ok
	}
	return Value{}, false
}

func literal(v *test_driver.ValueExpr) (any, bool) {
	switch v.Kind() {
	case test_driver.KindNull:
		return nil, true
	case test_driver.KindInt64:
		return v.GetInt64(), true
	case test_driver.KindUint64:
		return v.GetUint64(), true
	case test_driver.KindFloat32, test_driver.KindFloat64:
		return v.GetFloat64(), true
	case test_driver.KindMysqlDecimal:
		return router.Decimal(v.GetMysqlDecimal().String()), true
	case test_driver.KindString:
		return v.GetString(), true
	case test_driver.KindBytes:
		return slices.Clone(v.GetBytes()), true
	case test_driver.KindBinaryLiteral:
		// MySQL treats a hex or bit literal as BIGINT UNSIGNED in a
		// numeric comparison.
		b := v.GetBytes()
		for len(b) > 0 && b[0] == 0 {
			b = b[1:]
		}
		if len(b) > 8 {
			return slices.Clone(b), true
		}
		var buf [8]byte
		copy(buf[8-len(b):], b)
		return binary.BigEndian.Uint64(buf[:]), true
	}
	return nil, false
}

func negate(v *test_driver.ValueExpr) (any, bool) {
	switch v.Kind() {
	case test_driver.KindInt64:
		return -v.GetInt64(), true // literals are never negative, so no overflow
	case test_driver.KindUint64:
		u := v.GetUint64()
		if u <= 1<<63 {
			return -int64(u-1) - 1, true
		}
		return router.Decimal("-" + strconv.FormatUint(u, 10)), true
	case test_driver.KindFloat32, test_driver.KindFloat64:
		return -v.GetFloat64(), true
	case test_driver.KindMysqlDecimal:
		s := v.GetMysqlDecimal().String()
		if rest, ok := strings.CutPrefix(s, "-"); ok {
			return router.Decimal(rest), true
		}
		return router.Decimal("-" + s), true
	}
	return nil, false
}

func (a *Analysis) analyzeInsert(s *ast.InsertStmt) error {
	tn := insertTarget(s)
	if tn == nil {
		return nil
	}
	key, sharded := router.ShardKeyColumn(logicalName(tn.Name))
	if !sharded {
		return nil
	}
	verb := "INSERT"
	if s.IsReplace {
		verb = "REPLACE"
	}
	if s.Select != nil {
		return unsupported("%s ... SELECT into sharded table %s is not supported: send the rows as VALUES", verb, tn.Name.L)
	}
	if len(s.Columns) == 0 {
		// The engine names them first (from the backends' definitions).
		return unsupported("%s into sharded table %s must name the columns, e.g. %s INTO %s (%s, ...) VALUES (...)",
			verb, tn.Name.L, verb, tn.Name.L, key)
	}
	idx := -1
	for i, c := range s.Columns {
		if c.Name.L == key {
			idx = i
			break
		}
	}
	if idx < 0 {
		return unsupported("%s into sharded table %s must set the shard key column %s", verb, tn.Name.L, key)
	}
	for _, as := range s.OnDuplicate {
		if as.Column.Name.L == key {
			return unsupportedAs(ErrShardKeyUpdate,
				"ON DUPLICATE KEY UPDATE cannot assign the shard key column %s of sharded table %s", key, tn.Name.L)
		}
	}
	rows := make([]Value, 0, len(s.Lists))
	for r, row := range s.Lists {
		if len(row) != len(s.Columns) {
			return unsupportedAs(ErrColumnCount, "Column count doesn't match value count at row %d", r+1)
		}
		v, ok := a.value(row[idx])
		if !ok {
			return unsupported("shard key %s of row %d must be a literal or ?", key, r+1)
		}
		rows = append(rows, v)
	}
	a.InsertRows, a.InsertHasKey = rows, true
	return nil
}

func insertTarget(s *ast.InsertStmt) *ast.TableName {
	if s.Table == nil || s.Table.TableRefs == nil {
		return nil
	}
	ts, ok := s.Table.TableRefs.Left.(*ast.TableSource)
	if !ok {
		return nil
	}
	tn, _ := ts.Source.(*ast.TableName)
	return tn
}

func setVars(s *ast.SetStmt) ([]SetVar, error) {
	vars := make([]SetVar, 0, len(s.Variables))
	// The parser gives SET TRANSACTION READ ONLY and SET SESSION TRANSACTION
	// READ ONLY the same tree: only the text tells the one-shot form.
	oneShot := setTransactionOneShot(s.Text())
	for _, v := range s.Variables {
		sv := SetVar{Name: strings.ToLower(v.Name), Global: v.IsGlobal, User: !v.IsSystem}
		switch v.Name {
		case ast.SetNames, ast.SetCharset:
			sv.Name, sv.User = "names", false
			if v.Name == ast.SetCharset {
				sv.Name = "character_set"
			}
			if ve, ok := v.Value.(*test_driver.ValueExpr); ok {
				sv.Value = ve.GetString()
			} else if _, ok := v.Value.(*ast.DefaultExpr); ok {
				sv.Value = "DEFAULT"
			}
			if ve, ok := v.ExtendValue.(*test_driver.ValueExpr); ok && ve != nil {
				sv.Collate = ve.GetString()
			}
			vars = append(vars, sv)
			continue
		case "tx_isolation_one_shot":
			sv.Name, sv.NextTx = "tx_isolation", true
		case "tx_read_only":
			sv.NextTx = oneShot && !v.IsGlobal
			if ve, ok := v.Value.(*test_driver.ValueExpr); ok {
				// READ ONLY / READ WRITE: the parser's value is the string
				// '1' / '0', which MariaDB's boolean variable refuses.
				sv.Value = ve.GetString()
				vars = append(vars, sv)
				continue
			}
		}
		if v.Value != nil {
			text, err := Restore(v.Value)
			if err != nil {
				return nil, err
			}
			sv.Value = text
		}
		vars = append(vars, sv)
	}
	return vars, nil
}

// setTransactionOneShot reports text of the form SET TRANSACTION ...
// (comments allowed around the words), which sets the next transaction's
// characteristics only.
func setTransactionOneShot(text string) bool {
	words := 0
	for _, w := range strings.Fields(StripComments(text)) {
		words++
		switch words {
		case 1:
			if !strings.EqualFold(w, "SET") {
				return false
			}
		case 2:
			return strings.EqualFold(w, "TRANSACTION")
		}
	}
	return false
}

// logicalName is the name a table reference may match a sharded logical
// table by: table names are case-sensitive, as on MariaDB for Linux
// (lower_case_table_names=0), so `CONV_MSG` is another table. It is passed
// through to the default datasource, which answers 1146 as MariaDB would,
// instead of being routed as conv_msg.
func logicalName(n ast.CIStr) string {
	if n.O != n.L {
		return ""
	}
	return n.L
}
