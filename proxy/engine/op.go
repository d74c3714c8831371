package engine

import (
	"fmt"
	"strings"

	"github.com/pingcap/tidb/pkg/parser/ast"

	"github.com/convoy-im/convoy/rewrite"
)

// op is what the engine does with a statement: decided once, when its plan
// is built, and the one thing run switches on. Facts only known when the
// statement runs (inside a transaction, a migration's read ramp, the
// bound key values) choose between the paths of one op, never the op.
type op uint8

const (
	opEmpty       op = iota // a comment only: OK
	opBegin                 // BEGIN / START TRANSACTION
	opEndTxn                // COMMIT / ROLLBACK
	opSavepoint             // SAVEPOINT / ROLLBACK TO / RELEASE SAVEPOINT
	opSet                   // SET: the session keeps it
	opUse                   // USE db
	opKill                  // KILL [QUERY]: a Convoy client connection
	opShowGrants            // SHOW GRANTS: the Convoy account's privileges
	opProcessList           // SHOW PROCESSLIST: Convoy's client connections
	opDiagnostics           // SHOW WARNINGS / ERRORS: the session's diagnostics area
	opIntrospect            // SHOW DATABASES / TABLES, information_schema: logical names
	opPassthrough           // unsharded: the client's text to the default datasource
	opRoutine               // stored code the parser does not read (routine.go)
	opSearch                // msg_search (search.go): no datasource sees it
	opLoadData              // LOAD DATA LOCAL INFILE into a sharded table (loaddata.go)
	opMaintenance           // ANALYZE / OPTIMIZE / CHECK ... on every physical table
	opExplain               // EXPLAIN of a statement on sharded tables (explain.go)
	opDDL                   // DDL fanned out to every physical table
	opShowSharded           // SHOW COLUMNS / INDEX / CREATE TABLE of a sharded table
	opInsert                // INSERT / REPLACE split by each row's shard
	opInsertSeq             // INSERT INTO conv_msg allocating seqs (seq.go)
	opHistory               // a seed 000 history read the hot tier may answer
	opRoute                 // a statement routed by its shard key values
	opScatter               // a SELECT without the shard key: every shard, merged
)

var opNames = [...]string{
	opEmpty: "Empty", opBegin: "Begin", opEndTxn: "EndTxn", opSavepoint: "Savepoint",
	opSet: "Set", opUse: "Use", opKill: "Kill", opShowGrants: "ShowGrants",
	opProcessList: "ProcessList", opDiagnostics: "Diagnostics", opIntrospect: "Introspect",
	opPassthrough: "Passthrough", opRoutine: "Routine", opSearch: "Search",
	opLoadData: "LoadData", opMaintenance: "Maintenance", opExplain: "Explain",
	opDDL: "DDL", opShowSharded: "ShowSharded", opInsert: "Insert", opInsertSeq: "InsertSeq",
	opHistory: "History", opRoute: "Route", opScatter: "Scatter",
}

func (o op) String() string {
	if int(o) < len(opNames) {
		return opNames[o]
	}
	return fmt.Sprintf("op(%d)", o)
}

// sharded reports the ops that run on sharded tables through a template:
// they share the preamble of runOnShards (session values, the migration
// hold, the dual-write).
func (o op) sharded() bool {
	return o >= opExplain
}

// decideOp is the classification of a built plan. Its order is the order
// of precedence: stored code and search are recognised before the parser's
// kind of statement, a statement's kind before what it names.
func (s *Session) decideOp(pl *plan) op {
	a := pl.A
	switch {
	case pl.Routine != nil:
		return opRoutine
	case pl.Search != nil:
		return opSearch
	}
	switch a.Kind {
	case rewrite.KindEmpty:
		return opEmpty
	case rewrite.KindBegin:
		return opBegin
	case rewrite.KindCommit, rewrite.KindRollback:
		return opEndTxn
	case rewrite.KindSavepoint:
		return opSavepoint
	case rewrite.KindSet:
		return opSet
	case rewrite.KindUse:
		return opUse
	case rewrite.KindLoadData:
		return opLoadData
	case rewrite.KindMaintenance:
		if len(a.Sharded) > 0 {
			return opMaintenance
		}
	}
	if pl.Tmpl == nil {
		switch st := a.Stmt.(type) {
		case *ast.KillStmt:
			return opKill
		case *ast.ShowStmt:
			switch st.Tp {
			case ast.ShowGrants:
				return opShowGrants
			case ast.ShowProcessList:
				return opProcessList
			case ast.ShowWarnings, ast.ShowErrors:
				return opDiagnostics
			case ast.ShowDatabases, ast.ShowTables, ast.ShowTableStatus:
				return opIntrospect
			}
		}
		if a.Kind == rewrite.KindSelect && readsInfoSchema(a, s.db) {
			return opIntrospect
		}
		return opPassthrough
	}
	switch {
	case pl.Explain != "":
		return opExplain
	case a.Kind == rewrite.KindDDL:
		return opDDL
	case a.Kind == rewrite.KindShow:
		return opShowSharded
	case a.Kind == rewrite.KindInsert && rewrite.NeedsSeq(a):
		return opInsertSeq
	case a.Kind == rewrite.KindInsert:
		return opInsert
	case pl.Hist != nil:
		return opHistory
	case a.Kind == rewrite.KindSelect && !a.HasKey && !a.RoutedByNested:
		return opScatter
	}
	return opRoute
}

// String prints the plan on one line: its op, what the statement is and
// names, how it is routed and the facts that change how it runs. Golden
// plans (testdata/plans.json) are these lines.
func (pl *plan) String() string {
	var b strings.Builder
	b.WriteString(pl.Op.String())
	a := pl.A
	if pl.Op.sharded() || pl.Op == opMaintenance || pl.Op == opLoadData {
		fmt.Fprintf(&b, " %s %s", a.Kind, strings.Join(a.Sharded, ","))
		switch {
		case pl.Op == opInsert || pl.Op == opInsertSeq:
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
		flag(pl.Cold.read != nil, "cold=read")
		flag(pl.Cold.write != nil, "cold=write")
		flag(pl.Cold.other != nil, "cold=mysql-only")
	}
	flag(pl.Inline, "inline")
	flag(pl.textArgs, "text-args")
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
