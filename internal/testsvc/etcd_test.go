package testsvc

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// gateway calls etcd's JSON gRPC gateway, so this test needs no client
// library: the helper must work for packages that never import clientv3.
func gateway(t *testing.T, e *Etcd, path string, body map[string]string) (map[string]any, error) {
	t.Helper()
	b, _ := json.Marshal(body)
	hc := &http.Client{Timeout: 2 * time.Second}
	resp, err := hc.Post(e.Endpoints()[0]+path, "application/json", bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("decode %s: %v", path, err)
	}
	return out, nil
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func getValue(t *testing.T, e *Etcd, key string) string {
	t.Helper()
	out, err := gateway(t, e, "/v3/kv/range", map[string]string{"key": b64(key)})
	if err != nil {
		t.Fatalf("range %s: %v", key, err)
	}
	kvs, _ := out["kvs"].([]any)
	if len(kvs) != 1 {
		return ""
	}
	v, _ := base64.StdEncoding.DecodeString(kvs[0].(map[string]any)["value"].(string))
	return string(v)
}

func TestEtcdStopStartKeepsDataAndPorts(t *testing.T) {
	e := StartEtcd(t)
	ep := e.Endpoints()
	if len(ep) != 1 || !strings.HasPrefix(ep[0], "http://127.0.0.1:") {
		t.Fatalf("Endpoints() = %v, want one loopback URL", ep)
	}
	if _, err := gateway(t, e, "/v3/kv/put", map[string]string{"key": b64("k"), "value": b64("v1")}); err != nil {
		t.Fatalf("put: %v", err)
	}

	e.Stop()
	if _, err := gateway(t, e, "/v3/kv/range", map[string]string{"key": b64("k")}); err == nil {
		t.Fatal("etcd still answers after Stop")
	}
	e.Start()
	if got := e.Endpoints(); got[0] != ep[0] {
		t.Fatalf("restart moved etcd from %s to %s", ep[0], got[0])
	}
	if got := getValue(t, e, "k"); got != "v1" {
		t.Fatalf("after Stop/Start k = %q, want v1 (same data dir)", got)
	}

	e.Kill()
	if _, err := gateway(t, e, "/v3/kv/range", map[string]string{"key": b64("k")}); err == nil {
		t.Fatal("etcd still answers after Kill")
	}
	e.Start()
	if got := getValue(t, e, "k"); got != "v1" {
		t.Fatalf("after Kill/Start k = %q, want v1", got)
	}
}
