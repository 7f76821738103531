package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/catalog"
	"github.com/sluicedb/sluice/keyspace"
)

// Keyspaces (package keyspace; docs/agent-api.md, Keyspaces). The agent a
// keyspace is created on keeps it in its catalog and coordinates it; its
// partitions may be tenants of this agent or of configured peers
// (partitions.go).
//
// Creation is all or nothing: the schema runs in one transaction per
// partition, each prepared (PREPARE TRANSACTION); then the keyspace is
// recorded — the commit decision — and every partition commits (COMMIT
// PREPARED). Any failure before the record rolls every prepared transaction
// back: no table, no record, nothing left in pg_prepared_xacts.

// keyspaceTimeout bounds the work of creating a keyspace once partitions
// have been touched; it runs on after the client hangs up, so that no
// prepared transaction is left behind.
const keyspaceTimeout = 5 * time.Minute

// commitRetries is how often a partition's COMMIT PREPARED is tried, a
// second apart, once the keyspace is recorded.
const commitRetries = 3

// keyspaceRoutes registers the keyspace endpoints and the internal
// partition endpoint.
func (a *Agent) keyspaceRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/keyspaces", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
		if err != nil {
			writeError(w, errf(http.StatusBadRequest, "bad request body: %v", err))
			return
		}
		ks, err := a.CreateKeyspace(r.Context(), body)
		answer(w, http.StatusCreated, ks, err)
	})
	mux.HandleFunc("GET /v1/keyspaces", func(w http.ResponseWriter, r *http.Request) {
		kss, err := a.cat.Keyspaces()
		if kss == nil {
			kss = []*keyspace.Keyspace{}
		}
		answer(w, http.StatusOK, kss, err)
	})
	mux.HandleFunc("GET /v1/keyspaces/{name}", func(w http.ResponseWriter, r *http.Request) {
		ks, err := a.keyspace(r.PathValue("name"))
		answer(w, http.StatusOK, ks, err)
	})
	mux.HandleFunc("DELETE /v1/keyspaces/{name}", func(w http.ResponseWriter, r *http.Request) {
		ks, err := a.DeleteKeyspace(r.PathValue("name"))
		answer(w, http.StatusOK, ks, err)
	})
	mux.HandleFunc("GET /v1/keyspaces/{name}/sizes", func(w http.ResponseWriter, r *http.Request) {
		v, err := a.KeyspaceSizes(r.Context(), r.PathValue("name"))
		answer(w, http.StatusOK, v, err)
	})
	mux.HandleFunc("GET /v1/keyspaces/{name}/check", func(w http.ResponseWriter, r *http.Request) {
		v, err := a.CheckKeyspace(r.Context(), r.PathValue("name"))
		answer(w, http.StatusOK, v, err)
	})
	mux.HandleFunc("POST /v1/keyspaces/{name}/plan/check", func(w http.ResponseWriter, r *http.Request) {
		var spec keyspace.PlanSpec
		if err := readJSON(r, &spec); err != nil {
			writeError(w, err)
			return
		}
		v, err := a.CheckPlan(r.PathValue("name"), spec)
		answer(w, http.StatusOK, v, err)
	})
	a.partitionRoutes(mux)
	a.reshardRoutes(mux)
}

// answer writes v with code, or err.
func answer(w http.ResponseWriter, code int, v any, err error) {
	if err != nil {
		writeError(w, err)
		return
	}
	writeOK(w, code, v)
}

// keyspace reads keyspace name (404 when unknown).
func (a *Agent) keyspace(name string) (*keyspace.Keyspace, error) {
	ks, err := a.cat.Keyspace(name)
	if errors.Is(err, catalog.ErrNotFound) {
		return nil, errf(http.StatusNotFound, "unknown keyspace %q on agent %s", name, a.cfg.Name)
	}
	return ks, err
}

// CreateKeyspace validates the keyspace in body (keyspace.Decode; its
// schema parsed, without transaction control), checks every partition
// (tenant known and running, database present, prepared transactions on),
// applies the schema to all partitions or none, and records the keyspace
// with epoch 1. A 4xx error means nothing was changed.
func (a *Agent) CreateKeyspace(ctx context.Context, body []byte) (*keyspace.Keyspace, error) {
	ks, err := keyspace.Decode(body)
	if err != nil {
		return nil, errf(http.StatusBadRequest, "%v", err)
	}
	if err := checkSchema(ks.Schema); err != nil {
		return nil, errf(http.StatusBadRequest, "keyspace %s: %v", ks.Name, err)
	}
	ks.Epoch = 1
	ms, err := a.members(ks)
	if err != nil {
		return nil, err
	}
	a.ksMu.Lock()
	defer a.ksMu.Unlock()
	if _, err := a.cat.Keyspace(ks.Name); err == nil {
		return nil, errf(http.StatusConflict, "keyspace %s already exists on agent %s", ks.Name, a.cfg.Name)
	}
	for i := range ms {
		if _, err := onPartition[struct{}](ctx, a, &ms[i], opProbe, ks, ""); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), keyspaceTimeout)
	defer cancel()
	gids, err := a.prepareAll(ctx, ks, ms)
	if err != nil {
		return nil, err
	}
	if err := a.cat.Update(func(tx *catalog.Tx) error { return tx.CreateKeyspace(ks) }); err != nil {
		a.rollbackAll(ctx, ks, ms, gids)
		return nil, err
	}
	if err := a.commitAll(ctx, ks, ms, gids); err != nil {
		return nil, err
	}
	a.log.Info("keyspace created", "keyspace", ks.Name, "partitions", len(ms))
	a.announceKeyspace(ctx, ks)
	return ks, nil
}

