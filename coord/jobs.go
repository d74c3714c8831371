package coord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/convoy-im/convoy/router"
)

// Migration job records: one JSON document per shard being migrated, at
// /convoy/<cluster>/migrations/<shard> (the shard as four digits, so keys
// sort by shard). Every write is a compare-and-swap on the key's
// ModRevision from the caller's read, like the route document's, so two
// migrators that both read a job cannot both advance it; the runner's writes
// are additionally fenced by its election key (runner.go).

var (
	// ErrJobNotFound means no job record exists for the shard.
	ErrJobNotFound = errors.New("no migration job for the shard")
	// ErrJobExists means Create found a job record for the shard already.
	ErrJobExists = errors.New("a migration job for the shard already exists")
	// ErrJobConflict means the record changed (or was deleted) since the
	// caller read it: re-read and decide again.
	ErrJobConflict = errors.New("migration job changed concurrently")
)

// MigrationsPrefix is the etcd prefix holding a cluster's migration state:
// job records directly under it (<shard>), and the locks/, acks/ and
// runners/ subtrees.
func MigrationsPrefix(cluster string) string { return "/convoy/" + cluster + "/migrations/" }

// JobKey is the etcd key of one shard's migration job record.
func JobKey(cluster string, shard int) string { return MigrationsPrefix(cluster) + shardPart(shard) }

// jobsRangeEnd ends the range of job keys: shard keys are all digits and
// ':' follows '9', while the locks/, acks/ and runners/ subtrees start with
// letters and fall outside [prefix+"0", prefix+":").
func jobsRange(cluster string) (string, string) { return prefixRange(MigrationsPrefix(cluster)) }

func prefixRange(p string) (string, string) { return p + "0", p + ":" }

// ArchivePrefix is the etcd prefix of a cluster's cold-tier archiver state
// (package archive): one job record per shard directly under it, laid out
// and guarded exactly like the migration job records, and the runners/
// subtree of its runner elections; its other subtrees start with letters
// and stay out of the job range.
func ArchivePrefix(cluster string) string { return "/convoy/" + cluster + "/archive/" }

func shardPart(shard int) string { return fmt.Sprintf("%04d", shard) }

