package archive

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/convoy-im/convoy/cold"
	"github.com/convoy-im/convoy/coord"
	"github.com/convoy-im/convoy/internal/ratelimit"
	"github.com/convoy-im/convoy/routecfg"
	"github.com/convoy-im/convoy/router"
)

// Defaults (Config's zero values).
const (
	DefaultAfter       = 180 * 24 * time.Hour // docs/design.md §9: cold beyond 180 days
	DefaultDeleteAfter = 7 * 24 * time.Hour   // docs/design.md §9; seed 000: 温层删除延迟 7 天
	DefaultInboxAfter  = 30 * 24 * time.Hour  // docs/design.md §9; seed 001: read inbox rows kept 30 days
	// DefaultRate is the rows per second a job reads of a live shard: a
	// migration copy's (docs/design.md §5: 2000 rows/s), which does not show
	// in the shard's write latency.
	DefaultRate = 2000
	// DefaultPartRows bounds a part: about 10-30 MiB of rows held in memory
	// while the file is built, and a catalog record whose skip lists stay
	// far below etcd's request limit even if every row were skipped.
	DefaultPartRows = 20000
	// DefaultChunkRows is a delete transaction (and a fetch): a fraction
	// of a second of row locks on rows nobody writes any more.
	DefaultChunkRows = 500
	// DefaultScanRows is one key-scan statement.
	DefaultScanRows = 5000
	// DefaultScanKeys bounds the keys of later days one pass over a
	// table's keys keeps (archivePass): 24 bytes each, so about 12 MiB,
	// and a 5M-row shard table's history in about ten passes rather than
	// one per day.
	DefaultScanKeys = 500000
	// scanFactor: the key scan reads only keys and times, so it may go
	// this many times faster than the rows archived.
	scanFactor = 50
	// DefaultStoreTimeout bounds one object-store call.
	DefaultStoreTimeout = time.Minute
	// DefaultKeepNewest: a conversation's newest 500 messages are never
	// archived, however old. Seed 000 puts them in the hot tier ("最近 7
	// 天或每会话最近 500 条", Redis and the MySQL main table) and forbids
	// the first screen from reaching object storage (首屏绝不允许穿透到对象
	// 存储): with them warm, the first screen of a conversation idle for a
	// year is still MySQL's, and a hot-tier fill (the newest 500) still
	// finds its rows there.
	DefaultKeepNewest = 500
)

// Steps of an archive job record (coord.Job.Step).
const (
	StepIdle      = "idle"
	StepArchiving = "archiving"
	StepDeleting  = "deleting"
)

// Config configures the archiver of a cluster.
type Config struct {
	Client  *clientv3.Client
	Cluster string
	// ID names this process in runner elections.
	ID    string
	Store cold.Store
	// LocalStore says Store is a directory only this host sees (a file://
	// store not declared shared): runs refuse (ErrLocalStore) while more
	// than one Convoy process is registered, since the others could not
	// read what this one archives, and after the warm delete this host
	// would hold the only copy.
	LocalStore bool
	Connect    Connector
	// Prefix is put before every object key ("" none).
	Prefix string
	// After, DeleteAfter, Rate: cold.after, cold.delete_after, cold.rate
	// (defaults above; Rate < 0 is unlimited).
	After, DeleteAfter time.Duration
	Rate               float64
	// KeepNewest: rows among the newest KeepNewest of their conversation
	// are never archived (cold.keep_newest; DefaultKeepNewest if 0,
	// negative: none kept).
	KeepNewest int
	// InboxAfter: read im_inbox rows older than this are archived
	// (cold.inbox_after, DefaultInboxAfter if 0).
	InboxAfter time.Duration
	// EraseAfter: archived rows deleted through Convoy longer ago than
	// this are rewritten out of their files by the next run
	// (cold.erase_after, DefaultEraseAfter if 0; erase.go).
	EraseAfter time.Duration
	// CompactBelow: deleted history files with fewer rows are merged into
	// files of up to PartRows rows (compact.go; default PartRows/4,
	// negative: never).
	CompactBelow int
	// Retention: cold files of days older than this are deleted with
	// their rows (cold.retention; 0: kept for ever; retention.go).
	Retention time.Duration
	// Now is the clock (time.Now if nil): tests move it across days.
	Now func() time.Time
	Log *zap.Logger
	// Metrics records what this process archives (nil: none).
	Metrics *Metrics
	// RunnerTTL is the runner lease (coord.DefaultRunnerTTL if 0).
	RunnerTTL time.Duration
	// StoreTimeout bounds each object-store call; SQLTimeout each
	// statement (defaults: a minute, 30 s).
	StoreTimeout, SQLTimeout time.Duration
	// Sizes (defaults above); tests make parts and chunks small.
	PartRows, ChunkRows, ScanRows, ScanKeys int
	// Hook, if set, is called at each step boundary (Step*: a file
	// written, verified, catalogued, a delete chunk recorded, committed);
	// an error it returns stops the run there as a crash would: nothing
	// more is written (tests).
	Hook func(step string, shard int) error
}