// announceKeyspace tells the agent's proxy (config proxy) of keyspace ks
// as just recorded (created, or at the end of a reconfiguration), so that
// its clients are routed by it at once rather than after the proxy's next
// poll of the catalog. Best effort: the poll remains how proxies learn
// keyspaces.
func (a *Agent) announceKeyspace(ctx context.Context, ks *keyspace.Keyspace) {
	if a.cfg.Proxy == "" {
		return
	}
	b, err := json.Marshal(ks)
	if err == nil {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = a.proxyClient().SwitchKeyspace(pctx, b, nil, a.url)
		cancel()
	}
	if err != nil {
		a.log.Warn("keyspace: telling the proxy failed; it learns the keyspace from the catalog", "keyspace", ks.Name, "epoch", ks.Epoch, "err", err)
	}
}

// prepareAll prepares the schema on every member, in order, and returns the
// prepared transactions' ids (none when there is no schema). On a failure
// it rolls back those already prepared and returns the failure.
func (a *Agent) prepareAll(ctx context.Context, ks *keyspace.Keyspace, ms []member) ([]string, error) {
	if ks.Schema == "" {
		return nil, nil
	}
	b := make([]byte, 6)
	rand.Read(b)
	var gids []string
	for i := range ms {
		gid := fmt.Sprintf("sluice_ks_%s_%s_%d", ks.Name, hex.EncodeToString(b), i)
		gids = append(gids, gid)
		if _, err := onPartition[struct{}](ctx, a, &ms[i], opPrepare, ks, gid); err != nil {
			a.rollbackAll(ctx, ks, ms[:i+1], gids)
			return nil, err
		}
	}
	return gids, nil
}

// rollbackAll rolls back the prepared transactions gids[i] of ms[i] (the
// last may not exist); failures are logged: such a transaction stays in
// that tenant's pg_prepared_xacts for an operator.
func (a *Agent) rollbackAll(ctx context.Context, ks *keyspace.Keyspace, ms []member, gids []string) {
	for i, gid := range gids {
		if _, err := onPartition[struct{}](ctx, a, &ms[i], opRollbck, ks, gid); err != nil {
			a.log.Error("keyspace: roll back a prepared schema; ROLLBACK PREPARED it by hand", "keyspace", ks.Name, "gid", gid, "err", err)
		}
	}
}

// commitAll commits gids[i] on ms[i], each retried commitRetries times.
// The keyspace is recorded already: an error says which partitions still
// hold their prepared transaction.
func (a *Agent) commitAll(ctx context.Context, ks *keyspace.Keyspace, ms []member, gids []string) error {
	var failed []string
	for i, gid := range gids {
		var err error
		for try := 0; try < commitRetries; try++ {
			if try > 0 {
				time.Sleep(time.Second)
			}
			if _, err = onPartition[struct{}](ctx, a, &ms[i], opCommit, ks, gid); err == nil {
				break
			}
		}
		if err != nil {
			a.log.Error("keyspace: commit a prepared schema; COMMIT PREPARED it by hand", "keyspace", ks.Name, "gid", gid, "err", err)
			failed = append(failed, fmt.Sprintf("%s (transaction %s): %v", ms[i].Name, gid, err))
		}
	}
	if failed != nil {
		return fmt.Errorf("keyspace %s is recorded, but its schema is not committed on %s; COMMIT PREPARED there", ks.Name, strings.Join(failed, "; "))
	}
	return nil
}

// DeleteKeyspace removes keyspace name's record and returns it. The
// partitions' tables and rows stay.
func (a *Agent) DeleteKeyspace(name string) (*keyspace.Keyspace, error) {
	a.ksMu.Lock()
	defer a.ksMu.Unlock()
	ks, err := a.keyspace(name)
	if err != nil {
		return nil, err
	}
	if rec, err := a.cat.Reshard(name); err == nil && activePhase(rec.Phase) {
		return nil, errf(http.StatusConflict, "keyspace %s: reconfiguration %s is %s: delete it when it is done", name, rec.ID, rec.Phase)
	}
	if err := a.cat.Update(func(tx *catalog.Tx) error {
		if err := tx.DeleteReshard(name); err != nil {
			return err
		}
		return tx.DeleteKeyspace(name)
	}); err != nil {
		return nil, err
	}
	a.log.Info("keyspace record deleted; its partitions' data stays", "keyspace", name)
	return ks, nil
}

