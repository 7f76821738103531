package analyze

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/sluicedb/sluice/keyspace"
)

// KeysOf returns the keys of type t that v names: KeyOf's one key for a
// scalar Value; for an Array value, the key of each element of the array,
// in order (duplicates kept; none for an empty array). An array is read
// from a constant or a text-format parameter in PostgreSQL's array text
// form ('{1,2,3}', '{"a b",c}', nested braces for several dimensions, an
// optional '[1:3]=' dimension prefix), or from a binary-format parameter
// in array_send's layout (int32 ndim, int32 flags, uint32 element type
// oid, ndim × (int32 size, int32 lower bound), then each element as int32
// length and bytes). Text elements are read as KeyOf reads a text value,
// binary ones as KeyOf reads a binary value of the element type oid.
//
// A NULL array or element, a malformed array, or an element that is not
// of the key's type returns an error wrapping keyspace.ErrKeyType; the
// parameter and format errors of KeyOf are returned as it returns them.
func KeysOf(t keyspace.KeyType, v Value, params [][]byte, formats []int16, oids []uint32) ([]keyspace.Key, error) {
	if !v.Array {
		k, err := KeyOf(t, v, params, formats, oids)
		if err != nil {
			return nil, err
		}
		return []keyspace.Key{k}, nil
	}
	what := v.what
	if v.Param == 0 {
		return textArrayKeys(t, v.Const, what)
	}
	p, err := paramOf(v, params, formats, oids)
	if err != nil {
		return nil, err
	}
	if p.b == nil {
		return nil, fmt.Errorf("%w: %s is NULL, want an array of %s keys", keyspace.ErrKeyType, what(), t)
	}
	if p.format == 0 {
		return textArrayKeys(t, string(p.b), what)
	}
	return binaryArrayKeys(t, p.b, what)
}

// textArrayKeys reads the keys of an array in text form.
func textArrayKeys(t keyspace.KeyType, s string, what func() string) ([]keyspace.Key, error) {
	elems, err := parseTextArray(s)
	if err != nil {
		return nil, fmt.Errorf("%w: %s %q: %v", keyspace.ErrKeyType, what(), s, err)
	}
	out := make([]keyspace.Key, 0, len(elems))
	for i, e := range elems {
		if e == nil {
			return nil, fmt.Errorf("%w: %s %q: element %d is NULL, want a %s key", keyspace.ErrKeyType, what(), s, i+1, t)
		}
		k, err := textKey(t, *e, func() string { return fmt.Sprintf("%s element %q", what(), *e) })
		if err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, nil
}

// parseTextArray splits an array's text form into its elements, in
// order, flattening dimensions; a nil element is an unquoted NULL. It
// reads array_in's syntax for the delimiter ',' but does not check that
// sub-arrays have matching sizes (the server does).
func parseTextArray(s string) ([]*string, error) {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "[") { // dimension decoration: [1:3]={…}
		i := strings.IndexByte(s, '=')
		if i < 0 {
			return nil, fmt.Errorf("dimensions without '='")
		}
		s = strings.TrimSpace(s[i+1:])
	}
	p := &arrayText{s: s}
	if err := p.list(0); err != nil {
		return nil, err
	}
	p.space()
	if p.i != len(p.s) {
		return nil, fmt.Errorf("junk after the closing '}'")
	}
	return p.elems, nil
}

// maxArrayDepth is PostgreSQL's MAXDIM: an array has at most 6 dimensions.
const maxArrayDepth = 6

// arrayText is parseTextArray's cursor over an array's text.
type arrayText struct {
	s     string
	i     int
	elems []*string
}

func (p *arrayText) space() {
	for p.i < len(p.s) && isArraySpace(p.s[p.i]) {
		p.i++
	}
}

func isArraySpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

func (p *arrayText) peek() byte {
	if p.i < len(p.s) {
		return p.s[p.i]
	}
	return 0
}

