package merge

import (
	"fmt"
	"math"
	"sort"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// acc accumulates one aggregate column of one group.
type acc struct {
	seen  bool  // a non-NULL value was added (SUM, MIN, MAX)
	count int64 // COUNT
	sum   exact // SUM of exact (integer, DECIMAL) columns
	fsum  float64
	best  key // MIN / MAX
	cell  cell
}

// distAcc accumulates one DISTINCT aggregate of one group: the canonical
// forms of the argument values seen, and the sum of their first spellings.
type distAcc struct {
	seen map[string]struct{}
	n    int64
	sum  acc
}

// group is one GROUP BY group: the first row's cells (for plain columns),
// one accumulator per column and one per DISTINCT aggregate.
type group struct {
	n     int // rows added
	cells []cell
	accs  []acc
	dists []distAcc
}

// rowBuf is one materialised output candidate.
type rowBuf struct {
	cells []cell
	raw   mysql.RowData // the original packet while the row is unchanged
	keys  []key         // ORDER BY keys, filled before sorting
}

// counter enforces MaxRows over inputs plus materialised rows.
func (p *plan) hold(n int) error {
	if p.MaxRows > 0 && p.inRows+n > p.MaxRows {
		return fmt.Errorf("%w: %d shard rows plus %d merged rows exceed the limit of %d", ErrTooManyRows, p.inRows, n, p.MaxRows)
	}
	return nil
}

// groupKey appends the canonical form of the listed columns of a row.
func (p *plan) groupKey(dst []byte, cols []int, cells []cell) ([]byte, error) {
	for _, c := range cols {
		k, err := makeKey(p.kinds[c], p.fields[c], p.Binary, false, cells[c])
		if err != nil {
			return nil, err
		}
		dst = appendNorm(dst, p.kinds[c], &k)
	}
	return dst, nil
}

// aggregate groups all input rows, combines the per-shard aggregates,
// rebuilds AVGs, then applies HAVING, DISTINCT, ORDER BY, OFFSET, LIMIT.
func (p *plan) aggregate(parts []*mysql.Result, w *writer) error {
	groups := map[string]*group{}
	var order []*group
	// WITH ROLLUP: per key prefix length l (0: the grand total), the
	// super-groups, fed every row as the groups are (no combining of
	// partial aggregates needed, DISTINCT ones included).
	var supers []map[string]*group
	if p.Rollup {
		supers = make([]map[string]*group, len(p.GroupBy))
		for l := range supers {
			supers[l] = map[string]*group{}
		}
	}
	held := 0
	scratch := make([]cell, p.ncol)
	var kb []byte
	newGroup := func(cells []cell) (*group, error) {
		if err := p.hold(len(order) + held + 1); err != nil {
			return nil, err
		}
		g := &group{cells: make([]cell, p.ncol), accs: make([]acc, p.ncol), dists: make([]distAcc, len(p.DistinctAggs))}
		if cells != nil {
			copy(g.cells, cells)
		} else {
			for i := range g.cells {
				g.cells[i].null = true
			}
		}
		order = append(order, g)
		return g, nil
	}
	if len(p.GroupBy) == 0 {
		// One group even over no rows at all: COUNT(*) of an empty table
		// is one row 0, the other aggregates NULL.
		if _, err := newGroup(nil); err != nil {
			return err
		}
	}
	for _, r := range parts {
		for _, row := range r.RowDatas {
			if err := decodeRow(row, p.fields, p.Binary, scratch); err != nil {
				return err
			}
			var g *group
			if len(p.GroupBy) == 0 {
				if g = order[0]; g.n == 0 {
					copy(g.cells, scratch)
				}
			} else {
				var err error
				if kb, err = p.groupKey(kb[:0], p.GroupBy, scratch); err != nil {
					return err
				}
				if g = groups[string(kb)]; g == nil {
					if g, err = newGroup(scratch); err != nil {
						return err
					}
					groups[string(kb)] = g
				}
			}
			g.n++
			if err := p.accumulate(g, scratch); err != nil {
				return err
			}
			for l := range supers {
				var err error
				if kb, err = p.groupKey(kb[:0], p.GroupBy[:l], scratch); err != nil {
					return err
				}
				sg := supers[l][string(kb)]
				if sg == nil {
					if err := p.hold(len(order) + held + 1); err != nil {
						return err
					}
					held++
					sg = &group{cells: make([]cell, p.ncol), accs: make([]acc, p.ncol), dists: make([]distAcc, len(p.DistinctAggs))}
					copy(sg.cells, scratch)
					for _, c := range p.GroupBy[l:] {
						sg.cells[c] = cell{null: true}
					}
					supers[l][string(kb)] = sg
				}
				sg.n++
				if err := p.accumulate(sg, scratch); err != nil {
					return err
				}
			}
		}
	}
	rows := make([]rowBuf, 0, len(order))
	for _, g := range order {
		cells, err := p.finish(g)
		if err != nil {
			return err
		}
		rows = append(rows, rowBuf{cells: cells})
	}
	if len(p.OrderBy) == 0 && len(p.GroupBy) > 0 {
		// MariaDB (and MySQL before 8.0) return GROUP BY results sorted by
		// the group key when there is no ORDER BY.
		implicit := make([]Order, 0, len(p.GroupBy))
		for i, c := range p.GroupBy {
			if p.kinds[c] == kUnordered {
				implicit = nil
				break
			}
			implicit = append(implicit, Order{Col: c, Desc: i < len(p.GroupDesc) && p.GroupDesc[i]})
		}
		p.OrderBy = implicit
	}
	if p.Rollup {
		return p.rollup(rows, supers, w)
	}
	return p.finishRows(rows, w, true)
}

// rollup sorts the groups by their key and puts each key prefix's
// super-aggregate row (supers[l]: prefixes of l columns) after its last
// group, the grand total last, as MariaDB's WITH ROLLUP does; HAVING and
// LIMIT then apply to them all.
func (p *plan) rollup(rows []rowBuf, supers []map[string]*group, w *writer) error {
	if len(p.OrderBy) != len(p.GroupBy) {
		return fmt.Errorf("%w: WITH ROLLUP over a column that cannot be ordered (ENUM, SET, JSON or spatial)", ErrUnsupported)
	}
	if err := p.sortRows(rows); err != nil {
		return err
	}
	n := len(p.GroupBy)
	keys := make([][]string, len(rows)) // per row, its prefix keys of 0..n-1 columns
	for i, r := range rows {
		keys[i] = make([]string, n)
		var kb []byte
		for l := 0; l < n; l++ {
			var err error
			if kb, err = p.groupKey(kb[:0], p.GroupBy[:l], r.cells); err != nil {
				return err
			}
			keys[i][l] = string(kb)
		}
	}
	out := make([]rowBuf, 0, len(rows)+len(rows)*n)
	emit := func(i, from int) error { // row i's super rows of prefixes n-1 down to from
		for l := n - 1; l >= from; l-- {
			cells, err := p.finish(supers[l][keys[i][l]])
			if err != nil {
				return err
			}
			out = append(out, rowBuf{cells: cells})
		}
		return nil
	}
	for i, r := range rows {
		out = append(out, r)
		if i+1 == len(rows) {
			return p.finishRollup(out, emit(i, 0), w)
		}
		// The longest key prefix the next group shares: every longer
		// prefix of this group has all its groups written.
		shared := 0
		for shared+1 < n && keys[i+1][shared+1] == keys[i][shared+1] {
			shared++
		}
		if err := emit(i, shared+1); err != nil {
			return err
		}
	}
	// No group at all: MariaDB returns no row, not even the total.
	return p.finishRollup(out, nil, w)
}

// finishRollup writes rollup's rows in their order (HAVING, LIMIT).
func (p *plan) finishRollup(rows []rowBuf, err error, w *writer) error {
	if err != nil {
		return err
	}
	p.OrderBy = nil
	return p.finishRows(rows, w, true)
}

// accumulate adds one shard row to its group.
func (p *plan) accumulate(g *group, cells []cell) error {
	for j, a := range p.aggs {
		c := cells[j]
		ac := &g.accs[j]
		switch a {
		case AggCount:
			k, err := makeKey(p.kinds[j], p.fields[j], p.Binary, false, c)
			if err != nil {
				return err
			}
			if k.null {
				continue
			}
			var n int64
			switch p.kinds[j] {
			case kSigned:
				n = int64(k.n)
			case kUnsigned:
				if k.n > math.MaxInt64 {
					return fmt.Errorf("%w: count %d", ErrMalformed, k.n)
				}
				n = int64(k.n)
			default:
				return fmt.Errorf("%w: COUNT column %q is not an integer", ErrMalformed, p.fields[j].Name)
			}
			if n < 0 || ac.count > math.MaxInt64-n {
				return fmt.Errorf("%w: count %d", ErrMalformed, n)
			}
			ac.count += n
		case AggSum:
			if err := p.addSum(ac, j, c); err != nil {
				return err
			}
		case AggMin, AggMax:
			k, err := makeKey(p.kinds[j], p.fields[j], p.Binary, true, c)
			if err != nil {
				return err
			}
			if k.null {
				continue
			}
			cmp := 0
			if ac.seen {
				cmp = compareKeys(p.kinds[j], &k, &ac.best)
			}
			if !ac.seen || (a == AggMin && cmp < 0) || (a == AggMax && cmp > 0) {
				ac.best, ac.cell, ac.seen = k, c, true
			}
		}
	}
	return p.accumulateDistinct(g, cells)
}

// accumulateDistinct adds the argument values of one shard row to the
// group's DISTINCT aggregates: a tuple with a NULL is ignored (as MySQL
// does), a value already seen (equal under the column's comparison, 'a'
// and 'A' under a _ci collation) counts once.
func (p *plan) accumulateDistinct(g *group, cells []cell) error {
	for i, d := range p.DistinctAggs {
		kb := p.distKey[:0]
		null := false
		for _, c := range d.Args {
			k, err := makeKey(p.kinds[c], p.fields[c], p.Binary, false, cells[c])
			if err != nil {
				return err
			}
			if k.null {
				null = true
				break
			}
			kb = appendNorm(kb, p.kinds[c], &k)
		}
		p.distKey = kb
		if null {
			continue
		}
		da := &g.dists[i]
		if _, dup := da.seen[string(kb)]; dup {
			continue
		}
		if da.seen == nil {
			da.seen = map[string]struct{}{}
		}
		da.seen[string(kb)] = struct{}{}
		da.n++
		if d.Func != DistinctCount {
			if err := p.addSum(&da.sum, d.Args[0], cells[d.Args[0]]); err != nil {
				return err
			}
		}
	}
	return nil
}

// addSum adds cell c of numeric column j to a SUM accumulator: exactly for
// integers and DECIMAL, in float64 for FLOAT / DOUBLE. NULL is skipped.
func (p *plan) addSum(ac *acc, j int, c cell) error {
	if c.null {
		return nil
	}
	switch p.kinds[j] {
	case kFloat:
		k, err := makeKey(kFloat, p.fields[j], p.Binary, false, c)
		if err != nil {
			return err
		}
		ac.fsum += math.Float64frombits(k.n)
	case kSigned, kUnsigned, kDecimal:
		var e exact
		if p.Binary && p.kinds[j] != kDecimal {
			k, err := makeKey(p.kinds[j], p.fields[j], true, false, c)
			if err != nil {
				return err
			}
			if p.kinds[j] == kSigned {
				e.v.SetInt64(int64(k.n))
			} else {
				e.v.SetUint64(k.n)
			}
		} else if err := parseExact(c.raw, &e); err != nil {
			return err
		}
		if !ac.seen {
			ac.sum.scale = e.scale
		}
		ac.sum.add(&e)
	default:
		return fmt.Errorf("%w: SUM column %q is not numeric", ErrUnsupported, p.fields[j].Name)
	}
	ac.seen = true
	return nil
}

// finish computes a group's output cells (all columns, hidden included).
func (p *plan) finish(g *group) ([]cell, error) {
	out := make([]cell, p.ncol)
	copy(out, g.cells)
	for j, a := range p.aggs {
		ac := &g.accs[j]
		var err error
		switch a {
		case AggCount:
			var e exact
			e.v.SetInt64(ac.count)
			out[j], err = encodeExact(p.fields[j], p.Binary, &e)
		case AggSum:
			out[j], err = p.sumCell(p.fields[j], p.kinds[j] == kFloat, ac)
		case AggMin, AggMax:
			out[j] = cell{null: !ac.seen, raw: ac.cell.raw}
		}
		if err != nil {
			return nil, err
		}
	}
	for _, a := range p.Avgs {
		var err error
		out[a.Out], err = p.avgCell(p.fields[a.Out], p.kinds[a.Sum] == kFloat, &g.accs[a.Sum], g.accs[a.Count].count, a.Scale)
		if err != nil {
			return nil, err
		}
	}
	for i, d := range p.DistinctAggs {
		da := &g.dists[i]
		f := p.fields[d.Out]
		floatArg := p.kinds[d.Args[0]] == kFloat
		var err error
		switch d.Func {
		case DistinctCount:
			var e exact
			e.v.SetInt64(da.n)
			out[d.Out], err = encodeExact(f, p.Binary, &e)
		case DistinctSum:
			out[d.Out], err = p.sumCell(f, floatArg, &da.sum)
		case DistinctAvg:
			out[d.Out], err = p.avgCell(f, floatArg, &da.sum, da.n, d.Scale)
		}
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// sumCell encodes a SUM for output column f; floatSum says the accumulator
// summed FLOAT / DOUBLE values (fsum) rather than exact ones.
func (p *plan) sumCell(f *mysql.Field, floatSum bool, ac *acc) (cell, error) {
	switch {
	case !ac.seen:
		return cell{null: true}, nil
	case floatSum:
		return encodeFloat(f, p.Binary, ac.fsum), nil
	}
	return encodeExact(f, p.Binary, &ac.sum)
}

// avgCell encodes SUM / COUNT for an AVG output column f: a float division
// for FLOAT / DOUBLE, for DECIMAL rounded half away from zero to scale
// digits as MySQL's decimal division does. NULL when nothing was counted.
func (p *plan) avgCell(f *mysql.Field, floatSum bool, s *acc, cnt int64, scale int) (cell, error) {
	if cnt == 0 || !s.seen {
		return cell{null: true}, nil
	}
	switch f.Type {
	case mysql.MYSQL_TYPE_FLOAT, mysql.MYSQL_TYPE_DOUBLE:
		sum := s.fsum
		if !floatSum {
			sum = s.sum.float()
		}
		return encodeFloat(f, p.Binary, sum/float64(cnt)), nil
	case mysql.MYSQL_TYPE_DECIMAL, mysql.MYSQL_TYPE_NEWDECIMAL:
		if floatSum {
			return cell{}, fmt.Errorf("%w: DECIMAL AVG over a floating-point SUM", ErrUnsupported)
		}
		return cell{raw: s.sum.div(cnt, scale).text()}, nil
	}
	return cell{}, fmt.Errorf("%w: AVG output column %q has type %d", ErrUnsupported, f.Name, f.Type)
}

// distinct removes duplicate rows (over the visible columns) of a
// non-aggregating SELECT DISTINCT, then orders and limits.
func (p *plan) distinct(parts []*mysql.Result, w *writer) error {
	seen := map[string]struct{}{}
	var rows []rowBuf
	visible := make([]int, p.visible)
	for i := range visible {
		visible[i] = i
	}
	var kb []byte
	for _, r := range parts {
		for _, raw := range r.RowDatas {
			cells := make([]cell, p.ncol)
			if err := decodeRow(raw, p.fields, p.Binary, cells); err != nil {
				return err
			}
			var err error
			if kb, err = p.groupKey(kb[:0], visible, cells); err != nil {
				return err
			}
			if _, dup := seen[string(kb)]; dup {
				continue
			}
			if p.Having != nil {
				ok, err := p.having(cells)
				if err != nil {
					return err
				}
				if !ok {
					continue
				}
			}
			if err := p.hold(len(rows) + 1); err != nil {
				return err
			}
			seen[string(kb)] = struct{}{}
			rows = append(rows, rowBuf{cells: cells, raw: raw})
		}
	}
	return p.finishRows(rows, w, false)
}

// having runs the HAVING callback on one row.
func (p *plan) having(cells []cell) (bool, error) {
	vals := make([]mysql.FieldValue, p.ncol)
	for j, c := range cells {
		v, err := fieldValue(p.fields[j], p.Binary, c)
		if err != nil {
			return false, err
		}
		vals[j] = v
	}
	return p.Having(vals)
}

// finishRows applies (for grouped rows) HAVING and DISTINCT, then ORDER BY
// and the writer's OFFSET / LIMIT to materialised rows.
func (p *plan) finishRows(rows []rowBuf, w *writer, grouped bool) error {
	if grouped && p.Having != nil {
		kept := rows[:0]
		for _, r := range rows {
			ok, err := p.having(r.cells)
			if err != nil {
				return err
			}
			if ok {
				kept = append(kept, r)
			}
		}
		rows = kept
	}
	if grouped && p.Distinct {
		seen := make(map[string]struct{}, len(rows))
		visible := make([]int, p.visible)
		for i := range visible {
			visible[i] = i
		}
		kept := rows[:0]
		var kb []byte
		for _, r := range rows {
			var err error
			if kb, err = p.groupKey(kb[:0], visible, r.cells); err != nil {
				return err
			}
			if _, dup := seen[string(kb)]; !dup {
				seen[string(kb)] = struct{}{}
				kept = append(kept, r)
			}
		}
		rows = kept
	}
	if err := p.sortRows(rows); err != nil {
		return err
	}
	for _, r := range rows {
		if w.full() {
			break
		}
		if err := w.add(r.cells, r.raw, false); err != nil {
			return err
		}
	}
	return nil
}

// sortRows sorts rows by ORDER BY (stable; nothing without one).
func (p *plan) sortRows(rows []rowBuf) error {
	if len(p.OrderBy) == 0 {
		return nil
	}
	nk := len(p.OrderBy)
	keys := make([]key, len(rows)*nk)
	for i := range rows {
		rows[i].keys = keys[i*nk : (i+1)*nk : (i+1)*nk]
		if err := p.orderKeys(rows[i].cells, rows[i].keys); err != nil {
			return err
		}
	}
	sort.SliceStable(rows, func(a, b int) bool {
		return p.compareOrder(rows[a].keys, rows[b].keys) < 0
	})
	return nil
}
