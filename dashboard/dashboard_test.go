package dashboard

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestOpen: only GETs (and HEADs) of the page's own files, and of the root
// that redirects to it, pass without a token; a path that leaves Prefix
// once cleaned does not.
func TestOpen(t *testing.T) {
	for _, tc := range []struct {
		method, path string
		open         bool
	}{
		{"GET", "/", true},
		{"GET", "/ui/", true},
		{"HEAD", "/ui/app.js", true},
		{"GET", "/ui/style.css", true},
		{"POST", "/ui/", false},
		{"GET", "/ui", false},
		{"GET", "/ui/../v1/tenants", false},
		{"GET", "/ui/./app.js", false},
		{"GET", "/v1/overview", false},
		{"GET", "/metrics", false},
		{"GET", "//ui/", false},
	} {
		r := httptest.NewRequest(tc.method, "http://agent"+tc.path, nil)
		r.URL.Path = tc.path
		if got := Open(r); got != tc.open {
			t.Errorf("%s %s: open %v, want %v", tc.method, tc.path, got, tc.open)
		}
	}
}

// TestHandler: the embedded page, its script and style are served under
// Prefix with their types; nothing refers to another origin.
func TestHandler(t *testing.T) {
	srv := httptest.NewServer(http.StripPrefix("", Handler()))
	defer srv.Close()
	for path, ctype := range map[string]string{"/ui/": "text/html", "/ui/app.js": "text/javascript", "/ui/style.css": "text/css"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), ctype) {
			t.Errorf("GET %s: %d %s", path, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		if strings.Contains(string(body), "http://") || strings.Contains(string(body), "https://") {
			t.Errorf("GET %s refers to another origin", path)
		}
	}
}
