// Package schema holds Convoy's IM schema, im.sql (the five logical tables),
// for the programs and tests that install it.
package schema

import (
	_ "embed"
	"fmt"
	"regexp"
	"strings"
)

// IM is im.sql: CREATE TABLE IF NOT EXISTS statements of the logical
// tables, naming no database.
//
//go:embed im.sql
var IM string

// Table is the CREATE TABLE statement of a logical table under another
// name: the physical table `db`.`physical`.
func Table(logical, db, physical string) (string, error) {
	stmt := regexp.MustCompile(`(?s)CREATE TABLE IF NOT EXISTS ` + regexp.QuoteMeta(logical) + ` \(.*?;`).FindString(IM)
	if stmt == "" {
		return "", fmt.Errorf("schema: no CREATE TABLE %s in im.sql", logical)
	}
	return strings.Replace(stmt, "IF NOT EXISTS "+logical+" ", "`"+db+"`.`"+physical+"` ", 1), nil
}
