// Package sqltext reads SQL text as MariaDB's lexer cuts it into tokens,
// for the places that must look at a statement's text rather than at the
// parser's tree: before the parser runs (the plan cache's literal cut, a
// log line's digest, which comments a statement holds), for what the
// parser does not know (routine bodies, RETURNING, MariaDB's spellings),
// and where a session's sql_mode changes how text reads
// (NO_BACKSLASH_ESCAPES).
//
// It only finds where tokens start and end: quotes (backslash escapes and
// doubled quotes), backquoted names, comments (`#`, `-- `, `/* */`), the
// executable comments MariaDB runs as SQL (`/*! */`, `/*M! */`, with a
// version), user and system variables, `?`, words and single bytes. It
// never fails: an unterminated quote or comment is a token that runs to the
// end of the text, flagged Open, and what that means is the caller's
// business. Keywords, numbers and names are all words; the caller gives
// them meaning.
//
// One scanner rather than one per use: each hand-written loop had its own
// idea of where a `--` comment starts or whether a backslash escapes the
// closing quote, and a difference between two of them is a statement the
// proxy reads one way and the server another.
package sqltext

import "strings"

// Kind is what a token is.
type Kind uint8

const (
	// End: no more tokens.
	End Kind = iota
	// Space is a run of the blanks the lexer skips between tokens.
	Space
	// Comment is a comment the server does not run: `# ...` and `-- ...`
	// to the end of the line (the newline not included), `/* ... */`,
	// including an optimizer hint `/*+ ... */`, and an executable comment
	// whose version is above the scanner's PlainAbove. Open: `/*` never
	// closed (it runs to the end).
	Comment
	// ExecOpen opens an executable comment: `/*!` or `/*M!` and the
	// version digits if any (Version reads them). The tokens that follow
	// are its content, up to ExecClose. Open: no `*/` follows.
	ExecOpen
	// ExecClose is the `*/` that closes an executable comment.
	ExecClose
	// String is a '...' or "..." literal, quotes included. Open: it never
	// ends. Escaped: its value is not the bytes between its quotes (a
	// backslash escape or a doubled quote).
	String
	// Name is a `backquoted` name, quotes included (a doubled backquote is
	// one of the name's characters: Escaped). Open: it never ends.
	Name
	// Word is a run of name bytes: a keyword, an unquoted name, a number or
	// part of one (1.5 is a word, a '.' and a word). Bytes >= 0x80 are name
	// bytes, as in MariaDB's UTF-8 names.
	Word
	// Param is a `?` placeholder.
	Param
	// Var is a user variable (@name, @'name', @"name", @`name`) or a system
	// variable (@@name, @@scope.name); VarName reads the name.
	Var
	// Punct is any other single byte.
	Punct
)

// Token is one token: its kind, its text (a substring of the scanned
// text: no copy), where it starts, and whether it is Open or Escaped.
// (Four fields: the compiler keeps a struct of at most four in registers;
// a fifth made every token a trip through memory.)
type Token struct {
	Text  string
	Pos   int
	Kind  Kind
	flags uint8
}

const (
	flagOpen uint8 = 1 << iota
	flagEscaped
)

// Open reports a string, name or comment the text ends inside.
func (t Token) Open() bool { return t.flags&flagOpen != 0 }

// Escaped reports a String or Name whose value differs from its inner
// bytes (a backslash escape or a doubled quote).
func (t Token) Escaped() bool { return t.flags&flagEscaped != 0 }

// End is the offset just past the token.
func (t Token) End() int { return t.Pos + len(t.Text) }

// Is reports whether t is the word w, compared without regard to case as
// the server compares keywords.
func (t Token) Is(w string) bool { return t.Kind == Word && strings.EqualFold(t.Text, w) }

// IsPunct reports whether t is the single byte c.
func (t Token) IsPunct(c byte) bool { return t.Kind == Punct && t.Text[0] == c }

