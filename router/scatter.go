package router

import (
	"bytes"
	"encoding/binary"
	"slices"
	"strconv"

	"github.com/sluicedb/sluice/router/analyze"
)

// A scatter runs the same messages on several partitions and gives the
// client one answer: every partition answers Parse, Bind and Describe
// alike (one schema), so the first one's answers are passed on; the rows
// of an Execute or a Query are the union of all, in key order when the
// statement orders by a key column (limited again by a constant LIMIT),
// and its CommandComplete counts them all. If any partition fails, the
// client gets the first error alone.

// scatter sends xs[i] to bs[i], all at once, then merges the answers.
// resultFormats are the result columns' format codes as a Bind gave them
// (nil: text).
func (s *Session) scatter(bs []*backend, xs []*exchange, an *analyze.Statement, desc []byte, resultFormats ...int16) (result, error) {
	for i, b := range bs {
		if err := b.send(xs[i]); err != nil {
			return result{}, err
		}
	}
	caps := make([]*capture, len(bs))
	var res result
	var firstErr error
	for i, b := range bs {
		caps[i] = newCapture(0)
		r, err := b.recv(xs[i], caps[i])
		if err != nil && firstErr == nil {
			firstErr = err
		}
		if r.err != nil && res.err == nil {
			res.err = r.err
		}
		res.status = r.status
	}
	if firstErr != nil {
		return res, firstErr
	}
	if res.err != nil {
		return res, writeMsg(s.cw, 'E', res.err.body())
	}
	for _, m := range mergeAnswers(caps, an, desc, resultFormats) {
		if err := writeMsg(s.cw, m.typ, m.body); err != nil {
			return res, err
		}
	}
	return res, nil
}

// mergeAnswers composes the client's answers from every partition's.
func mergeAnswers(caps []*capture, an *analyze.Statement, desc []byte, resultFormats []int16) []msg {
	var out []msg
	first := caps[0].msgs
	for j := range first {
		var rows []msg
		var tag []byte
		hasRows := false
		for _, m := range first[j] {
			if m.typ == 'T' {
				desc = m.body
			}
			if m.typ == 'D' || m.typ == 'C' {
				hasRows = true
			}
		}
		if !hasRows {
			out = append(out, first[j]...)
			continue
		}
		var total int64
		prefix := ""
		counted := true
		for ci, c := range caps {
			if j >= len(c.msgs) {
				continue
			}
			for _, m := range c.msgs[j] {
				switch m.typ {
				case 'D':
					rows = append(rows, m)
				case 'C':
					p, n, ok := tagCount(string(bytes.TrimRight(m.body, "\x00")))
					if !ok {
						counted = false
						tag = m.body
					}
					prefix, total = p, total+n
				default:
					if ci == 0 {
						out = append(out, m)
					}
				}
			}
		}
		if an != nil && an.OrderKey != "" {
			sortRows(rows, desc, an.OrderKey, an.OrderDesc, resultFormats)
		}
		if an != nil && an.Limit > 0 && int64(len(rows)) > an.Limit {
			rows = rows[:an.Limit]
			if prefix == "SELECT" {
				total = an.Limit
			}
		}
		out = append(out, rows...)
		if counted {
			tag = append([]byte(prefix+" "+strconv.FormatInt(total, 10)), 0)
		}
		if tag != nil {
			out = append(out, msg{typ: 'C', body: tag})
		}
	}
	return out
}

// sortRows orders DataRows by the column named col of RowDescription desc.
func sortRows(rows []msg, desc []byte, col string, descending bool, formats []int16) {
	idx, typOID := fieldIndex(desc, col)
	if idx < 0 {
		return
	}
	format := int16(0)
	switch {
	case len(formats) == 1:
		format = formats[0]
	case idx < len(formats):
		format = formats[idx]
	}
	keyOf := func(m msg) (int64, []byte) {
		v := column(m.body, idx)
		if isIntOID(typOID) {
			if format == 1 {
				switch len(v) {
				case 2:
					return int64(int16(binary.BigEndian.Uint16(v))), nil
				case 4:
					return int64(int32(binary.BigEndian.Uint32(v))), nil
				case 8:
					return int64(binary.BigEndian.Uint64(v)), nil
				}
			}
			n, _ := strconv.ParseInt(string(v), 10, 64)
			return n, nil
		}
		return 0, v
	}
	slices.SortStableFunc(rows, func(a, b msg) int {
		ai, ab := keyOf(a)
		bi, bb := keyOf(b)
		c := 0
		switch {
		case ab != nil || bb != nil:
			c = bytes.Compare(ab, bb)
		case ai < bi:
			c = -1
		case ai > bi:
			c = 1
		}
		if descending {
			c = -c
		}
		return c
	})
}

func isIntOID(oid uint32) bool { return oid == 20 || oid == 21 || oid == 23 }

// fieldIndex finds column col in a RowDescription body: its index and type OID.
func fieldIndex(desc []byte, col string) (int, uint32) {
	if len(desc) < 2 {
		return -1, 0
	}
	n := int(binary.BigEndian.Uint16(desc))
	b := desc[2:]
	for i := 0; i < n; i++ {
		name, rest, err := cstr(b)
		if err != nil || len(rest) < 18 {
			return -1, 0
		}
		oid := binary.BigEndian.Uint32(rest[6:])
		if name == col {
			return i, oid
		}
		b = rest[18:]
	}
	return -1, 0
}

// column returns column i of a DataRow body (nil for NULL).
func column(row []byte, i int) []byte {
	if len(row) < 2 {
		return nil
	}
	n := int(binary.BigEndian.Uint16(row))
	b := row[2:]
	for j := 0; j < n && len(b) >= 4; j++ {
		l := int32(binary.BigEndian.Uint32(b))
		b = b[4:]
		if l < 0 {
			if j == i {
				return nil
			}
			continue
		}
		if int(l) > len(b) {
			return nil
		}
		if j == i {
			return b[:l]
		}
		b = b[l:]
	}
	return nil
}
