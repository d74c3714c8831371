package rewrite

import (
	"fmt"
	"slices"
	"strings"

	"github.com/convoy-im/convoy/internal/sqltext"
	"github.com/convoy-im/convoy/router"
)

// The parser knows neither routine bodies (BEGIN ... END with DECLARE,
// SIGNAL, handlers, loops) nor most routine statements, so they are
// recognised here from their leading keywords, checked on their tokens, and
// sent to the default datasource byte for byte. A stored routine, trigger or
// event runs inside one MariaDB server: it cannot see the 1024 shards, so
// one that names a sharded table is refused, and so is dynamic SQL, whose
// tables nobody can see before it runs.

// RoutineKind says how a routine statement runs.
type RoutineKind int

const (
	// RoutineDefine is CREATE / ALTER of a procedure, function, trigger or
	// event: stored code, checked here, and an implicit commit.
	RoutineDefine RoutineKind = iota + 1
	// RoutineDrop is DROP PROCEDURE / FUNCTION / TRIGGER / EVENT: an
	// implicit commit.
	RoutineDrop
	// RoutineCall runs stored code now: CALL, or an anonymous compound
	// statement (BEGIN NOT ATOMIC ... END, IF ... END IF, a loop). It may
	// answer with several result sets before its final OK.
	RoutineCall
	// RoutineShow reads routine metadata (SHOW CREATE PROCEDURE, SHOW
	// PROCEDURE STATUS, SHOW TRIGGERS, ...).
	RoutineShow
	// RoutineUnparsed is a statement of MariaDB's the parser does not know
	// (ClassifyUnparsed): a read, a write or DDL on unsharded tables, run
	// byte for byte like a CALL.
	RoutineUnparsed
)

// Routine is a routine statement found by ClassifyRoutine.
type Routine struct {
	Kind RoutineKind
	// What names the statement for messages: "CREATE PROCEDURE", "CALL", ...
	What string
	// Body: the statement carries code of its own (CREATE / ALTER of stored
	// code, a compound statement), which may hold ';' and so is never split
	// from the statements after it.
	Body bool
	// Params counts the `?` placeholders.
	Params int
	// UserVars are the user variables the statement names (lower-case,
	// plain names only), for RoutineCall: after it runs they are read back,
	// so `CALL p(@out); SELECT @out` sees the OUT value.
	UserVars []string
	// Need is the privilege a RoutineUnparsed statement needs: "read",
	// "write", "ddl" or "admin" (and "admin" for a CREATE FUNCTION ...
	// SONAME); Qualifiers are the names it qualifies
	// others with (`x` of x.y: a database, or a table's alias), checked
	// against the account's databases.
	Need       string
	Qualifiers []string
}

// maxReadBack bounds the user variables read back after one CALL.
const maxReadBack = 64

// ClassifyRoutine recognises a routine statement by its leading keywords
// (comments skipped, executable comments read as SQL, as MariaDB does). It
// returns nil, nil for any other statement. A routine statement that may
// touch a sharded table (one of router.ShardedTables() among its names,
// compared case-sensitively as MariaDB compares table names) or runs
// dynamic SQL (PREPARE / EXECUTE) is refused with an *UnsupportedError.
// CheckComments must have accepted sql.
func ClassifyRoutine(sql string) (*Routine, error) {
	sc := sqltext.New(sql)
	r := leadingRoutine(sc)
	if r == nil {
		return nil, nil
	}
	checkCode := r.Kind == RoutineDefine || r.Kind == RoutineCall
	seen := map[string]bool{}
	for t := sc.Code(); t.Kind != sqltext.End; t = sc.Code() {
		switch t.Kind {
		case sqltext.Param:
			r.Params++
		case sqltext.Var:
			v, system := sqltext.VarName(t)
			if name := strings.ToLower(v); !system && r.Kind == RoutineCall && plainVar(name) && !seen[name] && len(r.UserVars) < maxReadBack {
				seen[name] = true
				r.UserVars = append(r.UserVars, name)
			}
		case sqltext.Word, sqltext.Name:
			if !checkCode {
				continue
			}
			if n := name(t); isShardedTable(n) {
				return nil, unsupported("%s naming the sharded table %s is not supported through Convoy: stored code runs inside one MariaDB server, which cannot see the table's 1024 shards; run the statements from the application", r.What, n)
			}
			if t.Is("PREPARE") || t.Is("EXECUTE") {
				return nil, unsupported("%s with dynamic SQL (PREPARE / EXECUTE) is not supported through Convoy: nobody can see which tables it would touch, and stored code cannot see the sharded tables", r.What)
			}
			if r.Kind == RoutineDefine && t.Is("SONAME") {
				r.Need = "admin" // a UDF: a shared library loaded into the datasource
			}
		}
	}
	return r, nil
}

