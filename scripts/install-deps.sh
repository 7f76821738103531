#!/usr/bin/env bash
# Installs what sluice's tests, demo and benchmarks need on a fresh Debian 12
# machine, and nothing that is already there. Idempotent.
#   scripts/install-deps.sh          PostgreSQL 15 (+contrib), gcc (cgo), Go modules, and the
#                                    clients the proxy's tests drive (psql,
#                                    Debian's python3-psycopg2, node-postgres),
#                                    iproute2 (the lab's hosts in network namespaces)
#   scripts/install-deps.sh bench    also PgBouncer and the benchmark tools
set -euo pipefail
cd "$(dirname "$0")/.."
want=()
[ -x /usr/lib/postgresql/15/bin/postgres ] || want+=(postgresql-15)
[ -f /usr/share/postgresql/15/extension/pg_buffercache.control ] || want+=(postgresql-contrib)
command -v psql >/dev/null || want+=(postgresql-client-15)
# The keyspace router parses SQL with PostgreSQL's own parser (pg_query_go,
# cgo): building sluice needs a C compiler.
command -v gcc >/dev/null || want+=(gcc libc6-dev)
# The proxy's client tests run Debian's python3 (/usr/bin/python3, not one
# first on PATH) with its psycopg2, and node with the npm package pg.
/usr/bin/python3 -c 'import psycopg2' 2>/dev/null || want+=(python3-psycopg2)
command -v node >/dev/null || want+=(nodejs)
command -v npm >/dev/null || want+=(npm)
# The lab's hosts (lab/netns) are network namespaces linked and shaped with
# ip(8) and tc(8).
{ command -v ip >/dev/null && command -v tc >/dev/null; } || want+=(iproute2)
if [ "${1:-}" = bench ]; then
	command -v pgbouncer >/dev/null || [ -x /usr/sbin/pgbouncer ] || want+=(pgbouncer)
fi
if [ ${#want[@]} -gt 0 ]; then
	echo "install-deps: installing ${want[*]}" >&2
	SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${want[@]}" >/dev/null
	# Debian's package may start a cluster of its own; sluice never uses it.
	if command -v pg_lsclusters >/dev/null; then
		pg_lsclusters -h 2>/dev/null | awk '{print $1, $2}' | while read -r v n; do $SUDO pg_ctlcluster "$v" "$n" stop 2>/dev/null || true; done
	fi
	if [ -x /usr/sbin/pgbouncer ] && command -v service >/dev/null; then $SUDO service pgbouncer stop >/dev/null 2>&1 || true; fi
fi
id postgres >/dev/null 2>&1 || { echo "install-deps: OS user postgres missing after install" >&2; exit 1; }
go mod download
# node-postgres, pinned by proxy/testdata/node/package-lock.json; installed
# again only when the lock file changed.
node=proxy/testdata/node
if ! cmp -s "$node/package-lock.json" "$node/node_modules/.sluice-lock" 2>/dev/null; then
	echo "install-deps: npm ci in $node" >&2
	(cd "$node" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
	cp "$node/package-lock.json" "$node/node_modules/.sluice-lock"
fi
