package engine

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/pingcap/tidb/pkg/parser/ast"

	"github.com/convoy-im/convoy/proxy/backend"
	"github.com/convoy-im/convoy/proxy/sqlerr"
	"github.com/convoy-im/convoy/rewrite"
	"github.com/convoy-im/convoy/router"
)

// plan is one analysed statement. Plans are session-owned (the AST is not
// safe for concurrent use), built once per COM_QUERY or once per PREPARE.
type plan struct {
	Op   op     // what run does with it (op.go)
	SQL  string // the client's text: unsharded statements go out byte for byte
	A    *rewrite.Analysis
	Tmpl *rewrite.Template // set when the statement names sharded tables
	// temp is what the statement does to the session's temporary tables
	// and SQL-level prepared statements (temptables.go); nil: nothing.
	Temp *tempPlan
	// assigns are the user variables the statement assigns (SELECT @n :=
	// ...): read back after it from the connection it ran on, kept in the
	// session as SET would keep them (plain names only). On sharded
	// tables only a SELECT of one physical table may assign them.
	Assigns []string
	// namedLock marks a statement on no sharded table calling a named-lock
	// function (GET_LOCK and its kin): it runs on the session's lock
	// connection (namedlock.go).
	NamedLock bool
	// setsLastID marks a passthrough statement calling LAST_INSERT_ID(expr),
	// which sets the session's value; the connection it ran on is asked for
	// it afterwards (LAST_INSERT_ID() itself is answered from the session,
	// see rewrite.SessionTemplate).
	SetsLastID bool
	// diagWindow is SHOW WARNINGS / ERRORS's LIMIT: offset and count (nil:
	// no LIMIT).
	DiagWindow *[2]int
	// stmtSet are the variables of SET STATEMENT ... FOR (setstatement.go),
	// as session variables the statement's connections carry.
	StmtSet map[string]string
	// processList: a SELECT reading information_schema.PROCESSLIST, which
	// is answered with Convoy's client connections (processListSQL).
	ProcessList bool
	// calcFound: a SELECT SQL_CALC_FOUND_ROWS; FOUND_ROWS() is read on the
	// connection it ran on (see noteFoundRows).
	CalcFound bool
	// scatter is the every-shard form of a SELECT, built on first use.
	scatter *scatterPlan
	// hist is set for the seed 000 history reads when the hot tier is on.
	Hist *rewrite.History
	// histCols prints hist's columns, the fixed part of its metadata key.
	HistCols string
	// cold is set for the reads the cold tier may continue and the writes
	// that may name archived rows, when the cold tier is on.
	Cold *coldPlan
	// inline: a prepared statement on one shard goes to the backend as text
	// with its values printed (rewrite.InlineShape); a backend statement per
	// physical table would thrash the backend's prepared-statement cache.
	// inlineLimit are the placeholders that must be non-negative integers;
	// noInline is set once a result had a column without an exact binary form.
	Inline      bool
	InlineLimit []int
	// inlineAssigned are the placeholders that are whole stored values:
	// bytes that are not UTF-8 go inline there too (see inlineArgs).
	InlineAssigned []int
	noInline       bool
	// textArgs marks a shared plan from the plan cache: its arguments are
	// the literals of a text statement (rewrite.Literal), always inlined;
	// keyParam is the one holding the shard key.
	textArgs bool
	keyParam int
	// seqHoles is the seq-allocating INSERT with every value a hole (see
	// seqBatch), built on first use.
	seqHoles *rewrite.Template
	// namedColumns: an INSERT without a column list got the table's
	// columns from the backends (nameInsertColumns).
	NamedColumns bool
	// explain is "EXPLAIN " or "EXPLAIN FORMAT=JSON " for an EXPLAIN of a
	// statement on sharded tables (explain.go): a and tmpl are then the
	// explained statement's, which never runs.
	Explain string
	// routine is set for a routine statement (CREATE PROCEDURE, CALL, ...),
	// which the parser does not read: see routine.go.
	Routine *rewrite.Routine
	// search is set for a msg_search query (search.go), which no
	// datasource sees.
	Search *rewrite.Search
}

