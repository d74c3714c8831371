package planbuilder

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/pingcap/tidb/pkg/parser/ast"

	"github.com/convoy-im/convoy/proxy/sqlerr"
	"github.com/convoy-im/convoy/rewrite"
)

// Context is what planning needs to know besides the statement's text.
type Context struct {
	// Parser parses the statement (a session's: it is not safe for
	// concurrent use).
	Parser *rewrite.Parser
	// DB is the session's current database: it qualifies unqualified
	// names.
	DB string
	// OnShard: the statement runs on the one shard a /*+ convoy shard=N */
	// names (rewrite.AnalyzeOnShard).
	OnShard bool
	// NoBackslashEscapes: the session's sql_mode holds
	// NO_BACKSLASH_ESCAPES, which the backends' connections do not.
	NoBackslashEscapes bool
	// Hot, Cold and Search say which tiers are on.
	Hot, Cold, Search bool
	// Schema gives a sharded table's columns, in order, for an INSERT
	// without a column list.
	Schema Schema
}

// Schema is where planning learns a sharded table's columns.
type Schema interface {
	Columns(table string) ([]string, error)
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

// Build parses and analyses one statement and decides its op. Its errors
// are the client's: *sqlerr.Error or a *mysql.MyError.
func Build(sql string, ctx Context) (*Plan, error) {
	pl, err := build(sql, ctx)
	if err != nil {
		return nil, err
	}
	pl.Op = decide(pl, ctx.DB)
	return pl, nil
}

// BuildParsed is Build for a statement already parsed: stmt, one of a
// multi-statement text the session split (its text sql, its offsets set
// by the splitter).
func BuildParsed(sql string, stmt ast.StmtNode, ctx Context) (*Plan, error) {
	pl, err := analyse(sql, stmt, "", false, ctx)
	if err != nil {
		return nil, err
	}
	pl.Op = decide(pl, ctx.DB)
	return pl, nil
}

// build parses and analyses one statement.
func build(sql string, ctx Context) (*Plan, error) {
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
	stmts, err := ctx.Parser.Parse(text)
	if err != nil {
		if alt, ok := rewrite.MariaDBSpellings(text); ok {
			if st, aerr := ctx.Parser.Parse(alt); aerr == nil {
				stmts, err = st, nil
			}
		}
	}
	if err != nil {
		if a, ok := rewrite.AnalyzeSetNames(sql); ok {
			return &Plan{SQL: sql, A: a}, nil
		}
		if pl, ok, err := planSetStatement(sql, ctx); ok {
			return pl, err
		}
		if alt, ok := rewrite.LockWaitAsSetStatement(sql); ok {
			return Build(alt, ctx)
		}
		if a, ok, aerr := rewrite.AnalyzeMaintenance(ctx.Parser, sql); ok {
			if aerr != nil {
				return nil, classify(aerr)
			}
			return &Plan{SQL: sql, A: a}, nil // sharded: maintenance; else the text as sent
		}
		if m := diagLimit.FindStringSubmatch(sql); m != nil {
			pl, err := Build(m[1], ctx)
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
			return &Plan{SQL: sql, A: &rewrite.Analysis{Kind: rewrite.KindOther, ParamCount: r.Params}, Routine: r}, nil
		}
		if why := rewrite.UnparsedShardedReason(sql); why != "" {
			return nil, sqlerr.Errorf(sqlerr.NotSupported, "%s", why)
		}
		return nil, classify(err)
	}
	switch len(stmts) {
	case 0:
		if rewrite.OnlyComments(sql) {
			return &Plan{SQL: sql, A: &rewrite.Analysis{Kind: rewrite.KindEmpty}}, nil
		}
		return nil, sqlerr.Errorf(sqlerr.EmptyQuery, "Query was empty")
	case 1:
	default:
		return nil, sqlerr.Errorf(sqlerr.Syntax, "You have an error in your SQL syntax: several statements in one query need the client's multi-statements option (CLIENT_MULTI_STATEMENTS)")
	}
	return analyse(sql, stmts[0], returning, hasReturning, ctx)
}

// analyse plans one parsed statement; returning is its RETURNING clause,
// which the parser does not read (hasReturning: it has one).
func analyse(sql string, stmt ast.StmtNode, returning string, hasReturning bool, ctx Context) (*Plan, error) {
	if ex, ok := stmt.(*ast.ExplainStmt); ok {
		if pl, ok, err := explainPlan(sql, ex); ok {
			return pl, err
		}
	}
	namedColumns, err := nameInsertColumns(stmt, ctx)
	if err != nil {
		return nil, classify(err)
	}
	// NO_BACKSLASH_ESCAPES: its LIKEs without ESCAPE read as ESCAPE '',
	// and computed columns are named as written (the engine's nobackslash.go).
	nbeLike := ctx.NoBackslashEscapes && rewrite.LikesWithoutEscape(stmt)
	if ctx.NoBackslashEscapes && rewrite.NameFieldsAsWritten(stmt) {
		nbeLike = true
	}
	analyze := rewrite.Analyze
	if ctx.OnShard {
		analyze = rewrite.AnalyzeOnShard
	}
	a, err := analyze(stmt)
	if err != nil {
		return nil, classify(err)
	}
	if hasReturning {
		if err := rewrite.CheckReturning(ctx.Parser, returning, a.Sharded); err != nil {
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
	if pl, ok, err := searchPlan(sql, a, ctx); ok {
		return pl, err
	}
	pl := &Plan{SQL: sql, A: a, NamedColumns: namedColumns}
	if a.Kind == rewrite.KindLoadData {
		return pl, nil // its INSERTs are planned as it runs (the engine's loaddata.go)
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
		if ctx.Hot && a.Kind == rewrite.KindSelect && !pl.CalcFound && len(pl.Assigns) == 0 { // a cached page knows no total
			if pl.Hist, _ = rewrite.HistoryShape(a); pl.Hist != nil {
				pl.HistCols = fmt.Sprint(pl.Hist.Columns)
			}
		}
		if len(pl.Assigns) == 0 && ctx.Cold {
			pl.Cold = coldOf(a)
		}
		if a.ParamCount > 0 && a.Returning == "" {
			// (A write returning rows runs prepared on the backend: its rows
			// are then binary as the client expects, and a write is never
			// run twice, which converting text rows could need.)
			pl.Inline, pl.InlineLimit, pl.InlineAssigned = rewrite.InlineShape(a)
			pl.Inline = pl.Inline && pl.Tmpl.Params() == a.ParamCount
		}
	} else if a.Kind == rewrite.KindSelect && slices.ContainsFunc(a.Unsharded, func(t string) bool { return rewrite.IsProcessList(t, ctx.DB) }) {
		pl.ProcessList = true
	} else if a.SessionRefs.Has(rewrite.RefLastInsertID) || strings.Contains(strings.ToLower(sql), "last_insert_id") {
		v := &funcFinder{name: "last_insert_id", withArgs: true}
		a.Stmt.Accept(v)
		pl.SetsLastID = v.found
	}
	if a.Kind == rewrite.KindDDL || pl.Tmpl == nil {
		if pl.Temp, err = planTemp(a.Stmt, ctx.DB); err != nil {
			return nil, err
		}
		if err := checkPrepared(a.Stmt, ctx); err != nil {
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
