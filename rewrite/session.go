package rewrite

import (
	"strconv"
	"strings"

	"github.com/pingcap/tidb/pkg/parser/ast"
	"github.com/pingcap/tidb/pkg/parser/format"
	"github.com/pingcap/tidb/pkg/parser/test_driver"
)

// SessionRef is a value a statement reads that belongs to the client's
// session, which Convoy keeps itself: a pooled backend connection would
// answer with its own (autocommit always on, another connection's insert id,
// the backend account, the backend's connection id, the database the pooled
// connection last used).
type SessionRef uint8

// Session values Convoy answers for.
const (
	RefAutocommit       SessionRef = iota // @@autocommit
	RefInTransaction                      // @@in_transaction
	RefLastInsertID                       // @@last_insert_id, @@identity, LAST_INSERT_ID()
	RefMaxAllowedPacket                   // @@max_allowed_packet
	RefDatabase                           // DATABASE(), SCHEMA()
	RefUser                               // USER(), SESSION_USER(), SYSTEM_USER()
	RefCurrentUser                        // CURRENT_USER(), CURRENT_USER
	RefConnectionID                       // CONNECTION_ID()
	RefWarningCount                       // @@warning_count (the session's diagnostics area)
	RefErrorCount                         // @@error_count
	RefFoundRows                          // FOUND_ROWS(): rows of the session's last result set
	RefRowCount                           // ROW_COUNT(): rows its last statement changed (-1: a result set or an error)
	RefColdPartial                        // @@convoy_cold_partial: Convoy's own variable, unknown to the server
	RefSQLMode                            // @@sql_mode: the session's own while it has NO_BACKSLASH_ESCAPES
	RefTxnMode                            // @@convoy_txn: Convoy's own (single or outbox)
)

// SessionRefs is a set of SessionRef.
type SessionRefs uint16

// Has reports whether r is in the set.
func (s SessionRefs) Has(r SessionRef) bool { return s&(1<<r) != 0 }

// sessionVars are the session-scope system variables answered from the
// session, by lower-case name.
var sessionVars = map[string]SessionRef{
	"autocommit":          RefAutocommit,
	"in_transaction":      RefInTransaction,
	"last_insert_id":      RefLastInsertID,
	"identity":            RefLastInsertID,
	"max_allowed_packet":  RefMaxAllowedPacket,
	"warning_count":       RefWarningCount,
	"error_count":         RefErrorCount,
	"convoy_cold_partial": RefColdPartial,
	"sql_mode":            RefSQLMode,
	"convoy_txn":          RefTxnMode,
}

// SessionVariable reports whether the session-scope system variable name
// (lower-case) is answered from the session, for SHOW VARIABLES.
func SessionVariable(name string) (SessionRef, bool) {
	r, ok := sessionVars[name]
	return r, ok
}

// sessionRef reports whether n reads a session value.
func sessionRef(n ast.Node) (SessionRef, bool) {
	switch x := n.(type) {
	case *ast.VariableExpr:
		if !x.IsSystem || x.IsGlobal || x.IsInstance || x.Value != nil {
			return 0, false
		}
		r, ok := sessionVars[strings.ToLower(x.Name)]
		return r, ok
	case *ast.FuncCallExpr:
		switch x.FnName.L {
		case ast.Database, ast.Schema:
			return RefDatabase, len(x.Args) == 0
		case ast.User, ast.SessionUser, ast.SystemUser:
			return RefUser, len(x.Args) == 0
		case ast.CurrentUser:
			return RefCurrentUser, len(x.Args) == 0
		case ast.ConnectionID:
			return RefConnectionID, len(x.Args) == 0
		case ast.FoundRows:
			return RefFoundRows, len(x.Args) == 0
		case ast.RowCount:
			return RefRowCount, len(x.Args) == 0
		case ast.LastInsertId:
			// LAST_INSERT_ID(expr) sets the value: it runs on the backend.
			return RefLastInsertID, len(x.Args) == 0
		}
	}
	return 0, false
}

