package rewrite

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/convoy-im/convoy/internal/sqltext"
)

// MariaDB's own spellings and statements that the parser does not know or
// prints otherwise, read and written through plain text.

// WordOffsets are the offsets of word (a keyword, matched without regard
// to case) in text where it is a word of the SQL: not in a quoted string
// or name, a comment or a variable's name. In order.
func WordOffsets(text, word string) []int {
	var out []int
	s := sqltext.New(text)
	for t := s.Next(); t.Kind != sqltext.End; t = s.Next() {
		if t.Is(word) {
			out = append(out, t.Pos)
		}
	}
	return out
}

// edit replaces n bytes of a text at offset at.
type edit struct {
	at, n int
	with  string
}

// applyEdits applies non-overlapping edits to text.
func applyEdits(text string, edits []edit) string {
	slices.SortFunc(edits, func(a, b edit) int { return a.at - b.at })
	var b strings.Builder
	b.Grow(len(text) + 16*len(edits))
	last := 0
	for _, e := range edits {
		b.WriteString(text[last:e.at])
		b.WriteString(e.with)
		last = e.at + e.n
	}
	b.WriteString(text[last:])
	return b.String()
}

// mariadbShareLock rewrites the parser's FOR SHARE into MariaDB's LOCK IN
// SHARE MODE (its only spelling of a shared-lock read: MariaDB answers FOR
// SHARE with 1064). The parser reads both spellings as one lock type and
// prints FOR SHARE [NOWAIT | SKIP LOCKED]. In restored text every name is
// backquoted and every string single-quoted, so outside quotes the words
// can only be that clause.
func mariadbShareLock(text string) string {
	if !strings.Contains(text, " FOR SHARE") {
		return text
	}
	var edits []edit
	for _, at := range WordOffsets(text, "FOR") {
		if share := WordOffsets(text[at+len("FOR"):], "SHARE"); len(share) > 0 && strings.TrimSpace(text[at+len("FOR"):at+len("FOR")+share[0]]) == "" {
			edits = append(edits, edit{at, len("FOR") + share[0] + len("SHARE"), "LOCK IN SHARE MODE"})
		}
	}
	return applyEdits(text, edits)
}

// lockInShareWait matches MariaDB's LOCK IN SHARE MODE WAIT n, which the
// parser does not know.
var lockInShareWait = regexp.MustCompile(`(?is)\bLOCK\s+IN\s+SHARE\s+MODE\s+WAIT\s+(\d+)\b`)

// LockWaitAsSetStatement reads a statement with LOCK IN SHARE MODE WAIT n
// as what it means, SET STATEMENT lock_wait_timeout = n,
// innodb_lock_wait_timeout = n FOR the statement without WAIT n (false:
// sql has none, or more than one). (FOR UPDATE WAIT n and NOWAIT the
// parser knows.)
func LockWaitAsSetStatement(sql string) (string, bool) {
	m := lockInShareWait.FindAllStringSubmatchIndex(sql, -1)
	if len(m) != 1 || !slices.Contains(WordOffsets(sql, "LOCK"), m[0][0]) {
		return "", false // (none, several, or in a quoted string)
	}
	n := sql[m[0][2]:m[0][3]]
	wait := WordOffsets(sql[m[0][0]:m[0][1]], "WAIT")
	if len(wait) == 0 {
		return "", false
	}
	stripped := sql[:m[0][0]+wait[0]] + sql[m[0][1]:]
	return fmt.Sprintf("SET STATEMENT lock_wait_timeout = %s, innodb_lock_wait_timeout = %s FOR %s", n, n, strings.TrimSpace(stripped)), true
}

// fetchRows matches the standard's OFFSET n ROWS FETCH {FIRST | NEXT} m
// ROWS ONLY (and FETCH NEXT m ROWS ONLY), which the parser knows only as
// FETCH FIRST m ROWS ONLY without an offset.
var fetchRows = regexp.MustCompile(`(?is)(?:\bOFFSET\s+(\d+|\?)\s+ROWS?\s+)?\bFETCH\s+(?:FIRST|NEXT)\s+(\d+|\?)\s+ROWS?\s+ONLY\b`)

