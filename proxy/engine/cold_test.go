package engine

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/convoy-im/convoy/proxy/mysqlrow"
)

func seqRange(from, to uint64) []uint64 { // from down to to, or up
	var out []uint64
	for s := from; ; {
		out = append(out, s)
		if s == to {
			return out
		}
		if from > to {
			s--
		} else {
			s++
		}
	}
}

// TestColdDecision: when a page MySQL answered may lack archived rows. A
// full page of consecutive seqs proves itself (no lookup); otherwise the
// conversation's archived range decides, and only an uncovered seq inside
// it sends the read to the archive.
func TestColdDecision(t *testing.T) {
	const archivedHi = 170
	cases := []struct {
		name   string
		q      coldQuery
		page   bool // proved complete by the page alone
		ranges bool // complete given the archived range 1..170
	}{
		{"first screen max+1", coldQuery{shape: shapeBefore, cursor: 231, limit: 20, warm: seqRange(230, 211)}, true, true},
		{"first screen sentinel", coldQuery{shape: shapeBefore, cursor: 1 << 62, limit: 20, warm: seqRange(230, 211)}, false, true},
		{"recent page with a hole", coldQuery{shape: shapeBefore, cursor: 231, limit: 3, warm: []uint64{230, 228, 227}}, false, true},
		{"boundary page", coldQuery{shape: shapeBefore, cursor: 185, limit: 50, warm: seqRange(184, 171)}, false, false},
		{"deep page", coldQuery{shape: shapeBefore, cursor: 100, limit: 20}, false, false},
		{"an edited row kept warm below archived ones", coldQuery{shape: shapeBefore, cursor: 102, limit: 2, warm: []uint64{100}}, false, false},
		{"page of one warm row at the edit", coldQuery{shape: shapeBefore, cursor: 101, limit: 1, warm: []uint64{100}}, true, true},
		{"short conversation from seq 1", coldQuery{shape: shapeBefore, cursor: 16, limit: 20, warm: seqRange(15, 1)}, true, true},
		{"cursor 1", coldQuery{shape: shapeBefore, cursor: 1, limit: 20}, true, true},
		{"catch-up from the start", coldQuery{shape: shapeAfter, cursor: 0, limit: 20, warm: seqRange(171, 190)}, false, false},
		{"catch-up, consecutive", coldQuery{shape: shapeAfter, cursor: 200, limit: 20, warm: seqRange(201, 220)}, true, true},
		{"catch-up, nothing new", coldQuery{shape: shapeAfter, cursor: 230, limit: 20}, false, true},
		{"anchor warm", coldQuery{shape: shapeAnchor, cursor: 5, warm: []uint64{0}}, true, true},
		{"anchor not warm", coldQuery{shape: shapeAnchor, cursor: 5}, false, false},
		{"bodies warm", coldQuery{shape: shapeBodies, ids: []uint64{5, 6}, warm: []uint64{5, 6}}, true, true},
		{"bodies partly warm", coldQuery{shape: shapeBodies, ids: []uint64{5, 6}, warm: []uint64{6}}, false, false},
	}
	for _, c := range cases {
		lo, hi, seqs := c.q.window()
		page := c.q.covered(lo, hi)
		ranges := page
		if !page && seqs {
			ranges = c.q.covered(max(lo, 1), min(hi, archivedHi))
		}
		if page != c.page || ranges != c.ranges {
			t.Errorf("%s: window [%d,%d]: page proof %v, with the range %v; want %v, %v", c.name, lo, hi, page, ranges, c.page, c.ranges)
		}
	}
}

