package integration

import (
	"encoding/json"
	"flag"
	"os"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/convoy-im/convoy/internal/golden"
	"github.com/convoy-im/convoy/proxy/planbuilder"
	"github.com/convoy-im/convoy/rewrite"
)

var updatePlans = flag.Bool("update-plans", false, "rewrite testdata/differential_plans.json with the plans built now")

// imColumns are schema/im.sql's columns, for the INSERTs without a column
// list (planbuilder.Schema).
type imColumns struct{}

func (imColumns) Columns(table string) ([]string, error) {
	switch table {
	case "msg_content":
		return []string{"msg_id", "conv_id", "sender_uid", "msg_type", "content", "created_at"}, nil
	case "conv_msg":
		return []string{"conv_id", "seq", "msg_id", "sender_uid", "msg_type", "created_at"}, nil
	case "im_conv_seq":
		return []string{"conv_id", "max_seq", "member_cnt"}, nil
	case "im_conv_member":
		return []string{"uid", "conv_id", "last_read_seq", "mute", "updated_at"}, nil
	case "im_inbox":
		return []string{"uid", "conv_id", "seq", "msg_id", "send_time"}, nil
	}
	return nil, &mysql.MyError{Code: mysql.ER_NO_SUCH_TABLE, State: "42S02", Message: "Table '" + table + "' doesn't exist"}
}

// TestDifferentialPlans: the plan of every statement the differential
// suite runs (TestDifferential compares their answers with MariaDB's), in
// testdata/differential_plans.json: a change to what Convoy does with one
// of them shows in that file's diff (-update-plans rewrites it). Planning
// needs no server.
func TestDifferentialPlans(t *testing.T) {
	type entry struct {
		Query string `json:"query"`
		Plan  string `json:"plan"`
	}
	var got []entry
	seen := map[string]bool{}
	for _, dc := range differentialCases() {
		if seen[dc.sql] {
			continue
		}
		seen[dc.sql] = true
		ctx := planbuilder.Context{Parser: rewrite.NewParser(), DB: "im", Hot: true, Cold: true, Search: true, Schema: imColumns{}}
		got = append(got, entry{Query: dc.sql, Plan: planbuilder.Describe(planbuilder.Build(dc.sql, ctx))})
	}
	const file = "testdata/differential_plans.json"
	if *updatePlans {
		golden.Write(t, file, got)
		return
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var want []entry
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	if len(want) != len(got) {
		t.Errorf("%d statements in %s, %d in the differential suite: run with -update-plans and review the diff", len(want), file, len(got))
	}
	for i := range min(len(want), len(got)) {
		if want[i] != got[i] {
			t.Errorf("statement %d:\nwant %+v\ngot  %+v", i, want[i], got[i])
		}
	}
}
