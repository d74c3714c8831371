package router

import (
	"errors"
	"fmt"
	"sort"
)

// Datasource names one MySQL server. The password is never part of the route
// table: PasswordEnv / PasswordFile name where the proxy reads it locally, so
// the document can live in etcd and be printed without leaking secrets.
type Datasource struct {
	Name         string `json:"name" yaml:"name"`
	Addr         string `json:"addr" yaml:"addr"` // host:port
	User         string `json:"user" yaml:"user"`
	PasswordEnv  string `json:"password_env,omitempty" yaml:"password_env,omitempty"`
	PasswordFile string `json:"password_file,omitempty" yaml:"password_file,omitempty"`
	// TLS says how the proxy secures its connections to the server. Like
	// the password, the document names files each proxy reads locally,
	// never key material.
	TLS DatasourceTLS `json:"tls,omitzero" yaml:"tls,omitempty"`
}

// ShardRange maps the shards From..To (inclusive) to one database. Without
// Table each shard gets its own physical table (index = shard number); with
// Table every shard of the range shares that one table index, which small
// dev/test layouts use to avoid thousands of tables.
type ShardRange struct {
	From       int    `json:"from" yaml:"from"`
	To         int    `json:"to" yaml:"to"`
	Datasource string `json:"datasource" yaml:"datasource"`
	Database   string `json:"database" yaml:"database"`
	Table      *int   `json:"table,omitempty" yaml:"table,omitempty"`
}

// Document is the route table as stored in etcd: one versioned JSON value per
// cluster.
type Document struct {
	Version           int64        `json:"version" yaml:"version"`
	DefaultDatasource string       `json:"default_datasource" yaml:"default_datasource"`
	Datasources       []Datasource `json:"datasources" yaml:"datasources"`
	Shards            []ShardRange `json:"shards" yaml:"shards"`
	// ChangedBy is stamped by the writer of each version, for the audit
	// line every proxy logs when it swaps the version in: the etcd identity
	// and host that stored it and how (e.g. "convoy-admin@ops-1: routes
	// apply"). Informational: whoever may write routes may write it.
	ChangedBy string `json:"changed_by,omitempty" yaml:"changed_by,omitempty"`
}

// Target is where one logical shard lives.
type Target struct {
	Datasource string
	Database   string
	Table      int // physical table index; see PhysicalTableName
}

// Physical is one physical table: the unit a statement is sent to.
type Physical struct {
	Datasource string
	Database   string
	Table      string
}

func (p Physical) String() string { return p.Datasource + ":" + p.Database + "." + p.Table }

// Snapshot is an immutable, validated route table.
type Snapshot struct {
	version     int64
	defaultDS   string
	datasources map[string]Datasource
	dsOrder     []string
	targets     [NumShards]Target
	doc         Document
}

// ErrInvalidRoutes wraps every validation failure, so callers can tell a bad
// document (keep the last good snapshot) from an I/O error.
var ErrInvalidRoutes = errors.New("invalid route table")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidRoutes, fmt.Sprintf(format, args...))
}

// NewSnapshot validates doc and builds a snapshot. It rejects a document that
// does not map every shard exactly once, names an unknown or duplicate
// datasource, or has no default datasource.
func NewSnapshot(doc Document) (*Snapshot, error) {
	s := &Snapshot{version: doc.Version, defaultDS: doc.DefaultDatasource, datasources: map[string]Datasource{}}
	for _, ds := range doc.Datasources {
		if ds.Name == "" || ds.Addr == "" {
			return nil, invalid("datasource %q needs a name and an addr", ds.Name)
		}
		if err := ds.TLS.validate(); err != nil {
			return nil, invalid("datasource %q: %v", ds.Name, err)
		}
		if _, dup := s.datasources[ds.Name]; dup {
			return nil, invalid("datasource %q is defined twice", ds.Name)
		}
		s.datasources[ds.Name] = ds
		s.dsOrder = append(s.dsOrder, ds.Name)
	}
	sort.Strings(s.dsOrder)
	if _, ok := s.datasources[doc.DefaultDatasource]; !ok {
		return nil, invalid("default datasource %q is not defined", doc.DefaultDatasource)
	}
	var seen [NumShards]bool
	for _, r := range doc.Shards {
		if r.From < 0 || r.To >= NumShards || r.From > r.To {
			return nil, invalid("shard range %d..%d is outside 0..%d", r.From, r.To, NumShards-1)
		}
		if _, ok := s.datasources[r.Datasource]; !ok {
			return nil, invalid("shards %d..%d name unknown datasource %q", r.From, r.To, r.Datasource)
		}
		if !validIdent(r.Database) {
			return nil, invalid("shards %d..%d have an invalid database name %q", r.From, r.To, r.Database)
		}
		if r.Table != nil && (*r.Table < 0 || *r.Table > 9999) {
			return nil, invalid("shards %d..%d have table index %d outside 0..9999", r.From, r.To, *r.Table)
		}
		for sh := r.From; sh <= r.To; sh++ {
			if seen[sh] {
				return nil, invalid("shard %d is mapped twice", sh)
			}
			seen[sh] = true
			idx := sh
			if r.Table != nil {
				idx = *r.Table
			}
			s.targets[sh] = Target{Datasource: r.Datasource, Database: r.Database, Table: idx}
		}
	}
	for sh, ok := range seen {
		if !ok {
			return nil, invalid("shard %d is not mapped (every one of the %d shards must be)", sh, NumShards)
		}
	}
	s.doc = cloneDocument(doc)
	return s, nil
}

