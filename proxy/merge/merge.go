package merge

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// Order is one ORDER BY key: column index in the shard result and direction.
type Order struct {
	Col  int
	Desc bool
}

// AggKind is how a column of the per-shard result combines across shards.
type AggKind int

const (
	// AggNone is a plain column: a GROUP BY key, or functionally the same
	// within a group (the first row's value is taken).
	AggNone AggKind = iota
	// AggCount is COUNT(...): the sum of the shard counts.
	AggCount
	// AggSum is SUM(...): the sum of the shard sums, NULL if all are NULL.
	AggSum
	// AggMin is MIN(...), NULLs ignored.
	AggMin
	// AggMax is MAX(...), NULLs ignored.
	AggMax
)

func (k AggKind) String() string {
	switch k {
	case AggNone:
		return "none"
	case AggCount:
		return "count"
	case AggSum:
		return "sum"
	case AggMin:
		return "min"
	case AggMax:
		return "max"
	}
	return fmt.Sprintf("AggKind(%d)", int(k))
}

// Avg rebuilds an AVG(x) output column from hidden SUM(x) and COUNT(x)
// columns. Out is typically the shard's own AVG(x), whose metadata (DECIMAL
// or DOUBLE) the merged value is encoded to; its shard values are ignored.
type Avg struct {
	Out, Sum, Count int
	// Scale is the number of decimals MySQL shows for a DECIMAL AVG: the
	// argument's scale + div_precision_increment (4 by default).
	Scale int
}

// DistinctFunc is the aggregate a [DistinctAgg] rebuilds.
type DistinctFunc int

const (
	DistinctCount DistinctFunc = iota + 1 // COUNT(DISTINCT a, ...): distinct tuples without NULL
	DistinctSum                           // SUM(DISTINCT a): NULL when there is no non-NULL value
	DistinctAvg                           // AVG(DISTINCT a)
)

func (f DistinctFunc) String() string {
	switch f {
	case DistinctCount:
		return "COUNT"
	case DistinctSum:
		return "SUM"
	case DistinctAvg:
		return "AVG"
	}
	return fmt.Sprintf("DistinctFunc(%d)", int(f))
}

// DistinctAgg rebuilds COUNT / SUM / AVG(DISTINCT args) at column Out from
// the argument columns Args. Each shard grouped its rows by the arguments
// too, so a shard row carries one argument value (tuple) of its group; the
// merge collects the distinct non-NULL values of each group under the
// columns' comparison rules (collations included: 'a' and 'A' are one
// value under a _ci collation) and counts, sums or averages them. Out is
// typically the shard's own aggregate column, whose metadata the merged
// value is encoded to; its shard values are ignored.
type DistinctAgg struct {
	Out  int
	Func DistinctFunc
	Args []int // one for SUM and AVG
	// Scale is the number of decimals of a DECIMAL AVG, as in [Avg].
	Scale int
}

// Spec describes the merge of one cross-shard SELECT. Column indexes refer
// to the shard result's columns.
type Spec struct {
	Binary  bool  // rows are binary-protocol rows (prepared statements)
	GroupBy []int // group key columns (empty + any aggregate = one group over everything)
	// GroupDesc: per GroupBy column, the groups come in descending order
	// (MariaDB's GROUP BY a DESC) when there is no ORDER BY.
	GroupDesc []bool
	// Rollup adds GROUP BY ... WITH ROLLUP's super-aggregate rows: after
	// the groups of each key prefix, its row (the later key columns NULL),
	// and the grand total last.
	Rollup bool
	Aggs   []AggKind // per column; nil = no aggregation
	Avgs   []Avg
	// DistinctAggs are the COUNT / SUM / AVG(DISTINCT ...) columns.
	DistinctAggs []DistinctAgg
	Distinct     bool // DISTINCT over the visible columns
	// Having, if set, filters merged rows (groups when aggregating). It sees
	// every column, hidden ones included, decoded like go-mysql's client does.
	Having  func(row []mysql.FieldValue) (bool, error)
	OrderBy []Order // applied after grouping
	Offset  int64
	Limit   int64 // < 0: no limit
	// Visible is the number of leading columns the client sees; the hidden
	// helper columns after them are dropped (Fields too). 0 = all.
	Visible int
	// Exprs are result columns computed from merged operand columns by
	// Eval, after the rows are grouped, filtered, ordered and cut to
	// LIMIT (none may be sorted or filtered on).
	Exprs []Expr
	Eval  EvalFunc
	// MaxRows caps the rows held at once: the input rows of all shards plus
	// the groups / distinct rows Merge builds (the distinct values of
	// DistinctAggs come one per input row and are bounded by the inputs).
	// <= 0: no cap.
	MaxRows int
}

