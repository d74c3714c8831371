package planbuilder

import (
	"errors"
	"fmt"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/convoy-im/convoy/proxy/sqlerr"
	"github.com/convoy-im/convoy/rewrite"
)

// Op is what the engine does with a statement: decided once, when its plan
// is built, and the one thing the engine's run switches on. Facts only
// known when the statement runs (inside a transaction, a migration's read
// ramp, the bound key values) choose between the paths of one op, never
// the op.
type Op uint8

const (
	OpEmpty       Op = iota // a comment only: OK
	OpBegin                 // BEGIN / START TRANSACTION
	OpEndTxn                // COMMIT / ROLLBACK
	OpSavepoint             // SAVEPOINT / ROLLBACK TO / RELEASE SAVEPOINT
	OpSet                   // SET: the session keeps it
	OpUse                   // USE db
	OpKill                  // KILL [QUERY]: a Convoy client connection
	OpShowGrants            // SHOW GRANTS: the Convoy account's privileges
	OpProcessList           // SHOW PROCESSLIST: Convoy's client connections
	OpDiagnostics           // SHOW WARNINGS / ERRORS: the session's diagnostics area
	OpIntrospect            // SHOW DATABASES / TABLES, information_schema: logical names
	OpPassthrough           // unsharded: the client's text to the default datasource
	OpRoutine               // stored code the parser does not read (rewrite.ClassifyRoutine)
	OpSearch                // msg_search (rewrite.SearchShape): no datasource sees it
	OpLoadData              // LOAD DATA LOCAL INFILE into a sharded table
	OpMaintenance           // ANALYZE / OPTIMIZE / CHECK ... on every physical table
	OpExplain               // EXPLAIN of a statement on sharded tables
	OpDDL                   // DDL fanned out to every physical table
	OpShowSharded           // SHOW COLUMNS / INDEX / CREATE TABLE of a sharded table
	OpInsert                // INSERT / REPLACE split by each row's shard
	OpInsertSeq             // INSERT INTO conv_msg allocating seqs
	OpHistory               // a history read (docs/design.md §4) the hot tier may answer
	OpRoute                 // a statement routed by its shard key values
	OpScatter               // a SELECT without the shard key: every shard, merged
)

var opNames = [...]string{
	OpEmpty: "Empty", OpBegin: "Begin", OpEndTxn: "EndTxn", OpSavepoint: "Savepoint",
	OpSet: "Set", OpUse: "Use", OpKill: "Kill", OpShowGrants: "ShowGrants",
	OpProcessList: "ProcessList", OpDiagnostics: "Diagnostics", OpIntrospect: "Introspect",
	OpPassthrough: "Passthrough", OpRoutine: "Routine", OpSearch: "Search",
	OpLoadData: "LoadData", OpMaintenance: "Maintenance", OpExplain: "Explain",
	OpDDL: "DDL", OpShowSharded: "ShowSharded", OpInsert: "Insert", OpInsertSeq: "InsertSeq",
	OpHistory: "History", OpRoute: "Route", OpScatter: "Scatter",
}

func (o Op) String() string {
	if int(o) < len(opNames) {
		return opNames[o]
	}
	return fmt.Sprintf("op(%d)", o)
}

// Sharded reports the ops that run on sharded tables through a template:
// they share the engine's preamble (session values, the migration hold,
// the dual-write).
func (o Op) Sharded() bool {
	return o >= OpExplain
}

