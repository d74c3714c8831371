package rewrite

import (
	"fmt"
	"testing"

	"github.com/pingcap/tidb/pkg/parser/ast"
	"github.com/pingcap/tidb/pkg/parser/test_driver"
)

func physOf(logical string) (string, string) { return "im_3", logical + "_0441" }

func TestRenderInline(t *testing.T) {
	p := NewParser()
	for _, c := range []struct {
		sql  string
		args []any
		want string
	}{
		{"SELECT seq, msg_id FROM conv_msg WHERE conv_id = ? AND seq < ? ORDER BY seq DESC LIMIT ?",
			[]any{int64(42), uint64(1 << 63), int8(-20)},
			"SELECT `seq`,`msg_id` FROM `im_3`.`conv_msg_0441` AS `conv_msg` WHERE `conv_id`=42 AND `seq`<9223372036854775808 ORDER BY `seq` DESC LIMIT -20"},
		{"SELECT msg_id FROM conv_msg WHERE conv_id = ? AND sender_uid = '?' AND msg_type IN (?, ?)",
			[]any{[]byte("7"), nil, uint16(3)},
			"SELECT `msg_id` FROM `im_3`.`conv_msg_0441` AS `conv_msg` WHERE `conv_id`='7' AND `sender_uid`='?' AND `msg_type` IN (NULL,3)"},
		{"SELECT `a?b` FROM conv_msg WHERE conv_id = ? /* ? */", []any{int32(1)},
			"SELECT `a?b` FROM `im_3`.`conv_msg_0441` AS `conv_msg` WHERE `conv_id`=1"},
	} {
		a, err := parseOne(t, p, c.sql)
		if err != nil {
			t.Fatal(err)
		}
		tm, err := NewTemplate(a)
		if err != nil {
			t.Fatal(err)
		}
		if tm.Params() != a.ParamCount {
			t.Fatalf("%s: %d placeholder holes, parser counted %d", c.sql, tm.Params(), a.ParamCount)
		}
		got, ok := tm.RenderInline(nil, physOf, c.args)
		if !ok || string(got) != c.want {
			t.Errorf("%s:\n got %s (%v)\nwant %s", c.sql, got, ok, c.want)
		}
	}
}

// The restorer prints `LIMIT ? OFFSET ?` as `LIMIT ?,?` (offset first): the
// text keeps each value in its place and Bind reorders prepared arguments.
func TestPlaceholdersOutOfOrder(t *testing.T) {
	p := NewParser()
	a, err := parseOne(t, p, "SELECT seq FROM conv_msg WHERE conv_id = ? ORDER BY seq LIMIT ? OFFSET ?")
	if err != nil {
		t.Fatal(err)
	}
	tm, err := NewTemplate(a)
	if err != nil {
		t.Fatal(err)
	}
	const want = "SELECT `seq` FROM `im_3`.`conv_msg_0441` AS `conv_msg` WHERE `conv_id`=? ORDER BY `seq` LIMIT ?,?"
	if got := string(tm.Render(nil, physOf)); got != want {
		t.Fatalf("Render:\n got %s\nwant %s", got, want)
	}
	args := []any{int64(42), int64(20), int64(5)} // conv, count, offset
	if got := tm.Bind(args); len(got) != 3 || got[0] != int64(42) || got[1] != int64(5) || got[2] != int64(20) {
		t.Fatalf("Bind = %v, want [42 5 20] (offset before count)", got)
	}
	inl, _ := tm.RenderInline(nil, physOf, args)
	if want := "SELECT `seq` FROM `im_3`.`conv_msg_0441` AS `conv_msg` WHERE `conv_id`=42 ORDER BY `seq` LIMIT 5,20"; string(inl) != want {
		t.Fatalf("RenderInline:\n got %s\nwant %s", inl, want)
	}
	in, err := parseOne(t, p, "SELECT seq FROM conv_msg WHERE conv_id = ? AND seq < ?")
	if err != nil {
		t.Fatal(err)
	}
	ti, _ := NewTemplate(in)
	if a2 := []any{1, 2}; &ti.Bind(a2)[0] != &a2[0] {
		t.Error("Bind must not copy arguments already in order")
	}
}

