package rewrite

import (
	"strconv"
	"strings"

	"github.com/convoy-im/convoy/internal/sqltext"
)

// Literal is a literal cut out of a text statement by Normalize: Raw is the
// client's own token, printed back verbatim by RenderInline (so the backend
// reads exactly what the client wrote), Val its value for routing.
type Literal struct {
	Raw string
	Val any // int64 or uint64 for integers, string for strings, Undecoded
}

// Undecoded is the Val of a string literal Normalize keeps as text only (it
// has escapes or the _binary introducer): it is spliced back verbatim but
// never routed on, so Convoy never has to agree with MariaDB on its value.
type Undecoded struct{}

// Normalize replaces the literals of a text statement with `?`, so that
// statements differing only in their values share one parsed plan (the plan
// cache: parsing is most of the proxy's per-statement cost). It handles the
// forms IM traffic sends: plain decimal integers, and strings, also with
// backslash escapes or doubled quotes and after _binary (what drivers that
// interpolate parameters send for bytes; such strings are Undecoded). It
// reports !ok for anything else, which then takes the full parse: comments
// (they may be executable), `?`, `;`, double-quoted strings, strings right
// after another name character (other introducers, X'..', B'..', N'..',
// @'..'), and numbers that are not plain integers (1.5, 1e3, 0x7B, .5,
// integers beyond 64 bits).
//
// The end of a string is found as MariaDB's lexer finds it with backslash
// escapes on and a character set without 0x5C or 0x27 inside a multi-byte
// character; Convoy refuses the sessions for which that is not so
// (NO_BACKSLASH_ESCAPES, GBK and friends).
func Normalize(dst []byte, sql string, lits []Literal) ([]byte, []Literal, bool) {
	s := sqltext.New(sql)
	s.SkipSpace = true
	last := 0   // sql[last:] is not in dst yet: text between literals is copied in one piece
	glued := -1 // the end of the last token if it was a word or variable: a string there is glued to it (an introducer)
	for t := s.Next(); t.Kind != sqltext.End; t = s.Next() {
		after := glued == t.Pos
		glued = -1
		if t.Kind == sqltext.Word || t.Kind == sqltext.Var {
			glued = t.End()
		}
		switch t.Kind {
		case sqltext.String:
			if t.Text[0] != '\'' || t.Open() || after {
				return dst, lits, false // "...", unterminated, or after an introducer other than _binary
			}
			var val any = Undecoded{}
			if !t.Escaped() {
				val = t.Text[1 : len(t.Text)-1]
			}
			lits = append(lits, Literal{Raw: t.Text, Val: val})
			dst = append(append(dst, sql[last:t.Pos]...), '?')
			last = t.End()
		case sqltext.Word:
			if isBinaryIntroducer(t.Text) {
				save := *s
				if n := s.Next(); n.Kind == sqltext.String && n.Pos == t.End() && n.Text[0] == '\'' {
					if n.Open() {
						return dst, lits, false
					}
					lits = append(lits, Literal{Raw: sql[t.Pos:n.End()], Val: Undecoded{}})
					dst = append(append(dst, sql[last:t.Pos]...), '?')
					last = n.End()
					continue
				}
				*s = save
			}
			if c := t.Text[0]; c < '0' || c > '9' {
				continue
			}
			if !allDigits(t.Text) || t.End() < len(sql) && sql[t.End()] == '.' || t.Pos > 0 && sql[t.Pos-1] == '.' {
				return dst, lits, false // 1.5, 1e3, 0x7B, `.5`, or `t.1col`
			}
			v, ok := integer(t.Text)
			if !ok {
				return dst, lits, false
			}
			lits = append(lits, Literal{Raw: t.Text, Val: v})
			dst = append(append(dst, sql[last:t.Pos]...), '?')
			last = t.End()
		case sqltext.Name, sqltext.Var:
			if t.Open() || t.Kind == sqltext.Var && len(t.Text) > 1 && (t.Text[1] == '\'' || t.Text[1] == '"') {
				return dst, lits, false // a quoted user variable's name is a string to the lexer
			}
		case sqltext.Punct:
			if t.Text[0] == ';' || t.Text[0] == '-' && t.End() < len(sql) && sql[t.End()] == '-' {
				return dst, lits, false // several statements; "--" not a comment, which parsers read differently
			}
		default: // comments (they may be executable), ?
			return dst, lits, false
		}
	}
	return append(dst, sql[last:]...), lits, true
}

// SharedKey reports whether the plan of a normalised statement (params
// literals cut out by Normalize) may serve every statement of its shape,
// and which placeholder holds the shard key: a SELECT on sharded tables
// routed by one key value, or a one-row INSERT / REPLACE into a sharded
// table, with every literal where RenderInline may splice it (InlineShape).
// Other statements depend on more than their shape (several rows or values
// may split over shards).
func SharedKey(a *Analysis, params int) (key int, ok bool) {
	if len(a.Sharded) == 0 || a.ParamCount != params {
		return 0, false
	}
	if inl, _, _ := InlineShape(a); !inl {
		return 0, false
	}
	var v Value
	switch {
	case a.Kind == KindSelect && a.HasKey && len(a.Keys) == 1:
		v = a.Keys[0]
	case a.Kind == KindInsert && a.InsertHasKey && len(a.InsertRows) == 1:
		v = a.InsertRows[0]
	default:
		return 0, false
	}
	return v.Param, v.Param >= 0
}

func isBinaryIntroducer(tok string) bool {
	return len(tok) == 7 && (tok == "_binary" || strings.EqualFold(tok, "_binary"))
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// integer types a decimal literal as the parser does: int64 when it fits,
// else uint64; beyond that the parser makes a DECIMAL and so do we not.
func integer(tok string) (any, bool) {
	if len(tok) <= 18 { // all digits (the caller checked): cannot overflow, no strconv needed
		var v int64
		for i := 0; i < len(tok); i++ {
			v = v*10 + int64(tok[i]-'0')
		}
		return v, true
	}
	if v, err := strconv.ParseInt(tok, 10, 64); err == nil {
		return v, true
	}
	if v, err := strconv.ParseUint(tok, 10, 64); err == nil {
		return v, true
	}
	return nil, false
}
