package rewrite

import "strconv"

// Literal is a literal cut out of a text statement by Normalize: Raw is the
// client's own token, printed back verbatim by RenderInline (so the backend
// reads exactly what the client wrote), Val its value for routing.
type Literal struct {
	Raw string
	Val any // int64 or uint64 for integers, string for strings
}

// Normalize replaces the literals of a text statement with `?`, so that
// statements differing only in their values share one parsed plan (the plan
// cache: parsing is most of the proxy's per-statement cost). It handles the
// forms IM traffic sends, plain decimal integers and strings without escapes,
// and reports !ok for anything else, which then takes the full parse:
// comments (they may be executable), `?`, `;`, double-quoted strings, strings
// with backslashes or doubled quotes, strings right after a name character
// (charset introducers, X'..', B'..', N'..', @'..'), and numbers that are not
// plain integers (1.5, 1e3, 0x7B, .5, integers beyond 64 bits).
func Normalize(dst []byte, sql string, lits []Literal) ([]byte, []Literal, bool) {
	for i := 0; i < len(sql); {
		c := sql[i]
		switch {
		case c == '\'':
			if i > 0 && (nameChar(sql[i-1]) || sql[i-1] == '@') {
				return dst, lits, false
			}
			j := i + 1
			for j < len(sql) && sql[j] != '\'' {
				if sql[j] == '\\' {
					return dst, lits, false
				}
				j++
			}
			if j == len(sql) || (j+1 < len(sql) && sql[j+1] == '\'') {
				return dst, lits, false // unterminated, or a doubled quote
			}
			lits = append(lits, Literal{Raw: sql[i : j+1], Val: sql[i+1 : j]})
			dst = append(dst, '?')
			i = j + 1
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
