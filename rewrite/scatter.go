package rewrite

import (
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/pingcap/tidb/pkg/parser/ast"
	"github.com/pingcap/tidb/pkg/parser/opcode"
	"github.com/pingcap/tidb/pkg/parser/test_driver"
)

// AggFunc says how one result column combines across shards.
type AggFunc int

const (
	AggNone  AggFunc = iota // a group key, or a plain column (first value of the group)
	AggCount                // COUNT(...): sum of the shard counts
	AggSum                  // SUM: sum of the shard sums
	AggMin
	AggMax
)

// ScatterKey is an ORDER BY / GROUP BY key of the merged result: a result
// column found by Name (an alias Convoy chose or the client's), or by
// 1-based Index.
type ScatterKey struct {
	Name  string
	Index int
	Desc  bool
}

// HavingCond is one `column op literal` condition of a HAVING clause,
// evaluated on merged groups (a shard only ever sees part of a group).
type HavingCond struct {
	Name  string // result column (a hidden __cvy_h column for aggregates)
	Op    string // = <> < <= > >=
	Value any    // literal, as Value.Lit
	index int    // 1-based result position when the operand is a visible column
}

// Index is the 1-based result position of the operand when it is a visible
// column named by position or expression, 0 when Name is set.
func (c HavingCond) Index() int { return c.index }

// ScatterAvg rebuilds AVG(x) at result position Out (0-based) from the
// hidden SUM and COUNT columns SumName and CountName.
type ScatterAvg struct {
	Out                int
	SumName, CountName string
}

// ScatterDistinct rebuilds COUNT / SUM / AVG(DISTINCT args) at result
// column Out from hidden columns holding the arguments. Every shard groups
// by the arguments too (GROUP BY [client keys,] args), so it returns each
// distinct argument value of each group once; the merge de-duplicates them
// across shards under the columns' collations. The other aggregates stay
// right: a COUNT, SUM, MIN or MAX over finer groups adds up to the same
// result over the client's groups.
type ScatterDistinct struct {
	Out  ScatterKey
	Func string   // "count", "sum" or "avg"
	Args []string // hidden argument columns, in argument order
}

// ScatterLimit names the placeholders of a `LIMIT ?` / `LIMIT ?, ?` /
// `LIMIT ? OFFSET ?`, bound at each EXECUTE (see Scatter.BindLimit).
type ScatterLimit struct {
	Count, Offset int // client placeholder index; -1: the literal in Scatter.Count / Offset
	// Shard is the index of the placeholder the shard statement's own
	// LIMIT (offset + count) takes, after the client's; -1 when the shards
	// get no LIMIT (grouped rows).
	Shard int
}

// Scatter describes how a SELECT that reads every shard is merged.
type Scatter struct {
	OrderBy   []ScatterKey
	GroupBy   []ScatterKey
	Grouped   bool      // GROUP BY or aggregates: rows are combined per group
	Aggs      []AggFunc // per result column (visible then hidden); nil when not Grouped
	Avgs      []ScatterAvg
	Distincts []ScatterDistinct `json:",omitempty"`
	Having    []HavingCond      // AND-ed
	Distinct  bool
	Offset    int64
	Count     int64         // -1: no LIMIT
	Limit     *ScatterLimit `json:",omitempty"` // LIMIT / OFFSET placeholders
	Hidden    int           // trailing helper columns the client must not see
	// Rollup: GROUP BY ... WITH ROLLUP; the merge adds the super-aggregate
	// rows (each group key prefix's, then the grand total).
	Rollup bool `json:",omitempty"`
	// Exprs are result columns computed over merged aggregates (MAX(seq)
	// - MIN(seq), COUNT(*) > 0): a shard cannot compute them from its part.
	Exprs []ScatterExpr `json:",omitempty"`
}

