package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sluicedb/sluice/agent/client"
	"github.com/sluicedb/sluice/catalog"
	"github.com/sluicedb/sluice/keyspace"
	"github.com/sluicedb/sluice/reshard/pgreshard"
)

// A keyspace's partition is a database in a tenant that this agent or a
// peer runs. The agent holding the keyspace (its coordinator) resolves each
// partition to a member and runs a fixed operation on it: here, over the
// tenant's superuser socket (ConnString), or on the peer through
//
//	POST /v1/internal/partitions/{op}   partitionRequest → the op's answer
//
// The peer validates the keyspace again, finds the partition's tenant among
// its own (Partition.Agent is relative to the coordinator and ignored
// there) and runs the op. No op runs SQL from the request other than the
// keyspace's schema, at prepare, screened by checkSchema.
//
// A partition's tenant migrates like any other, and the keyspace's record
// is not changed when it does: Partition.Agent is where the tenant was
// when the keyspace was created, the first place to look. An agent the
// tenant has migrated away from answers 410 Gone (its catalog says moved);
// the coordinator then finds the agent that owns the tenant now among
// itself and its configured peers (relocate) and runs the op there. A
// tenant that moved to an agent the coordinator has no peer entry for
// cannot be reached: its op fails with the 410, naming the partition.

// partitionOp is one operation on a partition.
type partitionOp string

const (
	// opProbe: the tenant is running, the database exists, prepared
	// transactions are enabled (when there is a schema to apply), and the
	// tables exist (when there is none).
	opProbe partitionOp = "probe"
	// opPrepare: BEGIN; the schema (as the database's owner when that is
	// not a superuser); PREPARE TRANSACTION gid.
	opPrepare partitionOp = "prepare"
	opCommit  partitionOp = "commit"   // COMMIT PREPARED gid
	opRollbck partitionOp = "rollback" // ROLLBACK PREPARED gid, if it is prepared
	opSizes   partitionOp = "sizes"    // → client.PartitionSizes
	opCheck   partitionOp = "check"    // → client.PartitionCheck
)

// partitionRequest is the body of POST /v1/internal/partitions/{op}.
type partitionRequest struct {
	Keyspace  keyspace.Keyspace `json:"keyspace"`
	Partition string            `json:"partition"`
	GID       string            `json:"gid,omitempty"` // prepare, commit, rollback
}

// gidRE is the form of the prepared transactions' global ids (newGID).
var gidRE = regexp.MustCompile(`^sluice_ks_[a-z0-9_$]{1,150}$`)

// partitionRoutes registers the internal partition endpoint.
func (a *Agent) partitionRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/internal/partitions/{op}", func(w http.ResponseWriter, r *http.Request) {
		var req partitionRequest
		if err := readJSON(r, &req); err != nil {
			writeError(w, err)
			return
		}
		if err := req.Keyspace.Validate(); err != nil {
			writeError(w, errf(http.StatusBadRequest, "%v", err))
			return
		}
		v, err := a.runPartitionOp(r.Context(), partitionOp(r.PathValue("op")), &req.Keyspace, req.Partition, req.GID)
		if err != nil {
			writeError(w, err)
			return
		}
		if v == nil {
			v = struct{}{}
		}
		writeOK(w, http.StatusOK, v)
	})
}

// member is a partition as the coordinator reaches it.
type member struct {
	keyspace.Partition
	agent string // name of the agent running the tenant
	url   string // that agent's API URL; "" = this agent
}

func (m member) String() string {
	return fmt.Sprintf("partition %s (tenant %s on agent %s)", m.Name, m.Tenant, m.agent)
}

