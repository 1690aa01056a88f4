package javacompat

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
			if v, ok := ParseInt(in, bits); ok {
				got = strconv.FormatInt(v, 10)
			}
			if got != cols[1+i] {
				t.Errorf("%q: parseInt/%d = %s, Java %s", in, bits, got, cols[1+i])
			}
		}
		got := "ERR"
		if d, ok := ParseDouble(in); ok {
			b := math.Float64bits(d)
			if d != d {
				b = 0x7ff8000000000000 // doubleToLongBits canonical NaN
			}
			got = strconv.FormatUint(b, 16)
		}
		if got != cols[3] {
			t.Errorf("%q: Double.valueOf bits = %s, Java %s", in, got, cols[3])
		}
		if got := strconv.FormatBool(ParseBoolean(in)); got != cols[4] {
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
	if _, ok := ParseInt(nil, 32); ok {
		t.Error("parseInt(\"\") succeeded")
	}
	if _, ok := ParseDouble(nil); ok {
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
			if d := Digit(r); d != int(r-rune(rg.Lo))%10 {
				t.Errorf("Digit(%U) = %d", r, d)
			}
		}
	}
	for _, r := range []rune{'a', 0x0660 - 1, 0xFFFD, 0x1D7CE} {
		if Digit(r) >= 0 {
			t.Errorf("Digit(%U) is a digit", r)
		}
	}
	if CompareDouble(math.Copysign(0, -1), 0) != -1 || CompareDouble(math.NaN(), math.Inf(1)) != 1 ||
		CompareDouble(math.NaN(), math.NaN()) != 0 || CompareDouble(1, 2) != -1 {
		t.Error("CompareDouble differs from Double.compare")
	}
}

// FuzzParseInt: on ASCII text ParseInt agrees with strconv.ParseInt (Java and
// Go read ASCII decimals alike); on any text with its Unicode decimal digits
// mapped to ASCII it agrees too (Java's Character.digit reads those as
// digits); and ParseInt32 / ParseInt64 agree with ParseInt.
func FuzzParseInt(f *testing.F) {
	for _, s := range []string{"0", "-0", "+7", "007", "-2147483648", "2147483648", "-9223372036854775808",
		"9223372036854775807", "9223372036854775808", "00000000000000000000000001", "1_000", " 1", "+", "-",
		"\u0661\u0662", "1\u0967", "\U0001D7CE", "1e3", "\xff1"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, s []byte) {
		var ascii []byte
		ok := true
		for _, r := range string(s) {
			if r < 0x80 {
				ascii = append(ascii, byte(r))
			} else if d := Digit(r); d >= 0 {
				ascii = append(ascii, byte('0'+d))
			} else {
				ok = false // no ASCII equivalent: only the consistency checks below
				break
			}
		}
		for _, bits := range []int{32, 64} {
			n, pok := ParseInt(s, uint(bits))
			if ok {
				ref, err := strconv.ParseInt(string(ascii), 10, bits)
				if pok != (err == nil) || pok && n != ref {
					t.Fatalf("ParseInt(%q, %d) = %d %v, strconv on %q: %d %v", s, bits, n, pok, ascii, ref, err)
				}
			}
			if bits == 32 {
				n32, ok32 := ParseInt32(s)
				if ok32 != pok || pok && int64(n32) != n {
					t.Fatalf("ParseInt32(%q) = %d %v, ParseInt %d %v", s, n32, ok32, n, pok)
				}
			} else {
				n64, ok64 := ParseInt64(s)
				if ok64 != pok || pok && n64 != n {
					t.Fatalf("ParseInt64(%q) = %d %v, ParseInt %d %v", s, n64, ok64, n, pok)
				}
			}
		}
	})
}

func BenchmarkParseInt64(b *testing.B) {
	for _, v := range []string{"1764489600000", "-9223372036854775808"} {
		s := []byte(v)
		b.Run(v, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, ok := ParseInt64(s); !ok {
					b.Fatal(v)
				}
			}
		})
	}
}
