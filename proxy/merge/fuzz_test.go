package merge

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// fuzzFields covers every decoder: signed and unsigned integers of several
// widths, DECIMAL, DATETIME, TIME, general_ci VARCHAR, DOUBLE, FLOAT.
func fuzzFields() []*mysql.Field {
	return []*mysql.Field{
		{Name: []byte("i"), Type: mysql.MYSQL_TYPE_LONGLONG, Charset: 63},
		{Name: []byte("u"), Type: mysql.MYSQL_TYPE_LONGLONG, Flag: mysql.UNSIGNED_FLAG, Charset: 63},
		{Name: []byte("d"), Type: mysql.MYSQL_TYPE_NEWDECIMAL, Charset: 63, Decimal: 2},
		{Name: []byte("dt"), Type: mysql.MYSQL_TYPE_DATETIME, Charset: 63, Decimal: 3},
		{Name: []byte("tm"), Type: mysql.MYSQL_TYPE_TIME, Charset: 63},
		{Name: []byte("s"), Type: mysql.MYSQL_TYPE_VAR_STRING, Charset: 45},
		{Name: []byte("f"), Type: mysql.MYSQL_TYPE_DOUBLE, Charset: 63, Decimal: 31},
		{Name: []byte("t"), Type: mysql.MYSQL_TYPE_TINY, Charset: 63},
		{Name: []byte("fl"), Type: mysql.MYSQL_TYPE_FLOAT, Charset: 63, Decimal: 31},
	}
}

func textCells(i int64, u uint64, d, dt, tm, s string, f float64) []cell {
	return []cell{
		{raw: fmt.Append(nil, i)}, {raw: fmt.Append(nil, u)}, {raw: []byte(d)}, {raw: []byte(dt)},
		{raw: []byte(tm)}, {raw: []byte(s)}, {raw: fmt.Append(nil, f)}, {raw: []byte("-7")}, {null: true},
	}
}

func binCells(i int64, u uint64, d string, dt []byte, tm []byte, s string, f float64) []cell {
	return []cell{
		{raw: binary.LittleEndian.AppendUint64(nil, uint64(i))}, {raw: binary.LittleEndian.AppendUint64(nil, u)},
		{raw: []byte(d)}, {raw: dt}, {raw: tm}, {raw: []byte(s)},
		{raw: binary.LittleEndian.AppendUint64(nil, math.Float64bits(f))}, {raw: []byte{0xf9}},
		{raw: binary.LittleEndian.AppendUint32(nil, math.Float32bits(1.5))},
	}
}

var fuzzSpecs = []Spec{
	{OrderBy: []Order{{Col: 0}, {Col: 5, Desc: true}}, Limit: 3, Offset: 1},
	{OrderBy: []Order{{Col: 1, Desc: true}, {Col: 2}, {Col: 3}, {Col: 4}, {Col: 6}, {Col: 7}, {Col: 8}}, Limit: -1, Visible: 4},
	{GroupBy: []int{5}, Aggs: []AggKind{AggCount, AggSum, AggSum, AggMax, AggMin, AggNone, AggSum, AggMax, AggMin}, Limit: -1},
	{Aggs: []AggKind{AggCount, AggMin, AggSum, AggNone, AggNone, AggMax, AggNone, AggCount, AggNone},
		Avgs: []Avg{{Out: 3, Sum: 2, Count: 0, Scale: 6}, {Out: 8, Sum: 6, Count: 7}}, Limit: -1, Visible: 2},
	{Distinct: true, OrderBy: []Order{{Col: 4}}, Limit: 2, Visible: 6},
	{GroupBy: []int{3, 4}, Aggs: make([]AggKind, 9), Distinct: true, OrderBy: []Order{{Col: 6, Desc: true}}, Limit: 5,
		Having: func(row []mysql.FieldValue) (bool, error) { return row[0].Type != mysql.FieldValueTypeNull, nil }},
	{GroupBy: []int{7}, Aggs: []AggKind{AggNone, AggCount, AggNone, AggNone, AggNone, AggNone, AggNone, AggNone, AggNone},
		DistinctAggs: []DistinctAgg{{Out: 0, Func: DistinctCount, Args: []int{3, 4, 5}}, {Out: 2, Func: DistinctSum, Args: []int{6}},
			{Out: 8, Func: DistinctAvg, Args: []int{2}, Scale: 6}}, OrderBy: []Order{{Col: 0}}, Limit: -1},
}

// FuzzMerge feeds arbitrary bytes as row packets (split at 0x0a 0x0b):
// Merge may fail, never panic.
func FuzzMerge(f *testing.F) {
	fields := fuzzFields()
	tr := appendRow(nil, fields, textCells(-5, math.MaxUint64, "-12.50", "2024-02-03 04:05:06.789", "-838:59:59", "Zoë", 2.5), false)
	br := appendRow(nil, fields, binCells(-5, math.MaxUint64, "-12.50", []byte{0xe8, 0x07, 2, 3, 4, 5, 6, 1, 0, 0, 0}, []byte{1, 34, 0, 0, 0, 22, 59, 59}, "Zoë", 2.5), true)
	sep := []byte{0x0a, 0x0b}
	for mode := range byte(2 * len(fuzzSpecs)) {
		f.Add(mode, bytes.Join([][]byte{tr, tr, sep, tr}, sep))
		f.Add(mode, bytes.Join([][]byte{br, sep, br, br}, sep))
	}
	f.Add(byte(1), []byte{0, 0, 0})
	f.Add(byte(0), []byte{0xfc, 0xff})
	f.Fuzz(func(t *testing.T, mode byte, data []byte) {
		parts := []*mysql.Result{
			{Resultset: &mysql.Resultset{Fields: fields}},
			{Resultset: &mysql.Resultset{Fields: fields}},
		}
		p := 0
		for _, row := range bytes.Split(data, sep) {
			if len(row) == 0 {
				p = 1 - p
				continue
			}
			parts[p].RowDatas = append(parts[p].RowDatas, row)
		}
		spec := fuzzSpecs[int(mode>>1)%len(fuzzSpecs)]
		spec.Binary = mode&1 == 1
		r, err := Merge(parts, spec)
		if err != nil {
			return
		}
		// What Merge produces must parse with go-mysql's own decoder.
		for _, rd := range r.RowDatas {
			if _, err := rd.Parse(r.Fields, spec.Binary, nil); err != nil {
				t.Fatalf("merged row % x does not parse: %v", rd, err)
			}
		}
	})
}