// ScatterExpr is result column Out (0-based), an expression over
// aggregates, and the columns of its group: each shard returns the
// operands as hidden columns Args (merged like any aggregate or group
// column), and the merged values are put into Template in place of
// `__cvy_x<i>` for Args[i] (i counts over every ScatterExpr) and
// evaluated by a server, so the value and its type are MariaDB's own.
type ScatterExpr struct {
	Out      int
	Name     string   // the column's name: the alias, or the expression as written
	Template string   // the expression with its operands as `__cvy_x<i>`
	Args     []string // hidden operand columns
}

const hiddenPrefix = "__cvy_"

// PlanScatter prepares a SELECT on sharded tables to run on every shard and
// describes the merge. It rewrites a.Stmt in place (call it before
// NewTemplate): AVG(x) gets hidden SUM(x) and COUNT(x) columns;
// COUNT / SUM / AVG(DISTINCT x) get a hidden x column and x joins the
// shards' GROUP BY; group, order and HAVING operands that are not plain
// result columns become hidden columns; HAVING is removed (it is applied
// after the merge); LIMIT o,n becomes LIMIT o+n when rows are not grouped,
// and is removed when they are. Placeholders in LIMIT are bound at EXECUTE
// (BindLimit): the shards' LIMIT becomes one placeholder of its own.
//
// An expression over aggregates (MAX(seq) - MIN(seq), COUNT(*) > 0) gets
// its operands as hidden columns and is evaluated after the merge
// (ScatterExpr).
//
// Refused (clear *UnsupportedError): UNION, subqueries, ORDER BY / HAVING
// on expressions over aggregates, SELECT * with aggregates, SELECT DISTINCT
// or ORDER BY (MariaDB's 1221) with WITH ROLLUP, DISTINCT forms of
// aggregates other than COUNT, SUM, AVG, MIN and MAX, HAVING that is not
// an AND of `operand op literal`.
func PlanScatter(a *Analysis) (*Scatter, error) {
	sel, ok := a.Stmt.(*ast.SelectStmt)
	if !ok {
		return nil, unsupported("this %s would read every shard; only a plain SELECT can be spread over shards", a.Kind)
	}
	if hasSubquery(sel) {
		return nil, unsupported("a subquery in a SELECT that reads every shard is not supported: each shard would only see its own rows")
	}
	if sel.Fields == nil {
		return nil, unsupported("[BUG] SELECT without fields")
	}
	sc := &Scatter{Distinct: sel.Distinct, Count: -1}
	wildcard := false
	for _, f := range sel.Fields.Fields {
		if f.WildCard != nil {
			wildcard = true
		}
	}
	grouped := sel.GroupBy != nil
	visible := sel.Fields.Fields
	fields := visible
	var aggs, hiddenAggs []AggFunc
	exprArgs := 0 // operands of Exprs so far
	// hidden appends a helper column the client does not see.
	hidden := func(name string, e ast.ExprNode, kind AggFunc) string {
		name = hiddenPrefix + name
		fields = append(fields, &ast.SelectField{Expr: e, AsName: ast.NewCIStr(name)})
		hiddenAggs = append(hiddenAggs, kind)
		sc.Hidden++
		return name
	}
	// Arguments of DISTINCT aggregates join the shards' GROUP BY (once).
	var shardGroup []ast.ExprNode
	grouping := map[string]bool{}
	distinct := func(agg *ast.AggregateFuncExpr, out ScatterKey, tag string) {
		d := ScatterDistinct{Out: out, Func: strings.ToLower(agg.F)}
		for k, arg := range agg.Args {
			name := tag + "_" + strconv.Itoa(k)
			if _, constant := arg.(ast.ValueExpr); constant {
				// Not grouped (GROUP BY 1 would name a column): MIN(value)
				// is NULL on a shard without rows, where a bare value would
				// be a value seen.
				d.Args = append(d.Args, hidden(name, &ast.AggregateFuncExpr{F: ast.AggFuncMin, Args: []ast.ExprNode{arg}}, AggNone))
				continue
			}
			d.Args = append(d.Args, hidden(name, arg, AggNone))
			text, err := Restore(arg)
			if err != nil || !grouping[text] {
				grouping[text] = true
				shardGroup = append(shardGroup, arg)
			}
		}
		sc.Distincts = append(sc.Distincts, d)
	}
	// hiddenAgg adds an aggregate the client does not see (ORDER BY,
	// HAVING) as a hidden column.
	hiddenAgg := func(tag string, agg *ast.AggregateFuncExpr) (string, error) {
		if isMergedDistinct(agg) {
			name := hidden(tag, agg, AggNone)
			distinct(agg, ScatterKey{Name: name}, tag)
			return name, nil
		}
		kind, err := aggKind(agg)
		if err != nil {
			return "", err
		}
		if strings.EqualFold(agg.F, ast.AggFuncAvg) {
			return "", unsupported("ORDER BY or HAVING on AVG(...) is only supported when the AVG is a result column (with an alias for HAVING)")
		}
		return hidden(tag, agg, kind), nil
	}
	// Aggregates: only directly as a result column.
	for i, f := range visible {
		if f.WildCard != nil {
			aggs = append(aggs, AggNone)
			continue
		}
		agg, isAgg := f.Expr.(*ast.AggregateFuncExpr)
		if !isAgg {
			if containsAggregate(f.Expr) {
				x, err := planScatterExpr(f, i, exprArgs, func(tag string, e ast.ExprNode) (string, error) {
					agg, isAgg := e.(*ast.AggregateFuncExpr)
					switch {
					case !isAgg:
						return hidden(tag, e, AggNone), nil // a group column
					case strings.EqualFold(agg.F, ast.AggFuncAvg) && !agg.Distinct:
						// Merged like a result column's AVG, into a hidden one.
						out := hidden(tag, agg, AggNone)
						sumName := hidden(tag+"s", &ast.AggregateFuncExpr{F: ast.AggFuncSum, Args: agg.Args}, AggSum)
						countName := hidden(tag+"n", &ast.AggregateFuncExpr{F: ast.AggFuncCount, Args: agg.Args}, AggCount)
						sc.Avgs = append(sc.Avgs, ScatterAvg{Out: len(fields) - 3, SumName: sumName, CountName: countName})
						return out, nil
					}
					return hiddenAgg(tag, agg)
				})
				if err != nil {
					return nil, err
				}
				exprArgs += len(x.Args)
				sc.Exprs = append(sc.Exprs, x)
				grouped = true
			}
			aggs = append(aggs, AggNone)
			continue
		}
		grouped = true
		if isMergedDistinct(agg) {
			// The shards' own column stays for its metadata (the type MySQL
			// gives the aggregate); the merge computes its value.
			distinct(agg, ScatterKey{Index: i + 1}, "d"+strconv.Itoa(i))
			aggs = append(aggs, AggNone)
			continue
		}
		kind, err := aggKind(agg)
		if err != nil {
			return nil, err
		}
		if strings.EqualFold(agg.F, ast.AggFuncAvg) {
			// AVG = SUM / COUNT over all shards. The shards' own AVG column
			// stays (it carries the type MySQL gives AVG); hidden SUM and
			// COUNT columns carry what the merge needs.
			sumName := hidden("s"+strconv.Itoa(i), &ast.AggregateFuncExpr{F: ast.AggFuncSum, Args: agg.Args}, AggSum)
			countName := hidden("n"+strconv.Itoa(i), &ast.AggregateFuncExpr{F: ast.AggFuncCount, Args: agg.Args}, AggCount)
			sc.Avgs = append(sc.Avgs, ScatterAvg{Out: i, SumName: sumName, CountName: countName})
			aggs = append(aggs, AggNone)
			continue
		}
		aggs = append(aggs, kind)
	}
	if grouped && wildcard {
		return nil, unsupported("SELECT * with GROUP BY or aggregates cannot be merged across shards; name the columns")
	}
	if sel.Distinct && len(sc.Exprs) > 0 {
		// The merge removes duplicates before the expressions are
		// evaluated.
		return nil, unsupported("SELECT DISTINCT with an expression over aggregates cannot be merged across shards")
	}
	sc.Grouped = grouped
	if sel.GroupBy != nil {
		if sel.GroupBy.Rollup {
			switch {
			case sel.OrderBy != nil:
				return nil, unsupportedAs(ErrRollupOrder, "Incorrect usage of CUBE/ROLLUP and ORDER BY")
			case sel.Distinct:
				return nil, unsupported("SELECT DISTINCT ... WITH ROLLUP cannot be merged across shards")
			case sel.Having != nil || len(sc.Exprs) > 0:
				// Their operands copy group columns the super-aggregate
				// rows would have to show as NULL.
				return nil, unsupported("GROUP BY ... WITH ROLLUP with HAVING or an expression over aggregates cannot be merged across shards")
			}
			// The shards group without it; the merge adds the super-aggregate rows.
			sc.Rollup, sel.GroupBy.Rollup = true, false
		}
		for i, it := range sel.GroupBy.Items {
			k, ok := resolveKey(it, visible)
			if !ok {
				k = ScatterKey{Name: hidden("g"+strconv.Itoa(i), it.Expr, AggNone)}
			}
			k.Desc = it.Desc // MariaDB's GROUP BY a DESC: the groups' order
			sc.GroupBy = append(sc.GroupBy, k)
		}
	}
	if sel.OrderBy != nil {
		for i, it := range sel.OrderBy.Items {
			if containsAggregate(it.Expr) {
				if _, isAgg := it.Expr.(*ast.AggregateFuncExpr); !isAgg {
					return nil, unsupported("ORDER BY an expression over aggregates cannot be merged across shards")
				}
			}
			k, ok := resolveKey(it, visible)
			if !ok {
				tag := "o" + strconv.Itoa(i)
				if agg, isAgg := it.Expr.(*ast.AggregateFuncExpr); isAgg {
					name, err := hiddenAgg(tag, agg)
					if err != nil {
						return nil, err
					}
					k = ScatterKey{Name: name}
				} else {
					k = ScatterKey{Name: hidden(tag, it.Expr, AggNone)}
				}
			}
			k.Desc = it.Desc
			sc.OrderBy = append(sc.OrderBy, k)
		}
	}
	if sel.Having != nil {
		for i, c := range conjuncts(sel.Having.Expr, nil) {
			tag := "h" + strconv.Itoa(i)
			cond, err := havingCond(c, visible, func(e ast.ExprNode) (string, error) {
				if agg, isAgg := e.(*ast.AggregateFuncExpr); isAgg {
					return hiddenAgg(tag, agg)
				}
				return hidden(tag, e, AggNone), nil
			})
			if err != nil {
				return nil, err
			}
			sc.Having = append(sc.Having, cond)
		}
		sel.Having = nil
	}
	// The merge sorts and filters before Exprs are evaluated.
	isExpr := func(index int, name string) bool {
		return slices.ContainsFunc(sc.Exprs, func(x ScatterExpr) bool {
			return index > 0 && x.Out == index-1 || name != "" && strings.EqualFold(x.Name, name)
		})
	}
	for _, k := range sc.OrderBy {
		if isExpr(k.Index, k.Name) {
			return nil, unsupported("ORDER BY an expression over aggregates cannot be merged across shards")
		}
	}
	for _, c := range sc.Having {
		if isExpr(c.index, c.Name) {
			return nil, unsupported("HAVING on an expression over aggregates cannot be merged across shards")
		}
	}
	if len(shardGroup) > 0 {
		if sel.GroupBy == nil {
			sel.GroupBy = &ast.GroupByClause{}
		}
		for _, e := range shardGroup {
			sel.GroupBy.Items = append(sel.GroupBy.Items, &ast.ByItem{Expr: e})
		}
	}
	if sel.Limit != nil {
		if err := planLimit(a, sel, sc, grouped); err != nil {
			return nil, err
		}
	}
	if grouped {
		sel.OrderBy = nil // shards need not sort partial groups
		sc.Aggs = append(aggs, hiddenAggs...)
	}
	sel.Fields.Fields = fields
	return sc, nil
}

