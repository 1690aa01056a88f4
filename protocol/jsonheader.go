package protocol

import "strconv"

// appendJSONHeader appends c's header as the JSON object rocketmq-client-go writes, in
// the same key order:
//
//	{"code":11,"language":"GO","version":317,"opaque":1,"flag":0,"remark":"","extFields":{...}}
//
// remark is always present ("" when empty) and extFields always an object.
func appendJSONHeader(dst []byte, c *Command) []byte {
	dst = append(dst, `{"code":`...)
	dst = strconv.AppendInt(dst, int64(c.Code), 10)
	dst = append(dst, `,"language":"`...)
	dst = append(dst, c.Language.jsonName()...)
	dst = append(dst, `","version":`...)
	dst = strconv.AppendInt(dst, int64(c.Version), 10)
	dst = append(dst, `,"opaque":`...)
	dst = strconv.AppendInt(dst, int64(c.Opaque), 10)
	dst = append(dst, `,"flag":`...)
	dst = strconv.AppendInt(dst, int64(c.Flag), 10)
	dst = append(dst, `,"remark":`...)
	dst = appendJSONString(dst, c.Remark)
	dst = append(dst, `,"extFields":{`...)
	for i := range c.Ext.ents {
		if i > 0 {
			dst = append(dst, ',')
		}
		k, v := c.Ext.At(i)
		dst = appendJSONString(dst, k)
		dst = append(dst, ':')
		dst = appendJSONString(dst, v)
	}
	return append(dst, "}}"...)
}

// decodeJSONHeader parses a JSON command header into c, which must have been reset
// except for its buffers. Accepted, beyond what rocketmq-client-go and the Java broker
// emit: any key order and whitespace; language as an enum name (unknown names give
// LangUnknown) or a number; remark as a string or null; extFields as an object or null,
// whose values are strings (null is taken as ""); unknown keys holding any JSON value.
// A non-string extFields value is an error, as it is for rocketmq-client-go.
func decodeJSONHeader(h []byte, c *Command) error {
	s := scanner{b: h}
	if err := s.expect('{', "'{'"); err != nil {
		return err
	}
	if s.next() == '}' {
		s.i++
		return s.end()
	}
	for {
		if s.next() != '"' {
			return errHeader("expected object key", s.i)
		}
		keyRaw, keyEsc, err := s.str()
		if err != nil {
			return err
		}
		if err := s.expect(':', "':'"); err != nil {
			return err
		}
		s.ws()
		key := keyRaw
		if keyEsc {
			// Unusual: decode the key into the scratch buffer.
			c.scratch, err = appendUnescaped(c.scratch[:0], keyRaw)
			if err != nil {
				return err
			}
			key = c.scratch
		}
		switch string(key) {
		case "code":
			c.Code, err = s.int32Value()
		case "version":
			c.Version, err = s.int32Value()
		case "opaque":
			c.Opaque, err = s.int32Value()
		case "flag":
			c.Flag, err = s.int32Value()
		case "language":
			err = s.language(c)
		case "remark":
			err = s.remark(c)
		case "extFields":
			err = s.extFields(&c.Ext)
		default:
			err = s.skip(1)
		}
		if err != nil {
			return err
		}
		switch s.next() {
		case ',':
			s.i++
		case '}':
			s.i++
			return s.end()
		default:
			return errHeader("expected ',' or '}'", s.i)
		}
	}
}

// end checks that only whitespace follows the header object.
func (s *scanner) end() error {
	s.ws()
	if s.i != len(s.b) {
		return errHeader("trailing data after header object", s.i)
	}
	return nil
}

func (s *scanner) language(c *Command) error {
	switch s.next() {
	case '"':
		raw, esc, err := s.str()
		if err != nil {
			return err
		}
		if esc {
			c.Language = LangUnknown
			return nil
		}
		c.Language = languageByName(raw)
		return nil
	case 'n':
		c.Language = LangUnknown
		return s.lit("null")
	}
	start := s.i
	n, err := s.integer()
	if err != nil {
		return err
	}
	if n < 0 || n > 255 {
		return errHeader("language code out of range", start)
	}
	c.Language = Language(n)
	return nil
}

func (s *scanner) remark(c *Command) error {
	switch s.next() {
	case 'n':
		c.Remark = nil
		return s.lit("null")
	case '"':
	default:
		return errHeader("remark is not a string", s.i)
	}
	raw, esc, err := s.str()
	if err != nil {
		return err
	}
	if esc {
		c.remark, err = appendUnescaped(c.remark[:0], raw)
	} else {
		c.remark = append(c.remark[:0], raw...)
	}
	c.Remark = c.remark
	return err
}

func (s *scanner) extFields(e *ExtFields) error {
	switch s.next() {
	case 'n':
		return s.lit("null")
	case '{':
		s.i++
	default:
		return errHeader("extFields is not an object", s.i)
	}
	if s.next() == '}' {
		s.i++
		return nil
	}
	for {
		if s.next() != '"' {
			return errHeader("expected extFields key", s.i)
		}
		kraw, kesc, err := s.str()
		if err != nil {
			return err
		}
		if err := s.expect(':', "':'"); err != nil {
			return err
		}
		koff := uint32(len(e.buf))
		if kesc {
			if e.buf, err = appendUnescaped(e.buf, kraw); err != nil {
				return err
			}
		} else {
			e.buf = append(e.buf, kraw...)
		}
		klen := uint32(len(e.buf)) - koff
		voff := uint32(len(e.buf))
		switch s.next() {
		case '"':
			vraw, vesc, err := s.str()
			if err != nil {
				return err
			}
			if vesc {
				if e.buf, err = appendUnescaped(e.buf, vraw); err != nil {
					return err
				}
			} else {
				e.buf = append(e.buf, vraw...)
			}
		case 'n':
			if err := s.lit("null"); err != nil {
				return err
			}
		default:
			return errHeader("extFields value of "+strconv.Quote(string(e.buf[koff:koff+klen]))+" is not a string", s.i)
		}
		e.ents = append(e.ents, extEntry{koff: koff, klen: klen, voff: voff, vlen: uint32(len(e.buf)) - voff})
		switch s.next() {
		case ',':
			s.i++
		case '}':
			s.i++
			return nil
		default:
			return errHeader("expected ',' or '}' in extFields", s.i)
		}
	}
}
