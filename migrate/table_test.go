package migrate

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/convoy-im/convoy/migrate/internal/physical"
)

func TestKeyJSON(t *testing.T) {
	cases := []struct {
		key  Key
		json string
	}{
		{nil, `null`},
		{Key{[]byte("18446744073709551615"), []byte("7")}, `["18446744073709551615","7"]`},
		{Key{[]byte{0xff, 0x00, 'a'}, []byte("😀"), {}}, `[{"hex":"ff0061"},"😀",""]`},
	}
	for _, c := range cases {
		b, err := json.Marshal(c.key)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != c.json {
			t.Errorf("Marshal(%s) = %s, want %s", c.key, b, c.json)
		}
		var back Key
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("Unmarshal(%s): %v", b, err)
		}
		if len(back) != len(c.key) || (back == nil) != (c.key == nil) {
			t.Fatalf("round trip of %s gave %s", c.key, back)
		}
		for i := range back {
			if !bytes.Equal(back[i], c.key[i]) {
				t.Errorf("round trip of %s gave %s", c.key, back)
			}
		}
	}
	// Inside a Checkpoint an empty key disappears and comes back nil.
	b, _ := json.Marshal(Checkpoint{Rows: 3})
	if string(b) != `{"rows":3}` {
		t.Errorf("Checkpoint JSON = %s", b)
	}
	var bad Key
	if err := json.Unmarshal([]byte(`[{"hex":"zz"}]`), &bad); err == nil {
		t.Error("bad hex accepted")
	}
	if err := json.Unmarshal([]byte(`[7]`), &bad); err == nil {
		t.Error("a number accepted as a key part")
	}
}

func TestKeyCompareSQL(t *testing.T) {
	tbl := &table{Table: physical.Table{Database: "im_0", Name: "conv_msg_0000", Columns: []column{
		{Name: "conv_id", DataType: "bigint", ColumnType: "bigint(20) unsigned"},
		{Name: "seq", DataType: "bigint", ColumnType: "bigint(20) unsigned"},
		{Name: "amount", DataType: "decimal", ColumnType: "decimal(10,2)", Precision: 10, Scale: 2},
		{Name: "msg_id", DataType: "bigint", ColumnType: "bigint(20)"},
	}, PK: []int{0, 1, 2}}, filterCol: 0}
	w, err := segmentWhere(tbl, &ShardFilter{Column: "conv_id", Shard: 441},
		Key{[]byte("18446744073709551615"), []byte("5"), []byte("1.50")}, Key{[]byte("9"), []byte("1"), []byte("0.00")})
	if err != nil {
		t.Fatal(err)
	}
	want := " WHERE ((`conv_id` > ?) OR (`conv_id` = ? AND `seq` > ?) OR (`conv_id` = ? AND `seq` = ? AND `amount` > CAST(? AS DECIMAL(10,2))))" +
		" AND ((`conv_id` < ?) OR (`conv_id` = ? AND `seq` < ?) OR (`conv_id` = ? AND `seq` = ? AND `amount` < CAST(? AS DECIMAL(10,2)))" +
		" OR (`conv_id` = ? AND `seq` = ? AND `amount` = CAST(? AS DECIMAL(10,2))))" +
		" AND CRC32(`conv_id`) % 1024 = ?"
	if got := w.String(); got != want {
		t.Errorf("where =\n%s\nwant\n%s", got, want)
	}
	max := uint64(18446744073709551615)
	wantArgs := []any{max, max, uint64(5), max, uint64(5), []byte("1.50"),
		uint64(9), uint64(9), uint64(1), uint64(9), uint64(1), []byte("0.00"),
		uint64(9), uint64(1), []byte("0.00"), uint64(441)}
	if !reflect.DeepEqual(w.args, wantArgs) {
		t.Errorf("args = %v\nwant %v", w.args, wantArgs)
	}
	if _, err := segmentWhere(tbl, nil, Key{[]byte("1")}, nil); err == nil {
		t.Error("a key with too few parts was accepted")
	}
	if _, err := segmentWhere(tbl, nil, Key{[]byte("-1"), []byte("1"), []byte("1")}, nil); err == nil {
		t.Error("a negative value for an unsigned column was accepted")
	}
}
