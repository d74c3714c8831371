package main

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/convoy-im/convoy/archive"
	"github.com/convoy-im/convoy/cold"
	"github.com/convoy-im/convoy/proxy/backend"
	"github.com/convoy-im/convoy/proxy/engine"
	"github.com/convoy-im/convoy/router"
)

var _ engine.ArchiveAdmin = (*archive.Admin)(nil)

// coldStoreURL is cold.store, or a file:// store under the working
// directory's .state/ (where make run keeps its data), so the archiver
// needs nothing set up.
func coldStoreURL(c Config) (string, error) {
	if c.Cold.Store != "" {
		return c.Cold.Store, nil
	}
	dir, err := filepath.Abs(filepath.Join(".state", "cold"))
	if err != nil {
		return "", err
	}
	return "file://" + dir, nil
}

// archiveConnector opens an archiver run's connection to a datasource:
// its account and password, its TLS mode (preferred is clear text here,
// as for the binlog stream: this client cannot read the greeting first)
// and the collation the pools use.
func archiveConnector(ctx context.Context, ds router.Datasource) (*client.Conn, error) {
	pw, err := backend.ResolvePassword(ds)
	if err != nil {
		return nil, err
	}
	tc, err := backend.TLSConfig(ds)
	if err != nil {
		return nil, err
	}
	return client.ConnectWithContext(ctx, ds.Addr, ds.User, pw, "", 5*time.Second, func(c *client.Conn) error {
		if tc != nil {
			c.SetTLSConfig(tc)
		}
		return c.SetCollation(backend.Collation)
	})
}

// coldTier is what convoy serve runs of the cold tier.
type coldTier struct {
	store   cold.Store
	manager *archive.Manager
}

// startColdTier opens the store and starts this process's archiver
// manager (c.Cold.Enabled is set).
func startColdTier(ctx context.Context, cli *clientv3.Client, c Config, id string, log *zap.Logger, reg prometheus.Registerer) (*coldTier, error) {
	url, err := coldStoreURL(c)
	if err != nil {
		return nil, err
	}
	store, err := cold.OpenStore(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("cold.store: %w", err) // OpenStore's errors hide the secret key
	}
	metrics, err := archive.NewMetrics(reg)
	if err != nil {
		store.Close()
		return nil, err
	}
	a, err := archive.New(archive.Config{Client: cli, Cluster: c.Etcd.Cluster, ID: id, Store: store, Connect: archiveConnector,
		Prefix: c.Cold.Prefix, After: c.Cold.After, DeleteAfter: c.Cold.DeleteAfter, Rate: c.Cold.Rate, Log: log, Metrics: metrics})
	if err != nil {
		store.Close()
		return nil, err
	}
	return &coldTier{store: store, manager: archive.NewManager(a, 0, 0)}, nil
}

func (t *coldTier) Close() {
	t.manager.Close()
	t.store.Close()
}

// archiveAdmin answers the archive directives when the cold tier is on
// (nil otherwise: the directives then say it is off).
func archiveAdmin(cli *clientv3.Client, c Config) engine.ArchiveAdmin {
	if !c.Cold.Enabled {
		return nil
	}
	return archive.NewAdmin(cli, c.Etcd.Cluster)
}
