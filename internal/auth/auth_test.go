package auth

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadOrCreate(t *testing.T) {
	p := filepath.Join(t.TempDir(), "d", "token")
	tok, created, err := LoadOrCreate(p)
	if err != nil || !created || len(tok) != 64 {
		t.Fatalf("first: %q %v %v", tok, created, err)
	}
	fi, _ := os.Stat(p)
	di, _ := os.Stat(filepath.Dir(p))
	if fi.Mode().Perm() != 0o600 || di.Mode().Perm() != 0o700 {
		t.Fatalf("modes: file %04o, dir %04o", fi.Mode().Perm(), di.Mode().Perm())
	}
	again, created, err := LoadOrCreate(p)
	if err != nil || created || again != tok {
		t.Fatalf("second: %q %v %v, want the same token", again, created, err)
	}
	os.Chmod(p, 0o640)
	if _, _, err := LoadOrCreate(p); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("group-readable: %v", err)
	}
	os.Chmod(p, 0o600)
	os.WriteFile(p, []byte("\n"), 0o600)
	if _, _, err := LoadOrCreate(p); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Fatalf("empty: %v", err)
	}
}

func TestRequire(t *testing.T) {
	h := Require(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) }), "s3cret", "svc",
		func(r *http.Request) bool { return r.URL.Path == "/metrics" })
	for _, tc := range []struct {
		name, path, auth string
		code             int
	}{
		{"none", "/x", "", 401},
		{"wrong", "/x", "Bearer nope", 401},
		{"no scheme", "/x", "s3cret", 401},
		{"prefix", "/x", "Bearer s3cre", 401},
		{"right", "/x", "Bearer s3cret", 204},
		{"open path", "/metrics", "", 204},
	} {
		r := httptest.NewRequest("GET", tc.path, nil)
		if tc.auth != "" {
			r.Header.Set("Authorization", tc.auth)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tc.code || (tc.code == 401 && !strings.HasPrefix(w.Body.String(), `{"error": "svc: `)) {
			t.Errorf("%s: %d %s, want %d", tc.name, w.Code, w.Body, tc.code)
		}
	}
}

// TestRegistry: a registered token is found for its address only (the
// default port and localhost spelled either way), Find prefers the file and
// $SLUICE_TOKEN, and Unregister forgets it.
func TestRegistry(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv(Env, "")
	p := filepath.Join(t.TempDir(), "token")
	tok, _, err := LoadOrCreate(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := Register("http://127.0.0.1:7001", p); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"http://127.0.0.1:7001", "127.0.0.1:7001", "http://localhost:7001/"} {
		if got, err := Find(u, ""); err != nil || got != tok {
			t.Errorf("Find(%s) = %q, %v; want the token", u, got, err)
		}
	}
	for _, u := range []string{"http://127.0.0.1:7002", "http://10.0.0.1:7001"} {
		if got, err := Find(u, ""); !errors.Is(err, ErrNoToken) || got != "" {
			t.Errorf("Find(%s) = %q, %v; want ErrNoToken", u, got, err)
		}
		if got, err := ForPeer(u, ""); err != nil || got != "" {
			t.Errorf("ForPeer(%s) = %q, %v; want none", u, got, err)
		}
	}
	other := filepath.Join(t.TempDir(), "other")
	os.WriteFile(other, []byte("from-file\n"), 0o600)
	if got, _ := Find("http://127.0.0.1:7001", other); got != "from-file" {
		t.Errorf("Find with a file = %q", got)
	}
	t.Setenv(Env, "from-env")
	if got, _ := Find("http://127.0.0.1:7001", ""); got != "from-env" {
		t.Errorf("Find with $%s = %q", Env, got)
	}
	t.Setenv(Env, "")
	Unregister("http://127.0.0.1:7001", p)
	if _, err := Find("http://127.0.0.1:7001", ""); !errors.Is(err, ErrNoToken) {
		t.Errorf("after Unregister: %v", err)
	}
}
