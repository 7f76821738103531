package analyze

import (
	"errors"
	"strings"
	"testing"

	"github.com/sluicedb/sluice/keyspace"
)

func TestKeyOf(t *testing.T) {
	i := keyspace.IntKey
	s := keyspace.TextKey
	p := func(n int) Value { return Value{Param: n} }
	num := func(c string) Value { return Value{Const: c} }
	str := func(c string) Value { return Value{Const: c, IsString: true} }
	bin := func(b ...byte) []byte { return b }
	for _, tc := range []struct {
		name    string
		typ     keyspace.KeyType
		v       Value
		params  [][]byte
		formats []int16
		oids    []uint32
		want    keyspace.Key
		wrong   bool   // an error wrapping keyspace.ErrKeyType
		errHas  string // an error whose text holds this
	}{
		{name: "int constant", typ: keyspace.Int, v: num("42"), want: i(42)},
		{name: "negative constant", typ: keyspace.Int, v: num("-42"), want: i(-42)},
		{name: "quoted int", typ: keyspace.Int, v: str(" 42 "), want: i(42)},
		{name: "hex and underscores", typ: keyspace.Int, v: str("0x1_F"), want: i(31)},
		{name: "decimal with a leading zero", typ: keyspace.Int, v: num("010"), want: i(10)},
		{name: "int64 min", typ: keyspace.Int, v: num("-9223372036854775808"), want: i(-1 << 63)},
		{name: "overflow", typ: keyspace.Int, v: num("9223372036854775808"), wrong: true},
		{name: "text for int", typ: keyspace.Int, v: str("abc"), wrong: true, errHas: `"abc"`},
		{name: "fraction for int", typ: keyspace.Int, v: num("4.5"), wrong: true, errHas: "int"},
		{name: "bad underscores", typ: keyspace.Int, v: str("1__0"), wrong: true},
		{name: "text constant", typ: keyspace.Text, v: str("user1"), want: s("user1")},
		{name: "number for text", typ: keyspace.Text, v: num("42"), want: s("42")},

		{name: "text parameter", typ: keyspace.Int, v: p(2), params: [][]byte{[]byte("x"), []byte("17")}, want: i(17)},
		{name: "text parameter for text", typ: keyspace.Text, v: p(1), params: [][]byte{[]byte("user 9")}, want: s("user 9")},
		{name: "wrong text parameter", typ: keyspace.Int, v: p(1), params: [][]byte{[]byte("abc")}, wrong: true, errHas: `$1 "abc"`},
		{name: "null", typ: keyspace.Int, v: p(1), params: [][]byte{nil}, wrong: true, errHas: "NULL"},
		{name: "binary int4 by oid", typ: keyspace.Int, v: p(1), params: [][]byte{bin(0, 0, 1, 0)}, formats: []int16{1}, oids: []uint32{23}, want: i(256)},
		{name: "binary int2 negative", typ: keyspace.Int, v: p(1), params: [][]byte{bin(0xff, 0xfe)}, formats: []int16{1}, oids: []uint32{21}, want: i(-2)},
		{name: "binary int8 by length", typ: keyspace.Int, v: p(1), params: [][]byte{bin(0, 0, 0, 1, 0, 0, 0, 0)}, formats: []int16{1}, want: i(1 << 32)},
		{name: "binary length against oid", typ: keyspace.Int, v: p(1), params: [][]byte{bin(0, 0, 0, 1)}, formats: []int16{1}, oids: []uint32{20}, wrong: true},
		{name: "binary odd length", typ: keyspace.Int, v: p(1), params: [][]byte{bin(0, 0, 1)}, formats: []int16{1}, wrong: true},
		{name: "binary text for int", typ: keyspace.Int, v: p(1), params: [][]byte{[]byte("abcd")}, formats: []int16{1}, oids: []uint32{25}, wrong: true, errHas: "oid 25"},
		{name: "binary varchar", typ: keyspace.Text, v: p(1), params: [][]byte{[]byte("user1")}, formats: []int16{1}, oids: []uint32{1043}, want: s("user1")},
		{name: "binary int for text", typ: keyspace.Text, v: p(1), params: [][]byte{bin(0, 0, 0, 1)}, formats: []int16{1}, oids: []uint32{23}, wrong: true},
		{name: "per-parameter formats", typ: keyspace.Int, v: p(2), params: [][]byte{[]byte("1"), bin(0, 0, 0, 7)}, formats: []int16{0, 1}, oids: []uint32{23, 23}, want: i(7)},
		{name: "one format for all", typ: keyspace.Int, v: p(2), params: [][]byte{bin(0, 1), bin(0, 2)}, formats: []int16{1}, want: i(2)},

		{name: "parameter beyond Bind", typ: keyspace.Int, v: p(3), params: [][]byte{[]byte("1")}, errHas: "Bind has 1 parameters"},
		{name: "formats mismatch", typ: keyspace.Int, v: p(1), params: [][]byte{[]byte("1"), []byte("2"), []byte("3")}, formats: []int16{0, 0}, errHas: "2 formats for 3"},
		{name: "unknown format", typ: keyspace.Int, v: p(1), params: [][]byte{[]byte("1")}, formats: []int16{2}, errHas: "format 2"},
	} {
		got, err := KeyOf(tc.typ, tc.v, tc.params, tc.formats, tc.oids)
		switch {
		case tc.wrong || tc.errHas != "":
			if err == nil {
				t.Errorf("%s: KeyOf = %v, want an error", tc.name, got)
				continue
			}
			if errors.Is(err, keyspace.ErrKeyType) != tc.wrong {
				t.Errorf("%s: KeyOf error %v: wraps ErrKeyType %v, want %v", tc.name, err, !tc.wrong, tc.wrong)
			}
			if !strings.Contains(err.Error(), tc.errHas) || (tc.wrong && !strings.Contains(err.Error(), string(tc.typ))) {
				t.Errorf("%s: KeyOf error %q: want it to hold %q and the type %s", tc.name, err, tc.errHas, tc.typ)
			}
		case err != nil:
			t.Errorf("%s: KeyOf: %v", tc.name, err)
		case got != tc.want:
			t.Errorf("%s: KeyOf = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestKeyOfParsed: the values Parse finds become the keys the plan places.
func TestKeyOfParsed(t *testing.T) {
	ks := bench(t)
	stmts, err := Parse(`SELECT * FROM customer, warehouse WHERE w_id = $1 AND c_w_id = w_id`, ks)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range stmts[0].Keys {
		tbl, _ := ks.Table(k.Table)
		key, err := KeyOf(tbl.Type, k.Value, [][]byte{[]byte("7")}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if owner, err := ks.Owner(k.Table, key); err != nil || owner != "p2" {
			t.Errorf("%s key %v: owner %q, %v; want p2", k.Table, key, owner, err)
		}
	}
}