// Step boundaries passed to Config.Hook.
const (
	HookWritten    = "written"     // the Parquet object is stored
	HookVerified   = "verified"    // it was read back and checked
	HookCatalogued = "catalogued"  // its record and the checkpoint are in etcd
	HookChunkNoted = "chunk-noted" // a delete chunk's rows locked, its tombstones and read bounds written, not committed
	HookDeleted    = "deleted"     // a delete chunk committed
	HookRewritten  = "rewritten"   // a file rewritten without deleted rows is stored and recorded, its read bounds not moved
)

// hookStop wraps a Hook's error: the run ends without bookkeeping.
type hookStop struct{ err error }

func (h hookStop) Error() string { return "archive: stopped by hook: " + h.err.Error() }
func (h hookStop) Unwrap() error { return h.err }

var (
	// ErrPaused: ARCHIVE PAUSE is in force.
	ErrPaused = errors.New("archive: paused (ARCHIVE RESUME resumes)")
	// ErrMigrating: the shard has an active migration job; the archiver
	// never works on a shard that is moving.
	ErrMigrating = errors.New("archive: the shard is migrating")
	// ErrMoved: the routes moved the shard during the run.
	ErrMoved = errors.New("archive: the shard moved during the run")
	// ErrLocalStore: the store is local to this host and other Convoy
	// processes are registered (Config.LocalStore).
	ErrLocalStore = errors.New("archive: cold.store is a directory on this host, and other Convoy processes could not read it; " +
		"set cold.store to an object store (s3://...), or cold.store_shared: true if every process mounts the same directory")
	// ErrNotElected: another process runs the shard's archiver now.
	ErrNotElected = errors.New("archive: another process runs this shard's archiver")
)

// Archiver archives the shards of a cluster, one run at a time per shard
// (whoever wins the shard's election). Manager calls RunShard for due
// shards; tests call it directly.
type Archiver struct {
	cfg        Config
	log        *zap.Logger
	jobs       *coord.JobStore
	migrations *coord.JobStore
	routes     *routecfg.Store
	rows, scan *ratelimit.Limiter
}

