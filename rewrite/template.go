package rewrite

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"github.com/pingcap/tidb/pkg/parser/ast"
	"github.com/pingcap/tidb/pkg/parser/format"
	"github.com/pingcap/tidb/pkg/parser/test_driver"

	"github.com/convoy-im/convoy/internal/sqlq"
)

// Template is a restored statement with holes where sharded table names go.
// It is immutable: Render may be called from any number of goroutines.
type Template struct {
	parts    []string // len(holes)+1 fixed fragments
	holes    []int    // hole i is filled with logicals[holes[i]]; < 0: a placeholder (see paramHole)
	logicals []string // distinct logical tables that have holes
	fixed    int      // total length of parts
	params   int      // placeholder holes
	shuffled bool     // placeholders are printed out of the client's order
}

// NewTemplate restores a.Stmt once, with every reference to a sharded
// logical table replaced by a hole that Render fills with a physical
// `database`.`table`. The AST is modified while the template is built and put
// back before NewTemplate returns, so it must not be used concurrently with
// NewTemplate (the parser's AST is not shared across sessions anyway).
//
// Table references keep their meaning after renaming:
//   - a sharded table in a FROM clause (SELECT, UPDATE, multi-table DELETE)
//     without an alias gets its logical name as alias, so `conv_msg.seq` and
//     result-set metadata still say conv_msg;
//   - where MySQL allows no alias (INSERT/REPLACE target, single-table DELETE,
//     DDL) the table is only renamed, and column qualifiers that refer to it
//     become holes too (`conv_msg`.`seq` -> `im_3`.`conv_msg_0441`.`seq`);
//   - a schema qualifier on a sharded table (`im.conv_msg`) is dropped: the
//     hole carries the physical database.
//
// Placeholders become holes too, each knowing the client's placeholder
// index: the restorer does not always print them in the client's order
// (`LIMIT ? OFFSET ?` comes out as `LIMIT ?,?`, offset first), so Render
// prints `?` and Bind puts the arguments in printed order, and RenderInline
// prints each value where its placeholder went.
func NewTemplate(a *Analysis) (*Template, error) {
	return a.template(a.Stmt, a.params)
}

// maxTokenAttempts bounds retries when restored text happens to contain the
// random sentinel token; with 64 random bits a retry is already a miracle.
const maxTokenAttempts = 4

// newTemplate restores stmt with holes for the sharded tables and for the
// placeholders listed in params (nil: placeholders stay plain `?` text).
func newTemplate(stmt ast.StmtNode, sharded []string, params map[*test_driver.ParamMarkerExpr]int) (*Template, error) {
	undo := keepSourceForms(stmt)
	defer undo()
	if len(sharded) == 0 && len(params) == 0 {
		text, err := Restore(stmt)
		if err != nil {
			return nil, err
		}
		return &Template{parts: []string{text}, fixed: len(text)}, nil
	}
	return restoreWithHoles(stmt, sharded, params, func(token string) sentinels {
		return &renamer{token: token, sharded: sharded}
	})
}

// sentinels installs the sentinels `token_N` (N indexing the hole names) on
// an AST, counting them, and puts the AST back with undoAll.
type sentinels interface {
	ast.Visitor
	count() int
	undoAll()
}

// restoreWithHoles restores stmt with the sentinels of install(token) and
// of the placeholders in params, and cuts the text at them into a Template
// whose holes are names.
func restoreWithHoles(stmt ast.StmtNode, names []string, params map[*test_driver.ParamMarkerExpr]int, install func(token string) sentinels) (*Template, error) {
	for range maxTokenAttempts {
		token := "cvy" + strconv.FormatUint(rand.Uint64()|1<<63, 36)
		r := install(token)
		stmt.Accept(r)
		ps := paramSwapper{token: token, index: params}
		if len(params) > 0 {
			stmt.Accept(&ps)
		}
		text, err := Restore(stmt)
		if ps.installed > 0 {
			ps.undo = true
			stmt.Accept(&ps)
		}
		r.undoAll()
		if err != nil {
			return nil, err
		}
		if t, ok := split(text, token, names, r.count(), ps.installed); ok {
			return t, nil
		}
	}
	return nil, errors.New("[BUG] rewrite: sentinel token collided with statement text repeatedly")
}

