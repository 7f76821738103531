// Package auth holds the bearer tokens of sluice's HTTP APIs (agent and
// proxy) on one host: making and reading token files, checking requests,
// sending the token, and finding the token of a URL on this host.
//
// A token is 32 random bytes (crypto/rand) written as 64 hex digits in a
// file of mode 0600, made at a server's first start. Requests carry it as
// "Authorization: Bearer <token>"; the server compares in constant time.
//
// # Finding a token on this host
//
// A server that guards its API with a token file registers it: it puts a
// symbolic link named after its address (host:port) in Dir(), pointing at
// the file. The link names where the secret is, it holds no secret; reading
// it needs the permission to read the file itself. A client given only a
// URL (the CLI, a proxy following an agent's catalog, an agent calling a
// peer or its proxy) reads the token of exactly that URL's host:port there,
// so a token is never sent to another address. A server unregisters at a
// clean stop.
package auth

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// Env is the environment variable holding a token for the CLI.
const Env = "SLUICE_TOKEN"

// ErrNoToken is returned by Find when no token is known for a URL.
var ErrNoToken = errors.New("no token")

// New returns a fresh token: 32 bytes from crypto/rand in hex.
func New() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("auth: random token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// LoadOrCreate returns the secret in path, making the file (mode 0600, its
// directory 0700 if missing) with a New token when it does not exist. An
// existing file must not be readable or writable by group or others, and
// must hold a non-empty secret.
func LoadOrCreate(path string) (secret string, created bool, err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", false, fmt.Errorf("auth: %w", err)
	}
	tok, err := New()
	if err != nil {
		return "", false, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		_, werr := f.WriteString(tok + "\n")
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			os.Remove(path)
			return "", false, fmt.Errorf("auth: write %s: %w", path, werr)
		}
		return tok, true, nil
	}
	if !errors.Is(err, fs.ErrExist) {
		return "", false, fmt.Errorf("auth: %w", err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return "", false, fmt.Errorf("auth: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return "", false, fmt.Errorf("auth: %s has mode %04o: others may read it; chmod 600 it", path, fi.Mode().Perm())
	}
	s, err := Read(path)
	return s, false, err
}

// Read returns the secret in path: its content without surrounding white
// space, which must not be empty.
func Read(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("auth: token file: %w", err)
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "", fmt.Errorf("auth: token file %s is empty", path)
	}
	return s, nil
}

// Check reports whether r carries "Authorization: Bearer <token>",
// comparing in constant time. token must not be empty.
func Check(r *http.Request, token string) bool {
	got := r.Header.Get("Authorization")
	want := "Bearer " + token
	return subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// Require wraps h so that every request except those open(r) approves must
// carry the token; others are answered 401 with {"error": what + ": …"}.
// An empty token returns h unchanged (a server run open on purpose).
func Require(h http.Handler, token, what string, open func(*http.Request) bool) http.Handler {
	if token == "" {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if (open != nil && open(r)) || Check(r, token) {
			h.ServeHTTP(w, r)
			return
		}
		msg := "missing token"
		if r.Header.Get("Authorization") != "" {
			msg = "wrong token"
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="sluice"`)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintf(w, "{\"error\": %q}\n", what+": "+msg+" (send Authorization: Bearer <token>; the CLI reads --token-file, $"+Env+", or the token registered on this host)")
	})
}

// Transport adds "Authorization: Bearer <Token()>" to every request it
// sends through Base (nil: http.DefaultTransport), asking Token anew each
// time (a server started later registers its token later). An empty token
// sends none.
type Transport struct {
	Token func() string
	Base  http.RoundTripper
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(r *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	tok := ""
	if t.Token != nil {
		tok = t.Token()
	}
	if tok == "" {
		return base.RoundTrip(r)
	}
	r2 := r.Clone(r.Context())
	r2.Header.Set("Authorization", "Bearer "+tok)
	return base.RoundTrip(r2)
}

// Dir is where servers on this host register their token files:
// $XDG_CONFIG_HOME/sluice/tokens (default ~/.config/sluice/tokens) of the
// user running them.
func Dir() (string, error) {
	d, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("auth: %w", err)
	}
	return filepath.Join(d, "sluice", "tokens"), nil
}

// key returns the registry's name for a URL or host:port: "host:port",
// the port defaulted from the scheme.
func key(rawURL string) (string, error) {
	s := rawURL
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("auth: bad URL %q", rawURL)
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	if host == "localhost" {
		host = "127.0.0.1"
	}
	return strings.ReplaceAll(net.JoinHostPort(host, port), "/", "_"), nil
}

// Register records that the server at rawURL guards its API with the token
// in file path (made absolute). A previous registration of the address is
// replaced.
func Register(rawURL, path string) error {
	k, err := key(rawURL)
	if err != nil {
		return err
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("auth: register: %w", err)
	}
	dir, err := Dir()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("auth: register: %w", err)
	}
	tmp := filepath.Join(dir, "."+k+".tmp")
	os.Remove(tmp)
	if err := os.Symlink(abs, tmp); err != nil {
		return fmt.Errorf("auth: register: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, k)); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("auth: register: %w", err)
	}
	return nil
}

// Unregister removes rawURL's registration if it still points at path.
func Unregister(rawURL, path string) {
	k, err := key(rawURL)
	if err != nil {
		return
	}
	dir, err := Dir()
	if err != nil {
		return
	}
	abs, _ := filepath.Abs(path)
	link := filepath.Join(dir, k)
	if target, err := os.Readlink(link); err == nil && target == abs {
		os.Remove(link)
	}
}

// Registered returns the token registered on this host for rawURL's
// address; ErrNoToken when none is.
func Registered(rawURL string) (string, error) {
	k, err := key(rawURL)
	if err != nil {
		return "", err
	}
	dir, err := Dir()
	if err != nil {
		return "", err
	}
	link := filepath.Join(dir, k)
	if _, err := os.Lstat(link); err != nil {
		return "", fmt.Errorf("%w registered for %s on this host (in %s)", ErrNoToken, k, dir)
	}
	if _, err := os.Stat(link); errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("%w for %s: its registered file is gone (%s)", ErrNoToken, k, link)
	}
	return Read(link)
}

// Find returns the token a client sends to rawURL: the one in file if
// given, else $SLUICE_TOKEN if set, else the one registered on this host
// for rawURL. ErrNoToken when there is none: the request goes without one.
func Find(rawURL, file string) (string, error) {
	if file != "" {
		return Read(file)
	}
	if t := strings.TrimSpace(os.Getenv(Env)); t != "" {
		return t, nil
	}
	return Registered(rawURL)
}

// ForPeer returns the token a server sends to the server at rawURL: the
// one in file if given, else the one registered on this host for rawURL, or
// "" when there is none (the peer then answers 401, which says so).
func ForPeer(rawURL, file string) (string, error) {
	if file != "" {
		return Read(file)
	}
	t, err := Registered(rawURL)
	if errors.Is(err, ErrNoToken) {
		return "", nil
	}
	return t, err
}
