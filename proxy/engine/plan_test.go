package engine

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/convoy-im/convoy/proxy/sqlerr"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/plans.json with the plans built now")

// planCase is one golden plan of testdata/plans.json: what the engine
// decides for a statement, without running it. Inputs are Comment, Query,
// DB (the session's database; "im" if empty) and NoTiers (the hot tier,
// the cold tier and search off; on otherwise); Plan (plan.String, or the
// error the statement gets at planning) and Sends (the statement each
// shard's physical tables get, {table} standing for them) are the output.
type planCase struct {
	Comment string `json:"comment"`
	Query   string `json:"query"`
	DB      string `json:"db,omitempty"`
	NoTiers bool   `json:"no_tiers,omitempty"`
	Plan    string `json:"plan"`
	Sends   string `json:"sends,omitempty"`
}

func buildCase(c planCase) planCase {
	rec := &recorder{cols: 6}
	e := New(rec, staticRoutes{defaultSnapshot()}, nil, nil, Options{})
	if !c.NoTiers {
		// Planning asks the tiers nothing: whether each is on is all it
		// needs to know.
		e.SetHotTier(nil, 0)
		e.SetColdTier(nil, ColdOptions{})
		e.SetSearch(nil, SearchOptions{})
	}
	db := c.DB
	if db == "" {
		db = "im"
	}
	s := e.NewSession(db)
	out := planCase{Comment: c.Comment, Query: c.Query, DB: c.DB, NoTiers: c.NoTiers}
	pl, err := s.plan(c.Query)
	if err != nil {
		var me *mysql.MyError
		var ee *sqlerr.Error
		switch {
		case errors.As(err, &ee):
			out.Plan = fmt.Sprintf("error %s: %s", ee.Code, ee.Msg)
		case errors.As(err, &me):
			out.Plan = fmt.Sprintf("error %d: %s", me.Code, me.Message)
		default:
			out.Plan = "error: " + err.Error()
		}
		return out
	}
	out.Plan = pl.String()
	if pl.Tmpl != nil {
		out.Sends = pl.Tmpl.String()
	}
	return out
}

// TestGoldenPlans: a change to routing shows in the diff of
// testdata/plans.json (go test ./proxy/engine -run TestGoldenPlans -update
// rewrites it; review the diff).
func TestGoldenPlans(t *testing.T) {
	const file = "testdata/plans.json"
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var cases []planCase
	if err := json.Unmarshal(raw, &cases); err != nil {
		t.Fatal(err)
	}
	if len(cases) == 0 {
		t.Fatal("no golden plans")
	}
	seen := map[op]bool{}
	var got []planCase
	for _, c := range cases {
		g := buildCase(c)
		got = append(got, g)
		if g != c && !*updateGolden {
			want, _ := json.MarshalIndent(c, "", "  ")
			have, _ := json.MarshalIndent(g, "", "  ")
			t.Errorf("%s:\nwant %s\ngot  %s", c.Comment, want, have)
		}
		for o := range opNames {
			if len(g.Plan) >= len(opNames[o]) && g.Plan[:len(opNames[o])] == opNames[o] &&
				(len(g.Plan) == len(opNames[o]) || g.Plan[len(opNames[o])] == ' ') {
				seen[op(o)] = true
			}
		}
	}
	for o := range opNames {
		if !seen[op(o)] {
			t.Errorf("no golden plan has op %s: add a statement that gets it", op(o))
		}
	}
	if *updateGolden {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		if err := enc.Encode(got); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