// paramSentinel stands in for a placeholder while a template is restored
// and prints `token_pN`, N being the client's placeholder index.
type paramSentinel struct {
	*test_driver.ParamMarkerExpr
	text string
}

func (p *paramSentinel) Restore(ctx *format.RestoreCtx) error {
	ctx.WritePlain(p.text)
	return nil
}

func (p *paramSentinel) Accept(v ast.Visitor) (ast.Node, bool) {
	n, skip := v.Enter(p)
	if skip {
		return v.Leave(n)
	}
	return v.Leave(p)
}

// paramSwapper replaces placeholders with sentinels (parents store what
// Leave returns) and, with undo set, puts them back.
type paramSwapper struct {
	token     string
	index     map[*test_driver.ParamMarkerExpr]int
	installed int
	undo      bool
}

func (s *paramSwapper) Enter(n ast.Node) (ast.Node, bool) { return n, false }

func (s *paramSwapper) Leave(n ast.Node) (ast.Node, bool) {
	switch x := n.(type) {
	case *test_driver.ParamMarkerExpr:
		if i, ok := s.index[x]; ok && !s.undo {
			s.installed++
			return &paramSentinel{ParamMarkerExpr: x, text: "`" + s.token + "_p" + strconv.Itoa(i) + "`"}, true
		}
	case *paramSentinel:
		if s.undo {
			return x.ParamMarkerExpr, true
		}
	}
	return n, true
}

// split cuts text at the sentinels `token_N` (table N of sharded) and
// `token_pN` (client placeholder N). It fails when the text holds more
// sentinels than were installed (user text containing the token).
func split(text, token string, sharded []string, tables, params int) (*Template, bool) {
	marker := "`" + token + "_"
	t := &Template{}
	used := make([]int, len(sharded)) // sharded index -> logicals index + 1
	for {
		i := strings.Index(text, marker)
		if i < 0 {
			break
		}
		rest := text[i+len(marker):]
		param := len(rest) > 0 && rest[0] == 'p'
		if param {
			rest = rest[1:]
		}
		j := 0
		for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
			j++
		}
		if j == 0 || j >= len(rest) || rest[j] != '`' {
			return nil, false
		}
		n, err := strconv.Atoi(rest[:j])
		if err != nil {
			return nil, false
		}
		t.parts = append(t.parts, text[:i])
		switch {
		case param:
			t.shuffled = t.shuffled || n != t.params
			t.holes = append(t.holes, paramHole(n))
			t.params++
		case n >= len(sharded):
			return nil, false
		default:
			if used[n] == 0 {
				t.logicals = append(t.logicals, sharded[n])
				used[n] = len(t.logicals)
			}
			t.holes = append(t.holes, used[n]-1)
		}
		text = rest[j+1:]
	}
	t.parts = append(t.parts, text)
	if len(t.holes)-t.params > tables || t.params != params {
		return nil, false
	}
	for _, p := range t.parts {
		if strings.Contains(p, token) {
			return nil, false
		}
		t.fixed += len(p)
	}
	return t, true
}

// Render appends the SQL with each hole filled by phys(logical), printed as
// `database`.`table` (backquoted, embedded backquotes doubled; `table` alone
// for an empty database). phys is
// called once per distinct logical table.
func (t *Template) Render(dst []byte, phys func(logical string) (db, table string)) []byte {
	if len(t.holes) == 0 {
		return append(dst, t.parts[0]...)
	}
	var stack [4][2]string
	names := stack[:0]
	if len(t.logicals) > len(stack) {
		names = make([][2]string, 0, len(t.logicals))
	}
	for _, l := range t.logicals {
		db, tb := phys(l)
		names = append(names, [2]string{db, tb})
	}
	size := t.fixed + t.params
	for _, h := range t.holes {
		if h >= 0 {
			size += len(names[h][0]) + len(names[h][1]) + 5
		}
	}
	dst = slices.Grow(dst, size)
	for i, h := range t.holes {
		dst = append(dst, t.parts[i]...)
		if h < 0 {
			dst = append(dst, '?')
			continue
		}
		if names[h][0] != "" { // "": a logical statement (the outbox's), unqualified
			dst = sqlq.AppendIdent(dst, names[h][0])
			dst = append(dst, '.')
		}
		dst = sqlq.AppendIdent(dst, names[h][1])
	}
	return append(dst, t.parts[len(t.parts)-1]...)
}