// SessionValue is one session value, printed as SQL of the same type as
// the expression it stands for: a number is unsigned (`CAST(n AS
// UNSIGNED)`) unless Signed (@@autocommit is a signed BIGINT; Num then holds
// an int64, ROW_COUNT() may be -1); Null prints
// NULL; Keep leaves the expression to the server. Own marks a variable
// only Convoy has: the value is printed alone, since the server would
// refuse the expression (1193), so the column is typed as the literal.
type SessionValue struct {
	Keep   bool
	Own    bool
	Str    string
	Num    uint64
	IsNum  bool
	Signed bool
	Null   bool
}

// WithSessionValues returns a copy of a whose templates (NewTemplate,
// SubsetInsert, SeqInsert) print values(ref) wherever the statement reads a
// session value, for one execution (the values change from one to the
// next: build such templates per execution, never cache them).
//
// A value is printed as IF(0, <the original expression>, <value>): the
// server derives the result column's type, length and nullability from both
// arms, so the metadata is what it would be for the expression itself
// (a plain literal would be typed INT NOT NULL where @@autocommit is a
// nullable BIGINT), while the value is Convoy's. Unaliased result columns
// keep the client's text as their name.
func (a *Analysis) WithSessionValues(values func(SessionRef) SessionValue) *Analysis {
	c := *a
	c.values = values
	return &c
}

// SessionTemplate is NewTemplate(a.WithSessionValues(values)).
func SessionTemplate(a *Analysis, values func(SessionRef) SessionValue) (*Template, error) {
	return NewTemplate(a.WithSessionValues(values))
}

// template restores stmt (a.Stmt, or a variant of it such as an INSERT
// with a subset of its rows) with the session's values printed where it
// reads them (WithSessionValues) and the RETURNING clause at its end. The
// AST is put back as it was before it returns.
func (a *Analysis) template(stmt ast.StmtNode, params map[*test_driver.ParamMarkerExpr]int) (*Template, error) {
	if a.values != nil {
		sw := sessionSwapper{values: a.values}
		stmt.Accept(&sw)
		defer func() {
			sw.undo = true
			stmt.Accept(&sw)
		}()
	}
	return a.withReturning(newTemplate(stmt, a.Sharded, params))
}

// sessionValue stands in for a session-value read while a statement is
// restored.
type sessionValue struct {
	ast.ExprNode
	v SessionValue
}

func (s *sessionValue) Restore(ctx *format.RestoreCtx) error {
	if s.v.Own {
		b, _ := AppendLiteral(nil, s.v.Str)
		ctx.WritePlain(string(b))
		return nil
	}
	ctx.WritePlain("IF(0,")
	if err := s.ExprNode.Restore(ctx); err != nil {
		return err
	}
	ctx.WritePlain(",")
	switch {
	case s.v.Null:
		ctx.WritePlain("NULL")
	case s.v.IsNum && s.v.Signed:
		ctx.WritePlain(strconv.FormatInt(int64(s.v.Num), 10))
	case s.v.IsNum:
		// IF(0, unsigned, signed literal) would be typed DECIMAL.
		ctx.WritePlain("CAST(" + strconv.FormatUint(s.v.Num, 10) + " AS UNSIGNED)")
	default:
		b, _ := AppendLiteral(nil, s.v.Str)
		ctx.WritePlain(string(b))
	}
	ctx.WritePlain(")")
	return nil
}

func (s *sessionValue) Accept(v ast.Visitor) (ast.Node, bool) {
	n, skip := v.Enter(s)
	if skip {
		return v.Leave(n)
	}
	return v.Leave(s)
}

// sessionSwapper replaces session-value reads with sessionValue nodes
// (parents store what Leave returns) and, with undo set, puts them back.
type sessionSwapper struct {
	values func(SessionRef) SessionValue
	undo   bool
}

func (s *sessionSwapper) Enter(n ast.Node) (ast.Node, bool) {
	if _, ok := n.(*sessionValue); ok {
		return n, true
	}
	if _, ok := sessionRef(n); ok && !s.undo {
		return n, true // do not descend: the whole node is replaced
	}
	return n, false
}

func (s *sessionSwapper) Leave(n ast.Node) (ast.Node, bool) {
	if sv, ok := n.(*sessionValue); ok {
		if s.undo {
			return sv.ExprNode, true
		}
		return n, true
	}
	if r, ok := sessionRef(n); ok && !s.undo {
		if v := s.values(r); !v.Keep {
			return &sessionValue{ExprNode: n.(ast.ExprNode), v: v}, true
		}
	}
	return n, true
}