// A string value must come back from the parser as exactly its bytes.
func TestAppendLiteralRoundTrip(t *testing.T) {
	p := NewParser()
	for _, v := range []string{"", "plain", "it's", `back\slash`, "nul\x00byte", "\r\n\x1a\"", "中文 ' \\' \\\\", "?"} {
		lit, ok := AppendLiteral(nil, []byte(v))
		if !ok {
			t.Fatal("string not inlined")
		}
		stmts, err := p.Parse("SELECT " + string(lit))
		if err != nil {
			t.Fatalf("%q -> %s: %v", v, lit, err)
		}
		val := stmts[0].(*ast.SelectStmt).Fields.Fields[0].Expr.(*test_driver.ValueExpr)
		if got := val.GetString(); got != v {
			t.Errorf("%q printed as %s parses back as %q", v, lit, got)
		}
	}
	for _, v := range []any{float32(1.5), 2.5, struct{}{}, []byte("\xbf'"), "\xff"} {
		if _, ok := AppendLiteral(nil, v); ok {
			t.Errorf("%T must not be inlined", v)
		}
	}
}

// TestInlineShapeAssigned: only a placeholder that is a whole stored value
// may carry bytes that are not UTF-8 as a binary literal.
func TestInlineShapeAssigned(t *testing.T) {
	p := NewParser()
	for sql, want := range map[string]string{
		"INSERT INTO msg_content (msg_id, conv_id, content) VALUES (?, ?, ?), (?, ?, CONCAT(?, 'x'))": "[0 1 2 3 4]",
		"INSERT INTO im_inbox (uid, conv_id, seq) VALUES (?, 1, ?) ON DUPLICATE KEY UPDATE seq = ?":   "[0 1 2]",
		"UPDATE msg_content SET content = ?, msg_type = ? + 1 WHERE msg_id = ? AND conv_id = ?":       "[0]",
		"SELECT msg_id FROM msg_content WHERE conv_id = ? AND content = ?":                            "[]",
	} {
		a, err := parseOne(t, p, sql)
		if err != nil {
			t.Fatal(err)
		}
		ok, _, assigned := InlineShape(a)
		if !ok || fmt.Sprint(assigned) != want {
			t.Errorf("%s: assigned %v (ok %v), want %s", sql, assigned, ok, want)
		}
	}
	if got := BinaryLiteral([]byte{0xff, 0x00, 'A'}); got.Raw != "_binary X'FF0041'" {
		t.Errorf("BinaryLiteral = %s", got.Raw)
	}
}

func TestInlineShape(t *testing.T) {
	p := NewParser()
	for sql, want := range map[string][2]bool{
		"SELECT msg_id FROM conv_msg WHERE conv_id = ? AND seq < ? LIMIT ?":                                                      {true, true},
		"SELECT msg_id FROM conv_msg WHERE conv_id = ?":                                                                          {true, false},
		"SELECT msg_id, ? FROM conv_msg WHERE conv_id = ?":                                                                       {false, false},
		"SELECT msg_id FROM conv_msg WHERE conv_id = ? ORDER BY ?":                                                               {false, false},
		"SELECT msg_id FROM conv_msg WHERE conv_id = ? GROUP BY ?":                                                               {false, false},
		"SELECT msg_id FROM conv_msg WHERE conv_id = ? FOR UPDATE":                                                               {false, false},
		"SELECT msg_id FROM conv_msg WHERE conv_id = 1":                                                                          {false, false},
		"SELECT msg_id FROM conv_msg WHERE conv_id = ? UNION SELECT 1":                                                           {false, false},
		"UPDATE conv_msg SET msg_type = ? WHERE conv_id = ?":                                                                     {true, false},
		"UPDATE conv_msg SET msg_type = 1 WHERE conv_id = ? ORDER BY ? LIMIT 1":                                                  {false, false},
		"DELETE FROM conv_msg WHERE conv_id = ? LIMIT ?":                                                                         {true, true},
		"INSERT INTO im_inbox (uid, conv_id, seq, msg_id, send_time) VALUES (?, ?, ?, ?, NOW()) ON DUPLICATE KEY UPDATE seq = ?": {true, false},
		"INSERT INTO im_inbox SET uid = ?, conv_id = 1, seq = ?, msg_id = 1, send_time = NOW()":                                  {true, false},
		"SELECT msg_id FROM conv_msg WHERE conv_id = ? LIMIT 10 OFFSET ?":                                                        {true, true},
		"SELECT msg_id FROM conv_msg WHERE conv_id IN (SELECT ?) AND seq = ?":                                                    {true, false},
	} {
		a, err := parseOne(t, p, sql)
		if err != nil {
			t.Fatal(err)
		}
		ok, limit, _ := InlineShape(a)
		if ok != want[0] || (len(limit) > 0) != want[1] {
			t.Errorf("%s: InlineShape = %v, %v; want %v, limit placeholders %v", sql, ok, limit, want[0], want[1])
		}
		for _, i := range limit {
			if i != a.ParamCount-1 {
				t.Errorf("%s: LIMIT placeholder index %d, want %d (the last)", sql, i, a.ParamCount-1)
			}
		}
	}
}
