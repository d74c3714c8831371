package planbuilder

import (
	"encoding/json"
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/convoy-im/convoy/internal/golden"
	"github.com/convoy-im/convoy/rewrite"
)

var update = flag.Bool("update", false, "rewrite testdata/plans.json with the plans built now")

// planCase is one golden plan of testdata/plans.json: what Convoy decides
// for a statement, without running it. Inputs are Comment, Query, DB (the
// session's database; "im" if empty) and NoTiers (the hot tier, the cold
// tier and search off; on otherwise); Plan (Plan.String, or the error the
// statement gets at planning) and Sends (the statement each shard's
// physical tables get, {table} standing for them) are the output.
type planCase struct {
	Comment string `json:"comment"`
	Query   string `json:"query"`
	DB      string `json:"db,omitempty"`
	NoTiers bool   `json:"no_tiers,omitempty"`
	Plan    string `json:"plan"`
	Sends   string `json:"sends,omitempty"`
}

// testSchema is schema/im.sql's columns of two tables, for INSERTs
// without a column list.
type testSchema struct{}

func (testSchema) Columns(table string) ([]string, error) {
	switch table {
	case "im_inbox":
		return []string{"uid", "conv_id", "seq", "msg_id", "send_time"}, nil
	case "conv_msg":
		return []string{"conv_id", "seq", "msg_id", "sender_uid", "msg_type", "created_at"}, nil
	}
	return nil, &mysql.MyError{Code: mysql.ER_NO_SUCH_TABLE, State: "42S02", Message: "Table '" + table + "' doesn't exist"}
}

func buildCase(c planCase) planCase {
	ctx := Context{Parser: rewrite.NewParser(), DB: c.DB, Schema: testSchema{}, Hot: !c.NoTiers, Cold: !c.NoTiers, Search: !c.NoTiers}
	if ctx.DB == "" {
		ctx.DB = "im"
	}
	out := planCase{Comment: c.Comment, Query: c.Query, DB: c.DB, NoTiers: c.NoTiers}
	pl, err := Build(c.Query, ctx)
	out.Plan = Describe(pl, err)
	if err == nil && pl.Tmpl != nil {
		out.Sends = pl.Tmpl.String()
	}
	return out
}

// TestGoldenPlans: a change to routing shows in the diff of
// testdata/plans.json (go test ./proxy/planbuilder -update rewrites it;
// review the diff). Every op has a statement that gets it.
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
	seen := map[string]bool{}
	var got []planCase
	for _, c := range cases {
		g := buildCase(c)
		got = append(got, g)
		if g != c && !*update {
			want, _ := json.MarshalIndent(c, "", "  ")
			have, _ := json.MarshalIndent(g, "", "  ")
			t.Errorf("%s:\nwant %s\ngot  %s", c.Comment, want, have)
		}
		op, _, _ := strings.Cut(g.Plan, " ")
		seen[op] = true
	}
	for o := Op(0); !strings.HasPrefix(o.String(), "op("); o++ {
		if !seen[o.String()] {
			t.Errorf("no golden plan has op %s: add a statement that gets it", o)
		}
	}
	if *update {
		golden.Write(t, file, got)
	}
}

// A plan that runs with the session's values is a new plan: the one built
// is not changed, and a history read becomes a read of MySQL.
func TestWithSessionValues(t *testing.T) {
	ctx := Context{Parser: rewrite.NewParser(), DB: "im", Hot: true}
	pl, err := Build("SELECT seq, msg_id FROM conv_msg WHERE conv_id = ? AND seq < ? ORDER BY seq DESC LIMIT 20", ctx)
	if err != nil {
		t.Fatal(err)
	}
	if pl.Op != OpHistory {
		t.Fatalf("op %s, want History", pl.Op)
	}
	before := pl.String()
	c, err := pl.WithSessionValues(func(rewrite.SessionRef) rewrite.SessionValue { return rewrite.SessionValue{Keep: true} })
	if err != nil {
		t.Fatal(err)
	}
	if c == pl || c.Op != OpRoute || c.Hist != nil || pl.String() != before || pl.Hist == nil {
		t.Fatalf("session plan %s (built %s, now %s)", c, before, pl)
	}
}
