// Package agent is sluice's per-server agent (Slacker's per-server migration
// controller, DESIGN.md §2): it creates, starts, stops and deletes the
// server's tenants — one PostgreSQL postmaster per tenant, with its own data
// directory and port — keeps their state in an embedded catalog (package
// catalog) that survives restarts, serves an HTTP API for all of it, and runs
// both ends of tenant migrations with its peers.
//
// The agent is the goroutine-and-I/O shell around pure cores: the tenant
// lifecycle (catalog.CanTransition) and the migration state machine
// (migration.Step, driven by migration.Run) and the keyspace model
// (package keyspace: it validates keyspaces and plans; the agent applies
// their schema and checks their rows, keyspaces.go). It persists the migration
// Record in the catalog after every transition, so a killed agent resumes or
// rolls back at its next start (migration package rules). Tenant postmasters
// are detached (pg_ctl): they outlive the agent process.
//
// # Layout of the root directory
//
//	catalog.db           bbolt catalog: tenants, migrations, keyspaces
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
// their source drives them.
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
// Tenant users (client.CreateTenant.Users) are not superusers. Config.TLSCert,
// TLSKey and TLSCA give HTTPS for the API and the stream. docs/agent-api.md
// (Security) says the whole of it.
//
// docs/agent-api.md documents every request and answer with examples.
package agent
