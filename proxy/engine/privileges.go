package engine

import (
	"fmt"
	"slices"
	"strings"

	"github.com/pingcap/tidb/pkg/parser/ast"

	"github.com/convoy-im/convoy/proxy/sqlerr"
	"github.com/convoy-im/convoy/rewrite"
	"github.com/convoy-im/convoy/router"
)

// Privileges are what a Convoy account may do (config users[].privileges).
// Convoy checks them itself: the datasources see one account for every
// client, so their grants cannot tell an application from a DBA.
type Privileges struct {
	Read  bool // SELECT, SHOW, DESCRIBE, EXPLAIN, history reads
	Write bool // INSERT, UPDATE, DELETE, REPLACE, CALL
	DDL   bool // CREATE / ALTER / DROP / TRUNCATE and other schema statements (fanned out to every shard)
	Admin bool // directives, account management, and DROP / TRUNCATE of a sharded table
	// Databases the account may use (USE, qualified names); nil: any.
	// information_schema is always readable, as on MariaDB.
	Databases []string
}

// PrivilegeNames are the names config files use.
var PrivilegeNames = []string{"read", "write", "ddl", "admin"}

// ParsePrivileges reads a config's privilege names. None given means read,
// write and ddl (what every account could do before privileges existed);
// admin is added when the account's admin flag is set.
func ParsePrivileges(names []string, admin bool, databases []string) (Privileges, error) {
	p := Privileges{Admin: admin, Databases: databases}
	if len(names) == 0 {
		p.Read, p.Write, p.DDL = true, true, true
	}
	for _, n := range names {
		switch strings.ToLower(n) {
		case "read":
			p.Read = true
		case "write":
			p.Write = true
		case "ddl":
			p.DDL = true
		case "admin":
			p.Admin = true
		case "all":
			p.Read, p.Write, p.DDL, p.Admin = true, true, true, true
		default:
			return p, fmt.Errorf("unknown privilege %q (want %s or all)", n, strings.Join(PrivilegeNames, ", "))
		}
	}
	return p, nil
}

// SetPrivileges sets what the session's account may do.
func (s *Session) SetPrivileges(p Privileges) {
	s.priv = p
}

// MayUseDatabase reports whether the account may use db. The datasources'
// own system databases (mysql: their accounts and password hashes; sys)
// are an admin's only, whatever the account's list: every Convoy session
// reaches the datasources as Convoy's backend account, whose grants are not
// the client's.
func (p Privileges) MayUseDatabase(db string) bool {
	switch {
	case strings.EqualFold(db, "information_schema"):
		return true
	case strings.EqualFold(db, "mysql") || strings.EqualFold(db, "sys"):
		return p.Admin
	case p.Databases == nil:
		return true
	}
	return slices.Contains(p.Databases, db)
}

// dbDenied is MariaDB's 1044 for db.
func (s *Session) dbDenied(db string) error {
	return sqlerr.Errorf(sqlerr.DBAccessDenied, "Access denied for user '%s'@'%s' to database '%s'", s.user, s.host, db)
}

// authorize checks pl against the session's privileges before anything
// runs. Statements that only touch the session (SET, USE, transaction
// control, comments) need none; USE checks the database in UseDB.
func (s *Session) authorize(pl *plan) error {
	need, command := requiredPrivilege(pl)
	p := s.priv
	ok := true
	switch need {
	case "read":
		ok = p.Read
	case "write":
		ok = p.Write
	case "ddl":
		ok = p.DDL
	case "admin":
		ok = p.Admin
	}
	if !ok {
		table := s.db
		if len(pl.A.Sharded) > 0 {
			table = pl.A.Sharded[0]
		} else if len(pl.A.Unsharded) > 0 {
			table = pl.A.Unsharded[0]
		}
		if need == "admin" {
			return sqlerr.Errorf(sqlerr.AccessDenied, "Access denied; you need the Convoy admin privilege for %s", command)
		}
		// MariaDB's 1142 text, then the Convoy privilege that grants it.
		return sqlerr.Errorf(sqlerr.TableAccessDenied, "%s command denied to user '%s'@'%s' for table `%s` (Convoy privilege %q)",
			command, s.user, s.host, table, need)
	}
	if need == "ddl" && destroysShardedTable(pl) && !p.Admin {
		return sqlerr.Errorf(sqlerr.AccessDenied, "Access denied; you need the Convoy admin privilege for %s of sharded table %s: it removes the rows of all %d shards",
			command, pl.A.Sharded[0], router.NumShards)
	}
	if !p.Admin {
		for _, t := range pl.A.Unsharded {
			if backendActivity(t, s.db) {
				return sqlerr.Errorf(sqlerr.AccessDenied, "Access denied; you need the Convoy admin privilege to read %s: it lists the datasources' own connections and their statements (SHOW PROCESSLIST and information_schema.PROCESSLIST list Convoy's)", t)
			}
		}
	}
	for _, t := range pl.A.Unsharded {
		if db, _, qualified := strings.Cut(t, "."); qualified && !p.MayUseDatabase(strings.Trim(db, "`")) {
			return s.dbDenied(strings.Trim(db, "`"))
		}
	}
	if r := pl.Routine; r != nil && r.Kind == rewrite.RoutineUnparsed && !p.Admin {
		// Without the statement's tree a qualifier may be a database or a
		// table's alias: the datasources' own databases are refused either
		// way, and so is any qualifier outside an account's databases.
		for _, q := range r.Qualifiers {
			switch {
			case slices.ContainsFunc([]string{"mysql", "sys", "performance_schema", "information_schema"}, func(db string) bool { return strings.EqualFold(q, db) }):
				return s.dbDenied(q)
			case !p.MayUseDatabase(q):
				return sqlerr.Errorf(sqlerr.NotSupported, "this statement's syntax is one Convoy's parser does not know, and it qualifies a name with %s.: Convoy cannot tell a database from a table's alias there, and this account may use only %s", q, strings.Join(p.Databases, ", "))
			}
		}
	}
	if st, ok := pl.A.Stmt.(*ast.ShowStmt); ok && st.DBName != "" && !p.MayUseDatabase(st.DBName) {
		return s.dbDenied(st.DBName) // SHOW TABLES / TABLE STATUS / ... FROM db
	}
	return nil
}

