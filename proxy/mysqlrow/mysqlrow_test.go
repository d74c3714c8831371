package mysqlrow

import (
	"bytes"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
)

func TestTextRowsRoundTrip(t *testing.T) {
	vals := [][]byte{[]byte("42"), nil, []byte(""), bytes.Repeat([]byte("x"), 300)}
	r := &mysql.Result{Resultset: &mysql.Resultset{Fields: make([]*mysql.Field, len(vals)), RowDatas: []mysql.RowData{TextRow(vals)}}}
	got, err := TextRows(r)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || len(got[0]) != len(vals) {
		t.Fatalf("rows %q", got)
	}
	for i, v := range vals {
		if (v == nil) != (got[0][i] == nil) || !bytes.Equal(v, got[0][i]) {
			t.Errorf("value %d: %q, want %q", i, got[0][i], v)
		}
	}
	r.RowDatas[0] = r.RowDatas[0][:len(r.RowDatas[0])-1] // cut short
	if _, err := TextRows(r); err == nil {
		t.Error("a cut row decoded")
	}
}

// TextToBinary gives the rows go-mysql's own binary encoder gives for the
// same values. (The text rows are TextRow's: go-mysql's text builder
// writes an empty string as NULL.)
func TestTextToBinaryMatchesGoMySQL(t *testing.T) {
	rows := [][]any{{int64(-5), "héllo", "y"}, {int64(1 << 40), "", nil}}
	bin, err := mysql.BuildSimpleResultset([]string{"n", "s", "t"}, rows, true)
	if err != nil {
		t.Fatal(err)
	}
	text := &mysql.Resultset{Fields: bin.Fields, RowDatas: []mysql.RowData{
		TextRow([][]byte{[]byte("-5"), []byte("héllo"), []byte("y")}),
		TextRow([][]byte{[]byte("1099511627776"), []byte(""), nil}),
	}}
	if !TextToBinary(text) {
		t.Fatal("refused")
	}
	for i := range rows {
		if !bytes.Equal(text.RowDatas[i], bin.RowDatas[i]) {
			t.Errorf("row %d: % x, want % x", i, text.RowDatas[i], bin.RowDatas[i])
		}
	}
	dbl, err := mysql.BuildSimpleResultset([]string{"d"}, [][]any{{1.5}}, false)
	if err != nil {
		t.Fatal(err)
	}
	before := append([]byte(nil), dbl.RowDatas[0]...)
	if TextToBinary(dbl) || !bytes.Equal(dbl.RowDatas[0], before) {
		t.Error("a DOUBLE column converted (its text is rounded), or the rows changed")
	}
}