// isMergedDistinct: COUNT / SUM / AVG(DISTINCT ...), merged from the
// distinct argument values (MIN / MAX(DISTINCT x) are MIN / MAX(x)).
func isMergedDistinct(agg *ast.AggregateFuncExpr) bool {
	if !agg.Distinct {
		return false
	}
	switch strings.ToLower(agg.F) {
	case ast.AggFuncCount, ast.AggFuncSum, ast.AggFuncAvg:
		return true
	}
	return false
}

// planLimit records LIMIT / OFFSET for the merge and gives the shards
// LIMIT offset+count (rows not grouped) or no LIMIT (grouped: every shard
// returns all its partial groups).
func planLimit(a *Analysis, sel *ast.SelectStmt, sc *Scatter, grouped bool) error {
	cnt, err := limitOperand(a, sel.Limit.Count)
	if err != nil {
		return err
	}
	off := limitArg{param: -1}
	if sel.Limit.Offset != nil {
		if off, err = limitOperand(a, sel.Limit.Offset); err != nil {
			return err
		}
	}
	sc.Offset, sc.Count = clampLimit(off.val), clampLimit(cnt.val)
	if cnt.param < 0 && off.param < 0 {
		if grouped {
			sel.Limit = nil
		} else {
			sel.Limit = &ast.Limit{Count: ast.NewValueExpr(addLimits(off.val, cnt.val), "", "")}
		}
		return nil
	}
	sc.Limit = &ScatterLimit{Count: cnt.param, Offset: off.param, Shard: -1}
	for _, e := range []ast.ExprNode{sel.Limit.Count, sel.Limit.Offset} {
		if m, ok := e.(*test_driver.ParamMarkerExpr); ok {
			delete(a.params, m) // no longer printed: the template binds what remains
		}
	}
	sel.Limit = nil
	if !grouped {
		m := &test_driver.ParamMarkerExpr{}
		a.params[m] = a.ParamCount
		sc.Limit.Shard = a.ParamCount
		sel.Limit = &ast.Limit{Count: m}
	}
	return nil
}

