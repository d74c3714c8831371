package backend

import (
	"crypto/tls"
	"database/sql"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/convoy-im/convoy/router"
)

// OpenSQL opens a database/sql handle on ds (database db, "" for none)
// for the work that is not client traffic (migration copies, checksums,
// size statistics), with the datasource's password and TLS mode, the
// collation the pools use, and the driver options migrate needs: server-side
// prepared statements (exact binary values) and no time parsing (zero dates
// and fractions kept as text).
func OpenSQL(ds router.Datasource, db string) (*sql.DB, error) {
	pw, err := ResolvePassword(ds)
	if err != nil {
		return nil, err
	}
	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd, cfg.Net, cfg.Addr, cfg.DBName = ds.User, pw, "tcp", ds.Addr, db
	cfg.Collation = Collation
	cfg.Timeout, cfg.ReadTimeout, cfg.WriteTimeout = 5*time.Second, 5*time.Minute, time.Minute
	cfg.InterpolateParams = false
	cfg.ParseTime = false
	cfg.AllowNativePasswords = true
	tc, err := TLSConfig(ds)
	if err != nil {
		return nil, err
	}
	switch {
	case ds.EffectiveMode() == router.TLSPreferred:
		cfg.TLSConfig = "preferred" // the driver's own: TLS when offered
	case tc != nil:
		cfg.TLS = tc
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	return sql.OpenDB(conn), nil
}

// TLSConfig is the tls.Config for a connection to ds that must be secured
// (required, verify-ca, verify-identity), nil for disabled and preferred:
// a caller that cannot read the server's greeting first (the binlog
// reader) treats preferred as clear text.
func TLSConfig(ds router.Datasource) (*tls.Config, error) {
	t, err := newTLSSetup(ds)
	if err != nil || t.mode == router.TLSPreferred {
		return nil, err
	}
	return t.cfg, nil
}
