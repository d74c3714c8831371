package rewrite

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"testing"

	"github.com/convoy-im/convoy/internal/golden"
	"github.com/convoy-im/convoy/router"
)

var update = flag.Bool("update", false, "rewrite testdata/*.json with the actual results")

// analyzeCase is one golden case of testdata/analyze.json. Inputs are
// comment and query; everything else is output.
type analyzeCase struct {
	Comment    string     `json:"comment"`
	Query      string     `json:"query"`
	Error      string     `json:"error,omitempty"`
	Kind       string     `json:"kind,omitempty"`
	ParamCount int        `json:"param_count,omitempty"`
	Sharded    []string   `json:"sharded,omitempty"`
	KeyColumn  string     `json:"key_column,omitempty"`
	Unsharded  []string   `json:"unsharded,omitempty"`
	HasKey     bool       `json:"has_key,omitempty"`
	Keys       []string   `json:"keys,omitempty"`
	InsertRows []string   `json:"insert_rows,omitempty"`
	SetVars    []SetVar   `json:"set_vars,omitempty"`
	UseDB      string     `json:"use_db,omitempty"`
	TxReadOnly bool       `json:"tx_read_only,omitempty"`
	Savepoint  *Savepoint `json:"savepoint,omitempty"`
}

// renderCase is one golden case of testdata/render.json. Inputs are comment,
// query and subset_rows.
type renderCase struct {
	Comment      string `json:"comment"`
	Query        string `json:"query"`
	SubsetRows   []int  `json:"subset_rows,omitempty"`
	Error        string `json:"error,omitempty"`
	Template     string `json:"template,omitempty"`
	SQL          string `json:"sql,omitempty"`
	SubsetSQL    string `json:"subset_sql,omitempty"`
	SubsetParams []int  `json:"subset_params,omitempty"`
}

// fakePhys maps every logical table to shard 441 of database im_3.
func fakePhys(logical string) (string, string) {
	return "im_3", router.PhysicalTableName(logical, 441)
}

// valueString renders a Value with its Go type so goldens catch type changes.
func valueString(v Value) string {
	if v.Param >= 0 {
		return "?" + strconv.Itoa(v.Param)
	}
	switch x := v.Lit.(type) {
	case nil:
		return "NULL"
	case []byte:
		return "[]byte:" + hex.EncodeToString(x)
	case string:
		return "string:" + strconv.Quote(x)
	case router.Decimal:
		return "decimal:" + string(x)
	default:
		return fmt.Sprintf("%T:%v", x, x)
	}
}

func errorString(err error) string {
	var se *SyntaxError
	var ue *UnsupportedError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("syntax %d: %s", se.Code, se.Msg)
	case errors.Is(err, ErrMixedTables):
		return "mixed: " + err.Error()
	case errors.Is(err, ErrShardKeyUpdate):
		return "shard key update: " + err.Error()
	case errors.As(err, &ue):
		return "unsupported: " + err.Error()
	}
	return "other: " + err.Error()
}

func parseOne(t testing.TB, p *Parser, q string) (*Analysis, error) {
	t.Helper()
	stmts, err := p.Parse(q)
	if err != nil {
		return nil, err
	}
	if len(stmts) != 1 {
		t.Fatalf("%q: %d statements, want 1", q, len(stmts))
	}
	return Analyze(stmts[0])
}

func runAnalyze(t *testing.T, p *Parser, in analyzeCase) analyzeCase {
	out := analyzeCase{Comment: in.Comment, Query: in.Query}
	a, err := parseOne(t, p, in.Query)
	if err != nil {
		out.Error = errorString(err)
		return out
	}
	out.Kind = a.Kind.String()
	out.ParamCount = a.ParamCount
	out.Sharded, out.KeyColumn, out.Unsharded = a.Sharded, a.KeyColumn, a.Unsharded
	out.HasKey = a.HasKey
	for _, v := range a.Keys {
		out.Keys = append(out.Keys, valueString(v))
	}
	for _, v := range a.InsertRows {
		out.InsertRows = append(out.InsertRows, valueString(v))
	}
	if a.InsertHasKey != (len(a.InsertRows) > 0) {
		t.Errorf("%s: InsertHasKey=%v with %d rows", in.Comment, a.InsertHasKey, len(a.InsertRows))
	}
	out.SetVars, out.UseDB, out.TxReadOnly = a.SetVars, a.UseDB, a.TxReadOnly
	if a.Kind == KindSavepoint {
		out.Savepoint = &a.Savepoint
	}
	return out
}