// Expr is a result column (Out) an expression over aggregates computes
// from its operands: the Args columns (hidden), as merged.
type Expr struct {
	Out  int
	Args []int
}

// EvalFunc evaluates Spec.Exprs: rows[r] holds merged row r's operand
// values (every Expr's Args, in Expr order), fields their columns. It
// returns one row per input row (none: the fields alone), one column per
// Expr, in the Spec's protocol.
type EvalFunc func(fields []*mysql.Field, rows [][]mysql.FieldValue) (*mysql.Result, error)

// evalBatch is how many rows one EvalFunc call evaluates.
const evalBatch = 500

var (
	// ErrTooManyRows: the inputs plus the rows Merge would have to hold
	// exceed Spec.MaxRows.
	ErrTooManyRows = errors.New("merge: too many rows for a cross-shard merge")
	// ErrMalformed: a shard result is inconsistent (column counts or types
	// differ between shards, a row packet does not parse, a spec index is
	// out of range). A [BUG] on our side or the backend's, never user error.
	ErrMalformed = errors.New("merge: malformed shard result")
	// ErrUnsupported: the merge cannot reproduce MySQL's answer (ordering
	// by ENUM/SET/JSON, a merged sum out of the column's range, ...).
	ErrUnsupported = errors.New("merge: not supported across shards")
)

// plan is a validated Spec over known fields.
type plan struct {
	Spec
	fields  []*mysql.Field
	kinds   []kind
	ncol    int
	visible int
	aggs    []AggKind // per column, AVG sum/count columns forced
	avgOut  []int     // per column: index into Avgs + 1 when it is an AVG output
	agg     bool      // grouping / aggregation path
	inRows  int       // rows over all inputs
	distKey []byte    // scratch for DISTINCT aggregate keys
}

// Merge combines per-shard results of one SELECT into the result a single
// MySQL server would have returned for the whole table. parts must all come
// from the same statement (same columns) in the protocol spec.Binary says.
// Rows are reused byte for byte when they pass through unchanged; computed
// and trimmed rows are re-encoded in the same protocol. The inputs are not
// modified.
func Merge(parts []*mysql.Result, spec Spec) (*mysql.Result, error) {
	p, err := newPlan(parts, spec)
	if err != nil {
		return nil, err
	}
	out := &mysql.Result{Resultset: &mysql.Resultset{
		Fields:     append([]*mysql.Field(nil), p.fields[:p.visible]...),
		FieldNames: make(map[string]int, p.visible),
	}}
	for i, f := range out.Fields {
		out.FieldNames[string(f.Name)] = i
	}
	out.Status = parts[0].Status
	var warnings int
	for _, r := range parts {
		warnings += int(r.Warnings)
	}
	out.Warnings = uint16(min(warnings, math.MaxUint16))
	w := &writer{p: p, out: out.Resultset}
	switch {
	case p.agg:
		err = p.aggregate(parts, w)
	case p.Distinct:
		err = p.distinct(parts, w)
	default:
		err = p.stream(parts, w)
	}
	if err == nil {
		err = w.evalExprs()
	}
	if err != nil {
		return nil, err
	}
	out.AffectedRows = uint64(len(out.RowDatas))
	return out, nil
}