// limitArg is a LIMIT or OFFSET operand: a literal value or a placeholder.
type limitArg struct {
	val   uint64
	param int // client placeholder index, -1 for a literal
}

func limitOperand(a *Analysis, e ast.ExprNode) (limitArg, error) {
	if m, ok := e.(*test_driver.ParamMarkerExpr); ok {
		if i, known := a.params[m]; known {
			return limitArg{param: i}, nil
		}
		return limitArg{}, unsupported("[BUG] LIMIT placeholder without an index")
	}
	if v, ok := e.(*test_driver.ValueExpr); ok {
		switch v.Kind() {
		case test_driver.KindInt64:
			if n := v.GetInt64(); n >= 0 {
				return limitArg{val: uint64(n), param: -1}, nil
			}
		case test_driver.KindUint64:
			return limitArg{val: v.GetUint64(), param: -1}, nil
		}
	}
	return limitArg{}, unsupported("this LIMIT cannot be merged across shards: use numbers or placeholders")
}

// clampLimit maps a LIMIT / OFFSET value onto the merge's int64: anything
// from 2^63 on is as good as no limit (or as skipping every row).
func clampLimit(v uint64) int64 {
	return int64(min(v, math.MaxInt64))
}

// addLimits is offset + count for the shards' LIMIT, saturating at the
// largest LIMIT MariaDB takes.
func addLimits(off, cnt uint64) uint64 {
	if s := off + cnt; s >= off {
		return s
	}
	return math.MaxUint64
}

