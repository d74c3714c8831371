package search

import (
	"errors"
	"slices"
	"strconv"
	"testing"
)

func TestSegments(t *testing.T) {
	got := segments("Hello, 世界！iPhone15 的价格是 5999 元。Ça va?")
	want := []segment{
		{segWord, "hello", 0}, {segCJK, "世界", 7}, {segWord, "iphone15", 16}, {segCJK, "的价格是", 25},
		{segWord, "5999", 38}, {segCJK, "元", 43}, {segWord, "ça", 49}, {segWord, "va", 53},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("segments:\n got %v\nwant %v", got, want)
	}
}

func TestTokensPositions(t *testing.T) {
	// Unigrams and bigrams share positions; a run ends with a gap.
	var got []string
	for _, tk := range tokens("中国人 ok 人民") {
		got = append(got, tk.term+"@"+strconv.Itoa(tk.pos))
	}
	want := []string{"中@1", "中国@1", "国@2", "国人@2", "人@3", "ok@5", "人@6", "人民@6", "民@7"}
	if !slices.Equal(got, want) {
		t.Fatalf("tokens:\n got %v\nwant %v", got, want)
	}
}

func TestMatcher(t *testing.T) {
	cases := []struct {
		q, text string
		want    bool
	}{
		{"中", "我们在中国", true},
		{"中国", "我们在中国", true},
		{"中国", "中。国", false},   // not contiguous
		{"国人", "中国 人民", false}, // across a break
		{"在中国", "我们在中国", true},
		{"我中", "我们在中国", false},
		{"hello", "HELLO world", true},
		{"hell", "hello", false}, // whole words
		{"2024", "in 2024!", true},
		{"2024 中国", "中国 2024", true}, // AND, any order
		{"2024 日本", "中国 2024", false},
		{"iphone15", "新 iPhone15 发布", true},
	}
	for _, c := range cases {
		m, err := NewMatcher(c.q)
		if err != nil {
			t.Fatal(err)
		}
		if got := m.Match(c.text); got != c.want {
			t.Errorf("Match(%q, %q) = %v, want %v", c.q, c.text, got, c.want)
		}
	}
	if _, err := NewMatcher(" ，。!! "); !errors.Is(err, ErrEmptyQuery) {
		t.Fatalf("punctuation-only query: %v, want ErrEmptyQuery", err)
	}
}

// FuzzAnalyzer: any text and query analyse without a panic, and a text
// always matches a query made of itself.
func FuzzAnalyzer(f *testing.F) {
	f.Add("Hello 世界 123", "世")
	f.Add("\xff\xfe中\u0301国", "中国")
	f.Fuzz(func(t *testing.T, text, q string) {
		_ = tokens(text)
		if m, err := NewMatcher(text); err == nil && !m.Match(text) {
			t.Fatalf("%q does not match itself", text)
		}
		if m, err := NewMatcher(q); err == nil {
			_ = m.Match(text)
		}
	})
}

// Width and script folding (docs/design.md §9-10): full-width Latin letters and
// digits match their ASCII forms, half-width kana their full-width forms,
// Traditional Chinese characters their Simplified forms, whichever side
// (message or query) is written which way; a character that is also
// Simplified in its own right (乾) is left alone; folding is idempotent.
func TestFolding(t *testing.T) {
	for _, c := range []struct{ msg, query string }{
		{"ｉＰｈｏｎｅ１５ 到了", "iphone15"},
		{"iPhone15 到了", "ｉＰｈｏｎｅ１５"},
		{"ｶﾀｶﾅ", "カタカナ"},
		{"我們明天後天都發消息", "我们"},
		{"我们明天后天都发消息", "後天"},
		{"頭髮", "头发"},
		{"開會時間", "开会时间"},
	} {
		m, err := NewMatcher(c.query)
		if err != nil {
			t.Fatal(err)
		}
		if !m.Match(c.msg) {
			t.Errorf("%q does not find %q", c.query, c.msg)
		}
	}
	if got := segments("乾隆"); len(got) != 1 || got[0].text != "乾隆" {
		t.Errorf("乾隆 folded to %+v", got)
	}
	for _, s := range []string{"發後髮薴", "ｉＰｈｏｎｅ"} {
		once := segments(s)[0].text
		if twice := segments(once)[0].text; twice != once {
			t.Errorf("folding %q is not idempotent: %q then %q", s, once, twice)
		}
	}
	if pos, ok := positionOf(checkpointOf("0-1-42")); !ok || pos != "0-1-42" {
		t.Errorf("checkpoint round trip: %q %v", pos, ok)
	}
	if _, ok := positionOf("0-1-42"); ok {
		t.Error("a checkpoint without the analysis version counts as current")
	}
}
