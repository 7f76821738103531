package analyze

import "strings"

// hint returns the key of the first sluice.key comment among the comments
// that lead a statement's text (before its first token):
//
//	/* sluice.key=42 */ SELECT …
//	-- sluice.key = 'north'
//	SELECT …
//
// The value is the comment's text after '=', trimmed; a value in single
// quotes is unquoted (a doubled quote read as one). Block comments nest,
// as PostgreSQL reads them. "" when there is none.
func hint(seg string) string {
	for i := 0; i < len(seg); {
		switch c := seg[i]; {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			i++
		case strings.HasPrefix(seg[i:], "--"):
			end := strings.IndexAny(seg[i:], "\r\n")
			if end < 0 {
				end = len(seg) - i
			}
			if v, ok := hintBody(seg[i+2 : i+end]); ok {
				return v
			}
			i += end
		case strings.HasPrefix(seg[i:], "/*"):
			end := blockEnd(seg, i)
			if v, ok := hintBody(strings.TrimSuffix(seg[i+2:end], "*/")); ok {
				return v
			}
			i = end
		default:
			return ""
		}
	}
	return ""
}

// blockEnd returns the index just past the block comment starting at
// seg[i:] (which starts with "/*"), counting nested comments; len(seg)
// when it is not closed.
func blockEnd(seg string, i int) int {
	depth := 0
	for i < len(seg)-1 {
		switch seg[i : i+2] {
		case "/*":
			depth++
			i += 2
		case "*/":
			depth--
			i += 2
			if depth == 0 {
				return i
			}
		default:
			i++
		}
	}
	return len(seg)
}

// hintBody reads "sluice.key = v" from a comment's text.
func hintBody(body string) (string, bool) {
	body = strings.TrimSpace(body)
	if len(body) < len(keyGUC) || !strings.EqualFold(body[:len(keyGUC)], keyGUC) {
		return "", false
	}
	rest := strings.TrimSpace(body[len(keyGUC):])
	if !strings.HasPrefix(rest, "=") {
		return "", false
	}
	v := strings.TrimSpace(rest[1:])
	if len(v) >= 2 && v[0] == '\'' && v[len(v)-1] == '\'' {
		v = strings.ReplaceAll(v[1:len(v)-1], "''", "'")
	}
	return v, v != ""
}