// Plan is what Convoy does with one statement, decided from its text and
// the Context alone. A Plan is not changed once built: the engine keeps
// what it learns while running it beside the Plan, not in it. Plans hold
// the statement's AST (A.Stmt), which is not safe for concurrent use: a
// Plan is its session's, or shared read-only (the engine's text plan
// cache).
type Plan struct {
	Op  Op     // what the engine does with it
	SQL string // the client's text: unsharded statements go out byte for byte
	A   *rewrite.Analysis
	// Tmpl is set when the statement names sharded tables: it prints the
	// statement for one shard's physical tables.
	Tmpl *rewrite.Template
	// Temp is what the statement does to the session's temporary tables
	// and SQL-level prepared statements; nil: nothing.
	Temp *TempEffect
	// Assigns are the user variables the statement assigns (SELECT @n :=
	// ...): read back after it from the connection it ran on, kept in the
	// session as SET would keep them (plain names only). On sharded tables
	// only a SELECT of one physical table may assign them.
	Assigns []string
	// NamedLock marks a statement on no sharded table calling a named-lock
	// function (GET_LOCK and its kin): it runs on the session's lock
	// connection.
	NamedLock bool
	// SetsLastID marks a passthrough statement calling
	// LAST_INSERT_ID(expr), which sets the session's value; the connection
	// it ran on is asked for it afterwards (LAST_INSERT_ID() itself is
	// answered from the session, see rewrite.SessionTemplate).
	SetsLastID bool
	// DiagWindow is SHOW WARNINGS / ERRORS's LIMIT: offset and count (nil:
	// no LIMIT).
	DiagWindow *[2]int
	// StmtSet are the variables of SET STATEMENT ... FOR, as session
	// variables the statement's connections carry.
	StmtSet map[string]string
	// ProcessList: a SELECT reading information_schema.PROCESSLIST, which
	// is answered with Convoy's client connections.
	ProcessList bool
	// CalcFound: a SELECT SQL_CALC_FOUND_ROWS; FOUND_ROWS() is read on the
	// connection it ran on.
	CalcFound bool
	// Hist is set for the history reads (docs/design.md §4) when the hot tier
	// is on; HistCols prints its columns, the fixed part of its metadata key.
	Hist     *rewrite.History
	HistCols string
	// Cold is set for the reads the cold tier may continue and the writes
	// that may name archived rows, when the cold tier is on.
	Cold *Cold
	// Inline: a prepared statement on one shard goes to the backend as
	// text with its values printed (rewrite.InlineShape); a backend
	// statement per physical table would thrash the backend's
	// prepared-statement cache. InlineLimit are the placeholders that must
	// be non-negative integers; InlineAssigned those that are whole stored
	// values (bytes that are not UTF-8 go inline there too).
	Inline         bool
	InlineLimit    []int
	InlineAssigned []int
	// NamedColumns: an INSERT without a column list got the table's
	// columns from Context.Columns.
	NamedColumns bool
	// Explain is "EXPLAIN " or "EXPLAIN FORMAT=JSON " for an EXPLAIN of a
	// statement on sharded tables: A and Tmpl are then the explained
	// statement's, which never runs.
	Explain string
	// Routine is set for a routine statement (CREATE PROCEDURE, CALL,
	// ...), which the parser does not read.
	Routine *rewrite.Routine
	// Search is set for a msg_search query, which no datasource sees.
	Search *rewrite.Search
}

// Local reports statements the session answers itself or that carry no
// rows.
func (pl *Plan) Local() bool {
	switch pl.A.Kind {
	case rewrite.KindBegin, rewrite.KindCommit, rewrite.KindRollback, rewrite.KindSet, rewrite.KindUse, rewrite.KindEmpty, rewrite.KindSavepoint:
		return true
	case rewrite.KindDDL:
		return pl.Tmpl != nil
	}
	return false
}

// Tableless reports a statement that names no table and changes nothing
// (SELECT 1, SELECT @@x): it needs no transaction and no shard.
func (pl *Plan) Tableless() bool {
	return len(pl.A.Sharded) == 0 && len(pl.A.Unsharded) == 0 && !pl.Write() && pl.A.Kind != rewrite.KindOther
}

// Write reports a statement that changes rows or tables.
func (pl *Plan) Write() bool {
	switch pl.A.Kind {
	case rewrite.KindInsert, rewrite.KindUpdate, rewrite.KindDelete, rewrite.KindDDL:
		return true
	}
	return false
}

// TouchesHistory reports a write of conv_msg, which the hot tier's pages
// must follow.
func (pl *Plan) TouchesHistory() bool {
	if !pl.Write() || pl.A.Kind == rewrite.KindDDL {
		return false
	}
	for _, t := range pl.A.Sharded {
		if t == HistoryTable {
			return true
		}
	}
	return false
}

