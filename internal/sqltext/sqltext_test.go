package sqltext

import (
	"fmt"
	"strings"
	"testing"
)

var kindNames = map[Kind]string{End: "end", Space: "_", Comment: "comment", ExecOpen: "exec", ExecClose: "/exec",
	String: "str", Name: "name", Word: "w", Param: "?", Var: "var", Punct: "p"}

// tokens prints the tokens of text, blanks left out: kind:text, with a !
// after an Open token and a ~ after an Escaped one.
func tokens(s *Scanner) string {
	var out []string
	for t := s.Next(); t.Kind != End; t = s.Next() {
		if t.Kind == Space {
			continue
		}
		tok := kindNames[t.Kind] + ":" + t.Text
		if t.Open() {
			tok += "!"
		}
		if t.Escaped() {
			tok += "~"
		}
		out = append(out, tok)
	}
	return strings.Join(out, " ")
}

func TestTokens(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"SELECT a,b FROM t WHERE x = ?", "w:SELECT w:a p:, w:b w:FROM w:t w:WHERE w:x p:= ?:?"},
		{`'it''s' 'a\'b' "q" 'plain'`, `str:'it''s'~ str:'a\'b'~ str:"q" str:'plain'`},
		{"'unterminated", "str:'unterminated!"},
		{"`a``b` `open", "name:`a``b`~ name:`open!"},
		{"`a\\` b", "name:`a\\` w:b"}, // no backslash escapes in names
		{"# line\nx -- line\ny --z", "comment:# line w:x comment:-- line w:y p:- p:- w:z"},
		{"1--\n2 --", "w:1 comment:-- w:2 comment:--"},
		{"a /* c */ b /* open", "w:a comment:/* c */ w:b comment:/* open!"},
		{"/*+ hint */ x", "comment:/*+ hint */ w:x"},
		{"/*!50003 CALL p() */", "exec:/*!50003 w:CALL w:p p:( p:) /exec:*/"},
		{"/*M!100301 x*/ /*!1234 y*/", "exec:/*M!100301 w:x /exec:*/ exec:/*! w:1234 w:y /exec:*/"},
		{"/*! a /* inner */ b */ c */", "exec:/*! w:a comment:/* inner */ w:b /exec:*/ w:c p:* p:/"},
		{"/*!99999 never", "exec:/*!99999! w:never"},
		{"@a @`b c` @'d' @@session.sql_mode @x.y", "var:@a var:@`b c` var:@'d' var:@@session.sql_mode var:@x.y"},
		{"@'open", "var:@'open!"},
		{"_binary'\\0' X'0A' 1.5e-3", `w:_binary str:'\0'~ w:X str:'0A' w:1 p:. w:5e p:- w:3`},
		{"é名 x", "w:é名 w:x"},
		{"a;b", "w:a p:; w:b"},
	} {
		if got := tokens(New(c.in)); got != c.want {
			t.Errorf("%q:\n got %s\nwant %s", c.in, got, c.want)
		}
	}
}

func TestNoBackslashEscapes(t *testing.T) {
	s := New(`'a\' b 'c\\'`)
	s.NoBackslashEscapes = true
	if got, want := tokens(s), `str:'a\' w:b str:'c\\'`; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

func TestPlainAbove(t *testing.T) {
	s := New("/*!120000 x */ /*!110000 y */ /*! z */")
	s.PlainAbove = 119999
	if got, want := tokens(s), "comment:/*!120000 x */ exec:/*!110000 w:y /exec:*/ exec:/*! w:z /exec:*/"; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

func TestVersion(t *testing.T) {
	for _, c := range []struct {
		in          string
		v           int
		mariadb, ok bool
	}{
		{"/*!50003 x */", 50003, false, true},
		{"/*M!100301 x */", 100301, true, true},
		{"/*!1234 x */", 0, false, false},
		{"/*! x */", 0, false, false},
		{"/*!9999999 x */", 999999, false, true},
	} {
		tok := New(c.in).Next()
		v, m, ok := Version(tok)
		if tok.Kind != ExecOpen || v != c.v || m != c.mariadb || ok != c.ok {
			t.Errorf("%q: kind %d version %d %v %v, want %d %v %v", c.in, tok.Kind, v, m, ok, c.v, c.mariadb, c.ok)
		}
	}
}

func TestCode(t *testing.T) {
	s := New("/* a */ /*!50003 SELECT */ -- x\n 1")
	var got []string
	for tok := s.Code(); tok.Kind != End; tok = s.Code() {
		got = append(got, tok.Text)
	}
	if fmt.Sprint(got) != "[SELECT 1]" {
		t.Errorf("Code: %v", got)
	}
}

func TestVarName(t *testing.T) {
	for in, want := range map[string]string{"@a": "a", "@'b c'": "b c", "@`d`": "d", "@@x.y": "x.y!", "@'open": "open", "@": ""} {
		name, sys := VarName(New(in).Next())
		if sys {
			name += "!"
		}
		if name != want {
			t.Errorf("VarName(%q) = %q, want %q", in, name, want)
		}
	}
}

// FuzzScanner: the tokens cover the text exactly, in order, each non-empty,
// in both modes; and the scanner never panics.
func FuzzScanner(f *testing.F) {
	for _, s := range []string{"SELECT 'a\\'' `b` /*!5 x*/ -- c\n#d\n@'e' @@f ?;", "/*M!100000 /* */ */*/", "'", "`", "/*", "@'", "--", "/*!12345"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		for _, nbe := range []bool{false, true} {
			s := New(text)
			s.NoBackslashEscapes, s.PlainAbove = nbe, 50699
			var b strings.Builder
			for tok := s.Next(); tok.Kind != End; tok = s.Next() {
				if tok.Text == "" || tok.Pos != b.Len() || text[tok.Pos:tok.End()] != tok.Text {
					t.Fatalf("%q: token %+v at %d", text, tok, b.Len())
				}
				b.WriteString(tok.Text)
			}
			if b.String() != text {
				t.Fatalf("%q: tokens cover %q", text, b.String())
			}
		}
	})
}
