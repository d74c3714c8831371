package engine

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/pingcap/tidb/pkg/parser/ast"

	"github.com/convoy-im/convoy/proxy/merge"
	"github.com/convoy-im/convoy/proxy/sqlerr"
	"github.com/convoy-im/convoy/rewrite"
	"github.com/convoy-im/convoy/router"
)

// scatterPlan is a SELECT rewritten to run on many shards, with the merge
// that turns their answers into the one answer a single MySQL would give.
type scatterPlan struct {
	sc   *rewrite.Scatter
	tmpl *rewrite.Template
}

// scatterPlanFor builds (once per plan) the scatter form of a SELECT. It
// parses the statement again: PlanScatter rewrites its AST, and the
// single-shard template must keep the original.
func (s *Session) scatterPlanFor(pl *plan) (*scatterPlan, error) {
	if pl.scatter != nil {
		return pl.scatter, nil
	}
	stmts, err := s.parser.Parse(pl.SQL)
	if err != nil || len(stmts) != 1 {
		return nil, sqlerr.Errorf(sqlerr.Internal, "[BUG] re-parsing a planned statement failed: %v", err)
	}
	a, err := rewrite.Analyze(stmts[0])
	if err != nil {
		return nil, err
	}
	if a.SessionRefs != 0 {
		a = a.WithSessionValues(s.sessionValue) // a per-execution plan (sessionPlan)
	}
	sc, err := rewrite.PlanScatter(a)
	if err != nil {
		return nil, err
	}
	tmpl, err := rewrite.NewTemplate(a)
	if err != nil {
		return nil, err
	}
	pl.scatter = &scatterPlan{sc: sc, tmpl: tmpl}
	return pl.scatter, nil
}

// scatter runs a SELECT on the physical tables of shards (nil: every shard)
// in parallel and merges the results. A failed target fails the statement
// with an error that names it.
//
// Inside a transaction (every read of an ORM session is in one) the shard
// the transaction is pinned to is read through it, so its own uncommitted
// writes are seen; the other shards are read as they are now, each in its
// own snapshot: there is no distributed snapshot. A locking read (FOR
// UPDATE, LOCK IN SHARE MODE) would take locks outside the transaction and
// is refused.
func (s *Session) scatter(pl *plan, shards []router.Shard, args []any, binary bool) (*mysql.Result, error) {
	if len(pl.Assigns) > 0 {
		// Each shard would assign its own value, in an order no merge can
		// reproduce: MariaDB's answer (the last row's value) is unknowable.
		return nil, sqlerr.Errorf(sqlerr.NotSupported, "assigning user variables (@%s := ...) in a SELECT reaching several shards is not supported: select the value, then SET the variable", pl.Assigns[0])
	}
	if s.inTxn() && lockingRead(pl.A.Stmt) {
		return nil, sqlerr.Errorf(sqlerr.CrossShardTxn, "this locking SELECT reads several shards; inside a transaction locks can only be taken on the transaction's shard (no distributed transactions)")
	}
	sp, err := s.scatterPlanFor(pl)
	if err != nil {
		return nil, err
	}
	if pl.CalcFound && (sp.sc.Grouped || sp.sc.Distinct) {
		// Each shard counts its own groups or distinct rows; the same one
		// on two shards would be counted twice.
		return nil, sqlerr.Errorf(sqlerr.NotSupported, "SELECT SQL_CALC_FOUND_ROWS with GROUP BY, aggregates or DISTINCT reading several shards is not supported: count with SELECT COUNT(DISTINCT ...) and the same conditions")
	}
	offset, count, args, ok := sp.sc.BindLimit(args)
	if !ok {
		return nil, sqlerr.Errorf(sqlerr.Internal, "[BUG] the LIMIT placeholders of a scatter plan have no bound values")
	}
	if n, ok := s.selectLimit(); ok && count < 0 {
		// sql_select_limit is the LIMIT of a SELECT without one: each shard
		// applies it to its rows, the merge to the whole.
		count = n
	}
	snap := s.e.routes.Current()
	args = sp.tmpl.Bind(args) // the scatter form prints placeholders in its own order
	var parts []part
	if shards == nil {
		for _, g := range snap.AllPhysical(pl.A.Sharded[0]) {
			parts = append(parts, part{shard: g.Shards[0], ds: g.Datasource, args: args})
		}
	} else {
		seen := map[router.Target]bool{}
		for _, sh := range shards {
			if t := snap.Target(sh); !seen[t] {
				seen[t] = true
				parts = append(parts, part{shard: sh, ds: t.Datasource, args: args})
			}
		}
	}
	for i := range parts {
		parts[i].sql = renderTemplate(s, sp.tmpl, snap, parts[i].shard)
	}
	s.e.metrics.countScatter(pl.A.Sharded[0], len(parts))
	results := make([]*mysql.Result, len(parts))
	errs := make([]error, len(parts))
	pinned := -1 // the part read through the session's transaction
	if c := s.txn.conn; c != nil && s.txn.pin >= 0 {
		for i := range parts {
			if snap.Target(parts[i].shard) == snap.Target(router.Shard(s.txn.pin)) {
				pinned = i
			}
		}
	}
	// The first failure fails the statement: the parts not started yet are
	// skipped (on a hung datasource each would wait out the statement
	// timeout in turn, beyond ScatterParallelism).
	var failed atomic.Bool
	s.parallelN(len(parts), s.e.opt.ScatterParallelism, func(i int) {
		if failed.Load() && i != pinned {
			return
		}
		if i == pinned {
			results[i], errs[i] = s.exec(s.txn.conn, parts[i], binary)
		} else {
			results[i], errs[i] = s.autonomous(parts[i], false, binary)
		}
		if errs[i] != nil {
			failed.Store(true)
		}
	})
	if pinned >= 0 {
		s.afterError(s.txn.conn, errs[pinned])
	}
	for i, err := range errs {
		if err != nil {
			return nil, shardError(snap, pl.A.Sharded[0], parts[i].shard, classify(err))
		}
	}
	for i, r := range results {
		if r == nil || r.Resultset == nil {
			// A server answering a SELECT without rows: not a real one's
			// behaviour, and nothing to merge.
			return nil, shardError(snap, pl.A.Sharded[0], parts[i].shard, sqlerr.Errorf(sqlerr.BackendUnavailable, "the datasource answered a SELECT without a result set"))
		}
	}
	spec, err := mergeSpec(sp.sc, results[0].Fields, binary, s.e.opt.MaxScatterRows)
	if err != nil {
		return nil, err
	}
	spec.Offset, spec.Limit = offset, count
	if len(spec.Exprs) > 0 {
		spec.Eval = s.evalOverAggregates(sp.sc.Exprs, binary)
	}
	out, err := merge.Merge(results, spec)
	if err != nil {
		if errors.Is(err, merge.ErrUnsupported) {
			return nil, sqlerr.Errorf(sqlerr.NotSupported, "%v", err)
		}
		if errors.Is(err, merge.ErrTooManyRows) {
			return nil, sqlerr.Errorf(sqlerr.TooLarge, "this SELECT over %d shards produced more than %d rows (max_scatter_rows); add a LIMIT or a %s condition", len(parts), s.e.opt.MaxScatterRows, pl.A.KeyColumn)
		}
		return nil, sqlerr.Errorf(sqlerr.Internal, "merging shard results: %v", err)
	}
	fixFields(out, s.db)
	return out, nil
}

