package rewrite

import (
	"fmt"
	"slices"
	"strings"

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
	sc := scanner{s: sql}
	r := leadingRoutine(&sc)
	if r == nil {
		return nil, nil
	}
	checkCode := r.Kind == RoutineDefine || r.Kind == RoutineCall
	seen := map[string]bool{}
	for t := sc.next(); t.kind != tokEnd; t = sc.next() {
		switch t.kind {
		case tokParam:
			r.Params++
		case tokUserVar:
			if name := strings.ToLower(t.text); r.Kind == RoutineCall && plainVar(name) && !seen[name] && len(r.UserVars) < maxReadBack {
				seen[name] = true
				r.UserVars = append(r.UserVars, name)
			}
		case tokWord, tokQuoted:
			if !checkCode {
				continue
			}
			if _, sharded := router.ShardKeyColumn(t.text); sharded {
				return nil, unsupported("%s naming the sharded table %s is not supported through Convoy: stored code runs inside one MariaDB server, which cannot see the table's 1024 shards; run the statements from the application", r.What, t.text)
			}
			if t.kind == tokWord && (strings.EqualFold(t.text, "PREPARE") || strings.EqualFold(t.text, "EXECUTE")) {
				return nil, unsupported("%s with dynamic SQL (PREPARE / EXECUTE) is not supported through Convoy: nobody can see which tables it would touch, and stored code cannot see the sharded tables", r.What)
			}
			if r.Kind == RoutineDefine && t.isWord("SONAME") {
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
		if !nameChar(name[i]) || name[i] >= 0x80 {
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
func leadingRoutine(sc *scanner) *Routine {
	first := sc.next()
	if first.kind != tokWord {
		return nil
	}
	w := strings.ToUpper(first.text)
	switch w {
	case "CREATE", "ALTER":
		t := sc.next()
		if w == "CREATE" && t.isWord("OR") {
			if !sc.next().isWord("REPLACE") {
				return nil
			}
			t = sc.next()
		}
		if t.isWord("DEFINER") {
			if !sc.next().isPunct('=') || !sc.skipUser() {
				return nil
			}
			t = sc.next()
		}
		if w == "CREATE" && t.isWord("AGGREGATE") {
			t = sc.next()
		}
		obj := strings.ToUpper(t.text)
		if t.kind != tokWord || !storedObjects[obj] || w == "ALTER" && obj == "TRIGGER" {
			return nil
		}
		return &Routine{Kind: RoutineDefine, What: w + " " + obj, Body: true}
	case "DROP":
		t := sc.next()
		if obj := strings.ToUpper(t.text); t.kind == tokWord && storedObjects[obj] {
			return &Routine{Kind: RoutineDrop, What: "DROP " + obj}
		}
	case "CALL":
		return &Routine{Kind: RoutineCall, What: "CALL"}
	case "SHOW":
		t := sc.next()
		switch u := strings.ToUpper(t.text); {
		case t.kind != tokWord:
		case u == "CREATE":
			if t2 := sc.next(); t2.kind == tokWord && storedObjects[strings.ToUpper(t2.text)] {
				return &Routine{Kind: RoutineShow, What: "SHOW CREATE " + strings.ToUpper(t2.text)}
			}
		case u == "PROCEDURE" || u == "FUNCTION":
			if t2 := sc.next(); t2.isWord("STATUS") || t2.isWord("CODE") {
				return &Routine{Kind: RoutineShow, What: "SHOW " + u + " " + strings.ToUpper(t2.text)}
			}
		case u == "TRIGGERS" || u == "EVENTS":
			return &Routine{Kind: RoutineShow, What: "SHOW " + u}
		}
	case "BEGIN":
		if sc.next().isWord("NOT") && sc.next().isWord("ATOMIC") {
			return &Routine{Kind: RoutineCall, What: "BEGIN NOT ATOMIC", Body: true}
		}
	default:
		if compoundStarts[w] {
			return &Routine{Kind: RoutineCall, What: w, Body: true}
		}
		// label: BEGIN NOT ATOMIC / LOOP / WHILE / REPEAT / FOR
		if !sc.next().isPunct(':') {
			return nil
		}
		t := sc.next()
		switch u := strings.ToUpper(t.text); {
		case t.kind != tokWord:
		case u == "BEGIN":
			if sc.next().isWord("NOT") && sc.next().isWord("ATOMIC") {
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
		sc := scanner{s: sql, i: start}
		r := leadingRoutine(&sc)
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
	sc := scanner{s: sql, i: start}
	for {
		t := sc.next()
		if t.kind == tokEnd {
			return len(sql)
		}
		if t.isPunct(';') && !sc.inExec {
			return t.at
		}
	}
}

// onlyBlank: no token at all (blanks and comments).
func onlyBlank(s string) bool {
	sc := scanner{s: s}
	return sc.next().kind == tokEnd
}

type tokKind int

const (
	tokEnd     tokKind = iota
	tokWord            // a bare word: keyword, name or number
	tokQuoted          // a `quoted` name (text: unquoted)
	tokString          // '...' or "..." (ANSI_QUOTES is refused through Convoy)
	tokParam           // ?
	tokUserVar         // @name, @'name', @`name` (text: the name)
	tokSysVar          // @@name
	tokPunct           // any other byte
)

type token struct {
	kind tokKind
	text string
	at   int // offset in the statement
}

func (t token) isWord(w string) bool { return t.kind == tokWord && strings.EqualFold(t.text, w) }

func (t token) isPunct(c byte) bool { return t.kind == tokPunct && t.text[0] == c }

// scanner reads the tokens of a statement as MariaDB's lexer sees them:
// comments are skipped, `/*! ... */` contents are read as SQL (the version
// number skipped: CheckComments refused the versions MariaDB would not run).
type scanner struct {
	s      string
	i      int
	inExec bool // inside an executable comment
}

func (sc *scanner) next() token {
	s := sc.s
	for sc.i < len(s) {
		at := sc.i
		c := s[at]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			sc.i++
		case c == '#':
			sc.i = skipLine(s, at)
		case c == '-' && at+1 < len(s) && s[at+1] == '-' && (at+2 == len(s) || s[at+2] <= ' '):
			sc.i = skipLine(s, at)
		case c == '/' && at+1 < len(s) && s[at+1] == '*':
			body := at + 2
			if body < len(s) && s[body] == '!' && !sc.inExec {
				j := body + 1
				for j < len(s) && s[j] >= '0' && s[j] <= '9' {
					j++
				}
				sc.i, sc.inExec = j, true
				continue
			}
			end := indexFrom(s, body, "*/")
			if end < 0 {
				sc.i = len(s)
			} else {
				sc.i = end + 2
			}
		case c == '*' && sc.inExec && at+1 < len(s) && s[at+1] == '/':
			sc.i, sc.inExec = at+2, false
		case c == '\'' || c == '"':
			end := min(skipQuoted(s, at), len(s)-1)
			sc.i = end + 1
			return token{kind: tokString, text: s[at : end+1], at: at}
		case c == '`':
			end := skipQuoted(s, at)
			sc.i = min(end+1, len(s))
			return token{kind: tokQuoted, text: strings.ReplaceAll(s[at+1:min(end, len(s))], "``", "`"), at: at}
		case c == '?':
			sc.i++
			return token{kind: tokParam, text: "?", at: at}
		case c == '@':
			return sc.variable(at)
		case nameChar(c):
			j := at + 1
			for j < len(s) && nameChar(s[j]) {
				j++
			}
			sc.i = j
			return token{kind: tokWord, text: s[at:j], at: at}
		default:
			sc.i++
			return token{kind: tokPunct, text: s[at : at+1], at: at}
		}
	}
	return token{kind: tokEnd, at: len(s)}
}

// variable reads @name, @'name', @`name` or @@[scope.]name at at.
func (sc *scanner) variable(at int) token {
	s := sc.s
	j := at + 1
	kind := tokUserVar
	if j < len(s) && s[j] == '@' {
		kind = tokSysVar
		j++
	}
	if kind == tokUserVar && j < len(s) && (s[j] == '\'' || s[j] == '"' || s[j] == '`') {
		end := skipQuoted(s, j)
		sc.i = min(end+1, len(s))
		// Quoted names are read back only when they are plain (plainVar).
		return token{kind: tokUserVar, text: s[j+1 : min(end, len(s))], at: at}
	}
	k := j
	for k < len(s) && (nameChar(s[k]) || s[k] == '.') {
		k++
	}
	sc.i = k
	return token{kind: kind, text: s[j:k], at: at}
}

// skipUser reads the account of a DEFINER clause: user[@host] (names bare,
// quoted or backquoted), CURRENT_USER[()] or a role name.
func (sc *scanner) skipUser() bool {
	t := sc.next()
	switch t.kind {
	case tokWord, tokQuoted, tokString:
	default:
		return false
	}
	save := *sc
	switch n := sc.next(); {
	case n.kind == tokUserVar: // @host
	case n.isPunct('(') && (t.isWord("CURRENT_USER") || t.isWord("CURRENT_ROLE")):
		if !sc.next().isPunct(')') {
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
	sc := scanner{s: sql}
	first := sc.next()
	need, ok := unparsedNeeds[strings.ToUpper(first.text)]
	if first.kind != tokWord || !ok {
		return nil
	}
	r := &Routine{Kind: RoutineUnparsed, What: strings.ToUpper(first.text), Need: need}
	var prev token
	for t := sc.next(); t.kind != tokEnd; prev, t = t, sc.next() {
		if t.isPunct('.') && (prev.kind == tokWord || prev.kind == tokQuoted) && !slices.Contains(r.Qualifiers, prev.text) {
			r.Qualifiers = append(r.Qualifiers, prev.text)
		}
		switch t.kind {
		case tokParam:
			r.Params++
		case tokPunct:
			if t.text == ":" && strings.HasPrefix(sql[t.at:], ":=") {
				return nil
			}
		case tokWord, tokQuoted:
			if _, sharded := router.ShardKeyColumn(t.text); sharded {
				return nil
			}
			if t.kind != tokWord {
				continue
			}
			u := strings.ToUpper(t.text)
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
	sc := scanner{s: sql}
	var words []string
	table := ""
	for t := sc.next(); t.kind != tokEnd; t = sc.next() {
		switch {
		case t.kind == tokWord || t.kind == tokQuoted:
			if _, sharded := router.ShardKeyColumn(t.text); sharded && table == "" {
				table = t.text
			}
			words = append(words, strings.ToUpper(t.text))
		case t.isPunct('('):
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
