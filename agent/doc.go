// Package agent is sluice's per-server agent (Slacker's per-server migration
// controller, DESIGN.md §2): it creates, starts, stops and deletes the
// server's tenants — one PostgreSQL postmaster per tenant, with its own data
// directory and port — keeps their state in a catalog (package catalog:
// an embedded bbolt file, or an etcd cluster shared by the fleet's agents,
// Config.Catalog) that survives restarts, serves an HTTP API for all of it,
// and runs both ends of tenant migrations with its peers.
//
// The agent is the goroutine-and-I/O shell around pure cores: the tenant
// lifecycle (catalog.CanTransition) and the migration state machine
// (migration.Step, driven by migration.Run) and the keyspace model
// (package keyspace: it validates keyspaces and plans; the agent applies
// their schema and checks their rows, keyspaces.go) and the migration plan
// (package plan: validated, scheduled and stepped there; the agent starts each
// move as a migration on its source agent and paces it, plan*.go). It persists the migration
// Record in the catalog after every transition, so a killed agent resumes or
// rolls back at its next start (migration package rules). Tenant postmasters
// are detached (pg_ctl): they outlive the agent process.
//
// # Layout of the root directory
//
//	catalog.db           bbolt catalog: tenants, migrations, keyspaces, reshards, plans (none with an etcd catalog)
//	token                the API's bearer token (0600, made at first start; Config.TokenFile)
//	replication.password sluice_replication's password in this agent's tenants (0600)
//	template/            initdb output copied for each new tenant (initdb runs once)
//	tenants/<id>/        tenant <id>'s data directory; its port is base_port + id
//	tenants/<id>.retired-<unix>   a migrated-away tenant's directory, removed after retire_grace
//
// # Start-up reconciliation
//
// A tenant whose creation was cut short is rolled back (directory removed,
// record deleted); a tenant that should serve (running, migrating-out) whose
// postmaster is dead is started; source-side migrations not finished are run
// again (migration.Run feeds Resumed). Target-side migrations need nothing:
// their source drives them. Plans not ended are driven again (plan.Resumed).
//
// # A unique driver
//
// A source-side migration is driven under its tenant's catalog lock
// (driverLock; catalog.Lock): taken before the migration is recorded, and
// at start before an unfinished one is resumed (waited for in the
// background while a previous process's etcd lease lives, then the record
// read again). Every catalog write of the driver goes through the lock
// (catalog.Lock.Update); a driver that loses the lock — a write answered
// catalog.ErrNotOwner, or its session's lease ended — stops at once without
// touching PostgreSQL or the catalog again (launch), and the next holder
// resumes from the last record — the same agent too, once etcd answers
// again: it waits for the lock anew (retakeMigration). A keyspace's reconfiguration is driven
// likewise under reshardLock, and a plan under planLock. With the bbolt catalog the lock is
// in-process and only orders this agent's own drivers.
//
// A handover's Router is the proxy at Config.Proxy or, with
// Config.Proxies, all of them at once (fanRouter): the hold, the switch and
// the release go to every proxy in front of the tenant, and the handover
// goes on only when all answered, within a deadline; a silent proxy rolls
// it back.
//
// # HTTP API
//
// JSON in and out. Errors are {"error": "one line"} with 400 (bad request),
// 404 (unknown tenant/migration), 409 (conflict with the current state, e.g.
// already migrating), 422 (preflight refused: no space, other PostgreSQL
// major version, wal_level), 401 (a request without the token), 403 (a
// migration to an agent that is not a configured peer), 502 (a peer agent
// unreachable), 500 otherwise. A 4xx answer means
// nothing was changed. Rates are bytes/s, 0 = unlimited.
//
//	GET    /v1/info                      name, URL, PostgreSQL version, free/used space, peers
//	GET    /v1/tenants[?all=true]        tenants (deleted ones only with all=true)
//	POST   /v1/tenants                   {"id"?, "name"?, "settings"?} → tenant, running (201)
//	GET    /v1/tenants/{id}              one tenant
//	DELETE /v1/tenants/{id}              stop it, remove its directory (state deleted)
//	POST   /v1/tenants/{id}/start        start a stopped tenant
//	POST   /v1/tenants/{id}/stop         fast shutdown (state stopped)
//	POST   /v1/migrations                {"tenant", "to", "rate"?, "mode"?} on the source → migration (201)
//	GET    /v1/migrations                this agent's migrations (source and target sides)
//	GET    /v1/migrations/{id}           record, live progress (phase, bytes, rate, ETA, lag), summary when done
//	POST   /v1/migrations/{id}/rate      {"rate"}: change the throttle at once
//	POST   /v1/migrations/{id}/abort     roll back (refused after the route switch)
//	POST   /v1/migrations/{id}/pause|resume  hold the copy at rate 0 / let it go on (prepare, snapshot)
//	GET    /v1/migrations/{id}/series[?since=T]  the control loop's record (points after T)
//	GET    /v1/overview                  what the dashboard shows, in one answer (overview.go)
//	GET    /metrics                      Prometheus text format (metrics.go; docs/metrics.md)
//	GET    /ui/                          the dashboard's page (package dashboard): the one
//	                                     path served without the token; GET / redirects to it
//	POST   /v1/keyspaces                 keyspace.Keyspace JSON → schema on every partition (all or none), recorded (201)
//	GET    /v1/keyspaces                 keyspaces, validated, in name order
//	GET    /v1/keyspaces/{name}          one keyspace
//	DELETE /v1/keyspaces/{name}          forget its record (the partitions' data stays)
//	GET    /v1/keyspaces/{name}/sizes    per partition and table: rows, bytes
//	GET    /v1/keyspaces/{name}/check    misplaced rows per partition and table; reference tables compared
//	POST   /v1/keyspaces/{name}/plan/check   a proposed plan validated, parsed; nothing changed
//	POST   /v1/keyspaces/{name}/reshard       apply a new plan live (reshard.go) → 202 its status
//	GET    /v1/keyspaces/{name}/reshard       the reconfiguration running, or the last (?chunks=1: with its chunks)
//	POST   /v1/keyspaces/{name}/reshard/pace  change the running one's method
//	POST   /v1/keyspaces/{name}/reshard/pull  a proxy's reactive pull of one chunk, answered once it has arrived
//	POST   /v1/plans                     plan.Spec → a migration plan validated, recorded and driven from here (plan.go) (201)
//	GET    /v1/plans                     every plan driven here, oldest first
//	GET    /v1/plans/{id}                its state and live figures (per move and total: bytes, rate, ETA; the worst store)
//	GET    /v1/plans/{id}/series         its control loop's record, a point per step
//	POST   /v1/plans/{id}/pause|resume|abort
//
// The tenant object's first fields are what the proxy routes by:
// {"id":1,"name":"acme","host":"127.0.0.1","port":15001,"database":"postgres","state":"running", …}.
//
// Internal, agent to agent (the source's RemoteTarget calls the target; every
// body carries the migration Record; the snapshot is the chunked body of one
// POST with the record in the Sluice-Record header):
//
//	GET  /v1/internal/targets/info?tenant=ID
//	POST /v1/internal/targets/{mid}/reserve|snapshot|start-standby|position|wait-replay|prewarm|promote|addr|abort|commit
//
// and a keyspace's coordinator to the agents running its partitions
// (partitions.go):
//
//	POST /v1/internal/partitions/probe|prepare|commit|rollback|sizes|check
//	POST /v1/internal/reshard/install|uninstall|fence-in|fence-out|unfence|arrived|stats|clean|pull|reach
//	POST /v1/internal/reshard/copyout   a chunk's rows in one snapshot, as a framed stream (reshard_peers.go)
//
// # Security
//
// Every request but the dashboard's static files (dashboard.Open) must carry
// the agent's token (Config.TokenFile, made at first
// start; Config.InsecureNoAuth runs open, with a warning at start), compared
// in constant time; the agent registers the file on this host so that the
// CLI, the proxy and peers here find it (package internal/auth). The agent
// sends a peer the token configured for it (Config.PeerTokenFiles,
// PeerTokenFile) or registered for that peer's address, and nothing to any
// other address; it migrates tenants to configured peers only (403 before
// anything changes). Tenant postmasters get pgcluster's Secure pg_hba.conf:
// the superuser only over the Unix socket with peer authentication (the
// agent's own sessions), replication over TCP only as
// pgcluster.ReplicationRole with this agent's replication password (set in
// the tenant when a migration out starts), other roles with scram-sha-256.
// Tenant users (client.CreateTenant.Users) are not superusers; their
// passwords and the replication role's reach PostgreSQL as SCRAM secrets,
// and no password is kept in the catalog (a WAL source's waits in a 0600
// file, walrelay.go).
//
// Config.TLSCert, TLSKey and TLSCA make the API, and so every stream between
// agents, HTTPS with mutual TLS: a caller must present a certificate of
// TLSCA (refused in the handshake otherwise), and the agent presents its own
// to peers and its proxy (tls.go; certificates from `sluice certs`, package
// internal/certs). Without them New refuses the config unless
// Config.InsecureLoopback and a loopback Listen. With certificates the
// tenants' PostgreSQL serves TLS too, and a migration's standby streams the
// source's WAL over TLS with the agent's certificate (verify-full; tls.go).
// docs/agent-api.md (Security) says the whole of it.
//
// docs/agent-api.md documents every request and answer with examples.
package agent
