package migration

import (
	"context"
	"errors"
	"fmt"
)

// Sentinel errors of Validate, for callers that branch on the reason (the
// agent maps them to HTTP 400/409; the CLI to exit code 2).
var (
	ErrBadRequest       = errors.New("migration: bad request")
	ErrSameServer       = errors.New("migration: target is the source")
	ErrAlreadyMigrating = errors.New("migration: tenant is already migrating")
	ErrVersion          = errors.New("migration: PostgreSQL major versions differ")
	ErrWALLevel         = errors.New("migration: source wal_level does not allow a live migration")
	ErrNoSpace          = errors.New("migration: not enough space on the target")
	ErrTenantTaken      = errors.New("migration: the target has a tenant of that id")
)

// SpaceHeadroom is the space a target needs beyond the source's data
// directory, in bytes (256 MiB: WAL received during CATCH-UP, server log).
// On top of it the target needs 10% of the data size.
const SpaceHeadroom = 256 << 20

// Request is a migration asked for by an operator.
type Request struct {
	Tenant string
	Source string // server name the tenant lives on
	Target string // server name to move it to
	Mode   Mode   // Live or StopAndCopy; "" means Live
}

// Validate checks a request against what the source and target report and
// against the migrations still active (records not done or aborted). It is
// pure; a non-nil error wraps one of the sentinels above and is one line
// saying what is wrong. Unknown tenants and servers are the agent's checks.
func Validate(req Request, src SourceInfo, tgt TargetInfo, active []Record) error {
	switch {
	case req.Tenant == "":
		return fmt.Errorf("%w: tenant name is empty", ErrBadRequest)
	case req.Source == "" || req.Target == "":
		return fmt.Errorf("%w: source and target servers must be named", ErrBadRequest)
	case req.Mode != "" && req.Mode != Live && req.Mode != StopAndCopy:
		return fmt.Errorf("%w: mode %q is not %q or %q", ErrBadRequest, req.Mode, Live, StopAndCopy)
	case req.Source == req.Target:
		return fmt.Errorf("%w: tenant %s already lives on %s", ErrSameServer, req.Tenant, req.Target)
	}
	for _, r := range active {
		if r.Tenant == req.Tenant && r.Active() {
			return fmt.Errorf("%w: tenant %s: migration %s from %s to %s is in phase %s", ErrAlreadyMigrating, req.Tenant, r.ID, r.Source, r.Target, r.Phase)
		}
	}
	if tgt.Taken != "" {
		return fmt.Errorf("%w: %s already has tenant %s (state %s)", ErrTenantTaken, req.Target, req.Tenant, tgt.Taken)
	}
	if src.Major != tgt.Major {
		return fmt.Errorf("%w: source %s runs PostgreSQL %d, target %s has PostgreSQL %d", ErrVersion, req.Source, src.Major, req.Target, tgt.Major)
	}
	if (req.Mode == "" || req.Mode == Live) && src.WALLevel != "replica" && src.WALLevel != "logical" {
		return fmt.Errorf("%w: tenant %s on %s has wal_level=%s, needs replica (or use mode %s)", ErrWALLevel, req.Tenant, req.Source, src.WALLevel, StopAndCopy)
	}
	if need := src.DataBytes + src.DataBytes/10 + SpaceHeadroom; tgt.FreeBytes < need {
		return fmt.Errorf("%w: %s has %d MiB free, tenant %s needs %d MiB", ErrNoSpace, req.Target, tgt.FreeBytes>>20, req.Tenant, need>>20)
	}
	return nil
}

// Preflight asks the source and target for their facts and runs Validate.
// It changes nothing on either side.
func Preflight(ctx context.Context, req Request, src Source, tgt Target, active []Record) error {
	si, err := src.Info(ctx)
	if err != nil {
		return fmt.Errorf("migration: preflight: source: %w", err)
	}
	ti, err := tgt.Info(ctx, req.Tenant)
	if err != nil {
		return fmt.Errorf("migration: preflight: target: %w", err)
	}
	return Validate(req, si, ti, active)
}
