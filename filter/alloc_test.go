package filter

import (
	"testing"

	"github.com/apogeemq/apogee/internal/javacompat"
	"github.com/apogeemq/apogee/message"
)

// realisticProps is the properties string of a message as the Go client
// sends it and the broker stores it: unique key, tag, keys, the broker's
// cluster name, and a few user properties.
func realisticProps() []byte {
	var p []byte
	p = message.AppendProperty(p, message.PropUniqKey, "7F0000010B6818B4AAC27C8F3A2D0001")
	p = message.AppendProperty(p, message.PropTags, "TagA")
	p = message.AppendProperty(p, message.PropKeys, "order-20240101-000123")
	p = message.AppendProperty(p, message.PropWait, "true")
	p = message.AppendProperty(p, "region", "eu-west-1")
	p = message.AppendProperty(p, "price", "129")
	p = message.AppendProperty(p, "currency", "EUR")
	p = message.AppendProperty(p, "score", "0.87")
	p = message.AppendProperty(p, message.PropCluster, "DefaultCluster")
	return p
}

const threeClause = "price > 100 AND region = 'eu-west-1' OR vip IS NOT NULL"

func TestMatchAllocs(t *testing.T) {
	p := realisticProps()
	for _, src := range []string{
		threeClause,
		"a > 5 AND b = 'x' OR c IS NOT NULL",
		"score > 0.5 AND currency IN ('EUR', 'USD') AND TAGS STARTSWITH 'Tag'",
		"price BETWEEN 100 AND 200 AND NOT (region CONTAINS 'us')",
		"price > 5 OR score > 1",             // a thrown NumberFormatException: still no allocation
		"score > 0.123456789012345678901234", // long literal; the property is short
		"region > 1.5",                       // Double.valueOf fails on the property
		"KEYS ENDSWITH '000123' AND TAGS <> 'TagB'",
	} {
		s, err := Compile(src)
		if err != nil {
			t.Fatal(src, err)
		}
		if n := testing.AllocsPerRun(200, func() { s.Match(p) }); n != 0 {
			t.Errorf("%q: Match allocates %v times", src, n)
		}
	}
	tags, _ := CompileTags("TagA || TagB")
	if n := testing.AllocsPerRun(200, func() {
		tags.MatchTagCode(2598919)
		tags.MatchProperties(p)
	}); n != 0 {
		t.Errorf("Tags: %v allocations", n)
	}
	// Java number parsing of property values on their own.
	for _, v := range []string{"12345", "-2147483648", "1.5e300", "0x1.8p3", " 7d ", "NaN", "1e999", "1e-999",
		"0.000000000000000000000000001234", "123456789012345678901234", "abc", "1,5",
		"1000000000000000000000000000000000000000.000000", "1.5e309", "1.7976931348623158e308", "1.7976931348623157e308"} {
		b := []byte(v)
		if n := testing.AllocsPerRun(100, func() {
			javacompat.ParseDouble(b)
			javacompat.ParseInt(b, 32)
			javacompat.ParseInt(b, 64)
		}); n != 0 {
			t.Errorf("parsing %q allocates %v times", v, n)
		}
	}
}

func BenchmarkSQLMatch(b *testing.B) {
	s, err := Compile(threeClause)
	if err != nil {
		b.Fatal(err)
	}
	p := realisticProps()
	if !s.Match(p) {
		b.Fatal("no match")
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(p)))
	for b.Loop() {
		s.Match(p)
	}
}

func BenchmarkSQLMatchMiss(b *testing.B) {
	s, _ := Compile("price > 500 AND region = 'us-east-1' OR vip IS NOT NULL")
	p := realisticProps()
	b.ReportAllocs()
	for b.Loop() {
		if s.Match(p) {
			b.Fatal("match")
		}
	}
}

func BenchmarkTagsMatch(b *testing.B) {
	f, _ := CompileTags("TagA || TagB || TagC")
	p := realisticProps()
	code := message.TagCode([]byte("TagA"))
	b.ReportAllocs()
	for b.Loop() {
		if !f.MatchTagCode(code) || !f.MatchProperties(p) {
			b.Fatal("no match")
		}
	}
}

func BenchmarkCompile(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Compile(threeClause); err != nil {
			b.Fatal(err)
		}
	}
}
