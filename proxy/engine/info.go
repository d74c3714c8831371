package engine

import (
	"strconv"
	"strings"
)

// The info text of an OK packet is MariaDB's summary of a write:
// "Records: 3  Duplicates: 0  Warnings: 0" for an INSERT of several rows
// (or REPLACE, INSERT ... SELECT, ALTER), "Rows matched: 2  Changed: 1
// Warnings: 0" for an UPDATE, nothing for a DELETE or a one-row INSERT.
// The mysql client prints it, PHP's mysqli_info and MySQLdb's info() return
// it, and Node's mysql / mysql2 take an UPDATE's changedRows from it. A
// statement Convoy splits over several tables answers with the sums.

// infoField is one "Label: N" of an info text.
type infoField struct {
	label string
	n     uint64
}

// parseInfo splits an info text into its fields; false if it is not a list
// of "Label: N" separated by two spaces.
func parseInfo(s string) ([]infoField, bool) {
	var out []infoField
	for _, f := range strings.Split(s, "  ") {
		label, num, ok := strings.Cut(f, ": ")
		if !ok {
			return nil, false
		}
		n, err := strconv.ParseUint(num, 10, 64)
		if err != nil {
			return nil, false
		}
		out = append(out, infoField{label, n})
	}
	return out, len(out) > 0
}

func formatInfo(fs []infoField) string {
	var b strings.Builder
	for i, f := range fs {
		if i > 0 {
			b.WriteString("  ")
		}
		b.WriteString(f.label)
		b.WriteString(": ")
		b.WriteString(strconv.FormatUint(f.n, 10))
	}
	return b.String()
}

// addInfo is the info text of two parts of one statement: their fields
// summed. A part without one adds nothing; texts of different shapes
// (never two parts of one statement) keep the first.
func addInfo(a, b string) string {
	if a == "" || b == "" {
		return a + b
	}
	fa, ok1 := parseInfo(a)
	fb, ok2 := parseInfo(b)
	if !ok1 || !ok2 || len(fa) != len(fb) {
		return a
	}
	for i := range fa {
		if fa[i].label != fb[i].label {
			return a
		}
		fa[i].n += fb[i].n
	}
	return formatInfo(fa)
}

// oneRowInsertInfo is the info text MariaDB would have given a one-row part
// of a several-row INSERT had the row been in a statement of several:
// MariaDB omits it for one row. A duplicate is a row REPLACE replaced or
// ON DUPLICATE KEY UPDATE changed (2 rows affected) or INSERT IGNORE
// skipped (none affected, with the duplicate-key warning); an ON DUPLICATE
// KEY UPDATE that changed nothing is none, as in MariaDB.
func oneRowInsertInfo(affected uint64, warnings uint16) string {
	dup := uint64(0)
	if affected == 2 || (affected == 0 && warnings > 0) {
		dup = 1
	}
	return formatInfo([]infoField{{"Records", 1}, {"Duplicates", dup}, {"Warnings", uint64(warnings)}})
}

// withWarnings sets the Warnings field of an info text to the statement's
// count, which includes Convoy's own notes and conditions from every part,
// as the packet's warning count does.
func withWarnings(s string, n uint16) string {
	if s == "" {
		return s // most statements: no text, nothing to parse
	}
	fs, ok := parseInfo(s)
	if !ok || fs[len(fs)-1].label != "Warnings" {
		return s
	}
	fs[len(fs)-1].n = uint64(n)
	return formatInfo(fs)
}
