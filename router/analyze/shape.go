package analyze

import "strings"

// A simple query's text carries its values as literals (psycopg2 and psql
// interpolate them), so texts rarely repeat; their shapes do. shape
// replaces each literal with a parameter ($1, $2, … in order) and returns
// the literals' values as text, so the Cache parses a shape once and later
// texts of that shape only bind new values.
//
// Kept as written: literals after LIMIT and OFFSET (the router cuts merged
// rows by a constant LIMIT), comments (a hint is in one), identifiers and
// keywords. A text shape does not handle — E'' or U&'' strings, bit and
// hex strings, dollar quoting, an existing $n, typed literals such as
// DATE '…' (whose shape does not parse) — is parsed as it is.

// shape returns the text's shape and its literals; ok is false when the
// text must be parsed as it is.
func shape(sql string) (out string, lits [][]byte, ok bool) {
	var b strings.Builder
	b.Grow(len(sql) + 8)
	prevWord := ""  // the last identifier or keyword, upper-cased
	prevKind := ' ' // 'w' word, 'l' literal, ')' closing, 'o' other
	n := 0
	emit := func(lit string) {
		n++
		b.WriteByte('$')
		b.WriteString(itoa(n))
		lits = append(lits, []byte(lit))
		prevKind = 'l'
	}
	for i := 0; i < len(sql); {
		c := sql[i]
		switch {
		case c == '-' && i+1 < len(sql) && sql[i+1] == '-':
			j := strings.IndexByte(sql[i:], '\n')
			if j < 0 {
				j = len(sql) - i
			}
			b.WriteString(sql[i : i+j])
			i += j
		case c == '/' && i+1 < len(sql) && sql[i+1] == '*':
			end := blockEnd(sql, i)
			if end < 0 {
				return "", nil, false
			}
			b.WriteString(sql[i:end])
			i = end
		case c == '\'':
			if prevKind == 'w' && prevWord != "" && i > 0 && isIdent(sql[i-1]) {
				return "", nil, false // E'…', B'…', X'…', N'…', DATE '…' written tight
			}
			lit, end, good := quoted(sql, i)
			if !good {
				return "", nil, false
			}
			if keepLiteral(prevWord, prevKind) {
				b.WriteString(sql[i:end])
				prevKind = 'l'
			} else {
				emit(lit)
			}
			i = end
		case c == '"':
			j := strings.IndexByte(sql[i+1:], '"')
			if j < 0 {
				return "", nil, false
			}
			b.WriteString(sql[i : i+2+j])
			i += 2 + j
			prevKind, prevWord = 'w', ""
		case c == '$':
			return "", nil, false
		case isDigit(c) || (c == '.' && i+1 < len(sql) && isDigit(sql[i+1])) ||
			(c == '-' && i+1 < len(sql) && isDigit(sql[i+1]) && prevKind != 'w' && prevKind != 'l' && prevKind != ')'):
			j := i + 1
			for j < len(sql) && (isDigit(sql[j]) || sql[j] == '.' || sql[j] == 'e' || sql[j] == 'E' ||
				((sql[j] == '+' || sql[j] == '-') && (sql[j-1] == 'e' || sql[j-1] == 'E'))) {
				j++
			}
			if j < len(sql) && isIdent(sql[j]) {
				return "", nil, false // 1abc, 0x1f: not a plain number
			}
			if prevWord == "LIMIT" || prevWord == "OFFSET" || prevWord == "FIRST" || prevWord == "NEXT" {
				b.WriteString(sql[i:j])
				prevKind = 'l'
			} else {
				emit(sql[i:j])
			}
			i = j
		case isIdent(c):
			j := i + 1
			for j < len(sql) && (isIdent(sql[j]) || isDigit(sql[j])) {
				j++
			}
			b.WriteString(sql[i:j])
			prevWord, prevKind = strings.ToUpper(sql[i:j]), 'w'
			i = j
		default:
			b.WriteByte(c)
			if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
				prevKind = 'o'
				if c == ')' {
					prevKind = ')'
				}
				if c != ':' { // a cast keeps the word before it out of LIMIT's reach
					prevWord = ""
				}
			}
			i++
		}
	}
	return b.String(), lits, true
}

// keepLiteral: a string literal right after a type name or keyword that
// makes it a typed literal (DATE '…', INTERVAL '…') stays as written.
func keepLiteral(prevWord string, prevKind rune) bool {
	return prevKind == 'w' && prevWord != ""
}

// quoted reads the standard string literal starting at sql[i] ('…', ”
// for a quote) and returns its value and the index after it.
func quoted(sql string, i int) (string, int, bool) {
	var b strings.Builder
	for j := i + 1; j < len(sql); j++ {
		if sql[j] != '\'' {
			b.WriteByte(sql[j])
			continue
		}
		if j+1 < len(sql) && sql[j+1] == '\'' {
			b.WriteByte('\'')
			j++
			continue
		}
		return b.String(), j + 1, true
	}
	return "", 0, false
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isIdent(c byte) bool {
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	var d [20]byte
	i := len(d)
	for n > 0 {
		i--
		d[i] = byte('0' + n%10)
		n /= 10
	}
	return string(d[i:])
}