// String shows the template with holes as {logical}, for diagnostics.
func (t *Template) String() string {
	var sb strings.Builder
	for i, h := range t.holes {
		sb.WriteString(t.parts[i])
		if h < 0 {
			sb.WriteString("?")
			continue
		}
		sb.WriteString("{" + t.logicals[h] + "}")
	}
	sb.WriteString(t.parts[len(t.parts)-1])
	return sb.String()
}

// SubsetInsert returns a template of the INSERT/REPLACE restricted to the
// given VALUES rows (indexes into a.InsertRows, in the order given) and the
// placeholder indexes that template uses, in order, so the caller can pass
// the matching subset of bound arguments. It restores the statement, so it
// costs like NewTemplate; the AST is left unchanged.
func SubsetInsert(a *Analysis, rows []int) (*Template, []int, error) {
	return subsetInsert(a, rows, nil, false, false)
}

// SubsetInsertHoles is SubsetInsert with each placeholder a hole for
// RenderInline that keeps its number in the whole statement: rendered with
// the statement's arguments, the rows' values are printed in.
func SubsetInsertHoles(a *Analysis, rows []int) (*Template, error) {
	t, _, err := subsetInsert(a, rows, nil, false, true)
	return t, err
}

// SeqInsert is SubsetInsert for an INSERT into conv_msg that omits seq
// (NeedsSeq): the template gets a seq column whose value in rows[i] is
// seqs[i], allocated by the caller in the same local transaction. With
// asParams the seqs become placeholders (SeqParam in the returned order), so
// a prepared statement's text stays the same from one execution to the next.
func SeqInsert(a *Analysis, rows []int, seqs []uint64, asParams bool) (*Template, []int, error) {
	if len(seqs) != len(rows) {
		return nil, nil, errors.New("[BUG] rewrite: SeqInsert needs one seq per row")
	}
	if asParams {
		return subsetInsert(a, rows, nil, true, false)
	}
	return subsetInsert(a, rows, seqs, false, false)
}

// SeqInsertHoles is SeqInsert for every row of the statement with each
// placeholder a hole for RenderInline: client placeholder k keeps number k,
// the seq of row i is number a.ParamCount+i. The caller prints there any
// expression it likes, e.g. one reading the seq its own batch allocated.
func SeqInsertHoles(a *Analysis) (*Template, error) {
	rows := make([]int, len(a.InsertRows))
	for i := range rows {
		rows[i] = i
	}
	t, _, err := subsetInsert(a, rows, nil, true, true)
	return t, err
}

// NeedsSeq reports an INSERT / REPLACE into conv_msg without a seq column:
// Convoy allocates the seqs from im_conv_seq.
func NeedsSeq(a *Analysis) bool {
	ins, ok := a.Stmt.(*ast.InsertStmt)
	if !ok || a.Kind != KindInsert || len(a.Sharded) != 1 || a.Sharded[0] != "conv_msg" || ins.Select != nil {
		return false
	}
	for _, c := range ins.Columns {
		if c.Name.L == "seq" {
			return false
		}
	}
	return len(ins.Columns) > 0
}

