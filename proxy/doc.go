// Package proxy is sluice's front door: a PostgreSQL protocol 3 proxy that
// routes each tenant's sessions to its current server, times every
// transaction the way clients see it, and is the one place a handover
// pauses traffic (Slacker's frontend; shared/DESIGN.md §2–3).
//
// # Sessions
//
// A client connects with any driver; the database name in its startup
// message is an alias of a tenant. The proxy authenticates the client itself
// with SCRAM-SHA-256 (never -PLUS: channel binding is not implemented, so it
// is not offered; pgx and libpq then use plain SCRAM over TLS too), against a
// PgBouncer-style userlist (Config.AuthFile, Config.Users), and opens its own
// session to the tenant's server as the same user with the user's plaintext
// password from that list (or none, for a trust server). A sluice agent's
// tenant admits no one without a password over TCP: its users are the
// userlist's (sluice tenant create --users), not superusers. Client TLS is offered when
// Config.TLSCert/TLSKey are set; otherwise an SSLRequest is answered 'N' and
// the client may continue in plaintext.
//
// After startup the proxy relays raw message frames in both directions,
// decoding only ReadyForQuery (transaction boundaries), ParameterStatus
// (session state), and Parse/Close/Query bodies up to 1 MiB (the prepared
// statement registry). Relaying allocates nothing per message.
//
// A route's server address is host:port, or, when host starts with "/", a
// Unix socket directory and port as libpq takes them ("/var/run/postgresql:5432").
//
// A database name that is no tenant alias but a keyspace's name (from
// Config.Keyspaces or a catalog's GET /v1/keyspaces) makes the session a
// keyspace session: after authentication package router serves it, routing
// each transaction by key to partitions, which are databases in tenants this
// proxy routes (keyspaces.go; router's doc is the contract). A handover of
// a partition's tenant treats the router's server sessions there like the
// tenant's own sessions' (ksbackends.go): its transactions wait at the
// hold, idle_backends and GET …/backends name its server sessions.
// A keyspace session's BackendKeyData is registered like a tenant
// session's: a CancelRequest for it goes to the server sessions running its
// statement at the time.
//
// # Relay cost
//
// On Linux, a session whose client and server sockets are plain TCP or Unix
// (no TLS) is relayed by relay_fast_linux.go: each direction runs inside one
// RawConn.Read callback and makes its read(2)/write(2) calls with
// RawSyscall. A round trip then costs the proxy two reads and two writes,
// as PgBouncer's, instead of also a read that fails with EAGAIN per side,
// and the runtime's entersyscall (which wakes the sysmon thread whenever the
// process was idle) is not on the path. TLS sessions use the bufio relay in
// session.go. `sluice proxy --procs` (GOMAXPROCS, default 1) keeps the
// runtime from waking and spinning a second thread per ready goroutine.
//
// # Timing
//
// A transaction runs from the first client message after a boundary — a
// ReadyForQuery 'I' answering the last Query/Sync/FunctionCall sent — to the
// next boundary, and includes time the proxy held it (also reported on its
// own as queue_ms: the mean wait at a handover hold or session move). Latencies go into
// sliding windows (Config.Window, default 3 s; see package timing) per
// (tenant, server), served as JSON at GET /v1/latency and as a Prometheus
// summary at GET /metrics (metrics.go, client_golang; docs/metrics.md).
//
// # Handover
//
// POST /v1/tenants/{t}/hold makes new transactions of t wait at their
// boundary and returns when none is in flight. At deadline_ms (default
// migration.DefaultHoldDeadline) the transactions still open are ended: a
// session idle inside a transaction block (waiting for its client, such as
// a cursor read FETCH by FETCH; a cancel does not end it) is terminated at
// once — its server session closed, rolling the transaction back, and the
// client sent FATAL 57P01; a session with a statement running gets a
// CancelRequest and is terminated if still in its transaction
// Config.HoldGrace (default 50 ms) later. A portal suspended without a Sync
// (node's pg-cursor) looks running to the proxy: cancel, grace, terminate.
// So a hold returns by deadline + grace (+ one more grace for terminated
// sessions to close), and nothing of the tenant is open then (in_flight in
// the answer says otherwise); sessions between transactions never wait for
// an open one longer. The answer's
// idle_backends lists the backend pids of the held sessions' server sessions
// on the tenant's current server (and of keyspace router sessions' between
// transactions there): the proxy sends them nothing until release
// and moves their sessions before their next transaction, so a fence may
// leave them be (migration.Router.Hold).
// POST …/switch changes the route; POST …/release lets held sessions go. A
// session whose route changed moves at its next boundary: the proxy opens a
// server session with the client's startup parameters plus reported
// settings it changed (application_name, client_encoding, DateStyle,
// IntervalStyle, TimeZone, standard_conforming_strings,
// default_transaction_read_only), re-Parses the named prepared statements the
// client created with the extended protocol (and the last unnamed one),
// closes the old session, and only then forwards the client's message. The
// client keeps the BackendKeyData the proxy gave it; CancelRequests are sent
// to whichever backend serves the session now.
//
// POST …/prepare {"addr":…} (before the hold; the agent calls it when the
// target, still a hot standby, has caught up) opens that server session in
// advance for every current session of the tenant, so the move after the
// switch only swaps connections instead of forking a backend on the new
// server at each session's next transaction (a stall of 50–350 ms on a
// CPU-capped server). It also parses there the session's named prepared
// statements of that moment (their catalog caches do not survive a
// promotion: PostgreSQL resets every backend's caches at the end of
// recovery); the move then closes and re-parses only those the client has
// redefined, closed or added since. Sessions opened during recovery become
// read-write at promotion. Prepared sessions for a route that is not the current one
// at release are closed.
//
// A session idle through a handover whose old server shuts down meanwhile
// (the source fenced while the tenant is held) is kept: the server's parting
// 57P01 error is not passed on and the session reopens on the tenant's
// current server at its next transaction.
//
// Not restored at a move: SQL-level PREPARE statements, temporary tables,
// session advisory locks, LISTEN registrations, WITH HOLD cursors, and
// settings PostgreSQL does not report (SET work_mem …).
//
// # Security
//
// Every API call but GET /metrics must carry "Authorization: Bearer
// <token>" (compared in constant time; 401 otherwise): Config.TokenFile's
// token, made (0600) if missing and registered on this host for the API's
// address (package internal/auth); Config.Token instead; a random token
// kept in memory when neither is set (Token, APIClient); no token only with
// Config.InsecureNoAuth, which logs a warning at start. Catalog polling
// sends Config.CatalogTokenFile's token, else the one each agent registered
// on this host for its address.
//
// With Config.TLSCA the API is HTTPS with mutual TLS (tls.go): it presents
// Config.TLSCert and refuses, in the handshake, a caller without a
// certificate chaining to TLSCA; catalog polls present TLSCert to the
// agents, and to etcd. Without TLSCA the API must listen on loopback (New refuses
// otherwise, ErrConfig).
//
// # HTTP API (JSON)
//
//	GET  /v1/routes                      [{tenant, aliases, addr, database, held, sessions}]
//	PUT  /v1/routes/{tenant}             {"addr":"host:port","database":"db","aliases":[…]}
//	POST /v1/tenants/{tenant}/hold       {"deadline_ms":100} → {held_sessions, waited_ms, cancelled, terminated, terminated_idle, in_flight, idle_backends}
//	POST /v1/tenants/{tenant}/switch     {"addr":"host:port","database":"db","epoch":N}: with epoch, a proxy watching an etcd catalog waits for its watch to route the tenant by placement epoch ≥ N instead (watch.go)
//	POST /v1/tenants/{tenant}/prepare    {"addr":"host:port","database":"db"} → {sessions, opened, failed, statements, first_error, waited_ms}
//	POST /v1/tenants/{tenant}/release    → {status, released_at}: when the held sessions were let go (RFC 3339)
//	GET  /v1/tenants/{tenant}/backends   {addr, pids}: the pids of its server sessions on its current server
//	GET  /v1/latency[?tenant=T][&server=A] [{tenant, server, window_s, count, mean_ms, queue_ms, p50_ms, p95_ms, p99_ms}]
//	GET  /v1/handovers[?tenant=T]        [{tenant, from, to, held_at, released_at, window_s, before_mean_ms, before_count, after_mean_ms, after_count, excess_ms_s}]: the last 64 handovers' cost to the clients
//	GET  /v1/stats                       {sessions_open, sessions_total, moves, moves_prepared, cancels, reactive_pulls}
//	POST /v1/keyspaces/{name}/hold       {"deadline_ms":2000} → {waited_ms}: new transactions of the keyspace wait, open ones end (409 at the deadline, hold released)
//	POST /v1/keyspaces/{name}/switch     {"keyspace", "reshard", "driver"}: the new plan with its moving chunks (reshard.go); ends the hold
//	POST /v1/keyspaces/{name}/release    ends the hold, nothing changed
//	GET  /metrics                        Prometheus text format
//
// In /v1/latency, rows with both tenant and server are per pair; server ""
// aggregates a tenant over its servers, tenant "" a server over its tenants,
// and both "" everything. Unknown tenants get 404, bad bodies 400, both as
// {"error": "..."}. Package proxy/client is the Go client.
//
// # Catalog
//
// With Config.Catalogs, every URL's GET /v1/tenants (a sluice agent) is polled
// each Config.CatalogPoll; each tenant in state "running" is routed to that
// entry's host:port/database (created if new). While a tenant is held and
// the API has switched it, polling does not override the API's route.
//
// A Catalogs entry etcd://host:port[,…]/prefix is an etcd catalog the
// agents share: the proxy polls no agent but watches the catalog's
// placement records (catalog.WatchPlacements: one read, then a watch
// resumed from the last revision after a disconnect, a full read again
// after a compaction) and routes each served tenant (running,
// migrating-out) to its placement's address and database, applying a
// placement only when its epoch is newer than the one it routes by. A
// handover's switch is then the driver's write of the placement under its
// tenant lock; the agents still hold and release through the API, and
// their switch call carries the epoch written, which the proxy answers
// once its watch has brought it (so a release never lets a tenant's
// transactions go to the old server). With Config.TLSCA the proxy speaks
// mutual TLS to etcd with TLSCert, as agents do; without it the etcd
// endpoints must be on loopback (New refuses otherwise, ErrConfig).
//
// # Bad input
//
// Malformed startup packets, unknown message types, lengths below 4 or above
// Config.MaxMessage, unknown databases (3D000), wrong passwords or unknown
// users (28P01), and refused channel binding are answered with a FATAL
// ErrorResponse (08P01 unless said otherwise) and the session is closed;
// other sessions are unaffected.
package proxy
