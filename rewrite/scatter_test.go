package rewrite

import (
	"encoding/json"
	"testing"
)

type scatterCase struct {
	Comment  string          `json:"comment"`
	Query    string          `json:"query"`
	Template string          `json:"template,omitempty"`
	Merge    json.RawMessage `json:"merge,omitempty"`
	Error    string          `json:"error,omitempty"`
}

func runScatter(t *testing.T, p *Parser, c scatterCase) scatterCase {
	out := scatterCase{Comment: c.Comment, Query: c.Query}
	a, err := parseOne(t, p, c.Query)
	if err != nil {
		out.Error = err.Error()
		return out
	}
	sc, err := PlanScatter(a)
	if err != nil {
		out.Error = err.Error()
		return out
	}
	tpl, err := NewTemplate(a)
	if err != nil {
		out.Error = err.Error()
		return out
	}
	out.Template = tpl.String()
	// The rewritten statement must still parse.
	if _, err := p.Parse(string(tpl.Render(nil, func(l string) (string, string) { return "im_0", l + "_0000" }))); err != nil {
		t.Errorf("%s: rewritten scatter SQL does not parse: %v", c.Comment, err)
	}
	type view struct {
		*Scatter
		Having []map[string]any `json:",omitempty"`
	}
	v := view{Scatter: sc}
	for _, h := range sc.Having {
		v.Having = append(v.Having, map[string]any{"name": h.Name, "index": h.Index(), "op": h.Op, "value": h.Value})
	}
	b, _ := json.Marshal(v)
	out.Merge = b
	return out
}

// TestScatterGolden: how a SELECT that reads every shard is rewritten for
// the shards and described for the merge (testdata/scatter.json).
func TestScatterGolden(t *testing.T) {
	p := NewParser()
	golden(t, "testdata/scatter.json", func(c scatterCase) scatterCase { return runScatter(t, p, c) },
		func(c scatterCase) string { return c.Comment })
}