func subsetInsert(a *Analysis, rows []int, seqs []uint64, seqParams, holes bool) (*Template, []int, error) {
	ins, ok := a.Stmt.(*ast.InsertStmt)
	if !ok || ins.Select != nil {
		return nil, nil, fmt.Errorf("[BUG] rewrite: SubsetInsert on %T, want INSERT ... VALUES", a.Stmt)
	}
	if len(rows) == 0 {
		return nil, nil, errors.New("[BUG] rewrite: SubsetInsert with no rows")
	}
	orig, origCols := ins.Lists, ins.Columns
	var holeIndex map[*test_driver.ParamMarkerExpr]int
	if holes {
		holeIndex = make(map[*test_driver.ParamMarkerExpr]int, len(a.params)+len(rows))
		for m, i := range a.params {
			holeIndex[m] = i
		}
	}
	sub := make([][]ast.ExprNode, len(rows))
	for i, r := range rows {
		if r < 0 || r >= len(orig) {
			return nil, nil, fmt.Errorf("[BUG] rewrite: SubsetInsert row %d out of range (%d rows)", r, len(orig))
		}
		sub[i] = orig[r]
		if seqs != nil || seqParams {
			row := make([]ast.ExprNode, len(orig[r]), len(orig[r])+1)
			copy(row, orig[r])
			var v ast.ExprNode
			if seqParams {
				m := &test_driver.ParamMarkerExpr{}
				if holes {
					holeIndex[m] = a.ParamCount + i
				}
				v = m
			} else {
				v = ast.NewValueExpr(seqs[i], "", "")
			}
			sub[i] = append(row, v)
		}
	}
	if seqs != nil || seqParams {
		cols := make([]*ast.ColumnName, len(origCols), len(origCols)+1)
		copy(cols, origCols)
		ins.Columns = append(cols, &ast.ColumnName{Name: ast.NewCIStr("seq")})
	}
	ins.Lists = sub
	defer func() { ins.Lists, ins.Columns = orig, origCols }()
	t, err := a.template(ins, holeIndex)
	if err != nil {
		return nil, nil, err
	}
	var params []int
	if a.ParamCount > 0 || seqParams {
		pc := paramCollector{index: a.params}
		ins.Accept(&pc) // visit order of an INSERT is its textual order
		params = pc.order
	}
	return t, params, nil
}

type paramCollector struct {
	index map[*test_driver.ParamMarkerExpr]int
	order []int
}

func (p *paramCollector) Enter(n ast.Node) (ast.Node, bool) {
	if m, ok := n.(*test_driver.ParamMarkerExpr); ok {
		i, known := p.index[m]
		if !known {
			i = SeqParam // a placeholder SeqInsert added for a seq value
		}
		p.order = append(p.order, i)
	}
	return n, false
}

// SeqParam marks, in the placeholder order SeqInsert returns, a placeholder
// that takes the next allocated seq instead of a client argument.
const SeqParam = -1

func (p *paramCollector) Leave(n ast.Node) (ast.Node, bool) { return n, true }

// renamer installs sentinels on the AST and remembers how to undo them.
type renamer struct {
	token     string
	sharded   []string
	installed int
	ctes      map[string]bool
	undoLog

	// Tables that cannot take an alias, and the names their column
	// qualifiers use (lower-case table name -> sharded index).
	noAlias map[*ast.TableSource]bool
	targets map[string]int
	scopes  [][]string // names defined by enclosing SELECTs' FROM clauses
}

// undoRec remembers one overwritten name field; every change the renamer
// makes is a field assignment, so undoing is replaying these backwards.
type undoRec struct {
	field *ast.CIStr
	old   ast.CIStr
}

// undoLog records the name fields a sentinel installer overwrote.
type undoLog struct{ undo []undoRec }

func (u *undoLog) set(field *ast.CIStr, v ast.CIStr) {
	u.undo = append(u.undo, undoRec{field, *field})
	*field = v
}

func (u *undoLog) undoAll() {
	for i := len(u.undo) - 1; i >= 0; i-- {
		*u.undo[i].field = u.undo[i].old
	}
	u.undo = u.undo[:0]
}

func (r *renamer) count() int { return r.installed }

func (r *renamer) shardedIndex(name string) int {
	if r.ctes[name] {
		return -1
	}
	return slices.Index(r.sharded, name)
}

func (r *renamer) sentinel(i int) ast.CIStr {
	r.installed++
	return ast.NewCIStr(r.token + "_" + strconv.Itoa(i))
}

func (r *renamer) markNoAlias(refs *ast.TableRefsClause) {
	if refs == nil {
		return
	}
	var mark func(n ast.ResultSetNode)
	mark = func(n ast.ResultSetNode) {
		switch x := n.(type) {
		case *ast.Join:
			mark(x.Left)
			if x.Right != nil {
				mark(x.Right)
			}
		case *ast.TableSource:
			if r.noAlias == nil {
				r.noAlias = map[*ast.TableSource]bool{}
				r.targets = map[string]int{}
			}
			r.noAlias[x] = true
			if tn, ok := x.Source.(*ast.TableName); ok && x.AsName.L == "" {
				if i := r.shardedIndex(logicalName(tn.Name)); i >= 0 {
					r.targets[tn.Name.L] = i
				}
			}
		}
	}
	if refs.TableRefs != nil {
		mark(refs.TableRefs)
	}
}

