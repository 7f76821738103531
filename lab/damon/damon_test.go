package damon

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestPlan(t *testing.T) {
	anon := Filter{"type": "anon", "matching": "Y", "allow": "N"}
	unmapped := Filter{"type": "unmapped", "matching": "Y", "allow": "Y"}
	stale := Filter{"type": "memcg", "memcg_path": "/sluice-bed-1-server-a", "matching": "Y", "allow": "N"}
	live := Filter{"type": "memcg", "memcg_path": "/sluice-bed-2-server-a", "matching": "Y", "allow": "N"}
	theirs := Filter{"type": "memcg", "memcg_path": "/gone-but-not-ours", "matching": "Y", "allow": "N"}
	exists := func(m string) bool { return m != "/sluice-bed-1-server-a" && m != "/gone-but-not-ours" }

	got := Plan([]Filter{anon, stale, live, theirs, unmapped}, []string{"/sluice-bed-3-server-a", "/sluice-bed-2-server-a"}, exists)
	want := []Filter{
		{"type": "memcg", "memcg_path": "/sluice-bed-3-server-a", "matching": "Y", "allow": "N"},
		{"type": "memcg", "memcg_path": "/sluice-bed-2-server-a", "matching": "Y", "allow": "N"},
		anon, theirs, unmapped, // the stale one of ours goes, the repeated one is not doubled, others stay in order
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Plan:\n got %v\nwant %v", got, want)
	}
	if got := Plan([]Filter{anon, unmapped}, nil, exists); !reflect.DeepEqual(got, []Filter{anon, unmapped}) {
		t.Fatalf("Plan with nothing to add changed the list: %v", got)
	}
}

// TestExcludeHost adds and removes a filter on this host's own DAMON, when it
// runs a physical-address pageout scheme (this project's VMs do).
func TestExcludeHost(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	schemes, err := pageoutSchemes()
	if err != nil {
		t.Fatal(err)
	}
	if len(schemes) == 0 {
		t.Skip("no running DAMON pageout scheme on this host")
	}
	name := fmt.Sprintf("/sluice-bed-%d-damontest", os.Getpid())
	if err := os.Mkdir(filepath.Join(MemcgRoot, name), 0o755); err != nil {
		t.Skipf("no memory cgroup: %v", err)
	}
	defer os.Remove(filepath.Join(MemcgRoot, name))
	before, err := readFilters(schemes[0].filters)
	if err != nil {
		t.Fatal(err)
	}
	e, err := Exclude(name)
	if err != nil {
		t.Fatal(err)
	}
	if e.Schemes() != len(schemes) {
		t.Errorf("excluded from %d schemes, want %d", e.Schemes(), len(schemes))
	}
	during, _ := readFilters(schemes[0].filters)
	if len(during) != len(before)+1 || during[0]["type"] != "memcg" || during[0]["memcg_path"] != name || during[0]["allow"] != "N" {
		t.Errorf("filters while excluded: %v (before: %v)", during, before)
	}
	if err := e.Restore(); err != nil {
		t.Fatal(err)
	}
	after, _ := readFilters(schemes[0].filters)
	if !reflect.DeepEqual(after, Plan(before, nil, exists)) {
		t.Errorf("filters after Restore: %v, before: %v", after, before)
	}
}