// plainVar: a user variable name SET @name = ... can name without quotes.
func plainVar(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		if !sqltext.IsNameByte(name[i]) || name[i] >= 0x80 {
			return false
		}
	}
	return true
}

// storedObjects are what CREATE / ALTER / DROP / SHOW CREATE name here.
var storedObjects = map[string]bool{"PROCEDURE": true, "FUNCTION": true, "TRIGGER": true, "EVENT": true}

// compoundStarts are the statements that begin an anonymous compound
// statement (MariaDB runs them outside stored programs too).
var compoundStarts = map[string]bool{"IF": true, "CASE": true, "LOOP": true, "WHILE": true, "REPEAT": true, "FOR": true}

// leadingRoutine reads the leading keywords of a statement; nil when it is
// not a routine statement.
func leadingRoutine(sc *sqltext.Scanner) *Routine {
	first := sc.Code()
	if first.Kind != sqltext.Word {
		return nil
	}
	w := strings.ToUpper(first.Text)
	switch w {
	case "CREATE", "ALTER":
		t := sc.Code()
		if w == "CREATE" && t.Is("OR") {
			if !sc.Code().Is("REPLACE") {
				return nil
			}
			t = sc.Code()
		}
		if t.Is("DEFINER") {
			if !sc.Code().IsPunct('=') || !skipUser(sc) {
				return nil
			}
			t = sc.Code()
		}
		if w == "CREATE" && t.Is("AGGREGATE") {
			t = sc.Code()
		}
		obj := strings.ToUpper(t.Text)
		if t.Kind != sqltext.Word || !storedObjects[obj] || w == "ALTER" && obj == "TRIGGER" {
			return nil
		}
		return &Routine{Kind: RoutineDefine, What: w + " " + obj, Body: true}
	case "DROP":
		t := sc.Code()
		if obj := strings.ToUpper(t.Text); t.Kind == sqltext.Word && storedObjects[obj] {
			return &Routine{Kind: RoutineDrop, What: "DROP " + obj}
		}
	case "CALL":
		return &Routine{Kind: RoutineCall, What: "CALL"}
	case "SHOW":
		t := sc.Code()
		switch u := strings.ToUpper(t.Text); {
		case t.Kind != sqltext.Word:
		case u == "CREATE":
			if t2 := sc.Code(); t2.Kind == sqltext.Word && storedObjects[strings.ToUpper(t2.Text)] {
				return &Routine{Kind: RoutineShow, What: "SHOW CREATE " + strings.ToUpper(t2.Text)}
			}
		case u == "PROCEDURE" || u == "FUNCTION":
			if t2 := sc.Code(); t2.Is("STATUS") || t2.Is("CODE") {
				return &Routine{Kind: RoutineShow, What: "SHOW " + u + " " + strings.ToUpper(t2.Text)}
			}
		case u == "TRIGGERS" || u == "EVENTS":
			return &Routine{Kind: RoutineShow, What: "SHOW " + u}
		}
	case "BEGIN":
		if sc.Code().Is("NOT") && sc.Code().Is("ATOMIC") {
			return &Routine{Kind: RoutineCall, What: "BEGIN NOT ATOMIC", Body: true}
		}
	default:
		if compoundStarts[w] {
			return &Routine{Kind: RoutineCall, What: w, Body: true}
		}
		// label: BEGIN NOT ATOMIC / LOOP / WHILE / REPEAT / FOR
		if !sc.Code().IsPunct(':') {
			return nil
		}
		t := sc.Code()
		switch u := strings.ToUpper(t.Text); {
		case t.Kind != sqltext.Word:
		case u == "BEGIN":
			if sc.Code().Is("NOT") && sc.Code().Is("ATOMIC") {
				return &Routine{Kind: RoutineCall, What: "BEGIN NOT ATOMIC", Body: true}
			}
		case u == "LOOP" || u == "WHILE" || u == "REPEAT" || u == "FOR":
			return &Routine{Kind: RoutineCall, What: u, Body: true}
		}
	}
	return nil
}