// Scanner reads the tokens of one text. The zero value is not usable; use
// New, then set the mode fields before the first Next.
type Scanner struct {
	text string
	pos  int // where the next token starts
	// The token last read: tok, at start.
	tok    string
	start  int
	kind   Kind
	flags  uint8
	inExec bool

	// NoBackslashEscapes reads strings as a session with that sql_mode
	// does: a backslash is an ordinary character and never escapes the
	// closing quote.
	NoBackslashEscapes bool
	// PlainAbove, when not zero, makes an executable comment with a version
	// above it a plain Comment, as the server does with a version newer
	// than its own.
	PlainAbove int
	// SkipSpace: Next returns no Space tokens (what lies between two
	// tokens is then blanks). Blanks are half the tokens of most SQL, and
	// a caller that copies text between tokens does not need them.
	SkipSpace bool
}

// New returns a scanner at the start of text.
func New(text string) *Scanner { return &Scanner{text: text} }

// Seek moves to offset pos (for a caller that read a longer token itself,
// such as a number with an exponent). It must not be inside a comment.
func (s *Scanner) Seek(pos int) { s.pos = pos }

// InExec reports whether the next token is inside an executable comment.
func (s *Scanner) InExec() bool { return s.inExec }

// Next reads the next token and returns it, End at the end of the text.
// (Small enough to inline: the token is built in the caller, not copied
// out of a call, which is most of a scan's cost.)
func (s *Scanner) Next() Token {
	s.scan()
	return s.token()
}

// token returns the token last read.
func (s *Scanner) token() Token {
	return Token{Text: s.tok, Pos: s.start, Kind: s.kind, flags: s.flags}
}

// Code reads the next token that is SQL: blanks, comments and the marks
// of executable comments are skipped (their content is SQL and is
// returned).
func (s *Scanner) Code() Token {
	for {
		switch s.scan() {
		case Space, Comment, ExecOpen, ExecClose:
		default:
			return s.token()
		}
	}
}

// IsNameByte reports whether c is a byte of an unquoted name or number
// token (a name may start with a digit; a byte >= 0x80 is part of a UTF-8
// name).
func IsNameByte(c byte) bool { return class[c] == cName }

// Byte classes, looked up rather than compared: the scanner runs on every
// statement before the plan cache (per-statement CPU).
const (
	cOther uint8 = iota
	cSpace
	cName
	cSpecial // starts something other than a one-byte token
)

var class = func() (t [256]uint8) {
	for c := 0; c < 256; c++ {
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			t[c] = cSpace
		case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '$' || c >= 0x80:
			t[c] = cName
		case c == '#' || c == '-' || c == '/' || c == '*' || c == '\'' || c == '"' || c == '`' || c == '?' || c == '@':
			t[c] = cSpecial
		}
	}
	return t
}()

// scan reads the next token and returns its kind (token returns the
// token), End at the end of the text.
func (s *Scanner) scan() Kind {
	t := s.text
	at := s.pos
	if s.SkipSpace {
		for at < len(t) && class[t[at]] == cSpace {
			at++
		}
	}
	s.start, s.flags = at, 0
	if at >= len(t) {
		s.start, s.pos, s.kind, s.tok = len(t), len(t), End, ""
		return End
	}
	j := at + 1
	k := Punct
	switch c := t[at]; class[c] {
	case cSpace:
		for j < len(t) && class[t[j]] == cSpace {
			j++
		}
		k = Space
	case cName:
		for j < len(t) && class[t[j]] == cName {
			j++
		}
		k = Word
	case cSpecial:
		k, j = s.special(c, at)
	}
	s.pos, s.kind, s.tok = j, k, t[at:j]
	return k
}

// special reads a token that starts with a byte of class cSpecial: its
// kind and end.
func (s *Scanner) special(c byte, at int) (Kind, int) {
	t := s.text
	switch {
	case c == '#' || c == '-' && at+1 < len(t) && t[at+1] == '-' && (at+2 == len(t) || t[at+2] <= ' '):
		// "--" starts a comment only before a blank or a control byte:
		// "--1" is minus minus one.
		j := strings.IndexByte(t[at:], '\n')
		if j < 0 {
			j = len(t) - at
		}
		return Comment, at + j
	case c == '/' && at+1 < len(t) && t[at+1] == '*':
		return s.blockComment(at)
	case c == '*' && s.inExec && at+1 < len(t) && t[at+1] == '/':
		s.inExec = false
		return ExecClose, at + 2
	case c == '\'' || c == '"':
		return String, s.quoted(at, c != '`')
	case c == '`':
		return Name, s.quoted(at, false)
	case c == '?':
		return Param, at + 1
	case c == '@':
		return Var, s.variable(at)
	}
	return Punct, at + 1
}