// inlinable reports whether this execution may be sent as text.
func (pl *plan) inlinable(args []any) bool {
	if !pl.Inline || pl.noInline {
		return false
	}
	for _, i := range pl.InlineLimit {
		if !nonNegativeInt(args[i]) {
			return false
		}
	}
	// Values the backend connection sends as long data (over 64 KiB) stay
	// bound: that way each may be as large as max_allowed_packet, as when
	// a client sends it to MariaDB as long data; printed into the statement
	// (escaped, or as hex) it would not fit.
	for _, a := range args {
		if backend.IsLongArg(a) {
			return false
		}
	}
	return true
}

// inlineArgs returns args with the binary values of stored placeholders
// (an encrypted message body, typically) as binary literals, which
// AppendLiteral would refuse as bytes that are not UTF-8. args itself when
// there is none. Only for a session whose strings are utf8mb4 / utf8mb3
// (utf8Client): there a binary or UTF-8 column stores (or refuses) the
// literal exactly as the bound string. From another client character set
// the server converts a bound string and would not convert the literal, so
// the values stay bound.
func (pl *plan) inlineArgs(args []any, utf8Client bool) []any {
	if !utf8Client {
		return args
	}
	var out []any
	for _, i := range pl.InlineAssigned {
		if b, ok := args[i].([]byte); ok && !backend.IsLongArg(b) && !utf8.Valid(b) {
			if out == nil {
				out = append([]any(nil), args...)
			}
			out[i] = rewrite.BinaryLiteral(b)
		}
	}
	if out == nil {
		return args
	}
	return out
}

// nonNegativeInt: the only values MariaDB takes in LIMIT / OFFSET.
func nonNegativeInt(v any) bool {
	if l, ok := v.(rewrite.Literal); ok {
		v = l.Val
	}
	switch x := v.(type) {
	case uint8, uint16, uint32, uint64:
		return true
	case int8:
		return x >= 0
	case int16:
		return x >= 0
	case int32:
		return x >= 0
	case int64:
		return x >= 0
	}
	return false
}

// renderInline prints the statement for one shard with args as literals;
// "" when an argument has no exact literal.
func (pl *plan) renderInline(s *Session, snap *router.Snapshot, sh router.Shard, args []any) string {
	b, ok := pl.Tmpl.RenderInline(s.buf[:0], func(logical string) (string, string) {
		p := snap.Physical(logical, sh)
		return p.Database, p.Table
	}, args)
	s.buf = b
	if !ok {
		return ""
	}
	return string(b)
}

// Split cuts a multi-statement query into its statements' texts, for a
// client that enabled multi-statements; each is then run (routed, checked,
// authorised) on its own. One statement comes back as is. The whole text is
// parsed first: a syntax error anywhere refuses all of it, before anything
// ran (MariaDB would have run the statements before the bad one).
func (s *Session) Split(sql string) ([]string, error) {
	if err := rewrite.CheckComments(sql); err != nil {
		return nil, classify(err)
	}
	if parts, ok := rewrite.SplitRoutines(sql); ok {
		return s.splitRoutines(sql, parts)
	}
	stmts, err := s.parser.Parse(sql)
	if err != nil {
		return nil, classify(err)
	}
	if len(stmts) <= 1 {
		return []string{sql}, nil
	}
	if strings.Contains(sql, "/*!") {
		// A statement boundary inside an executable comment has no text of
		// its own to run separately.
		return nil, sqlerr.Errorf(sqlerr.NotSupported, "multi-statements with executable comments (/*! ... */) are not supported through Convoy: send the statements one by one")
	}
	out := make([]string, len(stmts))
	for i, st := range stmts {
		out[i] = st.Text()
	}
	return out, nil
}

// selectIntoVar spots SELECT ... INTO @var, which the parser does not know:
// a clear refusal instead of a syntax error.
var selectIntoVar = regexp.MustCompile(`(?is)^\s*select\b.*\binto\s+@`)

