package rewrite

import (
	"errors"
	"strings"
	"testing"
)

func searchOf(t *testing.T, sql string) (*Search, error) {
	t.Helper()
	stmts, err := NewParser().Parse(sql)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	a, err := Analyze(stmts[0])
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	if !NamesSearchTable(a) {
		t.Fatalf("%s: msg_search not seen", sql)
	}
	return SearchShape(a)
}

func TestSearchShape(t *testing.T) {
	s, err := searchOf(t, "SELECT msg_id, conv_id, seq, created_at FROM msg_search WHERE uid = ? AND MATCH(text) AGAINST (?) AND conv_id = ? "+
		"AND msg_type = 1 AND created_at >= '2026-11-01 00:00:00' ORDER BY created_at DESC LIMIT 20")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(s.Columns, ",") != "msg_id,conv_id,seq,created_at" || s.UID.Param != 0 || s.Text.Param != 1 ||
		s.ConvID == nil || s.ConvID.Param != 2 || s.MsgType == nil || s.MsgType.Lit != int64(1) ||
		s.Since == nil || s.Since.Lit != "2026-11-01 00:00:00" || s.Limit.Lit != uint64(20) && s.Limit.Lit != int64(20) {
		t.Fatalf("shape %+v", s)
	}
	// Conditions in any order, a reversed comparison, LIMIT ?, SELECT *.
	s, err = searchOf(t, "SELECT * FROM im.msg_search s WHERE MATCH (text) AGAINST ('你好' IN BOOLEAN MODE) AND 42 = uid LIMIT ?")
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Columns) != len(SearchColumns) || s.UID.Lit != int64(42) || s.Text.Lit != "你好" || s.Limit.Param != 0 || s.ConvID != nil {
		t.Fatalf("shape %+v", s)
	}
	for _, bad := range []string{
		"SELECT msg_id FROM msg_search WHERE MATCH(text) AGAINST ('x') LIMIT 5",                          // no uid
		"SELECT msg_id FROM msg_search WHERE uid = 1 LIMIT 5",                                            // no MATCH
		"SELECT msg_id FROM msg_search WHERE uid = 1 AND MATCH(text) AGAINST ('x')",                      // no LIMIT
		"SELECT msg_id FROM msg_search WHERE uid = 1 AND MATCH(text) AGAINST ('x') LIMIT 5 OFFSET 5",     // OFFSET
		"SELECT msg_id FROM msg_search WHERE uid = 1 AND MATCH(text) AGAINST ('x') ORDER BY seq LIMIT 5", // order
		"SELECT msg_id FROM msg_search WHERE uid = 1 OR MATCH(text) AGAINST ('x') LIMIT 5",               // OR
		"SELECT msg_id FROM msg_search WHERE uid = 1 AND MATCH(text) AGAINST ('x') AND conv_id IN (1, 2) LIMIT 5",
		"SELECT msg_id FROM msg_search WHERE uid = 1 AND uid = 2 AND MATCH(text) AGAINST ('x') LIMIT 5",
		"SELECT COUNT(*) FROM msg_search WHERE uid = 1 AND MATCH(text) AGAINST ('x') LIMIT 5",
		"SELECT content FROM msg_search WHERE uid = 1 AND MATCH(text) AGAINST ('x') LIMIT 5",
		"SELECT msg_id FROM msg_search WHERE uid = 1 AND MATCH(body) AGAINST ('x') LIMIT 5",
		"SELECT msg_id FROM msg_search, t WHERE uid = 1 AND MATCH(text) AGAINST ('x') LIMIT 5",
		"DELETE FROM msg_search WHERE uid = 1",
	} {
		_, err := searchOf(t, bad)
		var ue *UnsupportedError
		if !errors.As(err, &ue) {
			t.Errorf("%s: %v, want an UnsupportedError", bad, err)
		}
	}
}