// BindLimit resolves the LIMIT / OFFSET placeholders of one EXECUTE: the
// merged result's offset and row count, and the arguments of the shard
// statement (args, in the client's order, plus the shards' LIMIT
// offset+count when they take one). Bound values convert as MariaDB
// converts them in LIMIT (LimitValue): MariaDB raises no error for a
// negative or fractional value, and neither does Convoy.
func (sc *Scatter) BindLimit(args []any) (offset, count int64, shardArgs []any, ok bool) {
	offset, count = sc.Offset, sc.Count
	l := sc.Limit
	if l == nil {
		return offset, count, args, true
	}
	get := func(i int, lit int64) (uint64, bool) {
		if i < 0 {
			return uint64(lit), true
		}
		if i >= len(args) {
			return 0, false
		}
		return LimitValue(args[i]), true
	}
	off, ok1 := get(l.Offset, sc.Offset)
	cnt, ok2 := get(l.Count, sc.Count)
	if !ok1 || !ok2 {
		return 0, 0, nil, false
	}
	shardArgs = args
	if l.Shard >= 0 {
		if l.Shard != len(args) {
			return 0, 0, nil, false
		}
		shardArgs = append(append(make([]any, 0, len(args)+1), args...), addLimits(off, cnt))
	}
	return clampLimit(off), clampLimit(cnt), shardArgs, true
}