// members resolves ks's partitions: Agent "" or this agent's name or URL is
// this agent; a configured peer's name or URL is that peer; anything else
// is refused (400).
func (a *Agent) members(ks *keyspace.Keyspace) ([]member, error) {
	out := make([]member, len(ks.Partitions))
	for i, p := range ks.Partitions {
		m := member{Partition: p, agent: a.cfg.Name}
		if u, err := parsePeerURL(p.Agent); p.Agent == "" || p.Agent == a.cfg.Name || (err == nil && u == a.url) {
			out[i] = m
			continue
		}
		if u, ok := a.cfg.Peers[p.Agent]; ok {
			m.agent, m.url = p.Agent, u
		} else if name, ok := a.peerName(p.Agent); ok {
			m.agent, m.url = name, p.Agent
		} else {
			return nil, errf(http.StatusBadRequest, "partition %s: agent %q is not a configured peer of agent %s (peers: %s)",
				p.Name, p.Agent, a.cfg.Name, strings.Join(slices.Sorted(maps.Keys(a.cfg.Peers)), ", "))
		}
		u, err := parsePeerURL(m.url)
		if err != nil {
			return nil, errf(http.StatusBadRequest, "partition %s: agent %s: %v", p.Name, m.agent, err)
		}
		m.url = u
		out[i] = m
	}
	return out, nil
}

