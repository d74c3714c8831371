package search

import (
	"context"
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