// validIdent accepts the database names the proxy will print unquoted-safe
// inside backticks: no backtick, no NUL, not empty, at most 64 bytes.
func validIdent(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] == '`' || s[i] == 0 {
			return false
		}
	}
	return true
}

func cloneDocument(d Document) Document {
	c := d
	c.Datasources = append([]Datasource(nil), d.Datasources...)
	c.Shards = make([]ShardRange, len(d.Shards))
	for i, r := range d.Shards {
		c.Shards[i] = r
		if r.Table != nil {
			t := *r.Table
			c.Shards[i].Table = &t
		}
	}
	return c
}

// Version is the document version this snapshot was built from.
func (s *Snapshot) Version() int64 { return s.version }

// Document returns a copy of the document the snapshot was built from.
func (s *Snapshot) Document() Document { return cloneDocument(s.doc) }

// DefaultDatasource is where unsharded tables and session statements go.
func (s *Snapshot) DefaultDatasource() string { return s.defaultDS }

// Datasource looks a datasource up by name.
func (s *Snapshot) Datasource(name string) (Datasource, bool) {
	ds, ok := s.datasources[name]
	return ds, ok
}

// Datasources returns every datasource, sorted by name.
func (s *Snapshot) Datasources() []Datasource {
	out := make([]Datasource, 0, len(s.dsOrder))
	for _, n := range s.dsOrder {
		out = append(out, s.datasources[n])
	}
	return out
}

// Target returns where a shard lives.
func (s *Snapshot) Target(sh Shard) Target { return s.targets[sh] }

// Physical returns the physical table of a logical table on a shard.
func (s *Snapshot) Physical(logical string, sh Shard) Physical {
	t := s.targets[sh]
	return Physical{Datasource: t.Datasource, Database: t.Database, Table: PhysicalTableName(logical, t.Table)}
}

// PhysicalGroup is one physical table and the shards that live in it.
type PhysicalGroup struct {
	Physical
	Shards []Shard
}

// AllPhysical lists every distinct physical table of a logical table, in
// shard order of first appearance, each with the shards it holds. DDL fan-out
// and scatter reads use it so a table shared by several shards is touched once.
func (s *Snapshot) AllPhysical(logical string) []PhysicalGroup {
	idx := map[Physical]int{}
	var out []PhysicalGroup
	for sh := 0; sh < NumShards; sh++ {
		p := s.Physical(logical, Shard(sh))
		i, ok := idx[p]
		if !ok {
			i = len(out)
			idx[p] = i
			out = append(out, PhysicalGroup{Physical: p})
		}
		out[i].Shards = append(out[i].Shards, Shard(sh))
	}
	return out
}

// Databases lists every distinct (datasource, database) pair, sorted.
func (s *Snapshot) Databases() [][2]string {
	set := map[[2]string]bool{}
	for _, t := range s.targets {
		set[[2]string{t.Datasource, t.Database}] = true
	}
	out := make([][2]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i][0] != out[j][0] {
			return out[i][0] < out[j][0]
		}
		return out[i][1] < out[j][1]
	})
	return out
}