// parseShardPart reads a shard number written by shardPart.
func parseShardPart(s string) (int, bool) {
	if len(s) < 4 {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	if err != nil || validShard(n) != nil {
		return 0, false
	}
	return n, true
}

func validShard(shard int) error {
	if shard < 0 || shard >= router.NumShards {
		return fmt.Errorf("coord: shard %d out of range 0..%d", shard, router.NumShards-1)
	}
	return nil
}

// Endpoint is one side of a shard migration: where the shard's tables live.
type Endpoint struct {
	Datasource string `json:"datasource"`
	Database   string `json:"database"`
}

// String is "datasource:database", as messages name a side.
func (e Endpoint) String() string { return e.Datasource + ":" + e.Database }

// Job is the persisted state of one shard's migration. coord stores it
// and guards its writes; the meaning of Step, Intent and Progress belongs to
// the migrate package. The job layer persists Intent before it acts and Step
// (with Progress) after, so a runner taking over knows what was done and
// what may have been half done.
//
// StepDone is the one step other packages read: a job at it no longer
// holds its shard (the archiver waits for it).
type Job struct {
	ID    string   `json:"id"`
	Shard int      `json:"shard"`
	From  Endpoint `json:"from"`
	To    Endpoint `json:"to"`
	// Step is the last step completed (or being worked on, per the migrate
	// package's convention).
	Step string `json:"step"`
	// Intent is what the runner is about to do, written before it does it.
	Intent    string    `json:"intent,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	LastError string    `json:"last_error,omitempty"`
	// Progress is opaque to coord (copier checkpoints, checksum state,
	// counters); it must be valid JSON when set.
	Progress json.RawMessage `json:"progress,omitempty"`

	// Revision is the etcd ModRevision the record was read or written at;
	// not stored. Update and Delete compare it.
	Revision int64 `json:"-"`
}

// StepDone is the Step of a finished job (package migrate names the others).
const StepDone = "done"

// JobEvent is one change seen by JobStore.Watch.
type JobEvent struct {
	Shard int
	Job   *Job // nil when the record was deleted
	// Err is set on the last event of a broken watch (etcd lost, compacted):
	// List again and Watch from the list's revision.
	Err error
}

// JobStore reads and writes a cluster's migration job records. Like
// routecfg.Store it keeps no state besides the client.
type JobStore struct {
	cli     *clientv3.Client
	cluster string
	prefix  string // MigrationsPrefix or ArchivePrefix
	err     error  // invalid cluster name, reported by every call
}

// NewJobStore returns the migration job store of a cluster.
func NewJobStore(cli *clientv3.Client, cluster string) *JobStore {
	return &JobStore{cli: cli, cluster: cluster, prefix: MigrationsPrefix(cluster), err: validKeyPart("cluster name", cluster)}
}

// NewArchiveJobStore returns the store of the archiver's per-shard job
// records, under ArchivePrefix: the same records, compare-and-swap and
// runner election as migrations, so the archiver persists its steps the
// way a migration does without a second implementation.
func NewArchiveJobStore(cli *clientv3.Client, cluster string) *JobStore {
	return &JobStore{cli: cli, cluster: cluster, prefix: ArchivePrefix(cluster), err: validKeyPart("cluster name", cluster)}
}

// Key is the etcd key of the shard's record in this store.
func (s *JobStore) Key(shard int) string { return s.prefix + shardPart(shard) }

// Cluster is the cluster name the store serves.
func (s *JobStore) Cluster() string { return s.cluster }

func decodeJob(b []byte, modRevision int64) (Job, error) {
	var j Job
	if err := json.Unmarshal(b, &j); err != nil {
		return Job{}, fmt.Errorf("coord: stored value is not a migration job: %w", err)
	}
	j.Revision = modRevision
	return j, nil
}

func encodeJob(j Job) (string, error) {
	if len(j.Progress) > 0 && !json.Valid(j.Progress) {
		return "", fmt.Errorf("coord: job %s: progress is not valid JSON", j.ID)
	}
	b, err := json.Marshal(j)
	return string(b), err
}

// Create stores a new job record for job.Shard if the shard has none (a
// transaction on CreateRevision == 0); ErrJobExists otherwise. CreatedAt and
// UpdatedAt default to now. It returns the stored job with its Revision.
func (s *JobStore) Create(ctx context.Context, job Job) (Job, error) {
	if s.err != nil {
		return Job{}, s.err
	}
	if err := validShard(job.Shard); err != nil {
		return Job{}, err
	}
	if err := validKeyPart("job id", job.ID); err != nil {
		return Job{}, err
	}
	now := time.Now().UTC()
	if job.CreatedAt.IsZero() {
		job.CreatedAt = now
	}
	job.UpdatedAt = now
	val, err := encodeJob(job)
	if err != nil {
		return Job{}, err
	}
	key := s.Key(job.Shard)
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, val)).
		Commit()
	if err != nil {
		return Job{}, fmt.Errorf("coord: write %s: %w", key, err)
	}
	if !resp.Succeeded {
		return Job{}, fmt.Errorf("coord: %w (shard %d, key %s)", ErrJobExists, job.Shard, key)
	}
	job.Revision = resp.Header.Revision
	return job, nil
}

// Get returns the shard's job record, or ErrJobNotFound.
func (s *JobStore) Get(ctx context.Context, shard int) (Job, error) {
	if s.err != nil {
		return Job{}, s.err
	}
	if err := validShard(shard); err != nil {
		return Job{}, err
	}
	key := s.Key(shard)
	resp, err := s.cli.Get(ctx, key)
	if err != nil {
		return Job{}, fmt.Errorf("coord: read %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return Job{}, fmt.Errorf("coord: %w %d (key %s)", ErrJobNotFound, shard, key)
	}
	return decodeJob(resp.Kvs[0].Value, resp.Kvs[0].ModRevision)
}

// Update stores job if its record is still at job.Revision: of two writers
// that read the same revision exactly one wins, the other gets
// ErrJobConflict. UpdatedAt is set to now. It returns the stored job with
// its new Revision.
func (s *JobStore) Update(ctx context.Context, job Job) (Job, error) {
	return s.update(ctx, job, nil)
}

// update is Update with extra conditions (the runner's ownership); when the
// record is unchanged but a guard fails, it returns guardErr.
func (s *JobStore) update(ctx context.Context, job Job, guard *runnerGuard, also ...clientv3.Op) (Job, error) {
	if s.err != nil {
		return Job{}, s.err
	}
	if err := validShard(job.Shard); err != nil {
		return Job{}, err
	}
	job.UpdatedAt = time.Now().UTC()
	val, err := encodeJob(job)
	if err != nil {
		return Job{}, err
	}
	key := s.Key(job.Shard)
	resp, err := s.cli.Txn(ctx).
		If(guard.cmps(clientv3.Compare(clientv3.ModRevision(key), "=", job.Revision))...).
		Then(append([]clientv3.Op{clientv3.OpPut(key, val)}, also...)...).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return Job{}, fmt.Errorf("coord: write %s: %w", key, err)
	}
	if !resp.Succeeded {
		return Job{}, s.casFailure(resp, job, guard)
	}
	job.Revision = resp.Header.Revision
	return job, nil
}

// Delete removes the job record if it is still at job.Revision (the job is
// complete or cancelled); ErrJobConflict otherwise.
func (s *JobStore) Delete(ctx context.Context, job Job) error {
	return s.delete(ctx, job, nil)
}

func (s *JobStore) delete(ctx context.Context, job Job, guard *runnerGuard) error {
	if s.err != nil {
		return s.err
	}
	if err := validShard(job.Shard); err != nil {
		return err
	}
	key := s.Key(job.Shard)
	resp, err := s.cli.Txn(ctx).
		If(guard.cmps(clientv3.Compare(clientv3.ModRevision(key), "=", job.Revision))...).
		Then(clientv3.OpDelete(key)).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return fmt.Errorf("coord: delete %s: %w", key, err)
	}
	if !resp.Succeeded {
		return s.casFailure(resp, job, guard)
	}
	return nil
}

// casFailure names why a guarded write of job did not happen, from the
// Else branch's read of the record.
func (s *JobStore) casFailure(resp *clientv3.TxnResponse, job Job, guard *runnerGuard) error {
	key := s.Key(job.Shard)
	kvs := resp.Responses[0].GetResponseRange().GetKvs()
	switch {
	case len(kvs) == 0:
		return fmt.Errorf("coord: %w: job %s of shard %d was deleted (key %s)", ErrJobConflict, job.ID, job.Shard, key)
	case kvs[0].ModRevision != job.Revision:
		return fmt.Errorf("coord: %w: job %s of shard %d was written at revision %d since it was read at %d; re-read it",
			ErrJobConflict, job.ID, job.Shard, kvs[0].ModRevision, job.Revision)
	case guard != nil:
		return guard.lost()
	}
	return fmt.Errorf("coord: [BUG] compare-and-swap on %s failed with the revision unchanged", key)
}

// List returns every job record of the cluster, sorted by shard, and the
// etcd revision of the read: Watch from it to miss nothing. Records that do
// not decode are skipped.
func (s *JobStore) List(ctx context.Context) ([]Job, int64, error) {
	if s.err != nil {
		return nil, 0, s.err
	}
	from, end := prefixRange(s.prefix)
	resp, err := s.cli.Get(ctx, from, clientv3.WithRange(end))
	if err != nil {
		return nil, 0, fmt.Errorf("coord: list migration jobs: %w", err)
	}
	var out []Job
	for _, kv := range resp.Kvs {
		if j, err := decodeJob(kv.Value, kv.ModRevision); err == nil {
			out = append(out, j)
		}
	}
	slices.SortFunc(out, func(a, b Job) int { return a.Shard - b.Shard })
	return out, resp.Header.Revision, nil
}

// Watch streams job record changes after revision afterRev (from List). The
// channel is closed when ctx ends or the watch breaks; a break is reported
// first by an event with Err set.
func (s *JobStore) Watch(ctx context.Context, afterRev int64) <-chan JobEvent {
	out := make(chan JobEvent, 16)
	if s.err != nil {
		out <- JobEvent{Err: s.err}
		close(out)
		return out
	}
	from, end := prefixRange(s.prefix)
	prefix := s.prefix
	go func() {
		defer close(out)
		send := func(ev JobEvent) bool {
			select {
			case out <- ev:
				return true
			case <-ctx.Done():
				return false
			}
		}
		wch := s.cli.Watch(clientv3.WithRequireLeader(ctx), from, clientv3.WithRange(end), clientv3.WithRev(afterRev+1))
		for resp := range wch {
			if err := resp.Err(); err != nil || resp.Canceled {
				if err == nil {
					err = errors.New("watch canceled")
				}
				send(JobEvent{Err: fmt.Errorf("coord: migration job watch broken: %w", err)})
				return
			}
			for _, ev := range resp.Events {
				shard, ok := parseShardPart(strings.TrimPrefix(string(ev.Kv.Key), prefix))
				if !ok {
					continue
				}
				je := JobEvent{Shard: shard}
				if ev.Type == clientv3.EventTypePut {
					j, err := decodeJob(ev.Kv.Value, ev.Kv.ModRevision)
					if err != nil {
						continue
					}
					je.Job = &j
				}
				if !send(je) {
					return
				}
			}
		}
		if ctx.Err() == nil {
			send(JobEvent{Err: errors.New("coord: migration job watch closed")})
		}
	}()
	return out
}
