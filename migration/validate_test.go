package migration

import (
	"errors"
	"testing"
)

func TestValidate(t *testing.T) {
	okSrc := SourceInfo{Major: 15, WALLevel: "replica", DataBytes: 1 << 30}
	okTgt := TargetInfo{Major: 15, FreeBytes: 10 << 30}
	req := Request{Tenant: "t1", Source: "a", Target: "b"}
	moving := New("m0", "t1", "a", "c", Live, t0)
	moving.Phase = PhaseCatchUp
	finished := moving
	finished.Phase = PhaseDone
	for _, tc := range []struct {
		name   string
		req    Request
		src    SourceInfo
		tgt    TargetInfo
		active []Record
		want   error
	}{
		{"ok", req, okSrc, okTgt, nil, nil},
		{"ok after an earlier migration finished", req, okSrc, okTgt, []Record{finished}, nil},
		{"target is source", Request{Tenant: "t1", Source: "a", Target: "a"}, okSrc, okTgt, nil, ErrSameServer},
		{"already migrating", req, okSrc, okTgt, []Record{moving}, ErrAlreadyMigrating},
		{"version", req, okSrc, TargetInfo{Major: 16, FreeBytes: 10 << 30}, nil, ErrVersion},
		{"wal_level minimal", req, SourceInfo{Major: 15, WALLevel: "minimal", DataBytes: 1}, okTgt, nil, ErrWALLevel},
		{"wal_level minimal is fine for stop-and-copy", Request{Tenant: "t1", Source: "a", Target: "b", Mode: StopAndCopy}, SourceInfo{Major: 15, WALLevel: "minimal", DataBytes: 1}, okTgt, nil, nil},
		{"no space", req, okSrc, TargetInfo{Major: 15, FreeBytes: 1 << 30}, nil, ErrNoSpace},
		{"id taken on the target", req, okSrc, TargetInfo{Major: 15, FreeBytes: 10 << 30, Taken: "running"}, nil, ErrTenantTaken},
		{"empty tenant", Request{Source: "a", Target: "b"}, okSrc, okTgt, nil, ErrBadRequest},
		{"bad mode", Request{Tenant: "t1", Source: "a", Target: "b", Mode: "teleport"}, okSrc, okTgt, nil, ErrBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate(tc.req, tc.src, tc.tgt, tc.active)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("Validate = %v, want %v", err, tc.want)
			}
			if err != nil {
				t.Log(err)
			}
		})
	}
}
