package engine

import (
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/pingcap/tidb/pkg/parser/ast"

	"github.com/convoy-im/convoy/internal/sqlq"
	"github.com/convoy-im/convoy/proxy/mysqlrow"
	"github.com/convoy-im/convoy/proxy/sqlerr"
)

// SHOW GRANTS answers with the Convoy account's privileges in MariaDB's
// words (tools such as phpMyAdmin and Workbench decide what to offer from
// it; before, it was the datasources' grants of Convoy's backend account).
// Accounts are `name`@`%`: Convoy matches users by name only.

// Accounts looks an account's privileges up by name (the front end's
// users); false for a name no account has.
type Accounts func(name string) (Privileges, bool)

// SetAccounts gives the engine the accounts SHOW GRANTS FOR reads.
func (e *Engine) SetAccounts(a Accounts) { e.accounts = a }

// mariadbPrivileges are the MariaDB privileges each Convoy privilege
// stands for, in the order SHOW GRANTS lists them.
var mariadbPrivileges = []struct {
	name string
	has  func(Privileges) bool
}{
	{"SELECT", func(p Privileges) bool { return p.Read }},
	{"INSERT", func(p Privileges) bool { return p.Write }},
	{"UPDATE", func(p Privileges) bool { return p.Write }},
	{"DELETE", func(p Privileges) bool { return p.Write }},
	{"CREATE", func(p Privileges) bool { return p.DDL }},
	{"DROP", func(p Privileges) bool { return p.DDL }},
	{"INDEX", func(p Privileges) bool { return p.DDL }},
	{"ALTER", func(p Privileges) bool { return p.DDL }},
	{"CREATE TEMPORARY TABLES", func(p Privileges) bool { return p.DDL }},
	{"EXECUTE", func(p Privileges) bool { return p.Write }},
	{"CREATE VIEW", func(p Privileges) bool { return p.DDL }},
	{"SHOW VIEW", func(p Privileges) bool { return p.Read }},
	{"CREATE ROUTINE", func(p Privileges) bool { return p.DDL }},
	{"ALTER ROUTINE", func(p Privileges) bool { return p.DDL }},
	{"EVENT", func(p Privileges) bool { return p.DDL }},
	{"TRIGGER", func(p Privileges) bool { return p.DDL }},
}

// grantLines are the rows of SHOW GRANTS for account name with p.
func grantLines(name string, p Privileges) []string {
	to := " TO " + sqlq.Ident(name) + "@`%`"
	if p.Read && p.Write && p.DDL && p.Admin && p.Databases == nil {
		return []string{"GRANT ALL PRIVILEGES ON *.*" + to + " WITH GRANT OPTION"}
	}
	var list []string
	for _, m := range mariadbPrivileges {
		if m.has(p) {
			list = append(list, m.name)
		}
	}
	var global []string // what applies to the whole proxy
	if p.Admin {
		global = []string{"PROCESS", "CREATE USER"} // every connection in SHOW PROCESSLIST, account statements
	}
	if p.Databases == nil {
		global = append(list[:len(list):len(list)], global...)
	}
	line := func(privs []string, on string) string {
		if len(privs) == 0 {
			privs = []string{"USAGE"}
		}
		return "GRANT " + strings.Join(privs, ", ") + " ON " + on + to
	}
	out := []string{line(global, "*.*")}
	if p.Admin {
		out[0] += " WITH GRANT OPTION"
	}
	if p.Databases != nil && len(list) > 0 {
		for _, db := range p.Databases {
			out = append(out, line(list, sqlq.Ident(db)+".*"))
		}
	}
	return out
}

// showGrants answers SHOW GRANTS [FOR CURRENT_USER[()] | FOR user[@host]]:
// the session's own account, another's for an admin only (MariaDB wants
// SELECT on the mysql database: 1044 otherwise).
func (s *Session) showGrants(pl *plan, binary bool) (*mysql.Result, error) {
	st := pl.A.Stmt.(*ast.ShowStmt) // planbuilder.OpShowGrants
	s.e.metrics.countStatement("session")
	name, p := s.user, s.priv
	if u := st.User; u != nil && !u.CurrentUser && u.Username != s.user {
		if !s.priv.Admin {
			return nil, sqlerr.Errorf(sqlerr.DBAccessDenied, "Access denied for user '%s'@'%s' to database 'mysql'", s.user, s.host)
		}
		var known bool
		if s.e.accounts != nil {
			p, known = s.e.accounts(u.Username)
		}
		if !known || u.Hostname != "" && u.Hostname != "%" {
			host := u.Hostname
			if host == "" {
				host = "%"
			}
			return nil, &mysql.MyError{Code: mysql.ER_NONEXISTING_GRANT, State: "42000",
				Message: "There is no such grant defined for user '" + u.Username + "' on host '" + host + "'"}
		}
		name = u.Username
	}
	rs := &mysql.Resultset{Fields: []*mysql.Field{{Name: []byte("Grants for " + name + "@%"), Type: mysql.MYSQL_TYPE_VAR_STRING,
		Charset: 45, ColumnLength: 4096, Flag: mysql.NOT_NULL_FLAG, Decimal: 39}}}
	for _, l := range grantLines(name, p) {
		rs.RowDatas = append(rs.RowDatas, mysqlrow.TextRow([][]byte{[]byte(l)}))
	}
	if binary && !mysqlrow.TextToBinary(rs) {
		return nil, sqlerr.Errorf(sqlerr.Internal, "[BUG] SHOW GRANTS rows could not be encoded for the binary protocol")
	}
	return &mysql.Result{Resultset: rs}, nil
}
