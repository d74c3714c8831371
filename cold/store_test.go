package cold_test

import (
	"context"
	"strings"
	"testing"

	"github.com/convoy-im/convoy/cold"
)

// TestOpenStoreBadURL: a bad store URL is an error naming the problem,
// without the secret key.
func TestOpenStoreBadURL(t *testing.T) {
	for _, u := range []string{
		"http://bucket",
		"file://",
		"s3://bucket?use_path_style=maybe&secret_access_key=hunter2",
		"s3://bucket?disable_https=2&secret_access_key=hunter2",
		"s3://bucket?rate_limiter_capacity=x&secret_access_key=hunter2",
		"::not a url hunter2",
	} {
		s, err := cold.OpenStore(context.Background(), u)
		if err == nil {
			s.Close()
			t.Errorf("%q: opened", u)
			continue
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%q: error shows the secret: %v", u, err)
		}
	}
}