// HistoryTable is the table of the history reads of docs/design.md §4.
const HistoryTable = "conv_msg"

// String prints the plan on one line: its op, what the statement is and
// names, how it is routed and the facts that change how it runs. Golden
// plans (testdata/plans.json) are these lines.
func (pl *Plan) String() string {
	var b strings.Builder
	b.WriteString(pl.Op.String())
	a := pl.A
	if pl.Op.Sharded() || pl.Op == OpMaintenance || pl.Op == OpLoadData {
		fmt.Fprintf(&b, " %s %s", a.Kind, strings.Join(a.Sharded, ","))
		switch {
		case pl.Op == OpInsert || pl.Op == OpInsertSeq:
			fmt.Fprintf(&b, " rows=%s", values(a.InsertRows))
		case a.RoutedByNested && len(a.OtherKeys) > 0:
			fmt.Fprintf(&b, " by nested %s=%s", a.KeyColumn, values(a.OtherKeys[0]))
		case a.HasKey:
			fmt.Fprintf(&b, " by %s=%s", a.KeyColumn, values(a.Keys))
		}
		if n := len(a.OtherKeys); n > 0 && !a.RoutedByNested {
			fmt.Fprintf(&b, " colocated=%d", n)
		}
	} else if len(a.Unsharded) > 0 {
		fmt.Fprintf(&b, " %s", strings.Join(a.Unsharded, ","))
	}
	flag := func(on bool, name string) {
		if on {
			b.WriteString(" " + name)
		}
	}
	flag(a.ParamCount > 0, fmt.Sprintf("params=%d", a.ParamCount))
	flag(pl.Explain != "", "explain="+strings.TrimSpace(pl.Explain))
	flag(a.SessionRefs != 0, "session-values")
	flag(a.Returning != "", "returning")
	flag(pl.Hist != nil, "hist")
	if pl.Cold != nil {
		flag(pl.Cold.Read != nil, "cold=read")
		flag(pl.Cold.Write != nil, "cold=write")
		flag(pl.Cold.Other != nil, "cold=mysql-only")
	}
	flag(pl.Inline, "inline")
	flag(pl.NamedColumns, "named-columns")
	flag(pl.CalcFound, "calc-found-rows")
	flag(len(pl.Assigns) > 0, "assigns=@"+strings.Join(pl.Assigns, ",@"))
	flag(pl.NamedLock, "named-lock")
	flag(pl.SetsLastID, "sets-last-insert-id")
	flag(pl.ProcessList, "processlist")
	flag(pl.Temp != nil, "temp")
	flag(pl.StmtSet != nil, "set-statement")
	if pl.DiagWindow != nil {
		fmt.Fprintf(&b, " limit=%d,%d", pl.DiagWindow[0], pl.DiagWindow[1])
	}
	if pl.Routine != nil {
		fmt.Fprintf(&b, " %q", pl.Routine.What)
		flag(pl.Routine.Body, "body")
		flag(pl.Routine.Need != "", "needs="+pl.Routine.Need)
	}
	if pl.Search != nil {
		fmt.Fprintf(&b, " cols=%v", pl.Search.Columns)
		flag(pl.Search.Counts, "counts")
	}
	return b.String()
}

// Describe is a Build's outcome on one line: the plan (Plan.String), or
// the error the client gets, its class (or errno) and message.
func Describe(pl *Plan, err error) string {
	var me *mysql.MyError
	var ee *sqlerr.Error
	switch {
	case err == nil:
		return pl.String()
	case errors.As(err, &ee):
		return fmt.Sprintf("error %s: %s", ee.Code, ee.Msg)
	case errors.As(err, &me):
		return fmt.Sprintf("error %d: %s", me.Code, me.Message)
	}
	return "error: " + err.Error()
}

// values prints key values as the golden plans show them: ?n for a
// placeholder, the literal otherwise.
func values(vs []rewrite.Value) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		if v.Param >= 0 {
			parts[i] = fmt.Sprintf("?%d", v.Param)
		} else {
			parts[i] = fmt.Sprint(v.Lit)
		}
	}
	return "[" + strings.Join(parts, " ") + "]"
}
