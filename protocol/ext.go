package protocol

import (
	"strconv"

	"github.com/apogeemq/apogee/internal/javacompat"
)

// ExtFields is a command's custom header: an ordered list of key/value pairs whose values
// are strings on the wire. It stores every key and value in one flat byte buffer (no map,
// no per-entry allocation) and is reused across decodes.
//
// When a key occurs more than once (possible only in decoded input), the last occurrence
// wins, as it does for the Java and Go peers that decode into hash maps. Lookups are
// linear; a command carries a few dozen keys at most.
//
// Slices returned by Get and At alias the internal buffer: they stay valid until the next
// Set, Delete, Reset or decode into this ExtFields. The zero value is empty and ready.
type ExtFields struct {
	buf  []byte
	ents []extEntry
}

type extEntry struct {
	koff, klen, voff, vlen uint32
}

// Reset removes every pair, keeping the storage.
func (e *ExtFields) Reset() {
	e.buf = e.buf[:0]
	e.ents = e.ents[:0]
}

// Len returns the number of pairs, duplicates included.
func (e *ExtFields) Len() int { return len(e.ents) }

// At returns the i-th pair in wire order (0 <= i < Len()).
func (e *ExtFields) At(i int) (key, value []byte) {
	en := e.ents[i]
	return e.buf[en.koff : en.koff+en.klen : en.koff+en.klen], e.buf[en.voff : en.voff+en.vlen : en.voff+en.vlen]
}

// ForEach calls fn for each pair in wire order until fn returns false.
func (e *ExtFields) ForEach(fn func(key, value []byte) bool) {
	for i := range e.ents {
		if !fn(e.At(i)) {
			return
		}
	}
}

// find returns the index of the last pair with the key, or -1.
func (e *ExtFields) find(key string) int {
	for i := len(e.ents) - 1; i >= 0; i-- {
		en := e.ents[i]
		if int(en.klen) == len(key) && string(e.buf[en.koff:en.koff+en.klen]) == key {
			return i
		}
	}
	return -1
}

// Has reports whether key is present.
func (e *ExtFields) Has(key string) bool { return e.find(key) >= 0 }

// Get returns the value of key (a view into the internal buffer) and whether it is present.
func (e *ExtFields) Get(key string) ([]byte, bool) {
	i := e.find(key)
	if i < 0 {
		return nil, false
	}
	_, v := e.At(i)
	return v, true
}

// GetString returns a copy of the value of key as a string.
func (e *ExtFields) GetString(key string) (string, bool) {
	v, ok := e.Get(key)
	if !ok {
		return "", false
	}
	return string(v), true
}

// GetInt64 parses the value of key as a decimal int64. A missing key gives an error
// wrapping ErrMissingField, an unparsable value one wrapping ErrBadField.
func (e *ExtFields) GetInt64(key string) (int64, error) {
	v, ok := e.Get(key)
	if !ok {
		return 0, &FieldError{Field: key, Err: ErrMissingField}
	}
	n, ok := javacompat.ParseInt64(v)
	if !ok {
		return 0, &FieldError{Field: key, Value: string(v), Err: ErrBadField}
	}
	return n, nil
}

// GetInt32 parses the value of key as a decimal int32 (errors as GetInt64).
func (e *ExtFields) GetInt32(key string) (int32, error) {
	v, ok := e.Get(key)
	if !ok {
		return 0, &FieldError{Field: key, Err: ErrMissingField}
	}
	n, ok := javacompat.ParseInt32(v)
	if !ok {
		return 0, &FieldError{Field: key, Value: string(v), Err: ErrBadField}
	}
	return n, nil
}

// GetBool parses the value of key as a boolean: "true"/"false" in any case, "1"/"0", and
// "" as false (as Java's Boolean.parseBoolean does). Errors as GetInt64.
func (e *ExtFields) GetBool(key string) (bool, error) {
	v, ok := e.Get(key)
	if !ok {
		return false, &FieldError{Field: key, Err: ErrMissingField}
	}
	b, ok := parseBool(v)
	if !ok {
		return false, &FieldError{Field: key, Value: string(v), Err: ErrBadField}
	}
	return b, nil
}

