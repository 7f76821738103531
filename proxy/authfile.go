package proxy

import (
	"bufio"
	"fmt"
	"os"
	"strings"
)

// ParseUserlist parses PgBouncer's userlist.txt format: one user per line,
// `"user" "password"`, with "" inside quotes standing for one ". Blank lines
// and lines starting with ';' or '#' are ignored. The password is plaintext
// or a SCRAM-SHA-256 secret (SCRAM-SHA-256$iter:salt$stored:server).
func ParseUserlist(text string) (map[string]string, error) {
	_, users, err := ParseUserlistOrdered(text)
	return users, err
}

// ParseUserlistOrdered is ParseUserlist that also returns the users' names
// in the order of their first lines.
func ParseUserlistOrdered(text string) (names []string, users map[string]string, err error) {
	users = map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(text))
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == ';' || line[0] == '#' {
			continue
		}
		user, rest, err := quoted(line)
		if err != nil {
			return nil, nil, fmt.Errorf("userlist line %d: %w", n, err)
		}
		pw, rest, err := quoted(strings.TrimLeft(rest, " \t"))
		if err != nil {
			return nil, nil, fmt.Errorf("userlist line %d: %w", n, err)
		}
		if strings.TrimSpace(rest) != "" {
			return nil, nil, fmt.Errorf("userlist line %d: trailing text %q", n, rest)
		}
		if _, ok := users[user]; !ok {
			names = append(names, user)
		}
		users[user] = pw
	}
	return names, users, sc.Err()
}

// quoted reads one "..." token at the start of s.
func quoted(s string) (tok, rest string, err error) {
	if s == "" || s[0] != '"' {
		return "", "", fmt.Errorf("want a quoted string")
	}
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		if s[i] == '"' {
			if i+1 < len(s) && s[i+1] == '"' {
				b.WriteByte('"')
				i++
				continue
			}
			return b.String(), s[i+1:], nil
		}
		b.WriteByte(s[i])
	}
	return "", "", fmt.Errorf("unterminated quoted string")
}

// LoadUserlist reads and parses a userlist file.
func LoadUserlist(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("proxy: auth file: %w", err)
	}
	u, err := ParseUserlist(string(b))
	if err != nil {
		return nil, fmt.Errorf("proxy: auth file %s: %w", path, err)
	}
	return u, nil
}
