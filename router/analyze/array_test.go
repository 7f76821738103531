package analyze

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/sluicedb/sluice/keyspace"
)

func TestAny(t *testing.T) {
	runParse(t, []parseCase{
		{"array parameter", `SELECT * FROM usertable WHERE ycsb_key = ANY($1)`,
			one("select ro sharded=usertable keys=usertable:$1[] params=1")},
		{"array parameter under a cast", `SELECT * FROM warehouse WHERE w_id = ANY($1::int[])`,
			one("select ro sharded=warehouse keys=warehouse:$1[] params=1")},
		{"array constructor", `DELETE FROM warehouse WHERE w_id = ANY(ARRAY[1, $1, '7'])`,
			one("delete sharded=warehouse keys=warehouse:1,warehouse:$1,warehouse:'7' params=1")},
		{"two-dimensional constructor", `SELECT * FROM warehouse WHERE w_id = ANY(ARRAY[[1, 2], [3, 4]])`,
			one("select ro sharded=warehouse keys=warehouse:1,warehouse:2,warehouse:3,warehouse:4")},
		{"array literal", `SELECT * FROM warehouse WHERE w_id = ANY('{1,2}')`,
			one("select ro sharded=warehouse keys=warehouse:'{1,2}'[]")},
		{"array literal cast", `SELECT * FROM warehouse WHERE w_id = ANY('{1,2}'::bigint[])`,
			one("select ro sharded=warehouse keys=warehouse:'{1,2}'[]")},
		{"co-partitioned through a join", `SELECT * FROM warehouse JOIN district ON d_w_id = w_id WHERE w_id = ANY($1)`,
			one("select ro sharded=district,warehouse keys=district:$1[],warehouse:$1[] params=1")},
		{"in an OR", `SELECT * FROM warehouse WHERE w_id = ANY($1) OR w_id = 3`,
			one("select ro sharded=warehouse keys=warehouse:$1[],warehouse:3 params=1")},
		{"an element that is no value", `SELECT * FROM warehouse WHERE w_id = ANY(ARRAY[1, w_id + 1])`,
			one("select ro sharded=warehouse missing=warehouse.w_id")},
		{"a column", `SELECT * FROM warehouse WHERE w_id = ANY(w_ids)`,
			one("select ro sharded=warehouse missing=warehouse.w_id")},
		{"a number is no array", `SELECT * FROM warehouse WHERE w_id = ANY(5)`,
			one("select ro sharded=warehouse missing=warehouse.w_id")},
		{"not equal", `SELECT * FROM warehouse WHERE w_id <> ANY($1)`,
			one("select ro sharded=warehouse missing=warehouse.w_id params=1")},
		{"ALL", `SELECT * FROM warehouse WHERE w_id = ALL($1)`,
			one("select ro sharded=warehouse missing=warehouse.w_id params=1")},
		{"subquery", `SELECT * FROM warehouse WHERE w_id = ANY(SELECT d_w_id FROM district WHERE d_w_id = 1)`,
			one("select ro sharded=district,warehouse keys=district:1 missing=warehouse.w_id")},
	})
}

// binArray is array_send's layout of a one-dimensional array of elems
// (nil: NULL) of type oid.
func binArray(oid uint32, elems ...[]byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, 1)
	b = binary.BigEndian.AppendUint32(b, 0)
	b = binary.BigEndian.AppendUint32(b, oid)
	b = binary.BigEndian.AppendUint32(b, uint32(len(elems)))
	b = binary.BigEndian.AppendUint32(b, 1)
	for _, e := range elems {
		if e == nil {
			b = binary.BigEndian.AppendUint32(b, 0xffffffff)
			continue
		}
		b = binary.BigEndian.AppendUint32(b, uint32(len(e)))
		b = append(b, e...)
	}
	return b
}