// TestColdMerge: warm rows win over archived copies, the page keeps its
// order and limit, and a partial archive part keeps only the certain
// prefix, naming the seq to continue from.
func TestColdMerge(t *testing.T) {
	row := func(seq uint64, warm bool) mysql.RowData {
		return mysql.RowData(fmt.Sprintf("%d/%v", seq, warm))
	}
	q := &coldQuery{shape: shapeBefore, cursor: 185, limit: 20, warm: []uint64{184, 183, 182, 100}}
	r := &mysql.Result{Resultset: &mysql.Resultset{}}
	for _, s := range q.warm {
		r.RowDatas = append(r.RowDatas, row(s, true))
	}
	var cold []keyedRow
	for s := uint64(170); s > 90; s-- {
		cold = append(cold, keyedRow{key: s, data: row(s, false)})
	}
	show := func(r *mysql.Result) string {
		var b bytes.Buffer
		for _, d := range r.RowDatas {
			b.Write(d)
			b.WriteByte(' ')
		}
		return b.String()
	}
	out, _ := q.merge(r, cold, ColdPage{}, coldRange{has: true, lo: 1, hi: 170}, false)
	want := "184/true 183/true 182/true 170/false 169/false 168/false 167/false 166/false 165/false 164/false 163/false 162/false 161/false 160/false 159/false 158/false 157/false 156/false 155/false 154/false "
	if show(out) != want {
		t.Fatalf("complete merge:\n got %s\nwant %s", show(out), want)
	}
	// The budget ran out with the reader final above 165.
	out, cont := q.merge(r, cold[:5], ColdPage{More: true, Frontier: 165}, coldRange{has: true, lo: 1, hi: 170}, true)
	if show(out) != "184/true 183/true 182/true 170/false 169/false 168/false 167/false 166/false " || cont != 166 {
		t.Fatalf("partial merge: %s, continue from %d", show(out), cont)
	}
	// Nothing from the archive: above the archived range only.
	out, cont = q.merge(r, nil, ColdPage{}, coldRange{has: true, lo: 1, hi: 170}, true)
	if show(out) != "184/true 183/true 182/true " || cont != 182 {
		t.Fatalf("failed archive: %s, continue from %d", show(out), cont)
	}
	// A warm row wins over its archived copy (an edited row kept warm).
	out, _ = q.merge(r, []keyedRow{{key: 100, data: row(100, false)}, {key: 99, data: row(99, false)}}, ColdPage{}, coldRange{has: true, lo: 1, hi: 170}, false)
	if show(out) != "184/true 183/true 182/true 100/true 99/false " {
		t.Fatalf("warm first: %s", show(out))
	}
	// Catch-up: ascending, the frontier bounds from above.
	qa := &coldQuery{shape: shapeAfter, cursor: 150, limit: 30, warm: []uint64{171, 172}}
	ra := &mysql.Result{Resultset: &mysql.Resultset{RowDatas: []mysql.RowData{row(171, true), row(172, true)}}}
	out, cont = qa.merge(ra, []keyedRow{{key: 151, data: row(151, false)}, {key: 152, data: row(152, false)}}, ColdPage{More: true, Frontier: 153}, coldRange{has: true, lo: 1, hi: 170}, true)
	if show(out) != "151/false 152/false " || cont != 152 {
		t.Fatalf("partial catch-up: %s, continue from %d", show(out), cont)
	}
}

// TestColdRowsProtocols: an archived row encoded for the binary protocol
// is exactly what converting its text-protocol form gives (the conversion
// a prepared statement's inlined reads already use), NULL included; a
// column archived with another type is not served.
func TestColdRowsProtocols(t *testing.T) {
	fields := []*mysql.Field{
		{OrgName: []byte("seq"), Type: mysql.MYSQL_TYPE_LONGLONG, Flag: mysql.UNSIGNED_FLAG},
		{OrgName: []byte("msg_type"), Type: mysql.MYSQL_TYPE_TINY, Flag: mysql.UNSIGNED_FLAG},
		{OrgName: []byte("created_at"), Type: mysql.MYSQL_TYPE_DATETIME, Decimal: 3},
		{OrgName: []byte("note"), Type: mysql.MYSQL_TYPE_VAR_STRING},
	}
	cols := []ColdColumn{{Name: "note", Type: mysql.MYSQL_TYPE_VAR_STRING}, {Name: "seq", Type: mysql.MYSQL_TYPE_LONGLONG, Flags: mysql.UNSIGNED_FLAG},
		{Name: "created_at", Type: mysql.MYSQL_TYPE_DATETIME, Decimals: 3}, {Name: "msg_type", Type: mysql.MYSQL_TYPE_TINY, Flags: mysql.UNSIGNED_FLAG}}
	page := ColdPage{Msg: cols, Rows: []ColdRow{
		{Seq: 18446744073709551615, Msg: [][]byte{[]byte("x\x00\xff"), []byte("18446744073709551615"), []byte("2025-01-02 03:04:05.678"), []byte("255")}},
		{Seq: 7, Msg: [][]byte{nil, []byte("7"), []byte("2025-01-02 00:00:00.000"), []byte("0")}},
	}}
	q := &coldQuery{shape: shapeBefore}
	text, ok := coldRows(q, page, fields, false)
	if !ok {
		t.Fatal("text rows refused")
	}
	bin, ok := coldRows(q, page, fields, true)
	if !ok {
		t.Fatal("binary rows refused")
	}
	rs := &mysql.Resultset{Fields: fields}
	for _, k := range text {
		rs.RowDatas = append(rs.RowDatas, k.data)
	}
	if !mysqlrow.TextToBinary(rs) {
		t.Fatal("TextToBinary refused")
	}
	for i := range bin {
		if !bytes.Equal(bin[i].data, rs.RowDatas[i]) {
			t.Fatalf("row %d: binary %q, converted text %q", i, bin[i].data, rs.RowDatas[i])
		}
	}
	vals, err := text[0].data.Parse(fields, false, nil)
	if err != nil || vals[0].AsUint64() != 18446744073709551615 || string(vals[3].AsString()) != "x\x00\xff" {
		t.Fatalf("text row: %v %v", vals, err)
	}
	cols[2].Decimals = 0 // archived as DATETIME(0), read now as DATETIME(3)
	if _, ok := coldRows(q, page, fields, false); ok {
		t.Fatal("a column archived with another definition was served")
	}
}
