package dashboard

import (
	"embed"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

// Prefix is the path the page is served under.
const Prefix = "/ui/"

//go:embed static
var static embed.FS

// Handler serves the page's files under Prefix.
func Handler() http.Handler {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.StripPrefix(Prefix, http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The page is small and changes with the binary: always revalidate.
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
		files.ServeHTTP(w, r)
	})
}

// Open reports whether r asks for the page itself (GET or HEAD of the
// agent's root, which redirects to Prefix, or of a file under Prefix): the
// requests an API guard lets through without a token. The page's files are
// the same for everyone and hold no data.
func Open(r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	p := r.URL.Path
	if c := path.Clean(p); c != p && c+"/" != p {
		return false // "/ui/../v1/…": not the page's
	}
	return p == "/" || strings.HasPrefix(p, Prefix)
}