// Set sets key to a copy of value, replacing the last existing occurrence if any.
// value may alias this ExtFields' own buffer.
func (e *ExtFields) Set(key string, value []byte) { setPair(e, key, value) }

// SetString sets key to value.
func (e *ExtFields) SetString(key, value string) { setPair(e, key, value) }

// setPair replaces the value of the last occurrence of key (in place when the new value
// fits, so that steady-state reuse does not grow the buffer), or appends a new pair.
func setPair[V string | []byte](e *ExtFields, key string, value V) {
	if i := e.find(key); i >= 0 {
		en := &e.ents[i]
		if len(value) <= int(en.vlen) {
			copy(e.buf[en.voff:], value)
		} else {
			en.voff = uint32(len(e.buf))
			e.buf = append(e.buf, value...)
		}
		en.vlen = uint32(len(value))
		return
	}
	addPair(e, key, value)
}

// addPair appends a pair without looking for an existing key (decoders use it: duplicates
// are kept and the last one wins on lookup).
func addPair[K, V string | []byte](e *ExtFields, key K, value V) {
	koff := uint32(len(e.buf))
	e.buf = append(e.buf, key...)
	voff := uint32(len(e.buf))
	e.buf = append(e.buf, value...)
	e.ents = append(e.ents, extEntry{koff: koff, klen: uint32(len(key)), voff: voff, vlen: uint32(len(value))})
}

// fieldWriter writes a generated encoder's fields into an ExtFields. When the header
// held no pair as the encoder began (a command just reset, as every client and
// broker encoder starts from), none of its keys can be there yet, and each
// pair is appended without the search for an existing key that Set makes: a
// dozen fields would otherwise compare each key with every one before it.
// Otherwise it sets, as Set does. An encoder writes each key once.
type fieldWriter struct {
	e     *ExtFields
	fresh bool
}

func writeFields(e *ExtFields) fieldWriter { return fieldWriter{e: e, fresh: e.Len() == 0} }

func (w fieldWriter) bytes(key string, value []byte) {
	if w.fresh {
		addPair(w.e, key, value)
	} else {
		setPair(w.e, key, value)
	}
}

func (w fieldWriter) str(key, value string) {
	if w.fresh {
		addPair(w.e, key, value)
	} else {
		setPair(w.e, key, value)
	}
}

func (w fieldWriter) int(key string, v int64) {
	var tmp [20]byte
	w.bytes(key, strconv.AppendInt(tmp[:0], v, 10))
}

func (w fieldWriter) bool(key string, v bool) {
	if v {
		w.bytes(key, trueBytes)
	} else {
		w.bytes(key, falseBytes)
	}
}

var trueBytes, falseBytes = []byte("true"), []byte("false")

// SetInt sets key to the decimal text of v.
func (e *ExtFields) SetInt(key string, v int64) {
	var tmp [20]byte
	e.Set(key, strconv.AppendInt(tmp[:0], v, 10))
}

// SetBool sets key to "true" or "false".
func (e *ExtFields) SetBool(key string, v bool) {
	if v {
		e.SetString(key, "true")
	} else {
		e.SetString(key, "false")
	}
}

// Delete removes every occurrence of key and reports whether there was one.
func (e *ExtFields) Delete(key string) bool {
	found := false
	for i := e.find(key); i >= 0; i = e.find(key) {
		e.ents = append(e.ents[:i], e.ents[i+1:]...)
		found = true
	}
	return found
}

// CopyFrom replaces the contents of e with a copy of src's pairs.
func (e *ExtFields) CopyFrom(src *ExtFields) {
	if e == src {
		return
	}
	e.buf = append(e.buf[:0], src.buf...)
	e.ents = append(e.ents[:0], src.ents...)
}