// CheckPlan validates plan against keyspace name (400 with the one-line
// reason) and returns it parsed, with the ranges applying it would move.
// Nothing is changed.
func (a *Agent) CheckPlan(name string, plan keyspace.PlanSpec) (client.PlanCheck, error) {
	ks, err := a.keyspace(name)
	if err != nil {
		return client.PlanCheck{}, err
	}
	next, err := ks.WithPlan(plan)
	if err != nil {
		return client.PlanCheck{}, errf(http.StatusBadRequest, "%v", err)
	}
	moves, err := keyspace.Diff(ks, next)
	if err != nil {
		return client.PlanCheck{}, errf(http.StatusBadRequest, "%v", err)
	}
	return client.PlanCheck{Keyspace: ks.Name, Epoch: ks.Epoch, NextEpoch: next.Epoch, Plan: next.Plan,
		Ranges: client.PlanRanges(next.PlanRanges()), Moves: client.PlanMoves(moves)}, nil
}

// KeyspaceSizes measures every partition of keyspace name, in parallel; a
// partition that cannot be measured carries its error.
func (a *Agent) KeyspaceSizes(ctx context.Context, name string) (client.KeyspaceSizes, error) {
	ks, err := a.keyspace(name)
	if err != nil {
		return client.KeyspaceSizes{}, err
	}
	ms, err := a.members(ks)
	if err != nil {
		return client.KeyspaceSizes{}, err
	}
	out := client.KeyspaceSizes{Keyspace: ks.Name, Epoch: ks.Epoch, Partitions: make([]client.PartitionSizes, len(ms))}
	eachMember(ms, func(i int, m *member) {
		ps, err := onPartition[client.PartitionSizes](ctx, a, m, opSizes, ks, "")
		if err != nil {
			ps = client.PartitionSizes{Partition: m.Name, Tenant: m.Tenant, Agent: m.agent, Database: m.DB(), Tables: []client.TableSize{}, Error: err.Error()}
		}
		out.Partitions[i] = ps
	})
	for _, ps := range out.Partitions {
		out.Rows += ps.Rows
		out.Bytes += ps.Bytes
	}
	return out, nil
}

// CheckKeyspace checks every partition of keyspace name, in parallel: rows
// outside the partition's ranges, and each reference table's copies
// compared with the first partition's that could be read.
func (a *Agent) CheckKeyspace(ctx context.Context, name string) (client.KeyspaceCheck, error) {
	ks, err := a.keyspace(name)
	if err != nil {
		return client.KeyspaceCheck{}, err
	}
	ms, err := a.members(ks)
	if err != nil {
		return client.KeyspaceCheck{}, err
	}
	out := client.KeyspaceCheck{Keyspace: ks.Name, Epoch: ks.Epoch, OK: true, Partitions: make([]client.PartitionCheck, len(ms)), Reference: []client.ReferenceCheck{}}
	eachMember(ms, func(i int, m *member) {
		pc, err := onPartition[client.PartitionCheck](ctx, a, m, opCheck, ks, "")
		if err != nil {
			pc = client.PartitionCheck{Partition: m.Name, Tenant: m.Tenant, Agent: m.agent, Database: m.DB(), Tables: []client.TableCheck{}, Error: err.Error()}
		}
		out.Partitions[i] = pc
	})
	for _, pc := range out.Partitions {
		if pc.Error != "" {
			out.OK = false
		}
		for _, tc := range pc.Tables {
			out.Misplaced += tc.Misplaced
			if tc.Error != "" || tc.Misplaced > 0 {
				out.OK = false
			}
		}
	}
	for ti, t := range ks.Tables {
		if t.Kind != keyspace.Reference {
			continue
		}
		rc := compareReference(t.Name, ti, out.Partitions)
		out.OK = out.OK && rc.Equal
		out.Reference = append(out.Reference, rc)
	}
	return out, nil
}

// compareReference compares table ti (a reference table) across the
// partitions that checked it.
func compareReference(name string, ti int, pcs []client.PartitionCheck) client.ReferenceCheck {
	rc := client.ReferenceCheck{Table: name, Equal: true}
	var first *client.TableCheck
	for _, pc := range pcs {
		if ti >= len(pc.Tables) || pc.Tables[ti].Error != "" {
			continue
		}
		tc := &pc.Tables[ti]
		if first == nil {
			first = tc
			continue
		}
		if tc.MD5 != first.MD5 || tc.Rows != first.Rows {
			rc.Equal = false
			rc.Differs = append(rc.Differs, fmt.Sprintf("%s: %d rows", pc.Partition, tc.Rows))
		}
	}
	return rc
}

// eachMember runs fn for every member concurrently and waits for all.
func eachMember(ms []member, fn func(i int, m *member)) {
	var wg sync.WaitGroup
	for i := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(i, &ms[i])
		}()
	}
	wg.Wait()
}
