package search

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestBleveExactness(t *testing.T) {
	dir := t.TempDir()
	eng, err := OpenBleve(dir)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	c := buildCorpus(t, eng, *corpusSize, 1)
	t.Logf("indexed %d messages in %s", *corpusSize, time.Since(t0).Round(time.Millisecond))
	checkExactness(t, eng, c, 400, 2)

	// Reopened, the index still has its documents and its checkpoint.
	if err := eng.Close(); err != nil {
		t.Fatal(err)
	}
	if eng, err = OpenBleve(dir); err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	if cp, err := eng.Checkpoint(context.Background(), "corpus"); err != nil || cp != "dels-replayed" {
		t.Fatalf("checkpoint after reopen: %q, %v", cp, err)
	}
	checkExactness(t, eng, c, 50, 3)
}

// A second open of an index directory that is open fails at once, naming
// the holder's pid, instead of waiting for bleve's lock forever; once the
// first is closed the directory opens again.
func TestBleveDirInUse(t *testing.T) {
	dir := t.TempDir()
	eng, err := OpenBleve(dir)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		e2, err := OpenBleve(dir)
		if err == nil {
			e2.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "in use by another Convoy process (pid "+strconv.Itoa(os.Getpid())) {
			t.Fatalf("second open of a directory in use: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the second open of a directory in use hangs")
	}
	if err := eng.Close(); err != nil {
		t.Fatal(err)
	}
	eng, err = OpenBleve(dir)
	if err != nil {
		t.Fatalf("reopen after close: %v", err)
	}
	eng.Close()
}
