package testsvc_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/convoy-im/convoy/cold"
	"github.com/convoy-im/convoy/internal/testsvc"
)

// TestS3 starts the S3 gateway and checks what the cold tier's tests rely
// on: signed requests through the store (create-if-absent, ranged reads, a
// conflicting rewrite refused), unsigned and wrongly signed ones refused,
// the injected read latency, and nothing answering once killed.
func TestS3(t *testing.T) {
	s := testsvc.StartS3(t)
	ctx := context.Background()
	st, err := cold.OpenStore(ctx, s.URL("bucket"))
	if err != nil {
		t.Fatal(err)
	}
	data := []byte("0123456789abcdef")
	for i := 0; i < 2; i++ { // the second: same bytes, idempotent
		if err := st.PutIfAbsent(ctx, "a/b.parquet", data); err != nil {
			t.Fatalf("PutIfAbsent #%d: %v", i+1, err)
		}
	}
	if err := st.PutIfAbsent(ctx, "a/b.parquet", []byte("other")); !errors.Is(err, cold.ErrConflict) {
		t.Fatalf("PutIfAbsent of other bytes: %v, want ErrConflict", err)
	}
	got, err := st.ReadRange(ctx, "a/b.parquet", 4, 6)
	if err != nil || !bytes.Equal(got, data[4:10]) {
		t.Fatalf("ReadRange: %q, %v", got, err)
	}
	// Every request's signature is checked.
	resp, err := http.Get("http://" + s.Addr + "/bucket/a/b.parquet")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("an unsigned GET: %s, want 403", resp.Status)
	}
	wrong, err := cold.OpenStore(ctx, strings.Replace(s.URL("bucket"), "secret_access_key=", "secret_access_key=x", 1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wrong.ReadRange(ctx, "a/b.parquet", 0, 4); err == nil {
		t.Fatal("a read signed with a wrong secret succeeded")
	}
	// An injected latency delays reads, and ends.
	for _, d := range []time.Duration{300 * time.Millisecond, 0} {
		s.SetLatency(t, d)
		start := time.Now()
		if _, err := st.ReadRange(ctx, "a/b.parquet", 0, 4); err != nil {
			t.Fatal(err)
		}
		if el := time.Since(start); el < d || d == 0 && el > 250*time.Millisecond {
			t.Fatalf("latency %s: a read took %s", d, el)
		}
	}
	s.Kill()
	if resp, err := http.Get("http://" + s.Addr + "/"); err == nil {
		resp.Body.Close()
		t.Fatal("server still answers after Kill")
	}
}
