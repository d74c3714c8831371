package proxy

import (
	"fmt"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/convoy-im/convoy/proxy/engine"
)

func TestErrorMapComplete(t *testing.T) {
	for _, c := range engine.AllCodes() {
		m, ok := codes[c]
		if !ok {
			t.Errorf("engine code %d has no MySQL errno", c)
			continue
		}
		if m.errno < 1000 || len(m.state) != 5 {
			t.Errorf("engine code %d maps to errno %d state %q", c, m.errno, m.state)
		}
		if strings.HasPrefix(c.String(), "code(") {
			t.Errorf("engine code %d has no name for the log", c)
		}
	}
}

func TestToMySQL(t *testing.T) {
	backend := &mysql.MyError{Code: 1146, State: "42S02", Message: "Table 'x' doesn't exist"}
	if got := toMySQL(fmt.Errorf("wrapped: %w", backend)); got != backend {
		t.Errorf("backend error not passed through: %v", got)
	}
	got := toMySQL(&engine.Error{Code: engine.CodeSyntax, Msg: "bad"})
	if got.Code != 1064 || got.State != "42000" || got.Message != "bad" {
		t.Errorf("syntax error mapped to %+v", got)
	}
	if got := toMySQL(&engine.Error{Code: engine.CodeStatementTimeout, Msg: "slow"}); got.Code != 1969 || got.State != "70100" {
		t.Errorf("statement timeout mapped to %+v, want MariaDB's ER_STATEMENT_TIMEOUT", got)
	}
	if got := toMySQL(fmt.Errorf("plain")); got.Code != 1105 {
		t.Errorf("plain error mapped to %d", got.Code)
	}
}
