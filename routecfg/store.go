package routecfg

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/convoy-im/convoy/router"
)

var (
	// ErrNotFound means etcd holds no route document for the cluster.
	ErrNotFound = errors.New("no route document in etcd")
	// ErrExists means Init found a document already stored.
	ErrExists = errors.New("a route document already exists")
	// ErrVersionConflict means the document changed in etcd since the caller
	// read it: its version is not the one the caller edited, or another
	// writer won the compare-and-swap.
	ErrVersionConflict = errors.New("route document version conflict")
)

// Store reads and writes the route document of one cluster in etcd. It holds
// no state besides the client, so any number of Stores (in any number of
// processes) can share a cluster; etcd transactions keep writes safe.
type Store struct {
	cli     *clientv3.Client
	cluster string
	key     string
	err     error // invalid cluster name, reported by every call
}

// NewStore returns a Store for the cluster's key /convoy/<cluster>/routes. A
// cluster name that is empty or contains '/' would alias another cluster's
// key; every call then returns an error instead.
func NewStore(cli *clientv3.Client, cluster string) *Store {
	s := &Store{cli: cli, cluster: cluster, key: RoutesKey(cluster)}
	if cluster == "" || strings.ContainsAny(cluster, "/\x00") || strings.TrimSpace(cluster) != cluster {
		s.err = fmt.Errorf("routecfg: invalid cluster name %q (it must be non-empty, without '/' or surrounding spaces)", cluster)
	}
	return s
}

// RoutesKey is the etcd key holding a cluster's route document.
func RoutesKey(cluster string) string { return "/convoy/" + cluster + "/routes" }

// Key is the etcd key this Store reads and writes.
func (s *Store) Key() string { return s.key }

// Cluster is the cluster name this Store serves.
func (s *Store) Cluster() string { return s.cluster }

// stored is one read of the key: the decoded document plus the etcd
// revisions needed to compare-and-swap on it and to start a watch after it.
type stored struct {
	doc         router.Document
	modRevision int64 // key's last modification; 0 when absent
	revision    int64 // store revision of the read (watch from revision+1)
	decodeErr   error // value present but not a route document
}

func (s *Store) read(ctx context.Context) (stored, error) {
	if s.err != nil {
		return stored{}, s.err
	}
	resp, err := s.cli.Get(ctx, s.key)
	if err != nil {
		return stored{}, fmt.Errorf("routecfg: read %s from etcd: %w", s.key, err)
	}
	st := stored{revision: resp.Header.Revision}
	if len(resp.Kvs) == 0 {
		return st, nil
	}
	kv := resp.Kvs[0]
	st.modRevision = kv.ModRevision
	st.doc, st.decodeErr = DecodeDocument(kv.Value)
	return st, nil
}

// DecodeDocument parses a stored document. Unknown fields are ignored: a
// newer Convoy may add fields while older proxies still watch the key.
//
// It is exported for package coord: the migration lock's runner and each
// proxy's lock follower read the route document in their own etcd
// transactions, beside the lock, and must parse it exactly as Store and
// Watcher do.
func DecodeDocument(b []byte) (router.Document, error) {
	var doc router.Document
	if err := json.Unmarshal(b, &doc); err != nil {
		return router.Document{}, fmt.Errorf("%w: stored value is not a route document: %v", router.ErrInvalidRoutes, err)
	}
	return doc, nil
}

// Get returns the stored document, ErrNotFound when there is none, or an
// error wrapping router.ErrInvalidRoutes when the value is not JSON of a
// route document. Get does not validate the routes themselves.
func (s *Store) Get(ctx context.Context) (router.Document, error) {
	st, err := s.read(ctx)
	if err != nil {
		return router.Document{}, err
	}
	if st.modRevision == 0 {
		return router.Document{}, fmt.Errorf("routecfg: %w for cluster %q (key %s)", ErrNotFound, s.cluster, s.key)
	}
	return st.doc, st.decodeErr
}

// Init stores doc if the cluster has no document yet (an etcd transaction on
// CreateRevision == 0, so two concurrent Inits cannot both win). A doc with
// Version <= 0 is stored as version 1. It returns ErrExists when a document is
// already there, and a router.ErrInvalidRoutes error, writing nothing, when
// doc does not validate.
func (s *Store) Init(ctx context.Context, doc router.Document) error {
	if s.err != nil {
		return s.err
	}
	if doc.Version <= 0 {
		doc.Version = 1
	}
	s.stamp(&doc, "routes init")
	val, err := EncodeDocument(doc)
	if err != nil {
		return err
	}
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(s.key), "=", 0)).
		Then(clientv3.OpPut(s.key, string(val))).
		Commit()
	if err != nil {
		return fmt.Errorf("routecfg: write %s to etcd: %w", s.key, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("routecfg: %w for cluster %q (key %s)", ErrExists, s.cluster, s.key)
	}
	return nil
}

