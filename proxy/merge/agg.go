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

// group is one GROUP BY group: the first row's cells (for plain columns)
// and one accumulator per column.
type group struct {
	n     int // rows added
	cells []cell
	accs  []acc
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
	scratch := make([]cell, p.ncol)
	var kb []byte
	newGroup := func(cells []cell) (*group, error) {
		if err := p.hold(len(order) + 1); err != nil {
			return nil, err
		}
		g := &group{cells: make([]cell, p.ncol), accs: make([]acc, p.ncol)}
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
		for _, c := range p.GroupBy {
			if p.kinds[c] == kUnordered {
				implicit = nil
				break
			}
			implicit = append(implicit, Order{Col: c})
		}
		p.OrderBy = implicit
	}
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
			if c.null {
				continue
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
			switch {
			case !ac.seen:
				out[j] = cell{null: true}
			case p.kinds[j] == kFloat:
				out[j] = encodeFloat(p.fields[j], p.Binary, ac.fsum)
			default:
				out[j], err = encodeExact(p.fields[j], p.Binary, &ac.sum)
			}
		case AggMin, AggMax:
			out[j] = cell{null: !ac.seen, raw: ac.cell.raw}
		}
		if err != nil {
			return nil, err
		}
	}
	for _, a := range p.Avgs {
		cnt := g.accs[a.Count].count
		s := &g.accs[a.Sum]
		f := p.fields[a.Out]
		if cnt == 0 || !s.seen {
			out[a.Out] = cell{null: true}
			continue
		}
		switch f.Type {
		case mysql.MYSQL_TYPE_FLOAT, mysql.MYSQL_TYPE_DOUBLE:
			sum := s.fsum
			if p.kinds[a.Sum] != kFloat {
				sum = s.sum.float()
			}
			out[a.Out] = encodeFloat(f, p.Binary, sum/float64(cnt))
		case mysql.MYSQL_TYPE_DECIMAL, mysql.MYSQL_TYPE_NEWDECIMAL:
			if p.kinds[a.Sum] == kFloat {
				return nil, fmt.Errorf("%w: DECIMAL AVG over a floating-point SUM", ErrUnsupported)
			}
			out[a.Out] = cell{raw: s.sum.div(cnt, a.Scale).text()}
		default:
			return nil, fmt.Errorf("%w: AVG output column %q has type %d", ErrUnsupported, f.Name, f.Type)
		}
	}
	return out, nil
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
	if len(p.OrderBy) > 0 {
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