// evalExprs computes the Exprs of the rows held back (pending), evalBatch
// at a time, and writes them with the evaluated columns and their
// metadata.
func (w *writer) evalExprs() error {
	p := w.p
	if len(p.Exprs) == 0 {
		return nil
	}
	var argCols []int
	for _, x := range p.Exprs {
		argCols = append(argCols, x.Args...)
	}
	argFields := make([]*mysql.Field, len(argCols))
	for i, c := range argCols {
		argFields[i] = p.fields[c]
	}
	outFields := slices.Clone(p.fields[:p.visible])
	for start := 0; start == 0 || start < len(w.pending); start += evalBatch {
		batch := w.pending[start:min(start+evalBatch, len(w.pending))]
		rows := make([][]mysql.FieldValue, len(batch))
		for r, cells := range batch {
			rows[r] = make([]mysql.FieldValue, len(argCols))
			for i, c := range argCols {
				v, err := fieldValue(p.fields[c], p.Binary, cells[c])
				if err != nil {
					return err
				}
				rows[r][i] = v
			}
		}
		res, err := p.Eval(argFields, rows)
		if err != nil {
			return err
		}
		if res == nil || res.Resultset == nil || len(res.Fields) != len(p.Exprs) || len(res.RowDatas) != len(batch) {
			return fmt.Errorf("%w: an expression over aggregates evaluated to another shape than asked", ErrMalformed)
		}
		for k, x := range p.Exprs {
			outFields[x.Out] = res.Fields[k]
		}
		evaluated := make([]cell, len(p.Exprs))
		for r, cells := range batch {
			if err := decodeRow(res.RowDatas[r], res.Fields, p.Binary, evaluated); err != nil {
				return err
			}
			for k, x := range p.Exprs {
				cells[x.Out] = evaluated[k]
			}
			row := make([]mysql.FieldValue, p.visible)
			for j := range row {
				v, err := fieldValue(outFields[j], p.Binary, cells[j])
				if err != nil {
					return err
				}
				row[j] = v
			}
			w.out.RowDatas = append(w.out.RowDatas, appendRow(nil, outFields, cells[:p.visible], p.Binary))
			w.out.Values = append(w.out.Values, row)
		}
	}
	w.out.Fields = outFields
	return nil
}