func runRender(t *testing.T, p *Parser, in renderCase) renderCase {
	out := renderCase{Comment: in.Comment, Query: in.Query, SubsetRows: in.SubsetRows}
	a, err := parseOne(t, p, in.Query)
	if err != nil {
		out.Error = errorString(err)
		return out
	}
	before, err := Restore(a.Stmt)
	if err != nil {
		t.Fatalf("%s: restore: %v", in.Comment, err)
	}
	tpl, err := NewTemplate(a)
	if err != nil {
		out.Error = errorString(err)
		return out
	}
	out.Template = tpl.String()
	out.SQL = string(tpl.Render(nil, fakePhys))
	if in.SubsetRows != nil {
		st, params, err := SubsetInsert(a, in.SubsetRows)
		if err != nil {
			out.Error = errorString(err)
			return out
		}
		out.SubsetSQL, out.SubsetParams = string(st.Render(nil, fakePhys)), params
	}
	// The AST must come back unchanged: plans cache it and restore again.
	if after, _ := Restore(a.Stmt); after != before {
		t.Errorf("%s: AST changed by NewTemplate/SubsetInsert:\nbefore %s\nafter  %s", in.Comment, before, after)
	}
	return out
}

// checkGolden compares actual with the file's cases, prints every differing case
// as JSON, and rewrites the file under -update.
func checkGolden[C any](t *testing.T, file string, run func(C) C, name func(C) string) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var want []C
	if err := json.Unmarshal(data, &want); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	got := make([]C, len(want))
	failed := false
	for i, w := range want {
		got[i] = run(w)
		wj, _ := json.MarshalIndent(w, "  ", "  ")
		gj, _ := json.MarshalIndent(got[i], "  ", "  ")
		if !bytes.Equal(wj, gj) && !*update {
			failed = true
			t.Errorf("%s: case %q differs\nwant:\n  %s\ngot:\n  %s", file, name(w), wj, gj)
		}
	}
	if *update {
		golden.Write(t, file, got)
		return
	}
	if failed {
		t.Logf("if the new output is right, accept it with: go test ./rewrite -run %s -update", t.Name())
	}
}

func TestAnalyzeGolden(t *testing.T) {
	p := NewParser()
	checkGolden(t, "testdata/analyze.json", func(c analyzeCase) analyzeCase { return runAnalyze(t, p, c) },
		func(c analyzeCase) string { return c.Comment })
}

func TestRenderGolden(t *testing.T) {
	p := NewParser()
	checkGolden(t, "testdata/render.json", func(c renderCase) renderCase { return runRender(t, p, c) },
		func(c renderCase) string { return c.Comment })
}

