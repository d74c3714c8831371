package integration

import (
	"strings"
	"testing"
)

// The ORM tests (TestGORM, TestSQLAlchemy) run one application program
// against the reference MariaDB and through Convoy and compare what each
// step showed (docs/sql-reference.md: "Prove it with real ORMs in the test suite").

// ormStep is one step of an ORM program and what it showed: the compared
// result, and (not compared) the statements the step sent and the full
// error text, for the report.
type ormStep struct {
	name, result string
	detail       []string
}

// compareORMSteps requires the same result from every step and reports
// each differing one with what Convoy was sent. Later steps read back what
// earlier ones wrote, so one wrong statement can make several steps differ:
// the first differing step is the one to look at.
func compareORMSteps(t *testing.T, orm string, want, got []ormStep) {
	t.Helper()
	if len(want) != len(got) {
		t.Fatalf("%s program ran %d steps on MariaDB, %d through Convoy", orm, len(want), len(got))
	}
	same := 0
	for i := range want {
		w, g := want[i], got[i]
		if w.name != g.name {
			t.Fatalf("%s step %d is %q on MariaDB, %q through Convoy", orm, i, w.name, g.name)
		}
		if w.result == g.result {
			same++
			continue
		}
		var sent []string
		for _, d := range g.detail {
			if d = strings.Join(strings.Fields(d), " "); len(d) > 400 {
				d = d[:400] + "..."
			}
			sent = append(sent, d)
		}
		t.Errorf("%s step %q differs\n  mariadb: %s\n  convoy:  %s\n  sent through convoy:\n    %s", orm, w.name, w.result, g.result, strings.Join(sent, "\n    "))
	}
	t.Logf("%s: %d of %d steps agree", orm, same, len(want))
}
