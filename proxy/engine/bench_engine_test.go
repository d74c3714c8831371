package engine

import "testing"

// BenchmarkScatterText measures a keyless read end to end in the engine:
// plan, one statement per physical table (1024 on the test layout;
// the backend is a no-op fake answering one row each), and the merge.
// scripts/bench-engine.sh copies this file into the tree of BASE_REF when
// that tree lacks it, so both sides of a comparison run the same code.
func BenchmarkScatterText(b *testing.B) {
	s, rec := newTestSession()
	rec.quiet = true
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		r, err := s.Query("SELECT seq, msg_id FROM conv_msg ORDER BY seq DESC LIMIT 20")
		if err != nil {
			b.Fatal(err)
		}
		if len(r.RowDatas) != 20 {
			b.Fatalf("%d rows, want 20", len(r.RowDatas))
		}
	}
}
