package rewrite

import (
	"errors"
	"testing"
)

func TestCheckComments(t *testing.T) {
	ok := []string{
		"SELECT 1",
		"SELECT /*! STRAIGHT_JOIN */ 1",
		"/*!40101 SET NAMES utf8mb4 */",
		"SELECT 1 /*!50001 , 2 */",
		"SELECT '/*M! x */', \"/*!99999\", `/*M!` FROM t",
		"SELECT 1 -- /*M! not a comment start\n",
		"SELECT 1 # /*!99999 x */",
		"SELECT /* plain /*M! inside a plain comment */ 1",
		"SELECT 'it''s /*M!' , 'a\\'b /*M!'",
		"SELECT 1 /* unterminated plain",
	}
	for _, q := range ok {
		if err := CheckComments(q); err != nil {
			t.Errorf("%q: %v", q, err)
		}
	}
	var ue *UnsupportedError
	var se *SyntaxError
	bad := map[string]any{
		"DELETE FROM conv_msg WHERE conv_id = 1 /*M! AND seq = 5 */":      &ue,
		"UPDATE t SET a = 1 WHERE k = 1 /*M!100000 AND seq = 3 */":        &ue,
		"DELETE FROM conv_msg WHERE conv_id = 74 /*!99999 AND seq = 2 */": &ue,
		"SELECT 1 /*!50700 , 2 */":                                        &ue,
		"SELECT * FROM conv_msg WHERE conv_id = 42 /*! AND seq = 2":       &se,
		"SELECT 1 /*!40101 , (1 /*M! +1 */) */":                           &ue,
		"SELECT 1 --x /*M! y */":                                          &ue, // --x is not a comment in MySQL
	}
	for q, target := range bad {
		if err := CheckComments(q); err == nil || !errors.As(err, target) {
			t.Errorf("%q: %v, want %T", q, err, target)
		}
	}
}

func FuzzCheckComments(f *testing.F) {
	for _, s := range []string{"SELECT 1 /*M! x */", "/*!40101 x */", "'", "`a``b`", "--", "/*!", "/*"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		_ = CheckComments(s) // must not panic or hang
	})
}

// Bytes that are not UTF-8 are refused outside string literals (the lexer
// would turn them into '?') and kept inside them.
func TestCheckCommentsRefusesNonUTF8Names(t *testing.T) {
	for q, ok := range map[string]bool{
		"SELECT 0\xa0000(0)":                 false,
		"SELECT `a\xffb` FROM t":             false,
		"SELECT 'a\xffb', \"\xfe\" FROM 中文表": true,
		"SELECT 1 /* \xff */":                true,
		"SELECT 1 -- \xff\n":                 true,
	} {
		err := CheckComments(q)
		var se *SyntaxError
		if ok != (err == nil) || (!ok && !errors.As(err, &se)) {
			t.Errorf("%q: %v, want ok=%v", q, err, ok)
		}
	}
}

func TestStripComments(t *testing.T) {
	for in, want := range map[string]string{
		"SET /* x */ TRANSACTION READ ONLY": "SET   TRANSACTION READ ONLY",
		"SET -- x\nTRANSACTION":             "SET  \nTRANSACTION",
		"# a\nSET 'a/*b*/' `c#`":            " \nSET 'a/*b*/' `c#`",
		"/*!40101 SET */ x":                 "  SET   x",
		"SELECT 1 /* open":                  "SELECT 1  ",
		"SELECT 1-- x":                      "SELECT 1 ",
		"SELECT 1--x":                       "SELECT 1--x",
		"/*M!100301 SET */ x":               "  SET   x", // MariaDB runs it: SQL
		"/*!":                               " ",         // (once a panic: an unterminated executable comment)
		"/*!50003 'a*/b' */ c":              "  'a*/b'   c",
	} {
		if got := StripComments(in); got != want {
			t.Errorf("StripComments(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestAnalyzeSetNames(t *testing.T) {
	for in, want := range map[string]string{
		"SET NAMES cp1257": "names=cp1257",
		"set names 'latin2' collate latin2_czech_cs;": "names=latin2 collate latin2_czech_cs",
		"/* c */ SET CHARACTER SET koi8r":             "character_set=koi8r",
		"SET CHARSET \"greek\"":                       "character_set=greek",
		"SET NAMES default":                           "names=DEFAULT",
		"SET NAMES cp1257, autocommit = 0":            "",
		"SET NAMES cp1257; DROP TABLE t":              "",
		"SELECT 'SET NAMES cp1257'":                   "",
		"SET NAMES cp1257 COLLATE":                    "",
		"SET NAMES `cp1257`":                          "",
	} {
		a, ok := AnalyzeSetNames(in)
		got := ""
		if ok {
			v := a.SetVars[0]
			got = v.Name + "=" + v.Value
			if v.Collate != "" {
				got += " collate " + v.Collate
			}
		}
		if got != want {
			t.Errorf("AnalyzeSetNames(%q) = %q, want %q", in, got, want)
		}
	}
}