// relocate points m at the agent that owns m's tenant now, looking at this
// agent's catalog and at every configured peer's but m's own; it reports
// whether exactly one owns it (a tenant in any state but moved, deleted or
// migrating-in, matched by name or id as partitionTenant does). Peers that
// cannot be asked are skipped: the caller then keeps the 410.
func (a *Agent) relocate(ctx context.Context, m *member) bool {
	var found []member
	if m.url != "" {
		if ts, err := a.cat.Tenants(); err == nil {
			for _, tn := range ts {
				if namesTenant(m.Tenant, tn.ID, tn.Name) && owns(tn.State) {
					found = append(found, member{Partition: m.Partition, agent: a.cfg.Name})
					break
				}
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(a.cfg.Peers)) {
		u, err := parsePeerURL(a.cfg.Peers[name])
		if err != nil || u == m.url {
			continue
		}
		c, err := a.peerClient(u)
		if err != nil {
			continue
		}
		ts, err := c.Tenants(ctx, true)
		if err != nil {
			a.log.Warn("keyspace: looking for a partition's tenant", "partition", m.Name, "tenant", m.Tenant, "peer", name, "err", err)
			continue
		}
		for _, tn := range ts {
			if namesTenant(m.Tenant, tn.ID, tn.Name) && owns(catalog.State(tn.State)) {
				found = append(found, member{Partition: m.Partition, agent: name, url: u})
				break
			}
		}
	}
	if len(found) != 1 {
		return false
	}
	a.log.Info("keyspace: partition's tenant has migrated; following it", "partition", m.Name, "tenant", m.Tenant, "from", m.agent, "to", found[0].agent)
	*m = found[0]
	return true
}

// namesTenant reports whether a partition's tenant reference ref (a name or
// an id) names the tenant id called name.
func namesTenant(ref string, id int64, name string) bool {
	return name == ref || strconv.FormatInt(id, 10) == ref
}

// owns reports whether an agent whose catalog has a tenant in state s is
// where the tenant lives: not moved away, deleted, or still arriving.
func owns(s catalog.State) bool {
	return s != catalog.Moved && s != catalog.Deleted && s != catalog.MigratingIn
}

// onPartition runs op on m, here or on its peer, and returns the answer.
// Errors name the partition; a peer's refusal keeps its status, a peer that
// cannot be reached is 502. When m's agent answers that the tenant has
// migrated away (410), m is pointed at the agent that owns it now
// (relocate) and op runs there: callers that run several ops on one member
// (prepare, then commit) pass the same m to each.
func onPartition[T any](ctx context.Context, a *Agent, m *member, op partitionOp, ks *keyspace.Keyspace, gid string) (T, error) {
	v, err := onPartitionOnce[T](ctx, a, *m, op, ks, gid)
	if statusOf(err) != http.StatusGone {
		return v, err
	}
	if !a.relocate(ctx, m) {
		return v, err
	}
	return onPartitionOnce[T](ctx, a, *m, op, ks, gid)
}

// onPartitionOnce runs op on m where m says the tenant is.
func onPartitionOnce[T any](ctx context.Context, a *Agent, m member, op partitionOp, ks *keyspace.Keyspace, gid string) (T, error) {
	var v T
	if m.url == "" {
		res, err := a.runPartitionOp(ctx, op, ks, m.Name, gid)
		if err != nil {
			return v, errf(statusOf(err), "%s: %v", m, err)
		}
		v, _ = res.(T)
		return v, nil
	}
	c, err := a.peerClient(m.url)
	if err != nil {
		return v, errf(http.StatusBadRequest, "%s: %v", m, err)
	}
	err = c.Do(ctx, http.MethodPost, "/v1/internal/partitions/"+string(op), partitionRequest{Keyspace: *ks, Partition: m.Name, GID: gid}, &v)
	if code := client.StatusOf(err); code != 0 {
		return v, errf(code, "%s: %v", m, err)
	} else if err != nil {
		return v, errf(http.StatusBadGateway, "%s: agent %s is unreachable: %v", m, m.agent, err)
	}
	return v, nil
}

// runPartitionOp runs op on partition part of ks, which this agent runs.
func (a *Agent) runPartitionOp(ctx context.Context, op partitionOp, ks *keyspace.Keyspace, part, gid string) (any, error) {
	p, ok := ks.Partition(part)
	if !ok {
		return nil, errf(http.StatusBadRequest, "keyspace %s has no partition %q", ks.Name, part)
	}
	switch op {
	case opPrepare, opCommit, opRollbck:
		if !gidRE.MatchString(gid) {
			return nil, errf(http.StatusBadRequest, "bad prepared transaction id %q", gid)
		}
	case opProbe, opSizes, opCheck:
	default:
		return nil, errf(http.StatusNotFound, "no such partition operation %q", op)
	}
	conn, tn, err := a.partitionConn(ctx, p, op == opProbe || op == opPrepare)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	switch op {
	case opProbe:
		return nil, probePartition(ctx, conn, ks, tn)
	case opPrepare:
		return nil, preparePartition(ctx, conn, ks, gid)
	case opCommit:
		if _, err := conn.Exec(ctx, "COMMIT PREPARED "+quoteLiteral(gid)); err != nil {
			return nil, fmt.Errorf("commit prepared %s: %w", gid, err)
		}
		return nil, nil
	case opRollbck:
		return nil, rollbackPrepared(ctx, conn, gid)
	case opSizes:
		return a.partitionSizes(ctx, conn, ks, p), nil
	default:
		return a.partitionCheck(ctx, conn, ks, p), nil
	}
}

// partitionTenant finds p's tenant among this agent's: a tenant not
// deleted or moved whose name (or id) is p.Tenant. A tenant that has only
// moved away is 410 Gone (onPartition then looks for it elsewhere).
func (a *Agent) partitionTenant(p keyspace.Partition) (catalog.Tenant, error) {
	ts, err := a.cat.Tenants()
	if err != nil {
		return catalog.Tenant{}, err
	}
	var found []catalog.Tenant
	moved := false
	for _, tn := range ts {
		if !namesTenant(p.Tenant, tn.ID, tn.Name) {
			continue
		}
		switch tn.State {
		case catalog.Deleted:
		case catalog.Moved:
			moved = true
		default:
			found = append(found, tn)
		}
	}
	switch {
	case len(found) == 1:
		return found[0], nil
	case len(found) > 1:
		return catalog.Tenant{}, errf(http.StatusBadRequest, "tenant %q is ambiguous on agent %s: %d tenants have that name; name it by id", p.Tenant, a.cfg.Name, len(found))
	case moved:
		return catalog.Tenant{}, errf(http.StatusGone, "tenant %s has migrated away from agent %s", p.Tenant, a.cfg.Name)
	}
	return catalog.Tenant{}, errf(http.StatusBadRequest, "no tenant %s on agent %s", p.Tenant, a.cfg.Name)
}

// partitionConn connects to p's database as the superuser. The tenant must
// be running (running) or at least serving (running or migrating out).
func (a *Agent) partitionConn(ctx context.Context, p keyspace.Partition, running bool) (*pgx.Conn, catalog.Tenant, error) {
	tn, err := a.partitionTenant(p)
	if err != nil {
		return nil, tn, err
	}
	if (running && tn.State != catalog.Running) || !tn.State.Serving() {
		return nil, tn, errf(http.StatusConflict, "tenant %s is %s, not running", p.Tenant, tn.State)
	}
	conn, err := pgx.Connect(ctx, a.ConnString(tn.Port, p.DB()))
	if err == nil {
		return conn, tn, nil
	}
	var pe *pgconn.PgError
	switch {
	case errors.As(err, &pe) && pe.Code == "3D000":
		return nil, tn, errf(http.StatusBadRequest, "database %s does not exist in tenant %s", p.DB(), p.Tenant)
	case postmasterDown(err):
		return nil, tn, errf(http.StatusConflict, "tenant %s's postmaster is not running", p.Tenant)
	}
	return nil, tn, fmt.Errorf("tenant %s: connect: %w", p.Tenant, err)
}

// probePartition checks that ks can be created on the partition conn is
// connected to: prepared transactions enabled when there is a schema to
// apply, the tables present when there is none.
func probePartition(ctx context.Context, conn *pgx.Conn, ks *keyspace.Keyspace, tn catalog.Tenant) error {
	if ks.Schema != "" {
		var n int
		if err := conn.QueryRow(ctx, "SELECT current_setting('max_prepared_transactions')::int").Scan(&n); err != nil {
			return fmt.Errorf("max_prepared_transactions: %w", err)
		}
		if n == 0 {
			return errf(http.StatusConflict, "tenant %s has max_prepared_transactions = 0; a keyspace's schema is applied by two-phase commit (tenants get %s by default)", tn.Name, defaultMaxPreparedTransactions)
		}
		return nil
	}
	names := make([]string, len(ks.Tables))
	for i, t := range ks.Tables {
		names[i] = t.Name
	}
	var missing []string
	if err := conn.QueryRow(ctx, "SELECT coalesce(array_agg(t), '{}') FROM unnest($1::text[]) AS t WHERE to_regclass(quote_ident(t)) IS NULL", names).Scan(&missing); err != nil {
		return fmt.Errorf("tables: %w", err)
	}
	if len(missing) > 0 {
		return errf(http.StatusBadRequest, "keyspace %s has no schema and table %s does not exist", ks.Name, strings.Join(missing, ", "))
	}
	return nil
}

// preparePartition applies ks's schema in a transaction and prepares it as
// gid; on any error the transaction is rolled back. An error of the schema
// itself is the request's fault (400).
func preparePartition(ctx context.Context, conn *pgx.Conn, ks *keyspace.Keyspace, gid string) error {
	if err := checkSchema(ks.Schema); err != nil {
		return errf(http.StatusBadRequest, "%v", err)
	}
	if _, err := conn.Exec(ctx, "BEGIN"); err != nil {
		return err
	}
	err := func() error {
		var owner string
		var super bool
		if err := conn.QueryRow(ctx, `SELECT r.rolname, r.rolsuper FROM pg_database d JOIN pg_roles r ON r.oid = d.datdba
			WHERE d.datname = current_database()`).Scan(&owner, &super); err != nil {
			return fmt.Errorf("database owner: %w", err)
		}
		if !super {
			if _, err := conn.Exec(ctx, "SET LOCAL ROLE "+quoteIdent(owner)); err != nil {
				return fmt.Errorf("set role %s: %w", owner, err)
			}
		}
		if _, err := conn.PgConn().Exec(ctx, ks.Schema).ReadAll(); err != nil {
			var pe *pgconn.PgError
			if errors.As(err, &pe) {
				return errf(http.StatusBadRequest, "schema: %v", pe)
			}
			return fmt.Errorf("schema: %w", err)
		}
		if conn.PgConn().TxStatus() != 'T' {
			return errf(http.StatusBadRequest, "schema: it ended the transaction")
		}
		// The reconfiguration fence's table and triggers come with the
		// tables, so arming a fence later locks nothing (reshard/pgreshard).
		if _, err := conn.PgConn().Exec(ctx, pgreshard.InstallSQL(ks)).ReadAll(); err != nil {
			return fmt.Errorf("fence triggers: %w", err)
		}
		return nil
	}()
	if err != nil {
		conn.Exec(context.WithoutCancel(ctx), "ROLLBACK")
		return err
	}
	if _, err := conn.Exec(ctx, "PREPARE TRANSACTION "+quoteLiteral(gid)); err != nil {
		return fmt.Errorf("prepare transaction: %w", err)
	}
	return nil
}

// rollbackPrepared rolls back prepared transaction gid of conn's database,
// if there is one.
func rollbackPrepared(ctx context.Context, conn *pgx.Conn, gid string) error {
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_prepared_xacts WHERE gid = $1 AND database = current_database()", gid).Scan(&n); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	if _, err := conn.Exec(ctx, "ROLLBACK PREPARED "+quoteLiteral(gid)); err != nil {
		return fmt.Errorf("rollback prepared %s: %w", gid, err)
	}
	return nil
}

// partitionSizes measures p's tables; a failure is reported in the answer.
func (a *Agent) partitionSizes(ctx context.Context, conn *pgx.Conn, ks *keyspace.Keyspace, p keyspace.Partition) client.PartitionSizes {
	out := client.PartitionSizes{Partition: p.Name, Tenant: p.Tenant, Agent: a.cfg.Name, Database: p.DB(), Tables: []client.TableSize{}}
	for _, t := range ks.Tables {
		ts := client.TableSize{Table: t.Name}
		var reltuples float64
		err := conn.QueryRow(ctx, "SELECT c.reltuples, pg_total_relation_size(c.oid) FROM pg_class c WHERE c.oid = to_regclass($1)",
			quoteIdent(t.Name)).Scan(&reltuples, &ts.Bytes)
		if errors.Is(err, pgx.ErrNoRows) {
			err = fmt.Errorf("table %s does not exist", t.Name)
		}
		if err == nil && reltuples >= 0 {
			ts.Rows, ts.Estimated = int64(reltuples), true
		} else if err == nil {
			err = conn.QueryRow(ctx, "SELECT count(*) FROM "+quoteIdent(t.Name)).Scan(&ts.Rows)
		}
		if err != nil {
			out.Error = fmt.Sprintf("table %s: %v", t.Name, err)
			return out
		}
		out.Tables = append(out.Tables, ts)
		out.Rows += ts.Rows
		out.Bytes += ts.Bytes
	}
	return out
}

// partitionCheck counts p's misplaced rows per sharded and co-partitioned
// table and digests its reference tables; a failure is reported per table.
func (a *Agent) partitionCheck(ctx context.Context, conn *pgx.Conn, ks *keyspace.Keyspace, p keyspace.Partition) client.PartitionCheck {
	out := client.PartitionCheck{Partition: p.Name, Tenant: p.Tenant, Agent: a.cfg.Name, Database: p.DB(), Tables: []client.TableCheck{}}
	plan := ks.PlanRanges()
	for _, t := range ks.Tables {
		tc := client.TableCheck{Table: t.Name, Kind: t.Kind}
		var err error
		if t.Kind == keyspace.Reference {
			err = conn.QueryRow(ctx, referenceSQL(t)).Scan(&tc.Rows, &tc.MD5)
		} else {
			rs := plan[t.Root].Ranges(p.Name)
			tc.Ranges = rangesText(rs)
			err = conn.QueryRow(ctx, misplacedSQL(t, rs)).Scan(&tc.Rows, &tc.Misplaced)
		}
		if err != nil {
			tc.Error = err.Error()
		}
		out.Tables = append(out.Tables, tc)
	}
	return out
}