// SplitRoutines cuts a multi-statement query that holds a routine statement
// into its statements' texts. The parser cannot split such a text (it does
// not know routine bodies), so statements are cut at each ';' outside
// quotes and comments, except that a statement with a body (CREATE
// PROCEDURE ... BEGIN ...; ...; END) runs to the end of the text: where its
// body ends only MariaDB's grammar knows, and a body cut short would run
// its inner statements on their own. The server then refuses the text if
// more follows the body (nothing runs). ok is false when no statement of
// sql is a routine statement (the parser splits it as before).
func SplitRoutines(sql string) (parts []string, ok bool) {
	start := 0
	for start < len(sql) {
		sc := sqltext.New(sql)
		sc.Seek(start)
		r := leadingRoutine(sc)
		if r != nil {
			ok = true
			if r.Body {
				return append(parts, sql[start:]), true
			}
		}
		end := statementEnd(sql, start)
		if stmt := sql[start:end]; !onlyBlank(stmt) {
			parts = append(parts, stmt)
		}
		start = end + 1
	}
	return parts, ok
}

// statementEnd returns the index of the first ';' from start that is
// outside quotes and comments (len(sql) when there is none).
func statementEnd(sql string, start int) int {
	sc := sqltext.New(sql)
	sc.Seek(start)
	for {
		t := sc.Code()
		if t.Kind == sqltext.End {
			return len(sql)
		}
		if t.IsPunct(';') && !sc.InExec() {
			return t.Pos
		}
	}
}

// OneStatement reports whether sql holds at most one statement: no ';'
// outside quotes and comments (inside executable comments included) is
// followed by more SQL. A text of one statement and trailing semicolons
// needs no splitting.
func OneStatement(sql string) bool {
	sc := sqltext.New(sql)
	semi := false
	for t := sc.Code(); t.Kind != sqltext.End; t = sc.Code() {
		switch {
		case t.IsPunct(';'):
			semi = true
		case semi:
			return false
		}
	}
	return true
}

// onlyBlank: no token at all (blanks and comments).
func onlyBlank(s string) bool {
	return sqltext.New(s).Code().Kind == sqltext.End
}

// name is the name a word or a backquoted name spells.
func name(t sqltext.Token) string {
	if t.Kind != sqltext.Name {
		return t.Text
	}
	n := t.Text[1:]
	if !t.Open() {
		n = n[:len(n)-1]
	}
	return strings.ReplaceAll(n, "``", "`")
}

func isShardedTable(name string) bool {
	_, sharded := router.ShardKeyColumn(name)
	return sharded
}

// skipUser reads the account of a DEFINER clause: user[@host] (names bare,
// quoted or backquoted), CURRENT_USER[()] or a role name.
func skipUser(sc *sqltext.Scanner) bool {
	t := sc.Code()
	switch t.Kind {
	case sqltext.Word, sqltext.Name, sqltext.String:
	default:
		return false
	}
	save := *sc
	switch n := sc.Code(); {
	case n.Kind == sqltext.Var: // @host
	case n.IsPunct('(') && (t.Is("CURRENT_USER") || t.Is("CURRENT_ROLE")):
		if !sc.Code().IsPunct(')') {
			return false
		}
	default:
		*sc = save
	}
	return true
}

// unparsedNeeds are the leading keywords of the statements the parser does
// not know that Convoy passes on (ClassifyUnparsed), with the privilege
// each needs. Statements that change the session (SET, USE, LOCK, ...) or
// the server (GRANT, FLUSH, ...) are not among them: on a pooled
// connection they would reach whichever session runs there next.
var unparsedNeeds = map[string]string{
	"SELECT": "read", "WITH": "read", "VALUES": "read", "TABLE": "read",
	"SHOW": "admin", // (SHOW BINLOG EVENTS, SHOW SLAVE STATUS: the server's, every shard's data)
	"DESC": "read", "DESCRIBE": "read", "EXPLAIN": "read",
	"INSERT": "write", "UPDATE": "write", "DELETE": "write", "REPLACE": "write",
	"CREATE": "ddl", "ALTER": "ddl", "DROP": "ddl", "RENAME": "ddl", "TRUNCATE": "ddl",
}

// unparsedAdmin are words that make a DDL statement the server's business.
var unparsedAdmin = map[string]bool{"USER": true, "ROLE": true, "SERVER": true, "PLUGIN": true, "SONAME": true}

// unparsedSession are words whose statement keeps state in the session
// that runs it (named locks, LAST_INSERT_ID, temporary tables) or reads or
// writes the server's files: Convoy follows them only in statements it
// parses.
var unparsedSession = map[string]bool{
	"GET_LOCK": true, "RELEASE_LOCK": true, "RELEASE_ALL_LOCKS": true, "IS_FREE_LOCK": true, "IS_USED_LOCK": true,
	"LAST_INSERT_ID": true, "TEMPORARY": true, "LOAD_FILE": true, "OUTFILE": true, "DUMPFILE": true,
}