func newPlan(parts []*mysql.Result, spec Spec) (*plan, error) {
	if len(parts) == 0 {
		return nil, fmt.Errorf("%w: no shard results", ErrMalformed)
	}
	p := &plan{Spec: spec}
	for i, r := range parts {
		if r == nil || r.Resultset == nil || len(r.Fields) == 0 {
			return nil, fmt.Errorf("%w: shard result %d has no result set", ErrMalformed, i)
		}
		if i == 0 {
			p.fields = r.Fields
			p.ncol = len(r.Fields)
			for j, f := range r.Fields {
				if f == nil {
					return nil, fmt.Errorf("%w: column %d has no metadata", ErrMalformed, j)
				}
			}
		} else if len(r.Fields) != p.ncol {
			return nil, fmt.Errorf("%w: shard result %d has %d columns, shard result 0 has %d", ErrMalformed, i, len(r.Fields), p.ncol)
		} else {
			for j, f := range r.Fields {
				g := p.fields[j]
				if f == nil || f.Type != g.Type || f.Flag&mysql.UNSIGNED_FLAG != g.Flag&mysql.UNSIGNED_FLAG {
					return nil, fmt.Errorf("%w: column %d differs between shard results 0 and %d", ErrMalformed, j, i)
				}
			}
		}
		p.inRows += len(r.RowDatas)
	}
	if p.MaxRows > 0 && p.inRows > p.MaxRows {
		return nil, fmt.Errorf("%w: the shards returned %d rows, the limit is %d", ErrTooManyRows, p.inRows, p.MaxRows)
	}
	p.kinds = make([]kind, p.ncol)
	for j, f := range p.fields {
		p.kinds[j] = kindOf(f)
	}
	p.visible = spec.Visible
	if p.visible == 0 {
		p.visible = p.ncol
	}
	bad := func(what string, v int) error {
		return fmt.Errorf("%w: spec %s %d is out of range for %d columns", ErrMalformed, what, v, p.ncol)
	}
	if p.visible < 0 || p.visible > p.ncol {
		return nil, bad("Visible", p.visible)
	}
	if spec.Offset < 0 {
		return nil, fmt.Errorf("%w: negative offset", ErrMalformed)
	}
	for _, o := range spec.OrderBy {
		if o.Col < 0 || o.Col >= p.ncol {
			return nil, bad("ORDER BY column", o.Col)
		}
		if p.kinds[o.Col] == kUnordered {
			f := p.fields[o.Col]
			return nil, fmt.Errorf("%w: ORDER BY on column %q (ENUM, SET, JSON or spatial) across shards", ErrUnsupported, f.Name)
		}
	}
	for _, g := range spec.GroupBy {
		if g < 0 || g >= p.ncol {
			return nil, bad("GROUP BY column", g)
		}
	}
	if spec.Aggs != nil && len(spec.Aggs) != p.ncol {
		return nil, fmt.Errorf("%w: spec has %d aggregate kinds for %d columns", ErrMalformed, len(spec.Aggs), p.ncol)
	}
	p.aggs = make([]AggKind, p.ncol)
	copy(p.aggs, spec.Aggs)
	p.avgOut = make([]int, p.ncol)
	p.agg = len(spec.GroupBy) > 0 || len(spec.Avgs) > 0 || len(spec.DistinctAggs) > 0
	for j, a := range p.aggs {
		switch a {
		case AggNone:
		case AggCount, AggSum, AggMin, AggMax:
			p.agg = true
		default:
			return nil, fmt.Errorf("%w: column %d has unknown aggregate kind %d", ErrMalformed, j, int(a))
		}
		if (a == AggMin || a == AggMax) && p.kinds[j] == kUnordered {
			return nil, fmt.Errorf("%w: %s over column %q (ENUM, SET, JSON or spatial) across shards", ErrUnsupported, a, p.fields[j].Name)
		}
	}
	for i, a := range spec.Avgs {
		for _, c := range []int{a.Out, a.Sum, a.Count} {
			if c < 0 || c >= p.ncol {
				return nil, bad("AVG column", c)
			}
		}
		if a.Scale < 0 || a.Scale > 65 {
			return nil, fmt.Errorf("%w: AVG scale %d", ErrMalformed, a.Scale)
		}
		if a.Out == a.Sum || a.Out == a.Count || a.Sum == a.Count || p.avgOut[a.Out] != 0 {
			return nil, fmt.Errorf("%w: AVG columns overlap", ErrMalformed)
		}
		p.avgOut[a.Out] = i + 1
		p.aggs[a.Sum], p.aggs[a.Count] = AggSum, AggCount
	}
	if err := p.checkDistinctAggs(); err != nil {
		return nil, err
	}
	for _, x := range spec.Exprs {
		if x.Out < 0 || x.Out >= p.visible || spec.Eval == nil {
			return nil, bad("expression column", x.Out)
		}
		for _, c := range x.Args {
			if c < 0 || c >= p.ncol {
				return nil, bad("expression operand", c)
			}
		}
	}
	return p, nil
}

