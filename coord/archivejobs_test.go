package coord

import (
	"errors"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/convoy-im/convoy/internal/etcdtest"
)

// TestArchiveJobStore: the archiver's records live apart from the
// migrations' (neither store lists or watches the other's), its runners
// campaign in their own election, and SaveJobWith writes its extra keys in
// the same fenced transaction (none once the runner has lost its key).
func TestArchiveJobStore(t *testing.T) {
	_, cli := etcdtest.Start(t)
	ctx := etcdtest.Ctx(t)
	mig, arc := NewJobStore(cli, "c"), NewArchiveJobStore(cli, "c")
	if _, err := mig.Create(ctx, testJob(441)); err != nil {
		t.Fatal(err)
	}
	if _, err := arc.Create(ctx, Job{ID: "archive-0441", Shard: 441, Step: "idle"}); err != nil {
		t.Fatalf("archive record of a shard with a migration job: %v", err)
	}
	if k := arc.Key(441); k != "/convoy/c/archive/0441" {
		t.Errorf("archive key %q", k)
	}
	for name, s := range map[string]*JobStore{"migrations": mig, "archive": arc} {
		jobs, _, err := s.List(ctx)
		if err != nil || len(jobs) != 1 {
			t.Fatalf("%s: List = %v, %v; want its own one record", name, jobs, err)
		}
	}
	if j, _ := arc.Get(ctx, 441); j.ID != "archive-0441" {
		t.Errorf("archive Get returned %+v", j)
	}

	// A migration runner of shard 441 does not block the archiver's.
	mr, err := CampaignRunner(ctx, mig, 441, "p1")
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Close()
	ar, err := CampaignRunner(ctx, arc, 441, "p1")
	if err != nil {
		t.Fatalf("archive runner while a migration runner leads: %v", err)
	}
	job, _ := ar.Job(ctx)
	job.Step = "archiving"
	job, err = ar.SaveJobWith(ctx, job, clientv3.OpPut("/convoy/c/archive/files/0441/x", "1"))
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := cli.Get(ctx, "/convoy/c/archive/files/0441/x"); err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("extra op not written: %v %v", resp, err)
	}
	if err := ar.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := ar.SaveJobWith(ctx, job, clientv3.OpPut("/convoy/c/archive/files/0441/y", "1")); !errors.Is(err, ErrNotRunner) {
		t.Fatalf("save after resigning: %v, want ErrNotRunner", err)
	}
	if resp, _ := cli.Get(ctx, "/convoy/c/archive/files/0441/y"); len(resp.Kvs) != 0 {
		t.Fatal("a resigned runner's extra op was written")
	}
}
