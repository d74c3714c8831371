package rewrite

import (
	"strings"
	"testing"
)

func TestSplitReturning(t *testing.T) {
	for _, tc := range []struct {
		sql, head, returning string
		ok                   bool
	}{
		{"INSERT INTO t (a) VALUES (1) RETURNING id", "INSERT INTO t (a) VALUES (1) ", " id", true},
		{"insert into t values (1) returning `id`, a AS b", "insert into t values (1) ", " `id`, a AS b", true},
		{"DELETE FROM t WHERE a = 'x RETURNING y' RETURNING *", "DELETE FROM t WHERE a = 'x RETURNING y' ", " *", true},
		{"/* c */ REPLACE INTO t VALUES (1) /* RETURNING no */ RETURNING a", "/* c */ REPLACE INTO t VALUES (1) /* RETURNING no */ ", " a", true},
		{"INSERT INTO t (returning) VALUES (1)", "", "", false},
		{"INSERT INTO t VALUES ((SELECT 1 RETURNING))", "", "", false},
		{"INSERT INTO t VALUES (1) RETURNING", "", "", false},
		{"INSERT INTO t VALUES (1) RETURNING   ", "", "", false},
		{"SELECT 1 RETURNING a", "", "", false},
		{"UPDATE t SET a = 1 RETURNING a", "", "", false},
		{"INSERT INTO t VALUES (1) -- RETURNING a\n", "", "", false},
		{"INSERT INTO t VALUES (1) # RETURNING a", "", "", false},
		{"INSERT INTO t VALUES (1) my_returning a", "", "", false},
		{"INSERT INTO t VALUES (1) /* open RETURNING a", "", "", false},
	} {
		head, ret, ok := SplitReturning(tc.sql)
		if head != tc.head || ret != tc.returning || ok != tc.ok {
			t.Errorf("SplitReturning(%q) = %q, %q, %v; want %q, %q, %v", tc.sql, head, ret, ok, tc.head, tc.returning, tc.ok)
		}
	}
}

func TestCheckReturning(t *testing.T) {
	p := NewParser()
	for list, want := range map[string]string{
		" id, seq":            "",
		" *":                  "",
		" LENGTH(title) AS n": "",
		" ?":                  "placeholders",
		" conv_msg.seq":       "without the table",
		" (SELECT 1 FROM x)":  "subquery",
		" FROM":               "syntax",
	} {
		err := CheckReturning(p, list, []string{"conv_msg"})
		switch {
		case want == "" && err != nil:
			t.Errorf("%q: %v", list, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%q: %v, want an error about %s", list, err, want)
		}
	}
}
