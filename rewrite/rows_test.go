package rewrite

import (
	"fmt"
	"strings"
	"testing"
)

// show prints a WrittenRows compactly: cols|row;row with ?n for placeholders
// and _ for unknown values.
func (w WrittenRows) show() string {
	var rows []string
	for _, r := range w.Rows {
		var vs []string
		for _, v := range r {
			switch {
			case v.Param == Unknown:
				vs = append(vs, "_")
			case v.Param >= 0:
				vs = append(vs, fmt.Sprintf("?%d", v.Param))
			default:
				vs = append(vs, fmt.Sprint(v.Lit))
			}
		}
		rows = append(rows, strings.Join(vs, ","))
	}
	return w.Table + "(" + strings.Join(w.Columns, ",") + ")|" + strings.Join(rows, ";")
}

func TestWritten(t *testing.T) {
	p := NewParser()
	for _, c := range []struct{ sql, want string }{
		{"INSERT INTO conv_msg (conv_id, seq, msg_id, created_at) VALUES (1, 2, ?, NOW()), (?, 3, 4, NOW())",
			"conv_msg(conv_id,seq,msg_id,created_at)|1,2,?0,_;?1,3,4,_"},
		{"REPLACE INTO im_conv_seq (conv_id, max_seq) VALUES (7, 9)", "im_conv_seq(conv_id,max_seq)|7,9"},
		{"UPDATE conv_msg SET msg_type = 9 WHERE conv_id = ? AND seq = ?", "conv_msg(conv_id,seq)|?0,?1"},
		{"UPDATE conv_msg SET msg_type = 9 WHERE (conv_id, seq) IN ((1, 2), (1, 3))", "conv_msg(conv_id,seq)|1,2;1,3"},
		{"DELETE FROM im_inbox WHERE uid = 5 AND conv_id IN (1, 2) AND seq < 10", "im_inbox(uid,conv_id)|5,1;5,2"},
		{"DELETE FROM im_inbox WHERE 5 = uid AND conv_id = 1 AND conv_id IN (3, 4)", "im_inbox(uid,conv_id)|5,1"},
		{"UPDATE im_conv_member SET conv_id = 8 WHERE uid = 1 AND conv_id = 2", "im_conv_member(uid,conv_id)|1,2;1,8"},
		{"UPDATE im_conv_member SET conv_id = conv_id + 1 WHERE uid = 1 AND conv_id = 2", "im_conv_member(uid,conv_id)|1,2;1,_"},
		{"DELETE FROM msg_content WHERE conv_id = 1 AND msg_id = -3", "msg_content(conv_id,msg_id)|1,-3"},
	} {
		a, err := parseOne(t, p, c.sql)
		if err != nil {
			t.Fatalf("%s: %v", c.sql, err)
		}
		w, ok := a.Written(100)
		if !ok || w.show() != c.want {
			t.Errorf("%s:\n got %v %s\nwant %s", c.sql, ok, w.show(), c.want)
		}
	}
	for _, sql := range []string{
		"SELECT * FROM conv_msg WHERE conv_id = 1",
		"DELETE FROM conv_msg WHERE conv_id > 1",
		"UPDATE conv_msg a JOIN msg_content b ON a.msg_id = b.msg_id SET a.msg_type = 1 WHERE a.conv_id = 1",
		"DELETE FROM conv_msg WHERE conv_id IN (1,2,3) AND seq IN (1,2,3,4)", // 12 > max 10
	} {
		a, err := parseOne(t, p, sql)
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		if w, ok := a.Written(10); ok {
			t.Errorf("%s: got %s, want not known", sql, w.show())
		}
	}
}
