package sqlerr

import (
	"fmt"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
)

func TestEveryCodeMapped(t *testing.T) {
	for c := Code(0); c < codeCount; c++ {
		m := codes[c]
		if m.errno < 1000 || len(m.state) != 5 {
			t.Errorf("code %d maps to errno %d state %q", c, m.errno, m.state)
		}
		if strings.HasPrefix(c.String(), "code(") {
			t.Errorf("code %d has no name for the log", c)
		}
	}
}

func TestToMySQL(t *testing.T) {
	backend := &mysql.MyError{Code: 1146, State: "42S02", Message: "Table 'x' doesn't exist"}
	if got := ToMySQL(fmt.Errorf("wrapped: %w", backend)); got != backend {
		t.Errorf("backend error not passed through: %v", got)
	}
	got := ToMySQL(Errorf(Syntax, "bad %s", "x"))
	if got.Code != 1064 || got.State != "42000" || got.Message != "bad x" {
		t.Errorf("syntax error mapped to %+v", got)
	}
	if got := ToMySQL(&Error{Code: StatementTimeout, Msg: "slow"}); got.Code != 1969 || got.State != "70100" {
		t.Errorf("statement timeout mapped to %+v, want MariaDB's ER_STATEMENT_TIMEOUT", got)
	}
	if got := ToMySQL(&Error{Code: TxnRolledBack, Msg: "moved"}); got.Code != 1213 || got.State != "40001" {
		t.Errorf("a migration's rollback mapped to %+v, want the deadlock error ORMs retry", got)
	}
	if got := ToMySQL(&Error{Code: codeCount + 3, Msg: "?"}); got.Code != 1105 {
		t.Errorf("an unknown code mapped to %d", got.Code)
	}
	if got := ToMySQL(fmt.Errorf("plain")); got.Code != 1105 {
		t.Errorf("plain error mapped to %d", got.Code)
	}
	if ToMySQL(nil) != nil {
		t.Error("nil mapped to an error")
	}
	if !Is(Errorf(ShardHeld, "x"), ShardHeld) || Is(fmt.Errorf("w: %w", Errorf(ShardHeld, "x")), ShardHeld) || Is(nil, Internal) {
		t.Error("Is")
	}
}
