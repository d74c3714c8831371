package cold

import (
	"bytes"
	"strconv"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// TestNarrow: with small pages, the seq page index cuts a page read of a
// 2000-row conversation down to the rows near the cursor, and never cuts
// away a row the page needs.
func TestNarrow(t *testing.T) {
	u64 := func(n string) Column {
		return Column{Name: n, Type: mysql.MYSQL_TYPE_LONGLONG, Flags: mysql.UNSIGNED_FLAG | mysql.NOT_NULL_FLAG}
	}
	tables := Tables{Msg: []Column{u64("conv_id"), u64("seq"), u64("msg_id")}, Content: []Column{u64("msg_id")}}
	w, err := NewWriter(tables, 1, time.Now(), WriterOptions{RowsPerGroup: 100000, PageBytes: 256})
	if err != nil {
		t.Fatal(err)
	}
	const perConv = 2000
	for conv := 1; conv <= 3; conv++ {
		for seq := 1; seq <= perConv; seq++ {
			id := []byte(strconv.Itoa(conv*100000 + seq))
			if err := w.Add(Row{Msg: [][]byte{[]byte(strconv.Itoa(conv)), []byte(strconv.Itoa(seq)), id}, Content: [][]byte{id}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	data, _, err := w.Finish()
	if err != nil {
		t.Fatal(err)
	}
	f, err := openParquet("t", bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	rg := f.pf.RowGroups()[0]
	a, b, err := convSpan(rg.ColumnChunks()[f.lay.convID], 2, rg.NumRows())
	if err != nil || a > perConv || b < 2*perConv {
		t.Fatalf("conv 2 span [%d,%d) %v", a, b, err)
	}
	// Row of conv 2, seq s is perConv + s - 1.
	for _, c := range []struct {
		lo, hi uint64
		limit  int
		desc   bool
		// rows the page needs
		need0, need1 int64
	}{
		{0, 1499, 20, true, perConv + 1480 - 1, perConv + 1499},
		{0, perConv, 20, true, 2*perConv - 20, 2 * perConv},
		{501, perConv, 20, false, perConv + 500, perConv + 520},
		{1, perConv, 20, false, perConv, perConv + 20},
		{0, 10, 50, true, perConv, perConv + 10},
		{1995, perConv, 50, false, perConv + 1994, 2 * perConv},
	} {
		na, nb, err := narrow(rg, f.lay, 2, a, b, c.lo, c.hi, c.limit, c.desc)
		if err != nil {
			t.Fatal(err)
		}
		if na > c.need0 || nb < c.need1 {
			t.Errorf("%+v: narrowed to [%d,%d), cuts rows the page needs", c, na, nb)
		}
		if nb-na > int64(c.limit)+200 {
			t.Errorf("%+v: narrowed only to [%d,%d) (%d rows)", c, na, nb, nb-na)
		}
	}
}