// Apply stores an edited document. doc.Version must be the version stored
// now (the one the caller read and edited); the document is stored as
// doc.Version+1 by a transaction that compares the key's ModRevision from the
// same read, so of two concurrent Applies on one version exactly one wins and
// the other gets ErrVersionConflict. An invalid doc is never written. It
// returns the new version.
func (s *Store) Apply(ctx context.Context, doc router.Document) (int64, error) {
	st, err := s.read(ctx)
	if err != nil {
		return 0, err
	}
	if st.modRevision == 0 {
		return 0, fmt.Errorf("routecfg: %w for cluster %q (key %s); run `routes init` first", ErrNotFound, s.cluster, s.key)
	}
	if st.decodeErr != nil {
		return 0, fmt.Errorf("routecfg: cannot compare versions: %w; overwrite it with `routes init --force`", st.decodeErr)
	}
	if doc.Version != st.doc.Version {
		return 0, fmt.Errorf("routecfg: %w: the document was edited from version %d but etcd holds version %d; run `routes show`, redo the edit on the current version and apply again",
			ErrVersionConflict, doc.Version, st.doc.Version)
	}
	doc.Version = st.doc.Version + 1
	s.stamp(&doc, "routes apply")
	return doc.Version, s.swap(ctx, st.modRevision, doc)
}

// Replace stores doc whatever the stored document holds, as the next version
// after it (or after doc.Version, whichever is higher, so the version never
// goes backwards for the watching proxies). It is still a compare-and-swap:
// if the key changes between the read and the write, it returns
// ErrVersionConflict rather than overwrite a change it never saw. When the
// key is absent it behaves like Init. It returns the stored version.
func (s *Store) Replace(ctx context.Context, doc router.Document) (int64, error) {
	st, err := s.read(ctx)
	if err != nil {
		return 0, err
	}
	if st.modRevision == 0 {
		if doc.Version <= 0 {
			doc.Version = 1
		}
		if err := s.Init(ctx, doc); err != nil {
			if errors.Is(err, ErrExists) {
				return 0, fmt.Errorf("routecfg: %w: a document was created concurrently; run the command again", ErrVersionConflict)
			}
			return 0, err
		}
		return doc.Version, nil
	}
	// An undecodable stored value has no usable version: fall back to the
	// caller's, which the operator can raise above what proxies serve.
	doc.Version = max(st.doc.Version, doc.Version) + 1
	s.stamp(&doc, "routes init --force")
	return doc.Version, s.swap(ctx, st.modRevision, doc)
}

// swap writes doc if the key is still at modRevision.
func (s *Store) swap(ctx context.Context, modRevision int64, doc router.Document) error {
	val, err := EncodeDocument(doc)
	if err != nil {
		return err
	}
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(s.key), "=", modRevision)).
		Then(clientv3.OpPut(s.key, string(val))).
		Commit()
	if err != nil {
		return fmt.Errorf("routecfg: write %s to etcd: %w", s.key, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("routecfg: %w: the document changed in etcd while version %d was being written; run `routes show`, redo the edit and apply again",
			ErrVersionConflict, doc.Version)
	}
	return nil
}

// Identity is who a client is to etcd: its user name, or the common name of
// its client certificate (etcd's identity for certificate authentication),
// or "anonymous"; followed by @host of this process.
func Identity(cli *clientv3.Client) string {
	who := "anonymous"
	switch {
	case cli.Username != "":
		who = cli.Username
	default:
		if tc := cli.Ctx().Value(identityKey{}); tc != nil {
			who = tc.(string)
		}
	}
	host, _ := os.Hostname()
	return who + "@" + host
}

// identityKey lets a caller that authenticates by certificate name the
// certificate's common name (see WithCertIdentity): the etcd client does
// not expose the certificate it was configured with.
type identityKey struct{}

// WithCertIdentity returns a context for clientv3.Config.Context that
// names the client certificate's common name for Identity.
func WithCertIdentity(ctx context.Context, commonName string) context.Context {
	return context.WithValue(ctx, identityKey{}, commonName)
}

// stamp records who is storing doc and how.
func (s *Store) stamp(doc *router.Document, how string) {
	doc.ChangedBy = Identity(s.cli) + ": " + how
}

// EncodeDocument validates doc exactly as every proxy will, then encodes it
// as it is stored under RoutesKey. An invalid doc gives an error wrapping
// router.ErrInvalidRoutes and no bytes.
//
// It is exported for package coord: the route flip of a migration writes
// the route document in the same etcd transaction as the migration lock, so
// it cannot go through Store, and must never store what Store would refuse.
func EncodeDocument(doc router.Document) ([]byte, error) {
	if _, err := router.NewSnapshot(doc); err != nil {
		return nil, fmt.Errorf("routecfg: refusing to store version %d: %w", doc.Version, err)
	}
	return json.Marshal(doc)
}
