package migrate

import (
	"context"
	"database/sql"
	"fmt"
	"sync"

	"github.com/convoy-im/convoy/binlog"
	"github.com/convoy-im/convoy/router"
)

// pools opens each datasource once (per name, address and account: a
// datasource redefined in the routes gets a new pool).
type pools struct {
	connect Connector
	mu      sync.Mutex
	m       map[string]poolEntry
}

type poolEntry struct {
	db *sql.DB
	bl binlog.Config
}

func newPools(c Connector) *pools { return &pools{connect: c, m: map[string]poolEntry{}} }

func (p *pools) get(ctx context.Context, ds router.Datasource) (*sql.DB, binlog.Config, error) {
	key := ds.Name + "\x00" + ds.Addr + "\x00" + ds.User
	p.mu.Lock()
	e, ok := p.m[key]
	p.mu.Unlock()
	if ok {
		return e.db, e.bl, nil
	}
	db, bl, err := p.connect(ctx, ds)
	if err != nil {
		return nil, binlog.Config{}, fmt.Errorf("migrate: connect to datasource %s: %w", ds.Name, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.m[key]; ok { // opened concurrently
		db.Close()
		return e.db, e.bl, nil
	}
	p.m[key] = poolEntry{db: db, bl: bl}
	return db, bl, nil
}

// close closes every pool. Idempotent.
func (p *pools) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, e := range p.m {
		e.db.Close()
		delete(p.m, k)
	}
}
