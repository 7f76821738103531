package keyspace

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
)

func TestAssign(t *testing.T) {
	for _, tc := range []struct {
		name  string
		plan  PlanSpec
		rng   string
		to    string
		want  string // the new plan of warehouse, partitions sorted
		from  string
		error string
	}{
		{"the upper part of a range", PlanSpec{"warehouse": {"p1": "[1,4)", "p2": "[4,7)"}}, "[3,4)", "p2",
			"p1=[1,3) p2=[3,7)", "p1", ""},
		{"the middle of a range, to a third partition", PlanSpec{"warehouse": {"p1": "[1,10)", "p2": "[10,20)"}}, "[4,6)", "p3",
			"p1=[1,4),[6,10) p2=[10,20) p3=[4,6)", "p1", ""},
		{"across two owners, unbounded ends", PlanSpec{"warehouse": {"p1": "[,100)", "p2": "[100,)"}}, "[50,150)", "p3",
			"p1=[,50) p2=[150,) p3=[50,150)", "p1,p2", ""},
		{"joined with the destination's neighbours", PlanSpec{"warehouse": {"p1": "[1,3),[5,7)", "p2": "[3,5)"}}, "[3,5)", "p1",
			"p1=[1,7)", "p2", ""},
		{"already the destination's", PlanSpec{"warehouse": {"p1": "[1,4)", "p2": "[4,7)"}}, "[4,5)", "p2",
			"p1=[1,4) p2=[4,7)", "", ""},
		{"the whole unbounded range", PlanSpec{"warehouse": {"p1": "[,100)", "p2": "[100,)"}}, "[,)", "p3",
			"p3=[,)", "p1,p2", ""},
		{"beyond the plan's keys", PlanSpec{"warehouse": {"p1": "[1,4)", "p2": "[4,7)"}}, "[5,9)", "p1",
			"", "", "range [5,9) reaches beyond table warehouse's keys [1,7)"},
		{"unknown partition", PlanSpec{"warehouse": {"p1": "[1,4)", "p2": "[4,7)"}}, "[1,2)", "p9",
			"", "", "unknown partition p9"},
	} {
		ks := tpcc3(tc.plan)
		if err := ks.Validate(); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		r, err := ks.ParseRange("warehouse", tc.rng)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		spec, from, err := Assign(ks, "warehouse", r, tc.to)
		if tc.error != "" {
			if err == nil || !strings.Contains(err.Error(), tc.error) || !errors.Is(err, ErrInvalid) {
				t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.error)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var got []string
		for _, p := range slices.Sorted(maps.Keys(spec["warehouse"])) {
			got = append(got, fmt.Sprintf("%s=%s", p, spec["warehouse"][p]))
		}
		if g := strings.Join(got, " "); g != tc.want || strings.Join(from, ",") != tc.from {
			t.Errorf("%s: got %s from %v, want %s from %s", tc.name, g, from, tc.want, tc.from)
		}
		if _, err := ks.WithPlan(spec); err != nil {
			t.Errorf("%s: the assigned plan does not validate: %v", tc.name, err)
		}
	}
}

func TestAssignRefuses(t *testing.T) {
	ks := tpcc3(PlanSpec{"warehouse": {"p1": "[1,4)", "p2": "[4,7)"}})
	if err := ks.Validate(); err != nil {
		t.Fatal(err)
	}
	if _, err := ks.ParseRange("warehouse", "[4,2)"); err == nil {
		t.Error("an empty range parsed")
	}
	if _, err := ks.ParseRange("warehouse", "[1,2),[3,4)"); err == nil || !strings.Contains(err.Error(), "want one range") {
		t.Errorf("two ranges: %v", err)
	}
	if _, err := ks.ParseRange("warehouse", "['a','b')"); err == nil {
		t.Error("text bounds of an integer key parsed")
	}
	r, _ := ks.ParseRange("warehouse", "[1,2)")
	if _, _, err := Assign(ks, "district", r, "p2"); err == nil || !strings.Contains(err.Error(), "not a sharded table") {
		t.Errorf("a co-partitioned table: %v", err)
	}
}
