package testsvc

import (
	"io"
	"net/http"
	"strings"
	"testing"
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
	s.Kill()
	if resp, err := http.Get("http://" + s.Addr + "/"); err == nil {
		resp.Body.Close()
		t.Fatal("server still answers after Kill")
	}
}
