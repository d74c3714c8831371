package coord

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/convoy-im/convoy/internal/etcdtest"
)

func testJob(shard int) Job {
	return Job{
		ID: "mig-0441-1", Shard: shard, Step: "prepare",
		From: Endpoint{Datasource: "ds0", Database: "im_3"}, To: Endpoint{Datasource: "ds2", Database: "im_9"},
	}
}

func TestJobStore(t *testing.T) {
	_, cli := etcdtest.Start(t)
	ctx := etcdtest.Ctx(t)
	js := NewJobStore(cli, "jobs")

	created, err := js.Create(ctx, testJob(441))
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if created.Revision == 0 || created.CreatedAt.IsZero() {
		t.Fatalf("Create returned %+v, want a revision and a creation time", created)
	}
	if _, err := js.Create(ctx, testJob(441)); !errors.Is(err, ErrJobExists) {
		t.Fatalf("second Create: err = %v, want ErrJobExists", err)
	}
	if _, err := js.Create(ctx, testJob(1024)); err == nil {
		t.Error("Create of shard 1024 succeeded")
	}
	if _, err := js.Create(ctx, Job{Shard: 7, Progress: json.RawMessage(`{"rows":`)}); err == nil {
		t.Error("Create with no id / invalid progress JSON succeeded")
	}

	// The stored value is the documented JSON, under the four-digit key.
	resp, err := cli.Get(ctx, "/convoy/jobs/migrations/0441")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("job key: %v %v", resp, err)
	}
	var raw map[string]any
	if err := json.Unmarshal(resp.Kvs[0].Value, &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"id", "shard", "from", "to", "step", "created_at", "updated_at"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("stored job %s lacks %q", resp.Kvs[0].Value, k)
		}
	}

	// Two migrators read the same revision and both try to advance the job:
	// exactly one wins.
	a, err := js.Get(ctx, 441)
	if err != nil {
		t.Fatal(err)
	}
	b := a
	a.Step, a.Progress = "backfill", json.RawMessage(`{"rows":10}`)
	b.Step, b.LastError = "rollback", "operator"
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		errs  = make([]error, 2)
	)
	for i, j := range []Job{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, errs[i] = js.Update(ctx, j)
		}()
	}
	close(start)
	wg.Wait()
	won := -1
	for i, err := range errs {
		switch {
		case err == nil && won == -1:
			won = i
		case err == nil:
			t.Fatalf("both concurrent updates of one revision succeeded")
		case !errors.Is(err, ErrJobConflict):
			t.Fatalf("losing update: err = %v, want ErrJobConflict", err)
		}
	}
	if won == -1 {
		t.Fatalf("no update won: %v", errs)
	}
	got, err := js.Get(ctx, 441)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"backfill", "rollback"}[won]; got.Step != want {
		t.Errorf("stored step %q, want the winner's %q", got.Step, want)
	}
	if got.Revision <= a.Revision || !got.UpdatedAt.After(a.UpdatedAt.Add(-time.Nanosecond)) {
		t.Errorf("after update: revision %d (was %d), updated_at %v", got.Revision, a.Revision, got.UpdatedAt)
	}

	// List sees job records only, not the lock / ack / runner subtrees.
	if _, err := js.Create(ctx, testJob(7)); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{LockKey("jobs", 7), AckKey("jobs", 7, "p1"), runnersPrefix("jobs", 7) + "/abc"} {
		if _, err := cli.Put(ctx, k, `{"shard":7}`); err != nil {
			t.Fatal(err)
		}
	}
	jobs, rev, err := js.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 2 || jobs[0].Shard != 7 || jobs[1].Shard != 441 || jobs[1].Step != got.Step {
		t.Fatalf("List = %+v, want shards 7 and 441", jobs)
	}

	// Watch from the list's revision sees updates and deletes, nothing else.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events := js.Watch(wctx, rev)
	if _, err := cli.Put(ctx, LockKey("jobs", 441), `{}`); err != nil {
		t.Fatal(err)
	}
	got.Intent = "switch"
	got, err = js.Update(ctx, got)
	if err != nil {
		t.Fatal(err)
	}
	if err := js.Delete(ctx, jobs[0]); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	for i, want := range []struct {
		shard  int
		intent string
		del    bool
	}{{441, "switch", false}, {7, "", true}} {
		select {
		case ev := <-events:
			if ev.Err != nil || ev.Shard != want.shard || (ev.Job == nil) != want.del || (ev.Job != nil && ev.Job.Intent != want.intent) {
				t.Fatalf("watch event %d = %+v (job %+v), want shard %d deleted=%v", i, ev, ev.Job, want.shard, want.del)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("watch event %d missing", i)
		}
	}

	// A stale delete loses; the current one wins.
	stale := got
	stale.Revision--
	if err := js.Delete(ctx, stale); !errors.Is(err, ErrJobConflict) {
		t.Fatalf("stale Delete: err = %v, want ErrJobConflict", err)
	}
	if err := js.Delete(ctx, got); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Get(ctx, 441); !errors.Is(err, ErrJobNotFound) {
		t.Fatalf("Get after Delete: err = %v, want ErrJobNotFound", err)
	}
	if _, err := js.Update(ctx, got); !errors.Is(err, ErrJobConflict) {
		t.Fatalf("Update after Delete: err = %v, want ErrJobConflict", err)
	}
}

