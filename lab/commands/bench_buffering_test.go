package commands

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBufferingModelErrors: `sluice lab bench buffering --model FILE` with a
// model file that is missing, malformed or for other features exits 2 with
// one line, before any server starts; so do the training command's bad
// flags.
func TestBufferingModelErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"bench", "buffering", "--model", filepath.Join(dir, "none.json")}, "no such file"},
		{[]string{"bench", "buffering", "--model", write("bad.json", `{"kind":`)}, "not a model file"},
		{[]string{"bench", "buffering", "--model", write("other.json", `{"kind":"sluice-interference-model","features":["iops"],"coef":[1],"mean":[0],"scale":[1]}`)}, "model is for features [iops]"},
		{[]string{"bench", "buffering", "--model", "../../control/testdata/model-throttled.json", "--fio-for", "1s"}, "--fio-for"},
		{[]string{"tune", "classifier", "--rates", "fast"}, "--rates"},
		{[]string{"tune", "classifier", "--rates", "4MB/s", "--margin", "2"}, "--margin"},
	}
	for _, c := range cases {
		code, _, msg := labRunCLI(t, c.args...)
		if code != 2 || !strings.Contains(msg, c.want) || strings.Count(msg, "\n") != 1 {
			t.Errorf("sluice %s: exit %d, stderr %q; want 2 and one line mentioning %q", strings.Join(c.args, " "), code, msg, c.want)
		}
	}
}
