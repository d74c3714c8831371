package archive

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/convoy-im/convoy/coord"
	"github.com/convoy-im/convoy/router"
)

// pausedKey, when present, pauses every archiver of the cluster (ARCHIVE
// PAUSE): runs stop before their next part or delete chunk, and no new
// run starts until ARCHIVE RESUME deletes it.
func pausedKey(cluster string) string { return coord.ArchivePrefix(cluster) + "paused" }

// Paused reports whether ARCHIVE PAUSE is in force.
func Paused(ctx context.Context, cli *clientv3.Client, cluster string) (bool, error) {
	resp, err := cli.Get(ctx, pausedKey(cluster), clientv3.WithCountOnly())
	if err != nil {
		return false, fmt.Errorf("archive: read the pause flag: %w", err)
	}
	return resp.Count > 0, nil
}

// InputError is a directive the archiver refuses (the engine maps it to
// a wrong-arguments error).
type InputError struct{ Msg string }

func (e *InputError) Error() string { return e.Msg }

// InvalidInput marks the error as the client's.
func (e *InputError) InvalidInput() bool { return true }

// Admin answers the archive directives from etcd, in any process: it
// writes requests and reads the job records; the runners act.
type Admin struct {
	cli     *clientv3.Client
	cluster string
	jobs    *coord.JobStore
	now     func() time.Time
}

// NewAdmin returns the archive admin of a cluster.
func NewAdmin(cli *clientv3.Client, cluster string) *Admin {
	return &Admin{cli: cli, cluster: cluster, jobs: coord.NewArchiveJobStore(cli, cluster), now: time.Now}
}

// Command records ARCHIVE SHARD n NOW (verb NOW), ARCHIVE PAUSE or
// ARCHIVE RESUME (shard ignored).
func (a *Admin) Command(ctx context.Context, shard int, verb string) error {
	switch strings.ToUpper(verb) {
	case "PAUSE":
		_, err := a.cli.Put(ctx, pausedKey(a.cluster), a.now().UTC().Format(time.RFC3339))
		return err
	case "RESUME":
		_, err := a.cli.Delete(ctx, pausedKey(a.cluster))
		return err
	case "NOW":
		if shard < 0 || shard >= router.NumShards {
			return &InputError{fmt.Sprintf("shard %d out of range 0..%d", shard, router.NumShards-1)}
		}
		return a.requestNow(ctx, shard)
	}
	return &InputError{fmt.Sprintf("unknown archive command %q", verb)}
}

// requestNow sets the shard's Now flag (creating its record), by
// compare-and-swap: a runner's concurrent save keeps it (run.save).
func (a *Admin) requestNow(ctx context.Context, shard int) error {
	for attempt := 0; attempt < 5; attempt++ {
		job, err := a.jobs.Get(ctx, shard)
		if errors.Is(err, coord.ErrJobNotFound) {
			st := state{Now: true}
			_, err = a.jobs.Create(ctx, coord.Job{ID: jobID(shard), Shard: shard, Step: StepIdle, Progress: encodeState(st)})
			if errors.Is(err, coord.ErrJobExists) {
				continue
			}
			return err
		}
		if err != nil {
			return err
		}
		st, err := decodeState(job)
		if err != nil {
			return err
		}
		st.Now = true
		job.Progress = encodeState(st)
		if _, err = a.jobs.Update(ctx, job); !errors.Is(err, coord.ErrJobConflict) {
			return err
		}
	}
	return fmt.Errorf("archive: the record of shard %04d keeps changing; try again", shard)
}

// StatusColumns are SHOW ARCHIVE's columns.
var StatusColumns = []string{"shard", "state", "oldest_warm", "archived_through", "files", "bytes", "rows_archived",
	"rows_deleted", "edited_kept", "deleted_by_users", "inbox_oldest", "inbox_archived_through", "inbox_rows_archived",
	"inbox_rows_deleted", "unnamed_files", "pending_erasures", "oldest_pending_erasure", "rows_erased", "rows_expired", "files_compacted", "rows_per_sec", "last_run", "last_success", "last_error"}

// Status is SHOW ARCHIVE: one row per shard the archiver has a record of.
func (a *Admin) Status(ctx context.Context) ([]string, [][]string, error) {
	paused, err := Paused(ctx, a.cli, a.cluster)
	if err != nil {
		return nil, nil, err
	}
	jobs, _, err := a.jobs.List(ctx)
	if err != nil {
		return nil, nil, err
	}
	ts := func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format("2006-01-02 15:04:05")
	}
	day := func(d string) string {
		if t, err := time.Parse(dayLayout, d); err == nil {
			return t.Format("2006-01-02")
		}
		return d
	}
	var rows [][]string
	for _, j := range jobs {
		st, err := decodeState(j)
		if err != nil {
			row := make([]string, len(StatusColumns))
			row[0], row[1], row[len(row)-1] = router.Shard(j.Shard).String(), "unreadable", err.Error()
			rows = append(rows, row)
			continue
		}
		state := j.Step
		switch {
		case paused:
			state = "paused"
		case st.Now:
			state += " (now requested)"
		}
		n := func(v int64) string { return strconv.FormatInt(v, 10) }
		rows = append(rows, []string{router.Shard(j.Shard).String(), state, st.Oldest, day(st.Through),
			n(st.Files), n(st.Bytes), n(st.Rows), n(st.Deleted), n(st.Kept), n(st.Gone),
			st.Inbox.Oldest, day(st.Inbox.Through), n(st.Inbox.Rows), n(st.Inbox.Deleted), n(int64(st.Unnamed)),
			n(st.PendingErasures), ts(st.OldestErasure), n(st.Erased), n(st.Expired), n(st.Compacted),
			strconv.FormatFloat(st.RowsPerSec, 'f', 0, 64), ts(st.LastRun), ts(st.LastSuccess), j.LastError})
	}
	return StatusColumns, rows, nil
}
