// Package golden writes the golden files of tests (testdata/*.json that
// pin what a function gives for each case; a test's -update flag rewrites
// them from the results and the diff shows what changed).
package golden

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"
)

// Write writes v to file as indented JSON, with <, > and & as they are
// (golden files hold SQL).
func Write(t testing.TB, file string, v any) {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}
