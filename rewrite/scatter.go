package rewrite

import (
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

// Scatter describes how a SELECT that reads every shard is merged.
type Scatter struct {
	OrderBy  []ScatterKey
	GroupBy  []ScatterKey
	Grouped  bool      // GROUP BY or aggregates: rows are combined per group
	Aggs     []AggFunc // per result column (visible then hidden); nil when not Grouped
	Avgs     []ScatterAvg
	Having   []HavingCond // AND-ed
	Distinct bool
	Offset   int64
	Count    int64 // -1: no LIMIT
	Hidden   int   // trailing helper columns the client must not see
}

const hiddenPrefix = "__cvy_"

// PlanScatter prepares a SELECT on sharded tables to run on every shard and
// describes the merge. It rewrites a.Stmt in place (call it before
// NewTemplate): AVG(x) gets hidden SUM(x) and COUNT(x) columns; group, order and
// HAVING operands that are not plain result columns become hidden columns;
// HAVING is removed (it is applied after the merge); LIMIT o,n becomes LIMIT
// o+n when rows are not grouped, and is removed when they are.
//
// Refused (clear *UnsupportedError): UNION, subqueries, DISTINCT aggregates,
// aggregates inside expressions, SELECT * with aggregates, WITH ROLLUP,
// placeholders in LIMIT, HAVING that is not an AND of `operand op literal`.
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
	// Aggregates: only directly as a result column.
	var aggs []AggFunc
	grouped := sel.GroupBy != nil
	fields := sel.Fields.Fields
	for i, f := range fields {
		if f.WildCard != nil {
			aggs = append(aggs, AggNone)
			continue
		}
		agg, isAgg := f.Expr.(*ast.AggregateFuncExpr)
		if !isAgg {
			if containsAggregate(f.Expr) {
				return nil, unsupported("an aggregate inside an expression (%s) cannot be merged across shards; select the aggregate itself", f.Text())
			}
			aggs = append(aggs, AggNone)
			continue
		}
		grouped = true
		kind, err := aggKind(agg)
		if err != nil {
			return nil, err
		}
		if strings.EqualFold(agg.F, ast.AggFuncAvg) {
			// AVG = SUM / COUNT over all shards. The shards' own AVG column
			// stays (it carries the type MySQL gives AVG); hidden SUM and
			// COUNT columns carry what the merge needs.
			sumName, countName := hiddenPrefix+"s"+strconv.Itoa(i), hiddenPrefix+"n"+strconv.Itoa(i)
			fields = append(fields,
				&ast.SelectField{Expr: &ast.AggregateFuncExpr{F: ast.AggFuncSum, Args: agg.Args}, AsName: ast.NewCIStr(sumName)},
				&ast.SelectField{Expr: &ast.AggregateFuncExpr{F: ast.AggFuncCount, Args: agg.Args}, AsName: ast.NewCIStr(countName)})
			sc.Avgs = append(sc.Avgs, ScatterAvg{Out: i, SumName: sumName, CountName: countName})
			sc.Hidden += 2
			aggs = append(aggs, AggNone)
			continue
		}
		aggs = append(aggs, kind)
	}
	for range sc.Avgs {
		aggs = append(aggs, AggSum, AggCount)
	}
	if grouped && wildcard {
		return nil, unsupported("SELECT * with GROUP BY or aggregates cannot be merged across shards; name the columns")
	}
	sc.Grouped = grouped
	hidden := func(prefix string, n int, e ast.ExprNode, kind AggFunc) string {
		name := hiddenPrefix + prefix + strconv.Itoa(n)
		fields = append(fields, &ast.SelectField{Expr: e, AsName: ast.NewCIStr(name)})
		aggs = append(aggs, kind)
		sc.Hidden++
		return name
	}
	visible := sel.Fields.Fields
	if sel.GroupBy != nil {
		if sel.GroupBy.Rollup {
			return nil, unsupported("GROUP BY ... WITH ROLLUP cannot be merged across shards")
		}
		for i, it := range sel.GroupBy.Items {
			k, ok := resolveKey(it, visible)
			if !ok {
				k = ScatterKey{Name: hidden("g", i, it.Expr, AggNone)}
			}
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
				kind := AggNone
				if agg, isAgg := it.Expr.(*ast.AggregateFuncExpr); isAgg {
					var err error
					if kind, err = aggKind(agg); err != nil || strings.EqualFold(agg.F, ast.AggFuncAvg) {
						return nil, unsupported("ORDER BY AVG(...) is only supported when the AVG is a result column")
					}
				}
				k = ScatterKey{Name: hidden("o", i, it.Expr, kind)}
			}
			k.Desc = it.Desc
			sc.OrderBy = append(sc.OrderBy, k)
		}
	}
	if sel.Having != nil {
		for i, c := range conjuncts(sel.Having.Expr, nil) {
			cond, err := havingCond(c, visible, func(e ast.ExprNode, kind AggFunc) string { return hidden("h", i, e, kind) })
			if err != nil {
				return nil, err
			}
			sc.Having = append(sc.Having, cond)
		}
		sel.Having = nil
	}
	if sel.Limit != nil {
		cnt, ok1 := limitValue(sel.Limit.Count)
		off, ok2 := int64(0), true
		if sel.Limit.Offset != nil {
			off, ok2 = limitValue(sel.Limit.Offset)
		}
		if !ok1 || !ok2 {
			return nil, unsupported("LIMIT with placeholders is not supported in a SELECT that reads every shard; use literal numbers")
		}
		sc.Offset, sc.Count = off, cnt
		if grouped {
			sel.Limit = nil
		} else {
			sel.Limit = &ast.Limit{Count: ast.NewValueExpr(uint64(off+cnt), "", "")}
		}
	}
	if grouped {
		sel.OrderBy = nil // shards need not sort partial groups
		sc.Aggs = aggs
	}
	sel.Fields.Fields = fields
	return sc, nil
}

func aggKind(agg *ast.AggregateFuncExpr) (AggFunc, error) {
	if agg.Distinct {
		return 0, unsupported("%s(DISTINCT ...) cannot be merged across shards", strings.ToUpper(agg.F))
	}
	switch strings.ToLower(agg.F) {
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

func havingCond(e ast.ExprNode, visible []*ast.SelectField, hide func(ast.ExprNode, AggFunc) string) (HavingCond, error) {
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
	kind := AggNone
	if agg, isAgg := operand.(*ast.AggregateFuncExpr); isAgg {
		var err error
		if kind, err = aggKind(agg); err != nil {
			return HavingCond{}, err
		}
		if strings.EqualFold(agg.F, ast.AggFuncAvg) {
			return HavingCond{}, unsupported("HAVING AVG(...) is only supported when the AVG is a result column with an alias")
		}
	} else if containsAggregate(operand) {
		return HavingCond{}, bad
	}
	return HavingCond{Name: hide(operand, kind), Op: op, Value: val}, nil
}

func limitValue(e ast.ExprNode) (int64, bool) {
	v, ok := e.(*test_driver.ValueExpr)
	if !ok {
		return 0, false
	}
	if _, isParam := e.(*test_driver.ParamMarkerExpr); isParam {
		return 0, false
	}
	switch v.Kind() {
	case test_driver.KindInt64:
		return v.GetInt64(), v.GetInt64() >= 0
	case test_driver.KindUint64:
		u := v.GetUint64()
		return int64(u), u < 1<<62
	}
	return 0, false
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