// DefaultLayout builds the production layout: dbs databases (im_0..) with
// NumShards/dbs consecutive shards each, one physical table per shard; the
// databases are spread evenly over the datasources in order. 8 databases x
// 128 tables is the initial layout of docs/design.md §2; 16x64 and 32x32 are
// the expansion layouts.
func DefaultLayout(datasources []Datasource, dbs int) (Document, error) {
	if len(datasources) == 0 {
		return Document{}, invalid("at least one datasource is needed")
	}
	if dbs <= 0 || NumShards%dbs != 0 || dbs%len(datasources) != 0 {
		return Document{}, invalid("%d databases cannot split %d shards evenly over %d datasources", dbs, NumShards, len(datasources))
	}
	per := NumShards / dbs
	dbsPerDS := dbs / len(datasources)
	doc := Document{Version: 1, DefaultDatasource: datasources[0].Name, Datasources: append([]Datasource(nil), datasources...)}
	for d := 0; d < dbs; d++ {
		doc.Shards = append(doc.Shards, ShardRange{
			From: d * per, To: (d+1)*per - 1,
			Datasource: datasources[d/dbsPerDS].Name,
			Database:   fmt.Sprintf("im_%d", d),
		})
	}
	return doc, nil
}

// MoveShard returns doc with shard mapped to database db of datasource ds,
// in the physical table the shard has everywhere (table: the shared index
// of the range it came from, nil for a table of its own), the range that
// held it cut around it, and ranges that the move (or a move back) left
// adjacent and alike merged again, so that a migration and its rollback
// return the document to its original shape. doc is not modified. It is
// the route edit of a one-shard migration.
func MoveShard(doc Document, shard int, ds, db string, table *int) Document {
	out := doc
	out.Shards = nil // a new slice: doc's stays as it was
	for _, r := range doc.Shards {
		if shard < r.From || shard > r.To {
			out.Shards = append(out.Shards, r)
			continue
		}
		if r.From < shard {
			lo := r
			lo.To = shard - 1
			out.Shards = append(out.Shards, lo)
		}
		if shard < r.To {
			hi := r
			hi.From = shard + 1
			out.Shards = append(out.Shards, hi)
		}
	}
	moved := ShardRange{From: shard, To: shard, Datasource: ds, Database: db}
	if table != nil {
		idx := *table
		moved.Table = &idx
	}
	out.Shards = append(out.Shards, moved)
	sort.Slice(out.Shards, func(i, j int) bool { return out.Shards[i].From < out.Shards[j].From })
	merged := out.Shards[:0:0]
	for _, r := range out.Shards {
		if n := len(merged); n > 0 && mergeable(merged[n-1], r) {
			merged[n-1].To = r.To
			continue
		}
		merged = append(merged, r)
	}
	out.Shards = merged
	return out
}

// mergeable: b continues a with the same placement (a shared table index
// must be the same index; per-shard tables stay per-shard).
func mergeable(a, b ShardRange) bool {
	if a.To+1 != b.From || a.Datasource != b.Datasource || a.Database != b.Database {
		return false
	}
	if a.Table == nil || b.Table == nil {
		return a.Table == nil && b.Table == nil
	}
	return *a.Table == *b.Table
}

// SharedLayout builds a small layout for development and tests: dbs databases
// with tablesPerDB physical tables each, every table shared by
// NumShards/(dbs*tablesPerDB) consecutive shards.
func SharedLayout(datasources []Datasource, dbs, tablesPerDB int) (Document, error) {
	doc, err := DefaultLayout(datasources, dbs)
	if err != nil {
		return doc, err
	}
	per := NumShards / dbs
	if tablesPerDB <= 0 || per%tablesPerDB != 0 {
		return Document{}, invalid("%d tables per database cannot split %d shards evenly", tablesPerDB, per)
	}
	step := per / tablesPerDB
	var ranges []ShardRange
	for _, r := range doc.Shards {
		for t := 0; t < tablesPerDB; t++ {
			idx := r.From + t*step // the first shard's number names the shared table
			ranges = append(ranges, ShardRange{From: r.From + t*step, To: r.From + (t+1)*step - 1,
				Datasource: r.Datasource, Database: r.Database, Table: &idx})
		}
	}
	doc.Shards = ranges
	return doc, nil
}