// selectLimit is the session's (or the statement's) sql_select_limit, if
// one is set below its default (no limit).
func (s *Session) selectLimit() (int64, bool) {
	v, ok := s.stmtVars["@@sql_select_limit"]
	if !ok {
		v, ok = s.vars["@@sql_select_limit"]
	}
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(strings.Trim(v, "'\" "), 10, 64)
	if err != nil || n > math.MaxInt64 {
		return 0, false
	}
	return int64(n), true
}

// shardError names the shard and physical table a failure came from and
// keeps the backend's errno.
func shardError(snap *router.Snapshot, logical string, sh router.Shard, err error) error {
	where := fmt.Sprintf("shard %s (%s)", sh, snap.Physical(logical, sh))
	switch e := err.(type) {
	case *mysql.MyError:
		return &mysql.MyError{Code: e.Code, State: e.State, Message: where + ": " + e.Message}
	case *sqlerr.Error:
		return &sqlerr.Error{Code: e.Code, Msg: where + ": " + e.Msg}
	}
	return sqlerr.Errorf(sqlerr.Internal, "%s: %v", where, err)
}

// mergeSpec resolves the scatter description against the columns the shards
// actually returned (SELECT * is only known then).
func mergeSpec(sc *rewrite.Scatter, fields []*mysql.Field, binary bool, maxRows int) (merge.Spec, error) {
	col := func(k rewrite.ScatterKey) (int, error) {
		if k.Index > 0 {
			if k.Index > len(fields)-sc.Hidden {
				return 0, sqlerr.Errorf(sqlerr.Syntax, "Unknown column '%d' in 'order clause'", k.Index)
			}
			return k.Index - 1, nil
		}
		for i, f := range fields {
			if strings.EqualFold(string(f.Name), k.Name) {
				return i, nil
			}
		}
		return 0, sqlerr.Errorf(sqlerr.Internal, "[BUG] merge column %q not in the shard result", k.Name)
	}
	spec := merge.Spec{Binary: binary, Distinct: sc.Distinct, Offset: sc.Offset, Limit: sc.Count,
		Visible: len(fields) - sc.Hidden, MaxRows: maxRows}
	for _, k := range sc.OrderBy {
		i, err := col(k)
		if err != nil {
			return spec, err
		}
		spec.OrderBy = append(spec.OrderBy, merge.Order{Col: i, Desc: k.Desc})
	}
	for _, k := range sc.GroupBy {
		i, err := col(k)
		if err != nil {
			return spec, err
		}
		spec.GroupBy = append(spec.GroupBy, i)
		spec.GroupDesc = append(spec.GroupDesc, k.Desc)
	}
	spec.Rollup = sc.Rollup
	if sc.Grouped {
		spec.Aggs = make([]merge.AggKind, len(fields))
		for i, a := range sc.Aggs {
			if i < len(fields) {
				spec.Aggs[i] = map[rewrite.AggFunc]merge.AggKind{rewrite.AggNone: merge.AggNone, rewrite.AggCount: merge.AggCount,
					rewrite.AggSum: merge.AggSum, rewrite.AggMin: merge.AggMin, rewrite.AggMax: merge.AggMax}[a]
			}
		}
	}
	for _, a := range sc.Avgs {
		sum, err := col(rewrite.ScatterKey{Name: a.SumName})
		if err != nil {
			return spec, err
		}
		n, err := col(rewrite.ScatterKey{Name: a.CountName})
		if err != nil {
			return spec, err
		}
		// The shards' own AVG column carries the scale MySQL shows.
		spec.Avgs = append(spec.Avgs, merge.Avg{Out: a.Out, Sum: sum, Count: n, Scale: int(fields[a.Out].Decimal)})
	}
	for _, x := range sc.Exprs {
		e := merge.Expr{Out: x.Out}
		for _, name := range x.Args {
			i, err := col(rewrite.ScatterKey{Name: name})
			if err != nil {
				return spec, err
			}
			e.Args = append(e.Args, i)
		}
		spec.Exprs = append(spec.Exprs, e)
	}
	for _, d := range sc.Distincts {
		out, err := col(d.Out)
		if err != nil {
			return spec, err
		}
		da := merge.DistinctAgg{Out: out, Func: distinctFuncs[d.Func], Scale: int(fields[out].Decimal)}
		if da.Func == 0 {
			return spec, sqlerr.Errorf(sqlerr.Internal, "[BUG] DISTINCT aggregate %q", d.Func)
		}
		for _, name := range d.Args {
			i, err := col(rewrite.ScatterKey{Name: name})
			if err != nil {
				return spec, err
			}
			da.Args = append(da.Args, i)
		}
		spec.DistinctAggs = append(spec.DistinctAggs, da)
	}
	if len(sc.Having) > 0 {
		type cond struct {
			col int
			op  string
			val any
		}
		var conds []cond
		for _, h := range sc.Having {
			i, err := col(rewrite.ScatterKey{Name: h.Name, Index: h.Index()})
			if err != nil {
				return spec, err
			}
			conds = append(conds, cond{i, h.Op, h.Value})
		}
		spec.Having = func(row []mysql.FieldValue) (bool, error) {
			for _, c := range conds {
				ok, err := compareHaving(row[c.col], c.op, c.val)
				if err != nil || !ok {
					return false, err
				}
			}
			return true, nil
		}
	}
	return spec, nil
}