// backendActivity reports whether table (as written, db the current
// database) lists a datasource's connections or statements:
// performance_schema's threads and events. On a datasource every Convoy
// session is one account, so these show every session's statements: only
// an admin reads them (information_schema.PROCESSLIST is answered with
// Convoy's own connections instead, see processListSQL).
func backendActivity(table, db string) bool {
	schema, name, ok := strings.Cut(table, ".")
	if !ok {
		schema, name = db, table
	}
	if !strings.EqualFold(strings.Trim(schema, "`"), "performance_schema") {
		return false
	}
	name = strings.ToLower(strings.Trim(name, "`"))
	return name == "threads" || strings.HasPrefix(name, "events_") || name == "processlist" || strings.HasPrefix(name, "session_connect_attrs")
}

// requiredPrivilege names the privilege pl needs ("" for none) and the
// command as MariaDB's messages name it.
func requiredPrivilege(pl *plan) (need, command string) {
	if r := pl.Routine; r != nil {
		if r.Need != "" {
			return r.Need, r.What
		}
		switch r.Kind {
		case rewrite.RoutineCall:
			return "write", "EXECUTE"
		case rewrite.RoutineShow:
			return "read", "SHOW"
		}
		return "ddl", r.What
	}
	switch pl.A.Kind {
	case rewrite.KindSelect, rewrite.KindShow:
		return "read", "SELECT"
	case rewrite.KindInsert, rewrite.KindLoadData:
		return "write", "INSERT"
	case rewrite.KindUpdate:
		return "write", "UPDATE"
	case rewrite.KindDelete:
		return "write", "DELETE"
	case rewrite.KindDDL:
		return "ddl", ddlCommand(pl.A.Stmt)
	case rewrite.KindMaintenance:
		return "ddl", strings.ToUpper(pl.A.Maintenance.Op)
	case rewrite.KindOther:
		switch pl.A.Stmt.(type) {
		case *ast.ExplainStmt, *ast.DoStmt, *ast.LockTablesStmt, *ast.UnlockTablesStmt, *ast.KillStmt:
			return "read", "SELECT"
		case *ast.CreateUserStmt, *ast.AlterUserStmt, *ast.DropUserStmt, *ast.RenameUserStmt, *ast.GrantStmt,
			*ast.RevokeStmt, *ast.GrantRoleStmt, *ast.RevokeRoleStmt, *ast.SetPwdStmt:
			return "admin", "account management"
		default:
			return "ddl", "this statement"
		}
	}
	return "", ""
}

func ddlCommand(stmt ast.StmtNode) string {
	switch stmt.(type) {
	case *ast.CreateTableStmt:
		return "CREATE"
	case *ast.AlterTableStmt:
		return "ALTER"
	case *ast.DropTableStmt, *ast.TruncateTableStmt:
		return "DROP"
	case *ast.CreateIndexStmt, *ast.DropIndexStmt:
		return "INDEX"
	}
	return "ALTER"
}

// destroysShardedTable: DROP TABLE or TRUNCATE of a sharded logical table
// empties every shard's physical table at once.
func destroysShardedTable(pl *plan) bool {
	if len(pl.A.Sharded) == 0 {
		return false
	}
	switch pl.A.Stmt.(type) {
	case *ast.DropTableStmt, *ast.TruncateTableStmt:
		return true
	}
	return false
}
