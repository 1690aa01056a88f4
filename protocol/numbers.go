package protocol

import "math"

// parseInt64 parses an optionally signed decimal integer without allocating.
// It accepts what Java's Long.parseLong accepts (a leading '+' or '-', then digits).
func parseInt64(b []byte) (int64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	neg := false
	switch b[0] {
	case '-':
		neg = true
		b = b[1:]
	case '+':
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 19 {
		// More than 19 digits cannot fit, except with leading zeros; reject those too.
		return 0, false
	}
	var u uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		u = u*10 + uint64(c-'0') // 19 digits < 1e19 < 2^64: no overflow here
	}
	if neg {
		if u > 1<<63 {
			return 0, false
		}
		return -int64(u), true
	}
	if u > math.MaxInt64 {
		return 0, false
	}
	return int64(u), true
}

// parseInt32 parses a decimal int32.
func parseInt32(b []byte) (int32, bool) {
	n, ok := parseInt64(b)
	if !ok || n < math.MinInt32 || n > math.MaxInt32 {
		return 0, false
	}
	return int32(n), true
}

// parseBool accepts true/false in any letter case, 1/0, and "" as false.
func parseBool(b []byte) (bool, bool) {
	switch len(b) {
	case 0:
		return false, true
	case 1:
		switch b[0] {
		case '1':
			return true, true
		case '0':
			return false, true
		}
	case 4:
		if lowerEq(b, "true") {
			return true, true
		}
	case 5:
		if lowerEq(b, "false") {
			return false, true
		}
	}
	return false, false
}

// lowerEq reports whether b equals the lower-case ASCII word w ignoring b's letter case.
func lowerEq(b []byte, w string) bool {
	if len(b) != len(w) {
		return false
	}
	for i := range b {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != w[i] {
			return false
		}
	}
	return true
}