// New returns an archiver; it starts nothing.
func New(cfg Config) (*Archiver, error) {
	if cfg.Client == nil || cfg.Store == nil || cfg.Connect == nil || cfg.ID == "" {
		return nil, errors.New("archive: an archiver needs an etcd client, a store, a connector and an id")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&cfg.After, DefaultAfter)
	def(&cfg.DeleteAfter, DefaultDeleteAfter)
	def(&cfg.InboxAfter, DefaultInboxAfter)
	def(&cfg.EraseAfter, DefaultEraseAfter)
	if cfg.Retention > 0 && cfg.Retention <= cfg.After {
		return nil, fmt.Errorf("archive: cold.retention (%s) must be longer than cold.after (%s): files are made of rows older than cold.after", cfg.Retention, cfg.After)
	}
	def(&cfg.StoreTimeout, DefaultStoreTimeout)
	def(&cfg.SQLTimeout, 30*time.Second)
	def(&cfg.RunnerTTL, coord.DefaultRunnerTTL)
	defInt := func(n *int, v int) {
		if *n <= 0 {
			*n = v
		}
	}
	defInt(&cfg.PartRows, DefaultPartRows)
	if cfg.CompactBelow == 0 {
		cfg.CompactBelow = cfg.PartRows / 4
	}
	defInt(&cfg.ChunkRows, DefaultChunkRows)
	defInt(&cfg.ScanRows, DefaultScanRows)
	defInt(&cfg.ScanKeys, DefaultScanKeys)
	if cfg.Rate == 0 {
		cfg.Rate = DefaultRate
	}
	if cfg.KeepNewest == 0 {
		cfg.KeepNewest = DefaultKeepNewest
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	if cfg.Hook == nil {
		cfg.Hook = func(string, int) error { return nil }
	}
	return &Archiver{cfg: cfg, log: cfg.Log,
		jobs:       coord.NewArchiveJobStore(cfg.Client, cfg.Cluster),
		migrations: coord.NewJobStore(cfg.Client, cfg.Cluster),
		routes:     routecfg.NewStore(cfg.Client, cfg.Cluster),
		rows:       ratelimit.New(cfg.Rate), scan: ratelimit.New(cfg.Rate * scanFactor),
	}, nil
}

// state is an archive job's Progress: per kind of rows the checkpoint and
// SHOW ARCHIVE's figures (history's inline, for the records phase 1
// wrote), and the run's.
type state struct {
	progress
	Inbox      progress `json:"inbox,omitzero"`
	RowsPerSec float64  `json:"rows_per_sec,omitempty"`
	// Orphans are objects a crashed attempt stored and a rerun could not
	// reuse (the rows changed in between): never catalogued, never read.
	Orphans     []string  `json:"orphans,omitempty"`
	LastRun     time.Time `json:"last_run,omitzero"`
	LastSuccess time.Time `json:"last_success,omitzero"`
	// Now is set by ARCHIVE SHARD n NOW and cleared by the run it starts.
	Now bool `json:"now,omitempty"`
	// Catalog is the shard's current catalog manifest (manifest.go):
	// object key and version.
	Catalog        string `json:"catalog,omitempty"`
	CatalogVersion int    `json:"catalog_version,omitempty"`
	// SweptAt is the last sweep (sweep.go); Unnamed the files with a
	// catalog object that the catalog did not name then.
	SweptAt time.Time `json:"swept_at,omitzero"`
	Unnamed int       `json:"unnamed,omitempty"`
	// UnnamedSince: when each file the catalog does not name was first
	// seen so (orphanAfter later it is deleted).
	UnnamedSince map[string]time.Time `json:"unnamed_since,omitempty"`
	// Erase step (erase.go): rows rewritten out of files so far, and the
	// tombstones and erasures still waiting for it at the last run, the
	// oldest one's time.
	Erased int64 `json:"erased,omitempty"`
	// Compacted counts small files merged into larger ones.
	Compacted int64 `json:"compacted,omitempty"`
	// Expired counts rows of files deleted past their retention.
	Expired         int64     `json:"expired,omitempty"`
	PendingErasures int64     `json:"pending_erasures,omitempty"`
	OldestErasure   time.Time `json:"oldest_erasure,omitzero"`
}

// progress is one kind's checkpoint and figures.
type progress struct {
	// Day is being archived: parts before Part are catalogued, the last
	// ending at After. Through is the last day wholly archived.
	Day     string `json:"day,omitempty"`
	Part    int    `json:"part,omitempty"`
	After   *key   `json:"after,omitempty"`
	Through string `json:"through,omitempty"`
	// Oldest is the day column of the oldest warm row at the last run's
	// start.
	Oldest string `json:"oldest,omitempty"`
	Files  int64  `json:"files,omitempty"`
	Bytes  int64  `json:"bytes,omitempty"`
	Rows   int64  `json:"rows,omitempty"`
	// Deleted counts warm rows deleted (a crash between a chunk's commit
	// and the next save undercounts it by that chunk).
	Deleted int64 `json:"deleted,omitempty"`
	// Kept and Gone count rows changed or deleted by users after
	// archiving, found by finished delete steps (Record.Skips).
	Kept int64 `json:"kept,omitempty"`
	Gone int64 `json:"gone,omitempty"`
}

func decodeState(j coord.Job) (state, error) {
	var st state
	if len(j.Progress) == 0 {
		return st, nil
	}
	if err := json.Unmarshal(j.Progress, &st); err != nil {
		return st, fmt.Errorf("archive: job record of shard %04d: %w", j.Shard, err)
	}
	return st, nil
}

func encodeState(st state) json.RawMessage {
	b, err := json.Marshal(st)
	if err != nil {
		panic("[BUG] archive: marshal state: " + err.Error())
	}
	return b
}

// jobID is the id of a shard's archive record.
func jobID(shard int) string { return fmt.Sprintf("archive-%04d", shard) }

// run is one elected run of one shard.
type run struct {
	a     *Archiver
	r     *coord.Runner
	job   coord.Job
	st    state
	shard int
	log   *zap.Logger
	src   *source
	at    router.Target
	start time.Time
	rows  int64 // archived by this run, for RowsPerSec
	// files are the shard's file records (records), read once per run;
	// inEtcd marks those of the former layout, which etcd holds.
	files  []Record
	inEtcd map[string]bool
	// floors: per conversation, the lowest seq among its KeepNewest newest
	// rows when the run first looked (0: it has fewer, all are kept). A
	// floor only rises as messages arrive, so an old one keeps more.
	floors map[uint64]uint64
}

// save writes the job record with the run's state (and ops in the same
// transaction), fenced by the election. An admin's ARCHIVE SHARD n NOW
// written meanwhile is kept.
func (u *run) save(ctx context.Context, ops ...clientv3.Op) error {
	for attempt := 0; ; attempt++ {
		u.job.Progress = encodeState(u.st)
		job, err := u.r.SaveJobWith(ctx, u.job, ops...)
		if err == nil {
			u.job = job
			return nil
		}
		if !errors.Is(err, coord.ErrJobConflict) || attempt > 3 {
			return err
		}
		cur, gerr := u.r.Job(ctx)
		if gerr != nil {
			return gerr
		}
		other, derr := decodeState(cur)
		if derr != nil {
			return derr
		}
		u.st.Now = u.st.Now || other.Now
		u.job.Revision = cur.Revision
	}
}

// hook calls Config.Hook.
func (u *run) hook(step string) error {
	if err := u.a.cfg.Hook(step, u.shard); err != nil {
		return hookStop{err}
	}
	return nil
}

// RunShard runs the shard's archiver once if this process wins its
// election within a couple of seconds (ErrNotElected otherwise): archive
// every day older than After, then delete the warm rows of every file
// catalogued DeleteAfter ago. The outcome (and any error) is in the job
// record for SHOW ARCHIVE.
func (a *Archiver) RunShard(ctx context.Context, shard int) error { return a.runShard(ctx, shard, nil) }

// runShard is RunShard; once elected, it runs only if due (nil: always)
// says so of the record it then reads, which another process may just
// have updated.
func (a *Archiver) runShard(ctx context.Context, shard int, due func(coord.Job, state) bool) error {
	r, err := a.campaign(ctx, shard, 2*time.Second)
	if err != nil {
		return err
	}
	defer r.Close()
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		select {
		case <-r.Done():
			stop()
		case <-rctx.Done():
		}
	}()
	return a.runElected(rctx, r, due)
}

