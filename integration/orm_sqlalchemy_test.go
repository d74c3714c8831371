package integration

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

// TestSQLAlchemy runs testdata/clients/sqlalchemy_orm.py (SQLAlchemy 1.4
// over PyMySQL, Debian python3-sqlalchemy and python3-pymysql) against the
// reference MariaDB and through Convoy and requires the same result from
// every step: reflection (inspect(), autoload), metadata.create_all() on the
// existing sharded tables (no DDL) and a new unsharded table, ORM session
// commit, and rollback, by the session, by Core and by plain PyMySQL, which
// must leave exactly what MariaDB leaves.
func TestSQLAlchemy(t *testing.T) {
	s := newStack(t)
	want := sqlalchemyProgram(t, s.ref.Addr(), "root", "")
	got := sqlalchemyProgram(t, s.convoy.addr, "convoy", "convoy")
	compareORMSteps(t, "SQLAlchemy", want, got)
}

// sqlalchemyProgram runs the script against addr and returns its steps.
func sqlalchemyProgram(t *testing.T, addr, user, pass string) []ormStep {
	t.Helper()
	h, p := hostPort(t, addr)
	// /usr/bin/python3: the Debian interpreter that has the Debian packages
	// (a python3 earlier on PATH may be another installation).
	out := runClient(t, exec.Command("/usr/bin/python3", "testdata/clients/sqlalchemy_orm.py", h, p, user, pass), "python3-sqlalchemy python3-pymysql")
	var steps []ormStep
	for _, line := range strings.Split(out, "\n") {
		var st struct {
			Step   string   `json:"step"`
			Result string   `json:"result"`
			SQL    []string `json:"sql"`
		}
		if err := json.Unmarshal([]byte(line), &st); err != nil {
			t.Fatalf("sqlalchemy_orm.py against %s printed a line that is not a step (%v):\n%s", addr, err, out)
		}
		steps = append(steps, ormStep{name: st.Step, result: st.Result, detail: st.SQL})
	}
	return steps
}