// ClassifyUnparsed recognises a statement the parser refused that Convoy
// may still run: MariaDB syntax the TiDB parser does not know (system
// versioning's FOR SYSTEM_TIME, DELETE HISTORY, ...) in a read, a write or
// a DDL statement (unparsedNeeds) that names no sharded table. It runs
// byte for byte on the default datasource, where MariaDB reads it and
// answers with its own error if it is not SQL after all. nil: the
// parser's syntax error stands, as for a statement naming a sharded table
// (Convoy could not route it), or doing what Convoy follows only in
// statements it parses (named locks, := assignments, LAST_INSERT_ID,
// temporary tables, the server's files): Convoy cannot tell MariaDB syntax
// from a typo there, and a typo must get MariaDB's 1064. CheckComments
// must have accepted sql.
func ClassifyUnparsed(sql string) *Routine {
	sc := sqltext.New(sql)
	first := sc.Code()
	need, ok := unparsedNeeds[strings.ToUpper(first.Text)]
	if first.Kind != sqltext.Word || !ok {
		return nil
	}
	r := &Routine{Kind: RoutineUnparsed, What: strings.ToUpper(first.Text), Need: need}
	var prev sqltext.Token
	for t := sc.Code(); t.Kind != sqltext.End; prev, t = t, sc.Code() {
		if q := name(prev); t.IsPunct('.') && (prev.Kind == sqltext.Word || prev.Kind == sqltext.Name) && !slices.Contains(r.Qualifiers, q) {
			r.Qualifiers = append(r.Qualifiers, q)
		}
		switch t.Kind {
		case sqltext.Param:
			r.Params++
		case sqltext.Punct:
			if t.Text == ":" && strings.HasPrefix(sql[t.Pos:], ":=") {
				return nil
			}
		case sqltext.Word, sqltext.Name:
			if isShardedTable(name(t)) {
				return nil
			}
			if t.Kind != sqltext.Word {
				continue
			}
			u := strings.ToUpper(t.Text)
			if unparsedSession[u] {
				return nil
			}
			if (u == "NEXTVAL" || u == "SETVAL" || u == "NEXT") && r.Need == "read" {
				r.Need = "write" // a sequence's next value changes it
			}
			if unparsedAdmin[u] && r.Need == "ddl" {
				r.Need = "admin" // accounts, servers, plugins, shared libraries: the server's, not a schema's
			}
		}
	}
	return r
}

// unparsedConstructs are MariaDB clauses the parser does not know, as word
// sequences, with what they do: on a sharded table Convoy refuses them
// with the reason (1235), not a syntax error, since MariaDB reads them.
var unparsedConstructs = []struct {
	words []string
	what  string
}{
	{[]string{"WITH", "TIES"}, "FETCH ... WITH TIES (the rows tied with the last one across shards)"},
	{[]string{"ROWS", "EXAMINED"}, "LIMIT ... ROWS EXAMINED (a bound on the rows each server examines, not the statement's)"},
	{[]string{"PERSISTENT", "FOR"}, "ANALYZE ... PERSISTENT FOR (engine-independent statistics of one server's table)"},
	{[]string{"FOR", "SYSTEM_TIME"}, "FOR SYSTEM_TIME (system-versioned history)"},
	{[]string{"(", "VALUES"}, "a table value constructor (VALUES (...), (...))"},
}

// UnparsedShardedReason explains why a statement the parser refused,
// which names a sharded table, is refused through Convoy: a MariaDB
// clause it recognises (unparsedConstructs), "" when it recognises none
// (a typo: the parser's 1064 stands).
func UnparsedShardedReason(sql string) string {
	sc := sqltext.New(sql)
	var words []string
	table := ""
	for t := sc.Code(); t.Kind != sqltext.End; t = sc.Code() {
		switch {
		case t.Kind == sqltext.Word || t.Kind == sqltext.Name:
			if n := name(t); isShardedTable(n) && table == "" {
				table = n
			}
			words = append(words, strings.ToUpper(name(t)))
		case t.IsPunct('('):
			words = append(words, "(")
		default:
			words = append(words, "")
		}
	}
	if table == "" {
		return ""
	}
	if len(words) > 0 && words[0] == "VALUES" {
		words = append([]string{"("}, words...) // a statement that is a table value constructor
	}
	for _, c := range unparsedConstructs {
		for i := 0; i+len(c.words) <= len(words); i++ {
			if slices.Equal(words[i:i+len(c.words)], c.words) {
				return fmt.Sprintf("%s is not supported on sharded table %s through Convoy (MariaDB syntax Convoy cannot route); rewrite the statement without it", c.what, table)
			}
		}
	}
	return ""
}
