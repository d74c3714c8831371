package engine

import "testing"

func TestInfoText(t *testing.T) {
	for _, c := range []struct{ a, b, want string }{
		{"", "", ""},
		{"Records: 2  Duplicates: 0  Warnings: 0", "", "Records: 2  Duplicates: 0  Warnings: 0"},
		{"", "Rows matched: 1  Changed: 1  Warnings: 0", "Rows matched: 1  Changed: 1  Warnings: 0"},
		{"Records: 2  Duplicates: 1  Warnings: 1", "Records: 3  Duplicates: 0  Warnings: 2", "Records: 5  Duplicates: 1  Warnings: 3"},
		{"Rows matched: 2  Changed: 1  Warnings: 0", "Rows matched: 3  Changed: 3  Warnings: 0", "Rows matched: 5  Changed: 4  Warnings: 0"},
		// Shapes that do not add up keep the first.
		{"Rows matched: 2  Changed: 1  Warnings: 0", "Records: 1  Duplicates: 0  Warnings: 0", "Rows matched: 2  Changed: 1  Warnings: 0"},
		{"free text", "Records: 1  Duplicates: 0  Warnings: 0", "free text"},
	} {
		if got := addInfo(c.a, c.b); got != c.want {
			t.Errorf("addInfo(%q, %q) = %q, want %q", c.a, c.b, got, c.want)
		}
	}
	for _, c := range []struct {
		affected uint64
		warnings uint16
		want     string
	}{
		{1, 0, "Records: 1  Duplicates: 0  Warnings: 0"}, // inserted
		{2, 0, "Records: 1  Duplicates: 1  Warnings: 0"}, // replaced / updated on duplicate
		{0, 1, "Records: 1  Duplicates: 1  Warnings: 1"}, // skipped by IGNORE (1062 noted)
		{0, 0, "Records: 1  Duplicates: 0  Warnings: 0"}, // ON DUPLICATE KEY UPDATE changed nothing
	} {
		if got := oneRowInsertInfo(c.affected, c.warnings); got != c.want {
			t.Errorf("oneRowInsertInfo(%d, %d) = %q, want %q", c.affected, c.warnings, got, c.want)
		}
	}
	if got := withWarnings("Rows matched: 2  Changed: 2  Warnings: 0", 3); got != "Rows matched: 2  Changed: 2  Warnings: 3" {
		t.Errorf("withWarnings = %q", got)
	}
	if got := withWarnings("", 3); got != "" {
		t.Errorf("withWarnings of no text = %q", got)
	}
}
