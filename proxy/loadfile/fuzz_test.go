package loadfile

import (
	"bytes"
	"reflect"
	"testing"
)

// FuzzReader: any file in any of the formats reads without a panic, and
// rows written as SELECT ... INTO OUTFILE writes them (tabs, newlines,
// backslash escapes, \N for NULL) read back as they were. In the input,
// 0xFF separates fields, 0xFE rows, and a field that is only 0xFD is NULL.
func FuzzReader(f *testing.F) {
	f.Add([]byte("a\xffb\xfe\xfd\xffc\td\\e\nf"))
	f.Add([]byte("\xfe\xfe\x00N\xff\\N"))
	f.Add([]byte("NULL\xff\"x\"\"y\""))
	f.Fuzz(func(t *testing.T, in []byte) {
		for _, fm := range []Format{DefaultFormat(), csv(), {FieldTerm: "ab", Enclosed: 'a', Escape: 'a', LineStart: "b", LineTerm: "ba"}} {
			r := NewReader(bytes.NewReader(in), fm)
			r.SkipLines(1)
			for r.Next(3) {
				if len(r.Row())+r.Missing() != 3 {
					t.Fatalf("a row of %d fields and %d missing, want 3", len(r.Row()), r.Missing())
				}
			}
		}
		var rows [][]Field
		cols := 0
		for i, line := range bytes.Split(in, []byte{0xfe}) {
			var row []Field
			for _, v := range bytes.Split(line, []byte{0xff}) {
				if bytes.Equal(v, []byte{0xfd}) {
					row = append(row, Field{Null: true})
				} else {
					row = append(row, Field{Value: v})
				}
			}
			if i == 0 {
				cols = len(row)
			}
			for len(row) < cols {
				row = append(row, Field{Value: []byte{}})
			}
			rows = append(rows, row[:cols])
		}
		var file []byte
		for _, row := range rows {
			for i, fl := range row {
				if i > 0 {
					file = append(file, '\t')
				}
				if fl.Null {
					file = append(file, `\N`...)
					continue
				}
				for _, b := range fl.Value {
					switch b {
					case '\\', '\t', '\n':
						file = append(file, '\\', b)
					case 0:
						file = append(file, '\\', '0')
					default:
						file = append(file, b)
					}
				}
			}
			file = append(file, '\n')
		}
		r := NewReader(bytes.NewReader(file), DefaultFormat())
		var got [][]Field
		for r.Next(cols) {
			if r.Missing() != 0 || r.Cut() {
				t.Fatalf("row %d: %d missing, cut %v", len(got)+1, r.Missing(), r.Cut())
			}
			row := make([]Field, len(r.Row()))
			for i, fl := range r.Row() {
				row[i] = Field{Null: fl.Null}
				if !fl.Null {
					row[i].Value = append([]byte{}, fl.Value...)
				}
			}
			got = append(got, row)
		}
		for _, row := range rows {
			for i := range row {
				if !row[i].Null && row[i].Value == nil {
					row[i].Value = []byte{}
				}
			}
		}
		if !reflect.DeepEqual(got, rows) {
			t.Fatalf("file %q read back as %v, want %v", file, got, rows)
		}
	})
}
