package admin

import (
	"context"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/convoy-im/convoy/proxy/sqlerr"
)

// SearchStatus is what SHOW SEARCH STATUS needs of the message search
// index (package search, wired by cmd/convoy).
type SearchStatus interface {
	// Status returns column names and one row per datasource (nil: NULL).
	Status(ctx context.Context) ([]string, [][]any, error)
}

// SetSearch gives SHOW SEARCH STATUS the search index, when message search
// is on; call before serving.
func (a *Admin) SetSearch(s SearchStatus) { a.search = s }

// showSearchStatus answers SHOW SEARCH STATUS.
func (a *Admin) showSearchStatus() (*mysql.Result, error) {
	if a.search == nil {
		return nil, sqlerr.Errorf(sqlerr.NotSupported, "SHOW SEARCH STATUS: message search is off in this process (search.enabled)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), migrationTimeout)
	defer cancel()
	cols, rows, err := a.search.Status(ctx)
	if err != nil {
		return nil, sqlerr.Errorf(sqlerr.BackendUnavailable, "SHOW SEARCH STATUS: %v", err)
	}
	return table(cols, rows)
}