// list reads {elem, …} (each elem a sub-list or an element).
func (p *arrayText) list(depth int) error {
	if depth >= maxArrayDepth {
		return fmt.Errorf("more than %d dimensions", maxArrayDepth)
	}
	if p.peek() != '{' {
		return fmt.Errorf("want '{' at offset %d", p.i)
	}
	p.i++
	p.space()
	if p.peek() == '}' {
		p.i++
		return nil
	}
	for {
		p.space()
		var err error
		if p.peek() == '{' {
			err = p.list(depth + 1)
		} else {
			err = p.elem()
		}
		if err != nil {
			return err
		}
		p.space()
		switch p.peek() {
		case ',':
			p.i++
		case '}':
			p.i++
			return nil
		default:
			return fmt.Errorf("want ',' or '}' at offset %d", p.i)
		}
	}
}

// elem reads one element: "quoted" (backslash escapes), or unquoted up to
// a ',' or '}' with surrounding space trimmed (backslash escapes too).
func (p *arrayText) elem() error {
	var b strings.Builder
	if p.peek() == '"' {
		for p.i++; p.i < len(p.s); p.i++ {
			c := p.s[p.i]
			switch {
			case c == '\\' && p.i+1 < len(p.s):
				p.i++
				b.WriteByte(p.s[p.i])
			case c == '"':
				p.i++
				e := b.String()
				p.elems = append(p.elems, &e)
				return nil
			default:
				b.WriteByte(c)
			}
		}
		return fmt.Errorf("unterminated quoted element")
	}
	escaped, keep := false, 0 // keep: b's length up to its last escaped or non-space byte
	for ; p.i < len(p.s); p.i++ {
		c := p.s[p.i]
		if c == ',' || c == '}' {
			break
		}
		switch {
		case c == '{' || c == '"':
			return fmt.Errorf("unexpected %q at offset %d", c, p.i)
		case c == '\\' && p.i+1 < len(p.s):
			p.i++
			b.WriteByte(p.s[p.i])
			escaped, keep = true, b.Len()
		default:
			b.WriteByte(c)
			if !isArraySpace(c) {
				keep = b.Len()
			}
		}
	}
	e := b.String()[:keep]
	switch {
	case e == "":
		return fmt.Errorf("empty element at offset %d", p.i)
	case !escaped && strings.EqualFold(e, "NULL"):
		p.elems = append(p.elems, nil)
	default:
		p.elems = append(p.elems, &e)
	}
	return nil
}

// binaryArrayKeys reads the keys of an array in array_send's binary layout.
func binaryArrayKeys(t keyspace.KeyType, b []byte, what func() string) ([]keyspace.Key, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s (binary array, %d bytes): %s", keyspace.ErrKeyType, what(), len(b), fmt.Sprintf(format, args...))
	}
	if len(b) < 12 {
		return nil, bad("shorter than an array header")
	}
	ndim := int32(binary.BigEndian.Uint32(b))
	elemType := binary.BigEndian.Uint32(b[8:])
	if ndim < 0 || ndim > maxArrayDepth {
		return nil, bad("%d dimensions", ndim)
	}
	rest := b[12:]
	if len(rest) < 8*int(ndim) {
		return nil, bad("truncated dimensions")
	}
	n := 0
	if ndim > 0 {
		n = 1
	}
	for d := 0; d < int(ndim); d++ {
		size := int32(binary.BigEndian.Uint32(rest[8*d:]))
		if size < 0 || (size > 0 && n > len(b)/int(size)) {
			return nil, bad("dimension %d of size %d", d+1, size)
		}
		n *= int(size)
	}
	rest = rest[8*ndim:]
	if n > len(rest)/4 {
		return nil, bad("%d elements in %d bytes", n, len(rest))
	}
	out := make([]keyspace.Key, 0, n)
	for i := 0; i < n; i++ {
		if len(rest) < 4 {
			return nil, bad("truncated at element %d", i+1)
		}
		l := int32(binary.BigEndian.Uint32(rest))
		rest = rest[4:]
		if l < 0 {
			return nil, fmt.Errorf("%w: %s: element %d is NULL, want a %s key", keyspace.ErrKeyType, what(), i+1, t)
		}
		if int(l) > len(rest) {
			return nil, bad("truncated at element %d", i+1)
		}
		k, err := binaryKey(t, rest[:l], elemType, func() string { return fmt.Sprintf("%s element %d", what(), i+1) })
		if err != nil {
			return nil, err
		}
		out = append(out, k)
		rest = rest[l:]
	}
	if len(rest) != 0 {
		return nil, bad("%d bytes after the last element", len(rest))
	}
	return out, nil
}