// unparsedRefusals are MariaDB statements the parser does not know that
// Convoy refuses with a reason rather than a syntax error.
var unparsedRefusals = []struct {
	re  *regexp.Regexp
	msg string
}{
	{regexp.MustCompile(`(?is)^\s*xa\s`), "XA transactions are not supported through Convoy: a transaction runs on one shard's connection (no distributed transactions)"},
	{regexp.MustCompile(`(?is)^\s*handler\s`), "HANDLER is not supported through Convoy: read the rows with SELECT"},
	{regexp.MustCompile(`(?is)^\s*show\s+engine\s`), "SHOW ENGINE ... describes one datasource: an admin sends it to one with /*+ convoy datasource=NAME */ SHOW ENGINE ..."},
}

// diagLimit matches SHOW WARNINGS / ERRORS with MariaDB's LIMIT [offset,]
// count, which the parser does not know: the statement is planned without
// it and the session's list is cut (see showWarnings).
var diagLimit = regexp.MustCompile(`(?is)^\s*(show\s+(?:warnings|errors))\s+limit\s+(?:(\d+)\s*,\s*)?(\d+)\s*;?\s*$`)

// plan parses and analyses one statement and decides its op.
func (s *Session) plan(sql string) (*plan, error) {
	pl, err := s.build(sql)
	if err != nil {
		return nil, err
	}
	pl.Op = s.decideOp(pl)
	return pl, nil
}

