package migration

import (
	"fmt"
	"strconv"
	"strings"
)

// LSN is a PostgreSQL write-ahead-log position (pg_lsn): a byte offset into
// the WAL stream. The zero value means "unknown / not yet read".
// Its text form is PostgreSQL's "XXXXXXXX/XXXXXXXX" (hex high/low 32 bits),
// used in JSON and in SQL.
type LSN uint64

// ParseLSN parses PostgreSQL's "X/X" form.
func ParseLSN(s string) (LSN, error) {
	hi, lo, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return 0, fmt.Errorf("migration: parse LSN %q: want X/X", s)
	}
	h, err := strconv.ParseUint(hi, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("migration: parse LSN %q: %w", s, err)
	}
	l, err := strconv.ParseUint(lo, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("migration: parse LSN %q: %w", s, err)
	}
	return LSN(h<<32 | l), nil
}

// String returns PostgreSQL's "X/X" form.
func (l LSN) String() string { return fmt.Sprintf("%X/%X", uint64(l)>>32, uint32(l)) }

// MarshalText implements encoding.TextMarshaler (JSON as "X/X").
func (l LSN) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (l *LSN) UnmarshalText(b []byte) error {
	v, err := ParseLSN(string(b))
	if err != nil {
		return err
	}
	*l = v
	return nil
}
