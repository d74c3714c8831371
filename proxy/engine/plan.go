package engine

import (
	"strings"
	"unicode/utf8"

	"github.com/pingcap/tidb/pkg/parser/ast"

	"github.com/convoy-im/convoy/proxy/backend"
	"github.com/convoy-im/convoy/proxy/planbuilder"
	"github.com/convoy-im/convoy/proxy/sqlerr"
	"github.com/convoy-im/convoy/rewrite"
	"github.com/convoy-im/convoy/router"
)

// plan is a statement's plan (planbuilder.Plan, which planning fixed) and
// what the engine learns while running it. Plans are session-owned (the
// AST is not safe for concurrent use), built once per COM_QUERY or once
// per PREPARE; the text plan cache shares its plans read-only.
type plan struct {
	*planbuilder.Plan
	// scatter is the every-shard form of a SELECT, built on first use.
	scatter *scatterPlan
	// noInline is set once a result had a column without an exact binary
	// form (see Plan.Inline).
	noInline bool
	// textArgs marks a shared plan from the plan cache: its arguments are
	// the literals of a text statement (rewrite.Literal), always inlined;
	// keyParam is the one holding the shard key.
	textArgs bool
	keyParam int
	// seqHoles is the seq-allocating INSERT with every value a hole (see
	// seqBatch), built on first use.
	seqHoles *rewrite.Template
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

// Statement is one statement of a multi-statement query (Split): its text
// and, when Split parsed it, its AST, so that it is not parsed again.
type Statement struct {
	Text string
	node ast.StmtNode
}

// Split cuts a multi-statement query into its statements, for a client
// that enabled multi-statements; each is then run (routed, checked,
// authorised) on its own by RunStatement. A text of several statements is
// parsed whole first: a syntax error anywhere refuses all of it, before
// anything ran (MariaDB would have run the statements before the bad one).
// The statements keep their ASTs from that parse.
func (s *Session) Split(sql string) ([]Statement, error) {
	if rewrite.OneStatement(sql) {
		// The common case (drivers that enable multi-statements send one
		// at a time): not parsed here, so that the plan cache can serve it
		// without a parse at all.
		return []Statement{{Text: sql}}, nil
	}
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
	switch {
	case len(stmts) == 0:
		return []Statement{{Text: sql}}, nil
	case len(stmts) == 1:
		return []Statement{{Text: sql, node: stmts[0]}}, nil
	case strings.Contains(sql, "/*!"):
		// A statement boundary inside an executable comment has no text of
		// its own to run separately.
		return nil, sqlerr.Errorf(sqlerr.NotSupported, "multi-statements with executable comments (/*! ... */) are not supported through Convoy: send the statements one by one")
	}
	out := make([]Statement, len(stmts))
	at := 0
	for i, st := range stmts {
		// The parser's offsets are the whole text's; a statement's own
		// text starts at at (rewrite reads literals at their offsets).
		st.SetOriginTextPosition(at)
		out[i] = Statement{Text: st.Text(), node: st}
		at += len(st.Text())
	}
	return out, nil
}

// plan parses and analyses one statement and decides its op.
func (s *Session) plan(sql string) (*plan, error) {
	return s.planParsed(sql, nil)
}

// planParsed is plan for a statement Split parsed already (stmt; nil: not
// parsed yet).
func (s *Session) planParsed(sql string, stmt ast.StmtNode) (*plan, error) {
	ctx := planbuilder.Context{
		Parser: s.parser, DB: s.db, OnShard: s.onShard, NoBackslashEscapes: s.sqlModeNBE != "",
		Hot: s.e.hot != nil, Cold: s.e.cold != nil, Search: s.e.search != nil,
		Schema: (*schema)(s.e),
	}
	var p *planbuilder.Plan
	var err error
	if stmt != nil {
		p, err = planbuilder.BuildParsed(sql, stmt, ctx)
	} else {
		p, err = planbuilder.Build(sql, ctx)
	}
	if err != nil {
		return nil, err
	}
	return &plan{Plan: p}, nil
}

// schema gives planning the columns of a sharded table (an INSERT without
// a column list).
type schema Engine

func (e *schema) Columns(table string) ([]string, error) { return (*Engine)(e).logicalColumns(table) }

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