// MariaDBSpellings rewrites MariaDB-only spellings the parser does not
// know into equivalents it does: LOCK IN SHARE MODE followed by NOWAIT or
// SKIP LOCKED becomes FOR SHARE (printed back as MariaDB's LOCK IN SHARE
// MODE, see Restore), OFFSET n ROWS FETCH {FIRST | NEXT} m ROWS ONLY
// becomes LIMIT n, m, and VALUE(col), MariaDB's synonym of VALUES(col) in
// ON DUPLICATE KEY UPDATE, becomes VALUES(col). false: nothing to rewrite.
// For a text the parser refused only.
func MariaDBSpellings(text string) (string, bool) {
	var edits []edit
	for _, at := range WordOffsets(text, "LOCK") {
		rest := strings.Fields(text[at:])
		if len(rest) >= 5 && strings.EqualFold(rest[1], "IN") && strings.EqualFold(rest[2], "SHARE") && strings.EqualFold(rest[3], "MODE") &&
			(strings.EqualFold(rest[4], "NOWAIT") || strings.EqualFold(rest[4], "SKIP")) {
			if mode := WordOffsets(text[at:], "MODE"); len(mode) > 0 { // (offsets in text itself: no case folding of the text)
				edits = append(edits, edit{at, mode[0] + len("MODE"), "FOR SHARE"})
			}
		}
	}
	// OFFSET n ROWS FETCH NEXT m ROWS ONLY is LIMIT n, m (the offset
	// first, as in the text: placeholders keep their order).
	fetches := WordOffsets(text, "FETCH")
	for _, m := range fetchRows.FindAllStringSubmatchIndex(text, -1) {
		if at := strings.LastIndex(strings.ToUpper(text[m[0]:m[1]]), "FETCH"); !slices.Contains(fetches, m[0]+at) {
			continue // in a quoted string
		}
		limit := "LIMIT " + text[m[4]:m[5]]
		if m[2] >= 0 {
			limit = "LIMIT " + text[m[2]:m[3]] + ", " + text[m[4]:m[5]]
		}
		edits = append(edits, edit{m[0], m[1] - m[0], limit})
	}
	for _, at := range WordOffsets(text, "VALUE") {
		if after := strings.TrimLeft(text[at+len("VALUE"):], " \t\r\n"); strings.HasPrefix(after, "(") {
			edits = append(edits, edit{at, len("VALUE"), "VALUES"})
		}
	}
	if len(edits) == 0 {
		return text, false
	}
	return applyEdits(text, edits), true
}

// maintenanceText matches the table maintenance statements the parser does
// not know: CHECK, REPAIR and CHECKSUM TABLE.
var maintenanceText = regexp.MustCompile(`(?is)^\s*(check|repair|checksum)\s+(?:(no_write_to_binlog|local)\s+)?tables?\s+(.+?)\s*;?\s*$`)

// maintenanceOptions are the words that may follow their tables.
var maintenanceOptions = map[string]bool{"FOR": true, "UPGRADE": true, "QUICK": true, "FAST": true, "MEDIUM": true,
	"EXTENDED": true, "CHANGED": true, "USE_FRM": true, "FORCE": true}

// AnalyzeMaintenance analyzes CHECK / REPAIR / CHECKSUM TABLE, which the
// parser refuses, as a KindMaintenance statement (false: sql is not one):
// its table list is read by the parser as ANALYZE TABLE's.
func AnalyzeMaintenance(p *Parser, sql string) (*Analysis, bool, error) {
	m := maintenanceText.FindStringSubmatch(sql)
	if m == nil {
		return nil, false, nil
	}
	op, list := strings.ToLower(m[1]), m[3]
	words := strings.Fields(list)
	n := len(words)
	for n > 1 && maintenanceOptions[strings.ToUpper(words[n-1])] {
		n--
	}
	options := strings.Join(words[n:], " ")
	for i := len(words) - 1; i >= n; i-- { // the option words off the end
		list = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(list), words[i]))
	}
	stmts, err := p.Parse("ANALYZE TABLE " + list)
	if err != nil || len(stmts) != 1 {
		return nil, false, nil // not a table list: the caller reports the syntax error
	}
	a, err := Analyze(stmts[0])
	if err != nil {
		return nil, true, err
	}
	if a.Kind != KindMaintenance {
		return nil, false, nil
	}
	a.Maintenance.Op, a.Maintenance.Local, a.Maintenance.Options = op, m[2] != "", options
	return a, true, nil
}