// blockComment reads the comment opening at at ("/*").
func (s *Scanner) blockComment(at int) (Kind, int) {
	t := s.text
	body := at + 2
	if !s.inExec {
		marker := 0
		switch {
		case strings.HasPrefix(t[body:], "!"):
			marker = 1
		case strings.HasPrefix(t[body:], "M!"):
			marker = 2
		}
		if marker > 0 {
			j := body + marker
			if v, n := version(t[j:]); n == 0 || s.PlainAbove == 0 || v <= s.PlainAbove {
				if !strings.Contains(t[j+n:], "*/") {
					s.flags |= flagOpen
				}
				s.inExec = true
				return ExecOpen, j + n
			}
		}
	}
	// A plain comment, or one nested in an executable comment: the
	// server ends either at the first "*/".
	end := strings.Index(t[body:], "*/")
	if end < 0 {
		s.flags |= flagOpen
		return Comment, len(t)
	}
	return Comment, body + end + 2
}

// version reads the version of an executable comment as the server does:
// five digits, or six when a sixth follows (MariaDB's 10.x and later);
// fewer than five digits are no version but the comment's first SQL.
func version(s string) (v, n int) {
	for n < len(s) && n < 6 && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	if n < 5 {
		return 0, 0
	}
	for _, d := range s[:n] {
		v = v*10 + int(d-'0')
	}
	return v, n
}

// Version returns the version of an ExecOpen token (ok false: it has
// none, the comment always runs) and whether it is MariaDB's /*M!.
func Version(exec Token) (v int, mariadb, ok bool) {
	marker := 3 // "/*!"
	if strings.HasPrefix(exec.Text, "/*M!") {
		marker, mariadb = 4, true
	}
	v, n := version(exec.Text[marker:])
	return v, mariadb, n > 0
}

// quoted reads the string or backquoted name opening at at and returns
// its end; escapes: a backslash escapes the next byte.
func (s *Scanner) quoted(at int, escapes bool) int {
	t := s.text
	q := t[at]
	escapes = escapes && !s.NoBackslashEscapes
	for j := at + 1; j < len(t); j++ {
		switch {
		case t[j] == '\\' && escapes:
			s.flags |= flagEscaped
			j++ // the escaped byte, whatever it is
		case t[j] == q:
			if j+1 < len(t) && t[j+1] == q {
				s.flags |= flagEscaped
				j++ // a doubled quote is one quote of the value
				continue
			}
			return j + 1
		}
	}
	s.flags |= flagOpen
	return len(t)
}

// variable reads @name, @'name', @"name", @`name` or @@[scope.]name and
// returns its end.
func (s *Scanner) variable(at int) int {
	t := s.text
	j := at + 1
	if j < len(t) && (t[j] == '\'' || t[j] == '"' || t[j] == '`') {
		end := s.quoted(j, t[j] != '`')
		s.flags &^= flagEscaped // (a name: only plain ones are read back)
		return end
	}
	if j < len(t) && t[j] == '@' {
		j++
	}
	for j < len(t) && (class[t[j]] == cName || t[j] == '.') {
		j++
	}
	return j
}

// VarName returns the name of a Var token: without its @ or @@ and, for a
// quoted user variable, without its quotes (doubled quotes are left as
// written; only plain names are read back). System reports @@.
func VarName(v Token) (name string, system bool) {
	n := strings.TrimPrefix(v.Text, "@")
	if strings.HasPrefix(n, "@") {
		return n[1:], true
	}
	if n != "" && (n[0] == '\'' || n[0] == '"' || n[0] == '`') {
		end := len(n)
		if !v.Open() {
			end--
		}
		return n[1:max(end, 1)], false
	}
	return n, false
}
