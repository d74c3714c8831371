package search

import (
	"math/rand/v2"
	"strconv"
	"strings"
)

// The generated corpus of the exactness tests: Chinese text from a small
// set of common characters (so single characters and bigrams repeat across
// thousands of messages, and longer runs sometimes occur by chance),
// English words in mixed case, numbers and punctuation between them.

const corpusHan = "的一是了我不人在他有这个上们来到时大地为子中你说生国年着就那和要她出也得里后自以会家可下而过天去能对小多然于心学么之都好看起发当没成只如事把还用第样道想作种开美总从无情己面最女但现前些所同日手又行意动方期它头经长儿回位分爱老因很给名法间斯知世什两次使身者被高已亲其进此话常与活正感见明问力理尔点文几定本公特做外孩相西果走将月十实向声车全信重三机工物气每并别真打太新比才便夫再书部水像眼等体却加电主界门利海受听表德少克代员许稜先口由死安写性马光白或住难望教命花结乐色更拉东神记处让母父应直字场平报友关放至张认接告入笑内英军候民岁往何度山觉路带万男边风解叫任金快原吃妈变通师立象数四失满战远格士音轻目条呢"

var corpusWords = strings.Fields("hello world Meeting tomorrow lunch Project deadline report Review the a to of and Shanghai Beijing invoice order shipped payment OK thanks Convoy search index message group photo video call urgent ASAP weekend Monday Friday coffee code deploy bug fix release v2 iPhone15 COVID19 team budget")

type corpusGen struct {
	r *rand.Rand
}

func newCorpusGen(seed uint64) *corpusGen {
	return &corpusGen{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

func (g *corpusGen) han(n int) string {
	rs := []rune(corpusHan)
	var b strings.Builder
	for range n {
		b.WriteRune(rs[g.r.IntN(len(rs))])
	}
	return b.String()
}

var corpusSeps = []string{" ", "，", "。", "！", " ", "? ", "、", ", ", "…", " 😀 "}

// text is one message body: 1..8 segments of Chinese runs, words, numbers.
func (g *corpusGen) text() string {
	var b strings.Builder
	n := 1 + g.r.IntN(8)
	for i := range n {
		if i > 0 {
			b.WriteString(corpusSeps[g.r.IntN(len(corpusSeps))])
		}
		switch k := g.r.IntN(10); {
		case k < 6:
			b.WriteString(g.han(1 + g.r.IntN(12)))
		case k < 9:
			b.WriteString(corpusWords[g.r.IntN(len(corpusWords))])
		default:
			b.WriteString(strconv.Itoa(g.r.IntN(3000)))
		}
	}
	return b.String()
}

// query picks a query text: mostly pieces of a real message (a character,
// a run of 2..5 characters, a word, a number, or two of them), sometimes
// something absent or in other case.
func (g *corpusGen) query(sample string) string {
	segs := segments(sample)
	pick := func() string {
		if len(segs) == 0 || g.r.IntN(8) == 0 {
			switch g.r.IntN(3) {
			case 0:
				return g.han(1 + g.r.IntN(3))
			case 1:
				return strings.ToUpper(corpusWords[g.r.IntN(len(corpusWords))])
			}
			return strconv.Itoa(g.r.IntN(3000))
		}
		s := segs[g.r.IntN(len(segs))]
		if s.kind == segWord {
			return s.text
		}
		rs := []rune(s.text)
		n := 1 + g.r.IntN(min(5, len(rs)))
		if g.r.IntN(3) == 0 {
			n = 1
		}
		i := g.r.IntN(len(rs) - n + 1)
		return string(rs[i : i+n])
	}
	q := pick()
	if g.r.IntN(4) == 0 {
		q += " " + pick()
	}
	return q
}