// LimitValue converts a value bound to a LIMIT or OFFSET placeholder the
// way MariaDB 10.11 does (checked against the server): integers as
// unsigned (a negative one wraps to a huge value: no limit, or every row
// skipped), floating-point values rounded half to even (a negative result
// wraps too, beyond 2^63 saturates), strings by their leading integer
// ("3abc" and "2.9" are 3 and 2, "abc" and "" are 0, "-1" wraps, overflow
// saturates), NULL as 0.
func LimitValue(v any) uint64 {
	if l, ok := v.(Literal); ok {
		v = l.Val
	}
	switch x := v.(type) {
	case nil:
		return 0
	case int8:
		return uint64(int64(x))
	case int16:
		return uint64(int64(x))
	case int32:
		return uint64(int64(x))
	case int64:
		return uint64(x)
	case int:
		return uint64(int64(x))
	case uint8:
		return uint64(x)
	case uint16:
		return uint64(x)
	case uint32:
		return uint64(x)
	case uint64:
		return x
	case float32:
		return floatLimit(float64(x))
	case float64:
		return floatLimit(x)
	case []byte:
		return stringLimit(string(x))
	case string:
		return stringLimit(x)
	}
	return 0
}

func floatLimit(f float64) uint64 {
	f = math.RoundToEven(f)
	switch {
	case math.IsNaN(f):
		return 0
	case f >= math.MaxInt64:
		return math.MaxInt64
	case f <= math.MinInt64:
		return 1 << 63
	}
	return uint64(int64(f))
}

func stringLimit(s string) uint64 {
	i := 0
	for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
		i++
	}
	neg := false
	if i < len(s) && (s[i] == '-' || s[i] == '+') {
		neg = s[i] == '-'
		i++
	}
	var n uint64
	overflow := false
	for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		d := uint64(s[i] - '0')
		if n > (math.MaxUint64-d)/10 {
			overflow = true
			continue
		}
		n = n*10 + d
	}
	switch {
	case neg && (overflow || n > 1<<63):
		return 1 << 63
	case neg:
		return -n
	case overflow:
		return math.MaxUint64
	}
	return n
}

