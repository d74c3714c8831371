package sqltext

import "testing"

var benchText = "INSERT INTO conv_msg (conv_id, seq, sender, body, created_at) VALUES (123456789, 98765, 42, 'hello there, how are you doing today?', 1700000000)"

func BenchmarkNext(b *testing.B) {
	b.SetBytes(int64(len(benchText)))
	for i := 0; i < b.N; i++ {
		s := New(benchText)
		for t := s.Next(); t.Kind != End; t = s.Next() {
		}
	}
}
