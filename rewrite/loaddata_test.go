package rewrite

import (
	"reflect"
	"testing"
)

func TestAnalyzeLoadData(t *testing.T) {
	p := NewParser()
	for _, c := range []struct {
		sql     string
		targets []LoadTarget
		sets    []LoadSet
		replace bool
	}{
		{"LOAD DATA LOCAL INFILE 'f' INTO TABLE conv_msg", nil, nil, false},
		{"LOAD DATA LOCAL INFILE 'f' REPLACE INTO TABLE conv_msg (conv_id, @a, seq, @B) SET msg_id = @b * 10 + @a, msg_type = IF(@a > @x, '?', @a)",
			[]LoadTarget{{Column: "conv_id"}, {Var: "a"}, {Column: "seq"}, {Var: "b"}},
			[]LoadSet{{Column: "msg_id", Expr: "@b*10+@a", Vars: nil}, {Column: "msg_type", Expr: "IF(?>@`x`, '?', ?)", Vars: []int{1, 1}}}, true},
		{"LOAD DATA LOCAL INFILE 'f' INTO TABLE conv_msg (@k, seq) SET conv_id = @k",
			[]LoadTarget{{Var: "k"}, {Column: "seq"}}, []LoadSet{{Column: "conv_id", Expr: "?", Vars: []int{0}}}, false},
	} {
		stmts, err := p.Parse(c.sql)
		if err != nil {
			t.Fatal(err)
		}
		a, err := Analyze(stmts[0])
		if err != nil {
			t.Fatalf("%s: %v", c.sql, err)
		}
		if a.Kind != KindLoadData || a.Load == nil {
			t.Fatalf("%s: kind %v", c.sql, a.Kind)
		}
		l := a.Load
		// @b*10+@a: both are file variables: each is a `?`, in the order printed.
		if len(c.sets) > 0 && c.sets[0].Vars == nil && c.sets[0].Column == "msg_id" {
			c.sets[0] = LoadSet{Column: "msg_id", Expr: "?*10+?", Vars: []int{3, 1}}
		}
		if !reflect.DeepEqual(l.Targets, c.targets) || !reflect.DeepEqual(l.Sets, c.sets) || l.Replace != c.replace || l.File != "f" {
			t.Errorf("%s:\n got %+v %+v %v %q\nwant %+v %+v", c.sql, l.Targets, l.Sets, l.Replace, l.File, c.targets, c.sets)
		}
	}
	stmts, err := p.Parse("LOAD DATA LOCAL INFILE 'f' INTO TABLE t FIELDS TERMINATED BY ',' OPTIONALLY ENCLOSED BY '\"' ESCAPED BY '' LINES STARTING BY '#' TERMINATED BY '\\r\\n' IGNORE 2 LINES")
	if err != nil {
		t.Fatal(err)
	}
	a, err := Analyze(stmts[0])
	if err != nil {
		t.Fatal(err)
	}
	l := a.Load
	if *l.FieldsTerm != "," || *l.Enclosed != `"` || *l.Escaped != "" || *l.LinesStart != "#" || *l.LinesTerm != "\r\n" || l.IgnoreLines != 2 {
		t.Errorf("format read as %q %q %q %q %q %d", *l.FieldsTerm, *l.Enclosed, *l.Escaped, *l.LinesStart, *l.LinesTerm, l.IgnoreLines)
	}
}