func campaign(t *testing.T, js *JobStore, shard int, id string, opts ...RunnerOption) *Runner {
	t.Helper()
	r, err := CampaignRunner(etcdtest.Ctx(t), js, shard, id, append([]RunnerOption{WithRunnerLogger(etcdtest.Logger(t))}, opts...)...)
	if err != nil {
		t.Fatalf("CampaignRunner(%s): %v", id, err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// campaignAsync campaigns on a goroutine; the runner arrives on the channel.
func campaignAsync(t *testing.T, js *JobStore, shard int, id string, opts ...RunnerOption) <-chan *Runner {
	ch := make(chan *Runner, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	done := make(chan struct{})
	go func() {
		defer close(done)
		r, err := CampaignRunner(ctx, js, shard, id, append([]RunnerOption{WithRunnerLogger(etcdtest.Logger(t))}, opts...)...)
		if err != nil {
			if ctx.Err() == nil {
				t.Errorf("CampaignRunner(%s): %v", id, err)
			}
			close(ch)
			return
		}
		t.Cleanup(func() { r.Close() })
		ch <- r
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return ch
}

func TestRunnerElection(t *testing.T) {
	_, cli := etcdtest.Start(t)
	ctx := etcdtest.Ctx(t)
	js := NewJobStore(cli, "elect")
	if _, err := js.Create(ctx, testJob(441)); err != nil {
		t.Fatal(err)
	}
	ttl := WithRunnerTTL(2 * time.Second)
	r1 := campaign(t, js, 441, "m1", ttl)
	if id, ok, err := RunnerOf(ctx, cli, "elect", 441); err != nil || !ok || id != "m1" {
		t.Fatalf("RunnerOf = %q %v %v, want m1", id, ok, err)
	}
	second := campaignAsync(t, js, 441, "m2", ttl)
	select {
	case <-second:
		t.Fatal("a second runner was elected while the first lives")
	case <-time.After(300 * time.Millisecond):
	}

	// The runner persists its step; a stale copy written by anyone loses.
	job, err := r1.Job(ctx)
	if err != nil {
		t.Fatal(err)
	}
	job.Step = "backfill"
	if job, err = r1.SaveJob(ctx, job); err != nil {
		t.Fatalf("SaveJob: %v", err)
	}

	if err := r1.Elected(ctx); err != nil {
		t.Fatalf("Elected of the runner: %v", err)
	}

	// Close (revoke): the waiting candidate takes over at once and resumes
	// from the persisted step; the old runner can no longer write.
	t0 := time.Now()
	if err := r1.Close(); err != nil {
		t.Fatal(err)
	}
	var r2 *Runner
	select {
	case r2 = <-second:
	case <-time.After(3 * time.Second):
		t.Fatal("no takeover within 3 s of the runner's Close")
	}
	t.Logf("takeover %s after Close", time.Since(t0).Round(time.Millisecond))
	resumed, err := r2.Job(ctx)
	if err != nil || resumed.Step != "backfill" {
		t.Fatalf("new runner reads %+v %v, want step backfill", resumed, err)
	}
	job.Step = "verify"
	if _, err := r1.SaveJob(ctx, job); !errors.Is(err, ErrNotRunner) {
		t.Fatalf("SaveJob by the closed runner: err = %v, want ErrNotRunner", err)
	}
	if err := r1.Elected(ctx); !errors.Is(err, ErrNotRunner) {
		t.Fatalf("Elected of the closed runner: %v, want ErrNotRunner", err)
	}
	if id, _, _ := RunnerOf(ctx, cli, "elect", 441); id != "m2" {
		t.Errorf("RunnerOf = %q, want m2", id)
	}

	// Expiry: the runner stops renewing its lease (crashed, or cut off from
	// etcd); the next candidate takes over once etcd expires it.
	third := campaignAsync(t, js, 441, "m3", ttl)
	t0 = time.Now()
	r2.lead.session.Orphan()
	select {
	case <-r2.Done():
	default:
		t.Error("Done not closed after the lease stopped being renewed")
	}
	var r3 *Runner
	select {
	case r3 = <-third:
	case <-time.After(8 * time.Second):
		t.Fatal("no takeover within 8 s of the runner's lease expiring (TTL 2 s)")
	}
	took := time.Since(t0)
	t.Logf("takeover %s after the runner stopped renewing (TTL 2 s)", took.Round(time.Millisecond))
	if took < time.Second {
		t.Errorf("takeover after %s, before the 2 s lease could expire", took)
	}
	if err := r2.Elected(ctx); !errors.Is(err, ErrNotRunner) {
		t.Fatalf("Elected of the expired runner: %v, want ErrNotRunner", err)
	}
	resumed.Step = "verify"
	if _, err := r2.SaveJob(ctx, resumed); !errors.Is(err, ErrNotRunner) {
		t.Fatalf("SaveJob by the expired runner: err = %v, want ErrNotRunner", err)
	}
	if _, err := r3.SaveJob(ctx, resumed); err != nil {
		t.Fatalf("SaveJob by the new runner: %v", err)
	}
}