// build parses and analyses one statement.
func (s *Session) build(sql string) (*plan, error) {
	if err := rewrite.CheckComments(sql); err != nil {
		return nil, classify(err)
	}
	if pl, ok, err := routinePlan(sql); ok {
		return pl, err
	}
	text := sql
	head, returning, hasReturning := rewrite.SplitReturning(sql)
	if hasReturning {
		text = head // the parser does not know RETURNING: see Analysis.Returning
	}
	stmts, err := s.parser.Parse(text)
	if err != nil {
		if alt, ok := rewrite.MariaDBSpellings(text); ok {
			if st, aerr := s.parser.Parse(alt); aerr == nil {
				stmts, err = st, nil
			}
		}
	}
	if err != nil {
		if a, ok := rewrite.AnalyzeSetNames(sql); ok {
			return &plan{SQL: sql, A: a}, nil
		}
		if pl, ok, err := s.planSetStatement(sql); ok {
			return pl, err
		}
		if alt, ok := rewrite.LockWaitAsSetStatement(sql); ok {
			return s.plan(alt)
		}
		if a, ok, aerr := rewrite.AnalyzeMaintenance(s.parser, sql); ok {
			if aerr != nil {
				return nil, classify(aerr)
			}
			return &plan{SQL: sql, A: a}, nil // sharded: maintenance; else the text as sent
		}
		if m := diagLimit.FindStringSubmatch(sql); m != nil {
			pl, err := s.plan(m[1])
			if err != nil {
				return nil, err
			}
			off, _ := strconv.ParseUint(m[2], 10, 32) // "" (no offset): 0
			n, err := strconv.ParseUint(m[3], 10, 32)
			if err != nil {
				n = math.MaxUint32
			}
			pl.DiagWindow = &[2]int{int(off), int(n)} // (a new plan: SHOW is never cached)
			return pl, nil
		}
		for _, r := range unparsedRefusals {
			if r.re.MatchString(sql) {
				return nil, sqlerr.Errorf(sqlerr.NotSupported, "%s", r.msg)
			}
		}
		if selectIntoVar.MatchString(sql) {
			return nil, sqlerr.Errorf(sqlerr.NotSupported, "SELECT ... INTO @variable is not supported through Convoy: select the value and SET the variable from it")
		}
		// MariaDB syntax the parser does not know, on unsharded tables:
		// MariaDB reads it (rewrite.ClassifyUnparsed).
		if r := rewrite.ClassifyUnparsed(sql); r != nil {
			return &plan{SQL: sql, A: &rewrite.Analysis{Kind: rewrite.KindOther, ParamCount: r.Params}, Routine: r}, nil
		}
		if why := rewrite.UnparsedShardedReason(sql); why != "" {
			return nil, sqlerr.Errorf(sqlerr.NotSupported, "%s", why)
		}
		return nil, classify(err)
	}
	switch len(stmts) {
	case 0:
		if rewrite.OnlyComments(sql) {
			return &plan{SQL: sql, A: &rewrite.Analysis{Kind: rewrite.KindEmpty}}, nil
		}
		return nil, sqlerr.Errorf(sqlerr.EmptyQuery, "Query was empty")
	case 1:
	default:
		return nil, sqlerr.Errorf(sqlerr.Syntax, "You have an error in your SQL syntax: several statements in one query need the client's multi-statements option (CLIENT_MULTI_STATEMENTS)")
	}
	if ex, ok := stmts[0].(*ast.ExplainStmt); ok {
		if pl, ok, err := s.explainPlan(sql, ex); ok {
			return pl, err
		}
	}
	namedColumns, err := s.nameInsertColumns(stmts[0])
	if err != nil {
		return nil, classify(err)
	}
	// NO_BACKSLASH_ESCAPES: its LIKEs without ESCAPE read as ESCAPE '',
	// and computed columns are named as written (nobackslash.go).
	nbeLike := s.sqlModeNBE != "" && rewrite.LikesWithoutEscape(stmts[0])
	if s.sqlModeNBE != "" && rewrite.NameFieldsAsWritten(stmts[0]) {
		nbeLike = true
	}
	analyze := rewrite.Analyze
	if s.onShard {
		analyze = rewrite.AnalyzeOnShard
	}
	a, err := analyze(stmts[0])
	if err != nil {
		return nil, classify(err)
	}
	if hasReturning {
		if err := rewrite.CheckReturning(s.parser, returning, a.Sharded); err != nil {
			return nil, classify(err)
		}
		a.Returning = returning
	}
	if nbeLike && len(a.Sharded) == 0 {
		// Sent as restored SQL, not the client's text (which lacks the
		// ESCAPE ''): rendered as a statement reading session values is
		// (its RETURNING clause too).
		t, err := rewrite.SessionTemplate(a, func(rewrite.SessionRef) rewrite.SessionValue { return rewrite.SessionValue{Keep: true} })
		if err != nil {
			return nil, classify(err)
		}
		sql = string(t.Render(nil, nil))
	}
	if pl, ok, err := s.searchPlan(sql, a); ok {
		return pl, err
	}
	pl := &plan{SQL: sql, A: a, NamedColumns: namedColumns}
	if a.Kind == rewrite.KindLoadData {
		return pl, nil // its INSERTs are planned as it runs (loaddata.go)
	}
	if sel, ok := a.Stmt.(*ast.SelectStmt); ok && sel.SelectStmtOpts != nil && sel.SelectStmtOpts.CalcFoundRows {
		pl.CalcFound = true
	}
	if len(a.Sharded) > 0 {
		switch a.Kind {
		case rewrite.KindSelect, rewrite.KindInsert, rewrite.KindUpdate, rewrite.KindDelete, rewrite.KindDDL, rewrite.KindShow:
		case rewrite.KindMaintenance:
			return pl, nil // run on each physical table (maintenance), no template
		default:
			return nil, sqlerr.Errorf(sqlerr.NotSupported, "%s statements on the sharded table %s are not supported", a.Kind, a.Sharded[0])
		}
		if pl.Tmpl, err = rewrite.NewTemplate(a); err != nil {
			return nil, classify(err)
		}
		if pl.Assigns = assignedUserVars(a.Stmt, sql); len(pl.Assigns) > 0 && (a.Kind != rewrite.KindSelect || pl.CalcFound) {
			return nil, sqlerr.Errorf(sqlerr.NotSupported, "assigning user variables (@%s := ...) in %s on the sharded table %s is not supported: select the value, then SET the variable", pl.Assigns[0], a.Kind, a.Sharded[0])
		}
		// A SELECT assigning user variables runs on MySQL, never from the
		// hot or cold tier (they would not assign them), and the
		// connection it ran on is asked for the values after it (see
		// single): MariaDB keeps them in the session.
		if s.e.hot != nil && a.Kind == rewrite.KindSelect && !pl.CalcFound && len(pl.Assigns) == 0 { // a cached page knows no total
			if pl.Hist, _ = rewrite.HistoryShape(a); pl.Hist != nil {
				pl.HistCols = fmt.Sprint(pl.Hist.Columns)
			}
		}
		if len(pl.Assigns) == 0 {
			s.e.planCold(pl)
		}
		if a.ParamCount > 0 && a.Returning == "" {
			// (A write returning rows runs prepared on the backend: its rows
			// are then binary as the client expects, and a write is never
			// run twice, which converting text rows could need.)
			pl.Inline, pl.InlineLimit, pl.InlineAssigned = rewrite.InlineShape(a)
			pl.Inline = pl.Inline && pl.Tmpl.Params() == a.ParamCount
		}
	} else if a.Kind == rewrite.KindSelect && slices.ContainsFunc(a.Unsharded, func(t string) bool { return rewrite.IsProcessList(t, s.db) }) {
		pl.ProcessList = true
	} else if a.SessionRefs.Has(rewrite.RefLastInsertID) || strings.Contains(strings.ToLower(sql), "last_insert_id") {
		v := &funcFinder{name: "last_insert_id", withArgs: true}
		a.Stmt.Accept(v)
		pl.SetsLastID = v.found
	}
	if a.Kind == rewrite.KindDDL || pl.Tmpl == nil {
		if pl.Temp, err = planTemp(a.Stmt, s.db); err != nil {
			return nil, err
		}
		if err := s.checkPrepared(a.Stmt); err != nil {
			return nil, err
		}
	}
	if pl.Tmpl == nil {
		pl.Assigns = assignedUserVars(a.Stmt, sql)
	}
	if callsNamedLock(a, sql) {
		if pl.Tmpl != nil {
			return nil, sqlerr.Errorf(sqlerr.NotSupported, "GET_LOCK, RELEASE_LOCK and the other named-lock functions cannot be combined with sharded tables in one statement: call them in a statement of their own")
		}
		pl.NamedLock = true
	}
	return pl, nil
}

