package binlog

import (
	"context"
	"database/sql"

	"github.com/convoy-im/convoy/router"
)

// Connector opens what the readers of a datasource's rows and binlog need
// (the migration's jobs and dual-write, the search feed): a pool of its
// connections (the copier's exact-value rules apply:
// interpolateParams=false, parseTime=false) and the binlog account (Addr,
// User, Password, TLS; the caller sets ServerID and Log). One type, so
// that cmd/convoy wires one function into all of them.
type Connector func(ctx context.Context, ds router.Datasource) (*sql.DB, Config, error)