func aggKind(agg *ast.AggregateFuncExpr) (AggFunc, error) {
	fn := strings.ToLower(agg.F)
	if agg.Distinct && fn != ast.AggFuncMin && fn != ast.AggFuncMax {
		// COUNT / SUM / AVG(DISTINCT) are merged from their argument values
		// (isMergedDistinct) before this is asked.
		return 0, unsupported("%s(DISTINCT ...) cannot be merged across shards", strings.ToUpper(agg.F))
	}
	switch fn {
	case ast.AggFuncCount:
		return AggCount, nil
	case ast.AggFuncSum, ast.AggFuncAvg:
		return AggSum, nil
	case ast.AggFuncMin:
		return AggMin, nil
	case ast.AggFuncMax:
		return AggMax, nil
	}
	return 0, unsupported("aggregate %s cannot be merged across shards (COUNT, SUM, MIN, MAX and AVG can)", strings.ToUpper(agg.F))
}

// resolveKey finds an ORDER/GROUP BY item among the visible result columns:
// a position, an alias, or the same expression.
func resolveKey(it *ast.ByItem, visible []*ast.SelectField) (ScatterKey, bool) {
	switch e := it.Expr.(type) {
	case *ast.PositionExpr:
		if e.P == nil && e.N >= 1 && e.N <= len(visible) {
			return ScatterKey{Index: e.N}, true
		}
		return ScatterKey{}, false
	case *ast.ColumnNameExpr:
		if e.Name.Table.O == "" {
			for _, f := range visible {
				if f.AsName.L != "" && f.AsName.L == e.Name.Name.L {
					return ScatterKey{Name: f.AsName.O}, true
				}
			}
		}
	}
	want, err := Restore(it.Expr)
	if err != nil {
		return ScatterKey{}, false
	}
	for i, f := range visible {
		if f.WildCard != nil || f.Expr == nil {
			continue
		}
		if got, err := Restore(f.Expr); err == nil && got == want {
			return ScatterKey{Index: i + 1}, true
		}
	}
	return ScatterKey{}, false
}

var havingOps = map[opcode.Op]string{opcode.EQ: "=", opcode.NE: "<>", opcode.LT: "<", opcode.LE: "<=", opcode.GT: ">", opcode.GE: ">="}

