package filter

import (
	"bufio"
	"encoding/hex"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// TestJavaConversions checks the property-string conversions against a
// golden file written by a JDK (testdata/java/JavaConversions.java):
// Integer.parseInt, Long.parseLong, Double.valueOf and Boolean.valueOf.
func TestJavaConversions(t *testing.T) {
	f, err := os.Open("testdata/java_conversions.golden")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		cols := strings.Split(sc.Text(), "\t")
		if len(cols) != 5 {
			t.Fatalf("bad golden line %q", sc.Text())
		}
		in, err := hex.DecodeString(cols[0])
		if err != nil {
			t.Fatal(err)
		}
		n++
		for i, bits := range []uint{32, 64} {
			got := "ERR"
			if v, ok := javaParseInt(in, bits); ok {
				got = strconv.FormatInt(v, 10)
			}
			if got != cols[1+i] {
				t.Errorf("%q: parseInt/%d = %s, Java %s", in, bits, got, cols[1+i])
			}
		}
		got := "ERR"
		if d, ok := javaParseDouble(in); ok {
			b := math.Float64bits(d)
			if d != d {
				b = 0x7ff8000000000000 // doubleToLongBits canonical NaN
			}
			got = strconv.FormatUint(b, 16)
		}
		if got != cols[3] {
			t.Errorf("%q: Double.valueOf bits = %s, Java %s", in, got, cols[3])
		}
		if got := strconv.FormatBool(javaBool(in)); got != cols[4] {
			t.Errorf("%q: Boolean.valueOf = %s, Java %s", in, got, cols[4])
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if n < 100 {
		t.Fatalf("only %d golden lines", n)
	}
	// The empty string, which the golden input format cannot carry.
	if _, ok := javaParseInt(nil, 32); ok {
		t.Error("parseInt(\"\") succeeded")
	}
	if _, ok := javaParseDouble(nil); ok {
		t.Error("Double.valueOf(\"\") succeeded")
	}
}

// TestJavaDigit checks the digit table assumption: every BMP Nd range in
// Go's tables is made of whole runs of ten.
func TestJavaDigit(t *testing.T) {
	for _, rg := range unicode.Nd.R16 {
		if rg.Stride != 1 || (rg.Hi-rg.Lo+1)%10 != 0 {
			t.Errorf("Nd range %#x-%#x stride %d is not whole runs of ten", rg.Lo, rg.Hi, rg.Stride)
		}
		for r := rune(rg.Lo); r <= rune(rg.Hi); r++ {
			if r < 0x80 {
				continue
			}
			if d := javaDigit(r); d != int(r-rune(rg.Lo))%10 {
				t.Errorf("javaDigit(%U) = %d", r, d)
			}
		}
	}
	for _, r := range []rune{'a', 0x0660 - 1, 0xFFFD, 0x1D7CE} {
		if javaDigit(r) >= 0 {
			t.Errorf("javaDigit(%U) is a digit", r)
		}
	}
	if javaDoubleCompare(math.Copysign(0, -1), 0) != -1 || javaDoubleCompare(math.NaN(), math.Inf(1)) != 1 ||
		javaDoubleCompare(math.NaN(), math.NaN()) != 0 || javaDoubleCompare(1, 2) != -1 {
		t.Error("javaDoubleCompare differs from Double.compare")
	}
}
