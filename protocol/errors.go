package protocol

import "strconv"

// FieldError describes a missing or unparsable extFields value. Err is ErrMissingField or
// ErrBadField, so errors.Is works on it.
type FieldError struct {
	Header string // typed header name, e.g. "SendMessageRequest"; empty for ExtFields getters
	Field  string // extFields key
	Value  string // the offending value (empty when missing)
	Err    error  // ErrMissingField or ErrBadField
}

func (e *FieldError) Error() string {
	s := "protocol: "
	if e.Header != "" {
		s += e.Header + ": "
	}
	if e.Err == ErrMissingField {
		return s + "missing field " + strconv.Quote(e.Field)
	}
	return s + "field " + strconv.Quote(e.Field) + ": invalid value " + strconv.Quote(e.Value)
}

// Unwrap returns ErrMissingField or ErrBadField.
func (e *FieldError) Unwrap() error { return e.Err }

func missingField(header, field string) error {
	return &FieldError{Header: header, Field: field, Err: ErrMissingField}
}

func badField(header string, field, value []byte) error {
	return &FieldError{Header: header, Field: string(field), Value: string(value), Err: ErrBadField}
}

// headerError is a decoding error with a position, wrapping ErrBadHeader.
type headerError struct {
	msg string
	pos int
}

func (e *headerError) Error() string {
	if e.pos < 0 {
		return "protocol: malformed header: " + e.msg
	}
	return "protocol: malformed header: " + e.msg + " at offset " + strconv.Itoa(e.pos)
}

func (e *headerError) Unwrap() error { return ErrBadHeader }

func errHeader(msg string, pos int) error { return &headerError{msg: msg, pos: pos} }
