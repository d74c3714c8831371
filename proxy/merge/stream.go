package merge

import "github.com/go-mysql-org/go-mysql/mysql"

// cursor walks one shard's rows; cells and keys describe the current row.
type cursor struct {
	part  int
	rows  []mysql.RowData
	i     int
	cells []cell
	keys  []key
}

// load decodes the current row; it reports false when the shard is done.
func (c *cursor) load(p *plan) (bool, error) {
	if c.i >= len(c.rows) {
		return false, nil
	}
	if err := decodeRow(c.rows[c.i], p.fields, p.Binary, c.cells); err != nil {
		return false, err
	}
	return true, p.orderKeys(c.cells, c.keys)
}

// stream merges shard results that are each already sorted by OrderBy
// (every shard ran the same ORDER BY) with a k-way heap merge: only the
// head row of each shard is decoded at a time, and the merge stops as soon
// as OFFSET + LIMIT rows are out. Without ORDER BY the shards are
// concatenated in order.
func (p *plan) stream(parts []*mysql.Result, w *writer) error {
	nk := len(p.OrderBy)
	cells := make([]cell, len(parts)*p.ncol)
	keys := make([]key, len(parts)*nk)
	curs := make([]cursor, len(parts))
	h := make([]*cursor, 0, len(parts))
	for i, r := range parts {
		c := &curs[i]
		*c = cursor{part: i, rows: r.RowDatas, cells: cells[i*p.ncol : (i+1)*p.ncol : (i+1)*p.ncol], keys: keys[i*nk : (i+1)*nk : (i+1)*nk]}
		if nk == 0 {
			continue
		}
		ok, err := c.load(p)
		if err != nil {
			return err
		}
		if ok {
			h = append(h, c)
		}
	}
	if nk == 0 {
		for i := range curs {
			c := &curs[i]
			for ; c.i < len(c.rows) && !w.full(); c.i++ {
				if err := decodeRow(c.rows[c.i], p.fields, p.Binary, c.cells); err != nil {
					return err
				}
				if err := w.add(c.cells, c.rows[c.i], true); err != nil {
					return err
				}
			}
		}
		return nil
	}
	less := func(a, b *cursor) bool {
		if c := p.compareOrder(a.keys, b.keys); c != 0 {
			return c < 0
		}
		return a.part < b.part // ties: shard order, so the merge is deterministic
	}
	down := func(i int) {
		for {
			l := 2*i + 1
			if l >= len(h) {
				return
			}
			m := l
			if r := l + 1; r < len(h) && less(h[r], h[l]) {
				m = r
			}
			if !less(h[m], h[i]) {
				return
			}
			h[i], h[m] = h[m], h[i]
			i = m
		}
	}
	for i := len(h)/2 - 1; i >= 0; i-- {
		down(i)
	}
	for len(h) > 0 && !w.full() {
		c := h[0]
		if err := w.add(c.cells, c.rows[c.i], true); err != nil {
			return err
		}
		c.i++
		ok, err := c.load(p)
		if err != nil {
			return err
		}
		if !ok {
			h[0] = h[len(h)-1]
			h = h[:len(h)-1]
		}
		down(0)
	}
	return nil
}
