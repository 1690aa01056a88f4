package protocol

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