// checkDistinctAggs validates Spec.DistinctAggs: columns in range, an
// output column that nothing else computes, numeric arguments for SUM and
// AVG (MySQL de-duplicates those as numbers, not as strings).
func (p *plan) checkDistinctAggs() error {
	outs := map[int]bool{}
	for _, d := range p.DistinctAggs {
		if d.Out < 0 || d.Out >= p.ncol {
			return fmt.Errorf("%w: spec DISTINCT aggregate column %d is out of range for %d columns", ErrMalformed, d.Out, p.ncol)
		}
		if outs[d.Out] || p.avgOut[d.Out] != 0 || p.aggs[d.Out] != AggNone {
			return fmt.Errorf("%w: DISTINCT aggregate column %d is computed twice", ErrMalformed, d.Out)
		}
		outs[d.Out] = true
		switch d.Func {
		case DistinctCount:
			if len(d.Args) == 0 {
				return fmt.Errorf("%w: COUNT(DISTINCT) without arguments", ErrMalformed)
			}
		case DistinctSum, DistinctAvg:
			if len(d.Args) != 1 {
				return fmt.Errorf("%w: %s(DISTINCT) with %d arguments", ErrMalformed, d.Func, len(d.Args))
			}
		default:
			return fmt.Errorf("%w: unknown DISTINCT aggregate %d", ErrMalformed, int(d.Func))
		}
		if d.Scale < 0 || d.Scale > 65 {
			return fmt.Errorf("%w: %s(DISTINCT) scale %d", ErrMalformed, d.Func, d.Scale)
		}
		for _, c := range d.Args {
			if c < 0 || c >= p.ncol || c == d.Out {
				return fmt.Errorf("%w: spec DISTINCT aggregate argument column %d (output %d, %d columns)", ErrMalformed, c, d.Out, p.ncol)
			}
			if d.Func == DistinctCount {
				continue
			}
			switch p.kinds[c] {
			case kSigned, kUnsigned, kDecimal, kFloat:
			default:
				return fmt.Errorf("%w: %s: its argument is not a number (MySQL de-duplicates it as numbers)", ErrUnsupported, p.fields[d.Out].Name)
			}
		}
	}
	return nil
}

// compareOrder orders two rows by their ORDER BY keys (one key per Order).
func (p *plan) compareOrder(a, b []key) int {
	for i, o := range p.OrderBy {
		c := compareKeys(p.kinds[o.Col], &a[i], &b[i])
		if o.Desc {
			c = -c
		}
		if c != 0 {
			return c
		}
	}
	return 0
}

// orderKeys decodes the ORDER BY keys of a row into dst.
func (p *plan) orderKeys(cells []cell, dst []key) error {
	for i, o := range p.OrderBy {
		k, err := makeKey(p.kinds[o.Col], p.fields[o.Col], p.Binary, true, cells[o.Col])
		if err != nil {
			return err
		}
		dst[i] = k
	}
	return nil
}

// writer applies HAVING (when asked), OFFSET and LIMIT to rows in their
// final order and appends them to the output result.
type writer struct {
	p       *plan
	out     *mysql.Resultset
	skipped int64
	vals    []mysql.FieldValue // scratch for HAVING
	// pending are the rows held back for Exprs (evalExprs).
	pending [][]cell
}

// full reports that LIMIT rows have been written.
func (w *writer) full() bool {
	return w.p.Limit >= 0 && int64(len(w.out.RowDatas)+len(w.pending)) >= w.p.Limit
}

// add writes one row. raw is the original packet when the row is unchanged
// (it is then reused as is if no column is hidden); having says whether
// the HAVING filter still has to run on it.
func (w *writer) add(cells []cell, raw mysql.RowData, having bool) error {
	p := w.p
	var vals []mysql.FieldValue
	if having && p.Having != nil {
		vals = w.vals[:0]
		for j, c := range cells {
			v, err := fieldValue(p.fields[j], p.Binary, c)
			if err != nil {
				return err
			}
			vals = append(vals, v)
		}
		w.vals = vals
		ok, err := p.Having(vals)
		if err != nil {
			return err
		}
		if !ok {
			return nil
		}
	}
	if w.skipped < p.Offset {
		w.skipped++
		return nil
	}
	if w.full() {
		return nil
	}
	if len(p.Exprs) > 0 {
		w.pending = append(w.pending, slices.Clone(cells))
		return nil
	}
	row := make([]mysql.FieldValue, p.visible)
	if vals != nil {
		copy(row, vals)
	} else {
		for j := range row {
			v, err := fieldValue(p.fields[j], p.Binary, cells[j])
			if err != nil {
				return err
			}
			row[j] = v
		}
	}
	if raw == nil || p.visible != p.ncol {
		raw = appendRow(nil, p.fields, cells[:p.visible], p.Binary)
	}
	w.out.RowDatas = append(w.out.RowDatas, raw)
	w.out.Values = append(w.out.Values, row)
	return nil
}