var distinctFuncs = map[string]merge.DistinctFunc{"count": merge.DistinctCount, "sum": merge.DistinctSum, "avg": merge.DistinctAvg}

// compareHaving evaluates `value op literal` the way MySQL compares a
// number with a number (exactly, through rationals) or a string with a
// string (bytewise: an approximation of the collation). NULL compares false.
func compareHaving(v mysql.FieldValue, op string, lit any) (bool, error) {
	if v.Type == mysql.FieldValueTypeNull || lit == nil {
		return false, nil
	}
	var c int
	a, aNum := ratOf(v.Value())
	b, bNum := ratOf(lit)
	if aNum && bNum {
		c = a.Cmp(b)
	} else {
		c = strings.Compare(fmt.Sprint(stringOf(v.Value())), fmt.Sprint(stringOf(lit)))
	}
	switch op {
	case "=":
		return c == 0, nil
	case "<>":
		return c != 0, nil
	case "<":
		return c < 0, nil
	case "<=":
		return c <= 0, nil
	case ">":
		return c > 0, nil
	case ">=":
		return c >= 0, nil
	}
	return false, sqlerr.Errorf(sqlerr.Internal, "[BUG] HAVING operator %q", op)
}

func stringOf(v any) any {
	if b, ok := v.([]byte); ok {
		return string(b)
	}
	return v
}

func ratOf(v any) (*big.Rat, bool) {
	r := new(big.Rat)
	switch x := v.(type) {
	case int64:
		return r.SetInt64(x), true
	case uint64:
		return r.SetUint64(x), true
	case float64:
		if r.SetFloat64(x) == nil {
			return nil, false
		}
		return r, true
	case router.Decimal:
		return r.SetString(string(x))
	case []byte:
		return r.SetString(strings.TrimSpace(string(x)))
	case string:
		return r.SetString(strings.TrimSpace(x))
	}
	return nil, false
}

// lockingRead reports a SELECT ... FOR UPDATE / LOCK IN SHARE MODE / FOR
// SHARE.
func lockingRead(stmt ast.StmtNode) bool {
	sel, ok := stmt.(*ast.SelectStmt)
	return ok && sel.LockInfo != nil && sel.LockInfo.LockType != ast.SelectLockNone
}