func TestKeysOf(t *testing.T) {
	i4 := func(n int32) []byte { return binary.BigEndian.AppendUint32(nil, uint32(n)) }
	i8 := func(n int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(n)) }
	arr := func(n int) Value { return Value{Param: n, Array: true} }
	lit := func(c string) Value { return Value{Const: c, IsString: true, Array: true} }
	txt := func(s string) [][]byte { return [][]byte{[]byte(s)} }
	bin := []int16{1}
	// empty0 is an empty array: no dimensions; twoD is int8 {{5},{1<<40}}.
	empty0 := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, 0), 0), 23)
	twoD := binary.BigEndian.AppendUint32(nil, 2)
	twoD = binary.BigEndian.AppendUint32(twoD, 0)
	twoD = binary.BigEndian.AppendUint32(twoD, 20)
	for _, d := range []uint32{2, 1, 1, 1} {
		twoD = binary.BigEndian.AppendUint32(twoD, d)
	}
	twoD = append(twoD, append(binary.BigEndian.AppendUint32(nil, 8), i8(5)...)...)
	twoD = append(twoD, append(binary.BigEndian.AppendUint32(nil, 8), i8(1<<40)...)...)
	for _, tc := range []struct {
		name    string
		typ     keyspace.KeyType
		v       Value
		params  [][]byte
		formats []int16
		want    string // the keys, fmt'd; "" with err set
		wrong   bool   // an error wrapping keyspace.ErrKeyType
		errHas  string
	}{
		{name: "scalar", typ: keyspace.Int, v: Value{Const: "4"}, want: "[4]"},
		{name: "text parameter", typ: keyspace.Int, v: arr(1), params: txt("{1,150, 7 }"), want: "[1 150 7]"},
		{name: "empty", typ: keyspace.Int, v: arr(1), params: txt("{}"), want: "[]"},
		{name: "constant", typ: keyspace.Int, v: lit(" {3,4}"), want: "[3 4]"},
		{name: "dimensions", typ: keyspace.Int, v: lit("[0:1]={3,4}"), want: "[3 4]"},
		{name: "two dimensions", typ: keyspace.Int, v: lit("{{1,2},{3,4}}"), want: "[1 2 3 4]"},
		{name: "quoted text", typ: keyspace.Text, v: arr(1), params: txt(`{"a b","c,d",e\,f,"g\"h",  i j  ,"NULL"}`), want: `['a b' 'c,d' 'e,f' 'g"h' 'i j' 'NULL']`},
		{name: "null element", typ: keyspace.Text, v: arr(1), params: txt("{a,null}"), wrong: true, errHas: "element 2 is NULL"},
		{name: "null array", typ: keyspace.Int, v: arr(1), params: [][]byte{nil}, wrong: true, errHas: "NULL"},
		{name: "wrong element", typ: keyspace.Int, v: arr(1), params: txt("{1,x}"), wrong: true, errHas: `"x"`},
		{name: "malformed", typ: keyspace.Int, v: arr(1), params: txt("{1,2"), wrong: true},
		{name: "not an array", typ: keyspace.Int, v: arr(1), params: txt("12"), wrong: true},
		{name: "empty element", typ: keyspace.Int, v: arr(1), params: txt("{1,,2}"), wrong: true},
		{name: "junk after", typ: keyspace.Int, v: arr(1), params: txt("{1}x"), wrong: true},

		{name: "binary int4", typ: keyspace.Int, v: arr(1), params: [][]byte{binArray(23, i4(1), i4(-150))}, formats: bin, want: "[1 -150]"},
		{name: "binary int8, two dimensions", typ: keyspace.Int, v: arr(1), params: [][]byte{twoD}, formats: bin, want: "[5 1099511627776]"},
		{name: "binary text", typ: keyspace.Text, v: arr(1), params: [][]byte{binArray(25, []byte("a"), []byte("b c"))}, formats: bin, want: "['a' 'b c']"},
		{name: "binary varchar", typ: keyspace.Text, v: arr(1), params: [][]byte{binArray(1043, []byte("x"))}, formats: bin, want: "['x']"},
		{name: "binary empty", typ: keyspace.Int, v: arr(1), params: [][]byte{empty0}, formats: bin, want: "[]"},
		{name: "binary null element", typ: keyspace.Int, v: arr(1), params: [][]byte{binArray(23, i4(1), nil)}, formats: bin, wrong: true, errHas: "element 2 is NULL"},
		{name: "binary text for int", typ: keyspace.Int, v: arr(1), params: [][]byte{binArray(25, []byte("abcd"))}, formats: bin, wrong: true, errHas: "oid 25"},
		{name: "binary truncated", typ: keyspace.Int, v: arr(1), params: [][]byte{binArray(23, i4(1), i4(2))[:30]}, formats: bin, wrong: true, errHas: "truncated"},
		{name: "binary trailing bytes", typ: keyspace.Int, v: arr(1), params: [][]byte{append(binArray(23, i4(1)), 0)}, formats: bin, wrong: true},
		{name: "binary huge dimensions", typ: keyspace.Int, v: arr(1), params: [][]byte{binary.BigEndian.AppendUint32(binArray(23)[:12], 0x7fffffff)}, formats: bin, wrong: true},
		{name: "binary short header", typ: keyspace.Int, v: arr(1), params: [][]byte{{0, 0, 0, 1}}, formats: bin, wrong: true},

		{name: "parameter beyond Bind", typ: keyspace.Int, v: arr(2), params: txt("{1}"), errHas: "Bind has 1 parameters"},
	} {
		got, err := KeysOf(tc.typ, tc.v, tc.params, tc.formats, nil)
		switch {
		case tc.wrong || tc.errHas != "":
			if err == nil {
				t.Errorf("%s: KeysOf = %v, want an error", tc.name, got)
				continue
			}
			if errors.Is(err, keyspace.ErrKeyType) != tc.wrong || !strings.Contains(err.Error(), tc.errHas) {
				t.Errorf("%s: KeysOf error %q: want ErrKeyType %v and %q in it", tc.name, err, tc.wrong, tc.errHas)
			}
		case err != nil:
			t.Errorf("%s: KeysOf: %v", tc.name, err)
		default:
			var s []string
			for _, k := range got {
				s = append(s, k.String())
			}
			if g := "[" + strings.Join(s, " ") + "]"; g != tc.want {
				t.Errorf("%s: KeysOf = %s, want %s", tc.name, g, tc.want)
			}
		}
	}
	if _, err := KeyOf(keyspace.Int, arr(1), txt("{1}"), nil, nil); err == nil {
		t.Errorf("KeyOf of an array value: no error")
	}
}