// mirror turns `literal op x` into `x op' literal`.
var mirror = map[string]string{"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}

func havingCond(e ast.ExprNode, visible []*ast.SelectField, hide func(ast.ExprNode) (string, error)) (HavingCond, error) {
	bad := unsupported("this HAVING cannot be evaluated after merging shards: use AND-ed comparisons of a result column or aggregate with a literal")
	b, ok := unparen(e).(*ast.BinaryOperationExpr)
	if !ok {
		return HavingCond{}, bad
	}
	op, ok := havingOps[b.Op]
	if !ok {
		return HavingCond{}, bad
	}
	operand, lit := unparen(b.L), unparen(b.R)
	if _, isLit := operand.(*test_driver.ValueExpr); isLit {
		operand, lit = lit, operand
		op = mirror[op]
	}
	if _, isParam := lit.(*test_driver.ParamMarkerExpr); isParam {
		return HavingCond{}, unsupported("placeholders in HAVING are not supported in a SELECT that reads every shard")
	}
	v, ok := lit.(*test_driver.ValueExpr)
	if !ok {
		return HavingCond{}, bad
	}
	val, ok := literal(v)
	if !ok {
		return HavingCond{}, bad
	}
	if k, found := resolveKey(&ast.ByItem{Expr: operand}, visible); found {
		return HavingCond{Name: k.Name, Op: op, Value: val, index: k.Index}, nil
	}
	if _, isAgg := operand.(*ast.AggregateFuncExpr); !isAgg && containsAggregate(operand) {
		return HavingCond{}, bad
	}
	name, err := hide(operand)
	if err != nil {
		return HavingCond{}, err
	}
	return HavingCond{Name: name, Op: op, Value: val}, nil
}

func containsAggregate(e ast.Node) bool {
	v := &aggFinder{}
	e.Accept(v)
	return v.found
}

type aggFinder struct{ found bool }

func (v *aggFinder) Enter(n ast.Node) (ast.Node, bool) {
	switch n.(type) {
	case *ast.AggregateFuncExpr, *ast.WindowFuncExpr:
		v.found = true
	}
	return n, v.found
}

func (v *aggFinder) Leave(n ast.Node) (ast.Node, bool) { return n, true }

func hasSubquery(n ast.Node) bool {
	v := &subqueryFinder{}
	n.Accept(v)
	return v.found
}

type subqueryFinder struct{ found bool }

func (v *subqueryFinder) Enter(n ast.Node) (ast.Node, bool) {
	switch n.(type) {
	case *ast.SubqueryExpr, *ast.ExistsSubqueryExpr:
		v.found = true
	}
	return n, v.found
}

func (v *subqueryFinder) Leave(n ast.Node) (ast.Node, bool) { return n, true }

// planScatterExpr plans result column out, an expression over aggregates:
// its operands (each aggregate, and each column outside them, which must
// then be a group column) become hidden columns through operand, the
// shards' column becomes NULL under the column's name, and the expression
// becomes a template over `__cvy_x<first+i>`. Refused: an operand that
// cannot be merged (operand's refusals, window functions), and what a
// server evaluating the template later could not see (placeholders,
// variables).
func planScatterExpr(f *ast.SelectField, out, first int, operand func(tag string, e ast.ExprNode) (string, error)) (ScatterExpr, error) {
	x := ScatterExpr{Out: out, Name: f.AsName.O}
	if x.Name == "" {
		x.Name = strings.TrimSpace(f.Text())
	}
	v := &exprOperands{next: first}
	f.Expr.Accept(v)
	if v.err != nil {
		return x, v.err
	}
	for k, op := range v.ops {
		name, err := operand("x"+strconv.Itoa(first+k), op)
		if err != nil {
			return x, err
		}
		x.Args = append(x.Args, name)
	}
	tmpl, err := Restore(v.rewritten)
	if err != nil {
		return x, err
	}
	x.Template = tmpl
	f.Expr = ast.NewValueExpr(nil, "", "")
	f.AsName = ast.NewCIStr(x.Name)
	return x, nil
}

// exprOperands collects an expression's operands for planScatterExpr and
// rewrites it with each replaced by `__cvy_x<n>`.
type exprOperands struct {
	next      int
	ops       []ast.ExprNode
	rewritten ast.ExprNode
	depth     int
	err       error
}

func (v *exprOperands) Enter(n ast.Node) (ast.Node, bool) {
	v.depth++
	switch x := n.(type) {
	case *ast.AggregateFuncExpr, *ast.ColumnNameExpr:
		return n, true // an operand: its insides are the shards'
	case *ast.WindowFuncExpr:
		v.err = unsupported("a window function cannot be merged across shards")
	case *test_driver.ParamMarkerExpr:
		v.err = unsupported("a placeholder inside an expression over aggregates is not supported across shards; compare the selected aggregate in the application")
	case *ast.VariableExpr:
		v.err = unsupported("a variable inside an expression over aggregates is not supported across shards")
	case *ast.DefaultExpr, *ast.ValuesExpr:
		v.err = unsupported("%T inside an expression over aggregates is not supported across shards", x)
	}
	return n, v.err != nil
}

func (v *exprOperands) Leave(n ast.Node) (ast.Node, bool) {
	v.depth--
	var out ast.Node = n
	switch n.(type) {
	case *ast.AggregateFuncExpr, *ast.ColumnNameExpr:
		v.ops = append(v.ops, n.(ast.ExprNode))
		name := "__cvy_x" + strconv.Itoa(v.next)
		v.next++
		out = &ast.ColumnNameExpr{Name: &ast.ColumnName{Name: ast.NewCIStr(name)}}
	}
	if v.depth == 0 {
		v.rewritten = out.(ast.ExprNode)
	}
	return out, v.err == nil
}