// campaign wins shard's election within wait, or returns ErrNotElected.
func (a *Archiver) campaign(ctx context.Context, shard int, wait time.Duration) (*coord.Runner, error) {
	cctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	r, err := coord.CampaignRunner(cctx, a.jobs, shard, a.cfg.ID,
		coord.WithRunnerTTL(a.cfg.RunnerTTL), coord.WithRunnerLogger(a.log.Named("runner")))
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		return nil, ErrNotElected
	}
	return r, err
}

func (a *Archiver) runElected(ctx context.Context, r *coord.Runner, due func(coord.Job, state) bool) error {
	shard := r.Shard()
	job, err := r.Job(ctx)
	if errors.Is(err, coord.ErrJobNotFound) {
		if job, err = a.jobs.Create(ctx, coord.Job{ID: jobID(shard), Shard: shard, Step: StepIdle}); errors.Is(err, coord.ErrJobExists) {
			job, err = r.Job(ctx)
		}
	}
	if err != nil {
		return err
	}
	st, err := decodeState(job)
	if err != nil {
		return err
	}
	if due != nil && !st.Now && !due(job, st) {
		return nil
	}
	u := &run{a: a, r: r, job: job, st: st, shard: shard, log: a.log.With(zap.Int("shard", shard)), start: a.cfg.Now()}
	err = u.do(ctx)
	if u.src != nil {
		u.src.conn.Close()
	}
	var hs hookStop
	if errors.As(err, &hs) {
		return err
	}
	// Record the outcome even if ctx ended (a lost lease makes the write
	// fail, which is right: the next runner records its own).
	bctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	u.st.LastRun = u.start
	u.st.Now = false
	if secs := a.cfg.Now().Sub(u.start).Seconds(); u.rows > 0 && secs > 0 {
		u.st.RowsPerSec = float64(u.rows) / secs
	}
	u.job.Step, u.job.Intent, u.job.LastError = StepIdle, "", ""
	switch {
	case err == nil:
		u.st.LastSuccess = a.cfg.Now()
		a.cfg.Metrics.success(u.st.LastSuccess)
	case errors.Is(err, ErrPaused):
		u.job.LastError = "paused"
	default:
		u.job.LastError = err.Error()
		a.cfg.Metrics.failed()
		u.log.Warn("archive run failed", zap.Error(err))
	}
	if serr := u.save(bctx); serr != nil && err == nil {
		err = serr
	}
	return err
}

