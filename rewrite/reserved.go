package rewrite

import (
	"strings"

	"github.com/convoy-im/convoy/internal/sqltext"
)

// ReservedVarPrefix starts the names of the user variables Convoy's own
// sessions set on the datasources (the migration's: migrate/fence.go);
// clients may not name them.
const ReservedVarPrefix = "convoy_"

// NamesReservedVar reports whether sql names a user variable starting with
// ReservedVarPrefix, quoted or not. A scan of the text cannot tell a
// string literal that merely contains such a name: an '@' right after a
// word character (an e-mail address) or another '@' (@@system_variable) is
// passed over, any other counts.
func NamesReservedVar(sql string) bool {
	for i := 0; ; i++ {
		j := strings.IndexByte(sql[i:], '@')
		if j < 0 {
			return false
		}
		i += j
		if i > 0 && (sqltext.IsNameByte(sql[i-1]) || sql[i-1] == '@') {
			continue
		}
		k := i + 1
		if k < len(sql) && (sql[k] == '`' || sql[k] == '\'' || sql[k] == '"') {
			k++
		}
		if len(sql)-k >= len(ReservedVarPrefix) && strings.EqualFold(sql[k:k+len(ReservedVarPrefix)], ReservedVarPrefix) {
			return true
		}
	}
}
