// Package sqlq quotes names for the SQL Convoy writes itself, the one way
// every package does it.
package sqlq

import "strings"

// Ident is name as a backquoted identifier (a backquote in it doubled).
func Ident(name string) string { return string(AppendIdent(nil, name)) }

// AppendIdent appends name as a backquoted identifier to dst.
func AppendIdent(dst []byte, name string) []byte {
	dst = append(dst, '`')
	if strings.IndexByte(name, '`') < 0 {
		dst = append(dst, name...)
	} else {
		dst = append(dst, strings.ReplaceAll(name, "`", "``")...)
	}
	return append(dst, '`')
}