// do is the run: archive, then delete.
func (u *run) do(ctx context.Context) error {
	if err := u.check(ctx); err != nil {
		return err
	}
	snap, err := u.snapshot(ctx)
	if err != nil {
		return err
	}
	u.at = snap.Target(router.Shard(u.shard))
	ds, ok := snap.Datasource(u.at.Datasource)
	if !ok {
		return fmt.Errorf("[BUG] archive: shard %04d on unknown datasource %q", u.shard, u.at.Datasource)
	}
	conn, err := u.a.cfg.Connect(ctx, ds)
	if err != nil {
		return fmt.Errorf("archive: connect to %s: %w", ds.Name, err)
	}
	u.src = newSource(conn, snap, router.Shard(u.shard), u.a.cfg.SQLTimeout)
	if err := u.src.ensureTables(); err != nil {
		return err
	}
	if err := u.resolveRewrite(ctx); err != nil {
		return err
	}
	for _, k := range kinds {
		if u.progress(k).Oldest, err = u.src.oldest(k); err != nil {
			return err
		}
	}
	u.st.LastRun = u.start
	if err := u.save(ctx); err != nil {
		return err
	}
	for _, k := range kinds {
		if err := u.archiveDays(ctx, k); err != nil {
			return err
		}
	}
	if err := u.deleteDue(ctx); err != nil {
		return err
	}
	if err := u.expireDue(ctx); err != nil {
		return err
	}
	if err := u.eraseDue(ctx); err != nil {
		return err
	}
	if err := u.compactDue(ctx); err != nil {
		return err
	}
	return u.sweep(ctx)
}

// check stops the run when archiving is paused, the shard is migrating
// or the routes moved it; called before every part and delete chunk.
func (u *run) check(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	paused, err := Paused(ctx, u.a.cfg.Client, u.a.cfg.Cluster)
	if err != nil {
		return err
	}
	if paused {
		return ErrPaused
	}
	if u.a.cfg.LocalStore {
		ps, err := coord.ListProxies(ctx, u.a.cfg.Client, u.a.cfg.Cluster)
		if err != nil {
			return err
		}
		if len(ps) > 1 {
			return fmt.Errorf("%w (%d processes registered)", ErrLocalStore, len(ps))
		}
	}
	mj, err := u.a.migrations.Get(ctx, u.shard)
	switch {
	case err == nil && mj.Step != coord.StepDone:
		return fmt.Errorf("%w (job %s, step %s): skipped until it is done", ErrMigrating, mj.ID, mj.Step)
	case err != nil && !errors.Is(err, coord.ErrJobNotFound):
		return err
	}
	if u.src == nil {
		return nil
	}
	snap, err := u.snapshot(ctx)
	if err != nil {
		return err
	}
	if snap.Target(router.Shard(u.shard)) != u.at {
		return ErrMoved
	}
	return nil
}

// snapshot reads the routes now (not a proxy's watched copy: a run must
// see a move as soon as etcd has it).
func (u *run) snapshot(ctx context.Context) (*router.Snapshot, error) {
	doc, err := u.a.routes.Get(ctx)
	if err != nil {
		return nil, err
	}
	return router.NewSnapshot(doc)
}

// storeCtx bounds one object-store call.
func (u *run) storeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, u.a.cfg.StoreTimeout)
}

// location names where the shard's rows are now.
func (u *run) location() string { return u.at.Datasource + "/" + u.at.Database }