func fromNames(from *ast.TableRefsClause) []string {
	var names []string
	var walk func(n ast.ResultSetNode)
	walk = func(n ast.ResultSetNode) {
		switch x := n.(type) {
		case *ast.Join:
			walk(x.Left)
			if x.Right != nil {
				walk(x.Right)
			}
		case *ast.TableSource:
			if x.AsName.L != "" {
				names = append(names, x.AsName.L)
			} else if tn, ok := x.Source.(*ast.TableName); ok {
				names = append(names, tn.Name.L)
			}
		}
	}
	if from != nil && from.TableRefs != nil {
		walk(from.TableRefs)
	}
	return names
}

// qualifier rewrites a column or wildcard qualifier (schema.table) that
// names a sharded table. It reports the new values and whether to change.
func (r *renamer) qualifier(schema, table ast.CIStr) (ast.CIStr, ast.CIStr, bool) {
	if table.L == "" {
		return schema, table, false
	}
	if i, ok := r.targets[table.L]; ok && !r.shadowed(table.L) {
		return ast.CIStr{}, r.sentinel(i), true
	}
	if schema.L != "" && r.shardedIndex(logicalName(table)) >= 0 {
		return ast.CIStr{}, table, true
	}
	return schema, table, false
}

func (r *renamer) shadowed(name string) bool {
	for _, s := range r.scopes {
		if slices.Contains(s, name) {
			return true
		}
	}
	return false
}

func (r *renamer) Enter(n ast.Node) (ast.Node, bool) {
	switch x := n.(type) {
	case *ast.CommonTableExpression:
		if r.ctes == nil {
			r.ctes = map[string]bool{}
		}
		r.ctes[x.Name.L] = true
	case *ast.InsertStmt:
		r.markNoAlias(x.Table)
		if len(r.targets) > 0 {
			// A qualifier in the column list can only name the target:
			// drop it rather than print a three-part name.
			for _, c := range x.Columns {
				if c.Table.L != "" {
					r.set(&c.Schema, ast.CIStr{})
					r.set(&c.Table, ast.CIStr{})
				}
			}
		}
	case *ast.DeleteStmt:
		if !x.IsMultiTable {
			r.markNoAlias(x.TableRefs)
		}
	case *ast.SelectStmt:
		if x.Kind == ast.SelectStmtKindTable && x.From != nil {
			r.markNoAlias(x.From) // TABLE t takes no alias
		}
		r.scopes = append(r.scopes, fromNames(x.From))
	case *ast.DeleteTableList:
		// Multi-table DELETE targets name FROM entries, which are aliased
		// with their logical name: only a schema qualifier has to go.
		for _, tn := range x.Tables {
			if tn.Schema.L != "" && r.shardedIndex(logicalName(tn.Name)) >= 0 {
				r.set(&tn.Schema, ast.CIStr{})
			}
		}
		return n, true
	case *ast.TableSource:
		tn, ok := x.Source.(*ast.TableName)
		if ok && x.AsName.L == "" && !r.noAlias[x] && r.shardedIndex(logicalName(tn.Name)) >= 0 {
			r.set(&x.AsName, tn.Name)
		}
	case *ast.TableName:
		if i := r.shardedIndex(logicalName(x.Name)); i >= 0 && !(x.Schema.L == "" && r.ctes[x.Name.L]) {
			r.set(&x.Schema, ast.CIStr{})
			r.set(&x.Name, r.sentinel(i))
		}
	case *ast.ColumnName:
		if s, t, ok := r.qualifier(x.Schema, x.Table); ok {
			r.set(&x.Schema, s)
			r.set(&x.Table, t)
		}
	case *ast.SelectField:
		// SelectField.Accept does not visit its WildCardField.
		if w := x.WildCard; w != nil {
			if s, t, ok := r.qualifier(w.Schema, w.Table); ok {
				r.set(&w.Schema, s)
				r.set(&w.Table, t)
			}
		}
	}
	return n, false
}

func (r *renamer) Leave(n ast.Node) (ast.Node, bool) {
	if _, ok := n.(*ast.SelectStmt); ok {
		r.scopes = r.scopes[:len(r.scopes)-1]
	}
	return n, true
}
