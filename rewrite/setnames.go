package rewrite

import (
	"regexp"
	"strings"
)

// setNamesRE matches SET NAMES / SET CHARACTER SET / SET CHARSET with a bare
// or quoted name and an optional COLLATE, alone in its statement.
var setNamesRE = regexp.MustCompile(`(?is)^\s*SET\s+(NAMES|CHARACTER\s+SET|CHARSET)\s+(?:'(\w+)'|"(\w+)"|(\w+))(?:\s+COLLATE\s+(?:'(\w+)'|"(\w+)"|(\w+)))?\s*;?\s*$`)

// AnalyzeSetNames reads a SET NAMES statement whose character set the
// parser does not know (it knows the few TiDB supports; MariaDB has dozens,
// latin2, cp1257, koi8r ...): the same Analysis Analyze gives for a known
// one, whose names the backend then checks. ok is false for anything else.
func AnalyzeSetNames(sql string) (*Analysis, bool) {
	m := setNamesRE.FindStringSubmatch(StripComments(sql))
	if m == nil {
		return nil, false
	}
	name := "names"
	if !strings.EqualFold(m[1], "NAMES") {
		name = "character_set"
	}
	cs := m[2] + m[3] + m[4]
	if strings.EqualFold(cs, "DEFAULT") {
		cs = "DEFAULT"
	}
	return &Analysis{Kind: KindSet, SetVars: []SetVar{{Name: name, Value: cs, Collate: m[5] + m[6] + m[7]}}}, true
}