func loadRenderCases(t testing.TB) []renderCase {
	data, err := os.ReadFile("testdata/render.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []renderCase
	if err := json.Unmarshal(data, &cases); err != nil {
		t.Fatal(err)
	}
	return cases
}

// TestRenderRoundTrip: every rendered statement parses again, analyses to
// the same kind, and restoring the re-parsed tree prints the same SQL
// (parse -> rewrite -> restore -> parse again -> same tree).
func TestRenderRoundTrip(t *testing.T) {
	p := NewParser()
	for _, c := range loadRenderCases(t) {
		for _, sql := range []string{c.SQL, c.SubsetSQL} {
			if sql == "" {
				continue
			}
			a0, err := parseOne(t, p, c.Query)
			if err != nil {
				t.Fatalf("%s: %v", c.Comment, err)
			}
			stmts, err := p.Parse(sql)
			if err != nil {
				t.Errorf("%s: rendered SQL does not parse: %v\n%s", c.Comment, err, sql)
				continue
			}
			a1, err := Analyze(stmts[0])
			if err != nil {
				t.Errorf("%s: rendered SQL does not analyse: %v\n%s", c.Comment, err, sql)
				continue
			}
			if a1.Kind != a0.Kind || len(a1.Sharded) != 0 {
				t.Errorf("%s: rendered kind %v sharded %v, original kind %v", c.Comment, a1.Kind, a1.Sharded, a0.Kind)
			}
			undo := keepSourceForms(stmts[0])
			again, _ := Restore(stmts[0])
			undo()
			if again != sql {
				t.Errorf("%s: restore of the rendered SQL differs:\nrendered %s\nrestored %s", c.Comment, sql, again)
			}
		}
	}
}

func TestRenderQuotesPhysicalNames(t *testing.T) {
	p := NewParser()
	a, err := parseOne(t, p, "SELECT * FROM conv_msg WHERE conv_id = 1")
	if err != nil {
		t.Fatal(err)
	}
	tpl, err := NewTemplate(a)
	if err != nil {
		t.Fatal(err)
	}
	got := string(tpl.Render([]byte("-- "), func(string) (string, string) { return "d`b", "t" }))
	want := "-- SELECT * FROM `d``b`.`t` AS `conv_msg` WHERE `conv_id`=1"
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

// A statement that contains text looking like a sentinel must still render
// correctly: the per-template random token cannot be guessed.
func TestSentinelLookalike(t *testing.T) {
	p := NewParser()
	a, err := parseOne(t, p, "SELECT 'cvy_0', `cvy_0` FROM conv_msg WHERE conv_id = 1")
	if err != nil {
		t.Fatal(err)
	}
	tpl, err := NewTemplate(a)
	if err != nil {
		t.Fatal(err)
	}
	got := string(tpl.Render(nil, fakePhys))
	want := "SELECT 'cvy_0',`cvy_0` FROM `im_3`.`conv_msg_0441` AS `conv_msg` WHERE `conv_id`=1"
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	// Forced collision: split must refuse text holding the token.
	if _, ok := split("SELECT `tok_0` FROM `tok_0`", "tok", []string{"conv_msg"}, 1, 0); ok {
		t.Error("split accepted more sentinels than were installed")
	}
}

func TestSyntaxError(t *testing.T) {
	_, err := NewParser().Parse("SELEC 1")
	var se *SyntaxError
	if !errors.As(err, &se) || se.Code != 1064 || !bytes.Contains([]byte(se.Msg), []byte("You have an error in your SQL syntax")) {
		t.Fatalf("got %#v", err)
	}
}

func FuzzParseRenderRoundTrip(f *testing.F) {
	for _, c := range loadRenderCases(f) {
		f.Add(c.Query)
	}
	if data, err := os.ReadFile("testdata/analyze.json"); err == nil {
		var cases []analyzeCase
		if json.Unmarshal(data, &cases) == nil {
			for _, c := range cases {
				f.Add(c.Query)
			}
		}
	}
	p := NewParser()
	f.Fuzz(func(t *testing.T, q string) {
		if CheckComments(q) != nil {
			return // refused before parsing, as the engine does
		}
		stmts, err := p.Parse(q)
		if err != nil {
			return
		}
		for _, s := range stmts {
			before, err := Restore(s)
			if err != nil {
				continue // restorer gaps (e.g. some literal kinds) are not ours
			}
			a, err := Analyze(s)
			if err != nil {
				continue
			}
			tpl, err := NewTemplate(a)
			if err != nil {
				t.Fatalf("NewTemplate(%q): %v", before, err)
			}
			sql := string(tpl.Render(nil, fakePhys))
			if after, _ := Restore(s); after != before {
				t.Fatalf("AST changed:\n%s\n%s", before, after)
			}
			if _, err := p.Parse(sql); err != nil {
				t.Fatalf("rendered SQL does not parse: %v\noriginal %s\nrendered %s", err, before, sql)
			}
		}
	})
}

const benchQuery = "SELECT seq,msg_id FROM conv_msg WHERE conv_id = 12345 AND seq < 100 ORDER BY seq DESC LIMIT 20"

func BenchmarkParseAnalyzeRender(b *testing.B) {
	b.ReportAllocs()
	p := NewParser()
	var buf []byte
	for b.Loop() {
		stmts, err := p.Parse(benchQuery)
		if err != nil {
			b.Fatal(err)
		}
		a, err := Analyze(stmts[0])
		if err != nil {
			b.Fatal(err)
		}
		tpl, err := NewTemplate(a)
		if err != nil {
			b.Fatal(err)
		}
		buf = tpl.Render(buf[:0], fakePhys)
	}
}

func BenchmarkRender(b *testing.B) {
	b.ReportAllocs()
	p := NewParser()
	stmts, err := p.Parse(benchQuery)
	if err != nil {
		b.Fatal(err)
	}
	a, err := Analyze(stmts[0])
	if err != nil {
		b.Fatal(err)
	}
	tpl, err := NewTemplate(a)
	if err != nil {
		b.Fatal(err)
	}
	phys := func(string) (string, string) { return "im_3", "conv_msg_0441" }
	buf := make([]byte, 0, 256)
	for b.Loop() {
		buf = tpl.Render(buf[:0], phys)
	}
}