// local reports statements the session answers itself or that carry no rows.
func (pl *plan) local() bool {
	switch pl.A.Kind {
	case rewrite.KindBegin, rewrite.KindCommit, rewrite.KindRollback, rewrite.KindSet, rewrite.KindUse, rewrite.KindEmpty, rewrite.KindSavepoint:
		return true
	case rewrite.KindDDL:
		return pl.Tmpl != nil
	}
	return false
}

// tableless reports a statement that names no table and changes nothing
// (SELECT 1, SELECT @@x): it needs no transaction and no shard.
func (pl *plan) tableless() bool {
	return len(pl.A.Sharded) == 0 && len(pl.A.Unsharded) == 0 && !pl.write() && pl.A.Kind != rewrite.KindOther
}

func (pl *plan) write() bool {
	switch pl.A.Kind {
	case rewrite.KindInsert, rewrite.KindUpdate, rewrite.KindDelete, rewrite.KindDDL:
		return true
	}
	return false
}

// render prints the statement for one shard's physical tables.
func (pl *plan) render(s *Session, snap *router.Snapshot, sh router.Shard) string {
	return renderTemplate(s, pl.Tmpl, snap, sh)
}

func renderTemplate(s *Session, t *rewrite.Template, snap *router.Snapshot, sh router.Shard) string {
	s.buf = t.Render(s.buf[:0], func(logical string) (string, string) {
		p := snap.Physical(logical, sh)
		return p.Database, p.Table
	})
	return string(s.buf)
}

// limited reports an UPDATE / DELETE with ORDER BY or LIMIT, whose meaning
// changes when it runs once per shard.
func limited(stmt ast.StmtNode) bool {
	switch st := stmt.(type) {
	case *ast.UpdateStmt:
		return st.Limit != nil || st.Order != nil
	case *ast.DeleteStmt:
		return st.Limit != nil || st.Order != nil
	}
	return false
}

// funcFinder reports whether a statement calls the named function (with
// withArgs, with at least one argument).
type funcFinder struct {
	name     string
	withArgs bool
	found    bool
}

func (v *funcFinder) Enter(n ast.Node) (ast.Node, bool) {
	if f, ok := n.(*ast.FuncCallExpr); ok && f.FnName.L == v.name && (!v.withArgs || len(f.Args) > 0) {
		v.found = true
		return n, true
	}
	return n, v.found
}

func (v *funcFinder) Leave(n ast.Node) (ast.Node, bool) { return n, true }
