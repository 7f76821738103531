package analyze

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"

	"github.com/sluicedb/sluice/keyspace"
)

// PostgreSQL type OIDs of the binary parameter formats KeyOf reads.
const (
	oidName    = 19
	oidInt8    = 20
	oidInt2    = 21
	oidInt4    = 23
	oidText    = 25
	oidBpchar  = 1042
	oidVarchar = 1043
)

// KeyOf returns the key of type t that v names: a constant's text, or
// Bind parameter $v.Param from params, with formats and oids as the Bind
// and Parse messages give them (formats: none means all text, one applies
// to every parameter, else one per parameter; oids may be shorter than
// params, a missing or 0 oid being unspecified).
//
// Text values are read as PostgreSQL reads the key type: an int key from a
// decimal integer (surrounding space, a sign, underscores between digits
// and 0x/0o/0b prefixes allowed), whether the constant was written 42 or
// '42'; a text key from the bytes as given. Binary values: an int key from
// int2, int4 or int8 (by oid 21, 23 or 20, or by a length of 2, 4 or 8
// when the oid is unspecified); a text key from text, varchar, bpchar or
// name (bpchar's padding is kept) or an unspecified oid.
//
// A NULL parameter, or a value that is not of the key's type, returns an
// error wrapping keyspace.ErrKeyType that names the value and t; a
// parameter number beyond params, or a malformed format list, returns
// another error (a protocol violation).
func KeyOf(t keyspace.KeyType, v Value, params [][]byte, formats []int16, oids []uint32) (keyspace.Key, error) {
	if v.Array {
		return keyspace.Key{}, fmt.Errorf("analyze: KeyOf of an array value (%s): use KeysOf", v.what())
	}
	if v.Param == 0 {
		return textKey(t, v.Const, v.what)
	}
	p, err := paramOf(v, params, formats, oids)
	if err != nil {
		return keyspace.Key{}, err
	}
	if p.b == nil {
		return keyspace.Key{}, fmt.Errorf("%w: %s is NULL, want a %s key", keyspace.ErrKeyType, v.what(), t)
	}
	if p.format == 0 {
		return textKey(t, string(p.b), func() string { return fmt.Sprintf("%s %q", v.what(), p.b) })
	}
	return binaryKey(t, p.b, p.oid, v.what)
}

// param is one Bind parameter: its bytes (nil for NULL), format code and
// type oid (0: unspecified).
type param struct {
	b      []byte
	format int16
	oid    uint32
}

// paramOf returns Bind parameter $v.Param, as KeyOf documents formats and
// oids; REQUIRES: v.Param > 0.
func paramOf(v Value, params [][]byte, formats []int16, oids []uint32) (param, error) {
	n := v.Param - 1
	if n < 0 || n >= len(params) {
		return param{}, fmt.Errorf("analyze: key parameter $%d: Bind has %d parameters", v.Param, len(params))
	}
	p := param{b: params[n]}
	switch len(formats) {
	case 0:
	case 1:
		p.format = formats[0]
	case len(params):
		p.format = formats[n]
	default:
		return param{}, fmt.Errorf("analyze: key parameter $%d: Bind has %d formats for %d parameters", v.Param, len(formats), len(params))
	}
	if p.format != 0 && p.format != 1 {
		return param{}, fmt.Errorf("analyze: key parameter $%d: format %d: want 0 (text) or 1 (binary)", v.Param, p.format)
	}
	if n < len(oids) {
		p.oid = oids[n]
	}
	return p, nil
}

// what names v in errors.
func (v Value) what() string {
	if v.Param == 0 {
		return fmt.Sprintf("constant %q", v.Const)
	}
	return fmt.Sprintf("parameter $%d", v.Param)
}

// textKey reads a key of type t from its text form; what names the value
// in errors (called only then: naming costs an allocation).
func textKey(t keyspace.KeyType, s string, what func() string) (keyspace.Key, error) {
	switch t {
	case keyspace.Text:
		return keyspace.TextKey(s), nil
	case keyspace.Int:
		if i, ok := parseInt(s); ok {
			return keyspace.IntKey(i), nil
		}
	}
	return keyspace.Key{}, fmt.Errorf("%w: %s is not a %s key", keyspace.ErrKeyType, what(), t)
}

// parseInt reads an integer as PostgreSQL's int8in does (version 16 on):
// surrounding white space, a sign, a 0x, 0o or 0b prefix, and single
// underscores between digits.
func parseInt(s string) (int64, bool) {
	s = strings.TrimSpace(s)
	neg := false
	if s != "" && (s[0] == '-' || s[0] == '+') {
		neg, s = s[0] == '-', s[1:]
	}
	base := 10
	if len(s) > 2 && s[0] == '0' {
		switch s[1] {
		case 'x', 'X':
			base = 16
		case 'o', 'O':
			base = 8
		case 'b', 'B':
			base = 2
		}
		if base != 10 {
			s = s[2:]
		}
	}
	if s == "" || s[0] == '_' || s[len(s)-1] == '_' || strings.Contains(s, "__") || s[0] == '+' || s[0] == '-' {
		return 0, false
	}
	u, err := strconv.ParseUint(strings.ReplaceAll(s, "_", ""), base, 64)
	if err != nil {
		return 0, false
	}
	switch {
	case !neg && u <= 1<<63-1:
		return int64(u), true
	case neg && u <= 1<<63:
		return int64(-u), true // -(1<<63) wraps to itself
	}
	return 0, false
}

// binaryKey reads a key of type t from a binary parameter of type oid.
func binaryKey(t keyspace.KeyType, b []byte, oid uint32, what func() string) (keyspace.Key, error) {
	switch {
	case t == keyspace.Int && (oid == 0 || oid == oidInt2 || oid == oidInt4 || oid == oidInt8):
		want := map[uint32]int{oidInt2: 2, oidInt4: 4, oidInt8: 8}[oid]
		if want == 0 || len(b) == want {
			switch len(b) {
			case 2:
				return keyspace.IntKey(int64(int16(binary.BigEndian.Uint16(b)))), nil
			case 4:
				return keyspace.IntKey(int64(int32(binary.BigEndian.Uint32(b)))), nil
			case 8:
				return keyspace.IntKey(int64(binary.BigEndian.Uint64(b))), nil
			}
		}
	case t == keyspace.Text && (oid == 0 || oid == oidText || oid == oidVarchar || oid == oidBpchar || oid == oidName):
		return keyspace.TextKey(string(b)), nil
	}
	return keyspace.Key{}, fmt.Errorf("%w: %s (binary, type oid %d, %d bytes) is not a %s key", keyspace.ErrKeyType, what(), oid, len(b), t)
}
