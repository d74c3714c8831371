package rewrite

import (
	"strconv"
	"strings"
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
	for i := 0; i < len(sql); {
		c := sql[i]
		switch {
		case c == '\'':
			if i > 0 && (nameChar(sql[i-1]) || sql[i-1] == '@') {
				return dst, lits, false
			}
			end, plain, ok := stringEnd(sql, i)
			if !ok {
				return dst, lits, false
			}
			var val any = Undecoded{}
			if plain {
				val = sql[i+1 : end-1]
			}
			lits = append(lits, Literal{Raw: sql[i:end], Val: val})
			dst = append(dst, '?')
			i = end
		case c == '`':
			j := i + 1
			for j < len(sql) && sql[j] != '`' {
				j++
			}
			if j == len(sql) {
				return dst, lits, false
			}
			dst = append(dst, sql[i:j+1]...) // a doubled backquote is two names back to back here: same bytes
			i = j + 1
		case nameChar(c):
			j := i
			for j < len(sql) && nameChar(sql[j]) {
				j++
			}
			tok := sql[i:j]
			if j < len(sql) && sql[j] == '\'' && isBinaryIntroducer(tok) && (i == 0 || !nameChar(sql[i-1]) && sql[i-1] != '@') {
				end, _, ok := stringEnd(sql, j)
				if !ok {
					return dst, lits, false
				}
				lits = append(lits, Literal{Raw: sql[i:end], Val: Undecoded{}})
				dst = append(dst, '?')
				i = end
				continue
			}
			if c >= '0' && c <= '9' {
				if !allDigits(tok) || (j < len(sql) && sql[j] == '.') {
					return dst, lits, false
				}
				if i > 0 && sql[i-1] == '.' {
					return dst, lits, false // `.5`, or `t.1col`
				}
				v, ok := integer(tok)
				if !ok {
					return dst, lits, false
				}
				lits = append(lits, Literal{Raw: tok, Val: v})
				dst = append(dst, '?')
			} else {
				dst = append(dst, tok...)
			}
			i = j
		case c == '"' || c == '?' || c == ';' || c == '#':
			return dst, lits, false
		case (c == '-' && i+1 < len(sql) && sql[i+1] == '-') || (c == '/' && i+1 < len(sql) && sql[i+1] == '*'):
			return dst, lits, false
		default:
			dst = append(dst, c)
			i++
		}
	}
	return dst, lits, true
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

// stringEnd finds the end (one past the closing quote) of the string
// literal opening at sql[i]; plain reports that it holds no escape.
func stringEnd(sql string, i int) (end int, plain, ok bool) {
	plain = true
	for j := i + 1; j < len(sql); j++ {
		switch sql[j] {
		case '\\':
			plain = false
			j++ // the escaped byte, whatever it is
		case '\'':
			if j+1 < len(sql) && sql[j+1] == '\'' {
				plain = false
				j++ // a doubled quote is one quote of the value
				continue
			}
			return j + 1, plain, true
		}
	}
	return 0, false, false // unterminated
}

func isBinaryIntroducer(tok string) bool {
	return len(tok) == 7 && (tok == "_binary" || strings.EqualFold(tok, "_binary"))
}

// nameChar: bytes of unquoted names and number tokens (MySQL allows names
// to start with a digit; any byte >= 0x80 is part of a UTF-8 name).
func nameChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '$' || c >= 0x80
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
	if v, err := strconv.ParseInt(tok, 10, 64); err == nil {
		return v, true
	}
	if v, err := strconv.ParseUint(tok, 10, 64); err == nil {
		return v, true
	}
	return nil, false
}