func TestDecodeMalformedNoPanic(t *testing.T) {
	fields := fuzzFields()
	for _, bin := range []bool{false, true} {
		for _, row := range [][]byte{nil, {0}, {0xfe}, {0xfc, 1}, {0, 0xff}, {0, 0, 0, 0xfe, 1, 2}} {
			parts := []*mysql.Result{{Resultset: &mysql.Resultset{Fields: fields, RowDatas: []mysql.RowData{row}}}}
			for _, spec := range fuzzSpecs {
				spec.Binary = bin
				if _, err := Merge(parts, spec); err == nil {
					t.Errorf("binary=%v row % x: no error", bin, row)
				}
			}
		}
	}
}

// benchParts builds n shard results of rows rows each, sorted by id, ids
// interleaved across shards, in the text or binary protocol.
func benchParts(n, rows int, bin bool) []*mysql.Result {
	fields := []*mysql.Field{
		{Name: []byte("id"), Type: mysql.MYSQL_TYPE_LONGLONG, Flag: mysql.UNSIGNED_FLAG, Charset: 63},
		{Name: []byte("conv"), Type: mysql.MYSQL_TYPE_LONGLONG, Charset: 63},
		{Name: []byte("body"), Type: mysql.MYSQL_TYPE_VAR_STRING, Charset: 45},
		{Name: []byte("ts"), Type: mysql.MYSQL_TYPE_DATETIME, Charset: 63, Decimal: 3},
	}
	parts := make([]*mysql.Result, n)
	for s := range parts {
		r := &mysql.Result{Resultset: &mysql.Resultset{Fields: fields}}
		for i := range rows {
			id := uint64(i*n + s)
			var cells []cell
			if bin {
				cells = []cell{
					{raw: binary.LittleEndian.AppendUint64(nil, id)},
					{raw: binary.LittleEndian.AppendUint64(nil, uint64(s))},
					{raw: fmt.Appendf(nil, "message %d from shard %d", i, s)},
					{raw: []byte{0xe8, 0x07, 5, 17, 10, 20, byte(i), 0x40, 0x0d, 0x03, 0}},
				}
			} else {
				cells = []cell{
					{raw: fmt.Append(nil, id)}, {raw: fmt.Append(nil, s)},
					{raw: fmt.Appendf(nil, "message %d from shard %d", i, s)},
					{raw: fmt.Appendf(nil, "2024-05-17 10:20:%02d.200", i)},
				}
			}
			r.RowDatas = append(r.RowDatas, appendRow(nil, fields, cells, bin))
		}
		parts[s] = r
	}
	return parts
}

func BenchmarkMergeOrderLimit(b *testing.B) {
	for _, bin := range []bool{false, true} {
		name := "text"
		if bin {
			name = "binary"
		}
		b.Run(name, func(b *testing.B) {
			parts := benchParts(1024, 20, bin)
			spec := Spec{Binary: bin, OrderBy: []Order{{Col: 0, Desc: true}}, Limit: 20, MaxRows: 1 << 20}
			b.ReportAllocs()
			for b.Loop() {
				r, err := Merge(parts, spec)
				if err != nil || len(r.RowDatas) != 20 {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestAggregateNoRowsAnywhere: an aggregate without GROUP BY over no rows at
// all is one row: COUNT 0, the rest NULL.
func TestAggregateNoRowsAnywhere(t *testing.T) {
	fields := fuzzFields()
	for _, bin := range []bool{false, true} {
		parts := []*mysql.Result{{Resultset: &mysql.Resultset{Fields: fields}}, {Resultset: &mysql.Resultset{Fields: fields}}}
		r, err := Merge(parts, Spec{Binary: bin, Aggs: []AggKind{AggCount, AggSum, AggSum, AggMax, AggMin, AggNone, AggSum, AggCount, AggNone},
			Avgs: []Avg{{Out: 8, Sum: 6, Count: 7}}, Limit: -1})
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Values) != 1 {
			t.Fatalf("binary=%v: %d rows, want 1", bin, len(r.Values))
		}
		row := r.Values[0]
		if row[0].Type != mysql.FieldValueTypeSigned || row[0].AsInt64() != 0 || row[7].AsInt64() != 0 {
			t.Errorf("binary=%v: counts %v %v, want 0 0", bin, row[0].Value(), row[7].Value())
		}
		for _, j := range []int{1, 2, 3, 4, 5, 6, 8} {
			if row[j].Type != mysql.FieldValueTypeNull {
				t.Errorf("binary=%v: column %d = %v, want NULL", bin, j, row[j].Value())
			}
		}
		parsed, err := r.RowDatas[0].Parse(r.Fields, bin, nil)
		if err != nil || parsed[0].AsInt64() != 0 || parsed[1].Type != mysql.FieldValueTypeNull {
			t.Errorf("binary=%v: packet % x: %v", bin, r.RowDatas[0], err)
		}
	}
}
