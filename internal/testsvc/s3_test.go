package testsvc

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestS3 starts the S3 server and checks that it answers S3 requests
// (ListBuckets) and stops answering once killed.
func TestS3(t *testing.T) {
	s := StartS3(t)
	resp, err := http.Get("http://" + s.Addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "<ListAllMyBucketsResult") {
		t.Fatalf("ListBuckets: %s %v %q", resp.Status, err, body)
	}
	// An injected latency delays reads, and ends.
	for _, d := range []time.Duration{300 * time.Millisecond, 0} {
		s.SetLatency(t, d)
		start := time.Now()
		resp, err := http.Get("http://" + s.Addr + "/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if el := time.Since(start); el < d || d == 0 && el > 200*time.Millisecond {
			t.Fatalf("latency %s: a read took %s", d, el)
		}
	}
	s.Kill()
	if resp, err := http.Get("http://" + s.Addr + "/"); err == nil {
		resp.Body.Close()
		t.Fatal("server still answers after Kill")
	}
}
