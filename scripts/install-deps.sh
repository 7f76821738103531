#!/usr/bin/env bash
# Installs what sluice's tests, demo and benchmarks need on a fresh Debian 12
# machine, and nothing that is already there. Idempotent.
#   scripts/install-deps.sh          PostgreSQL 15 (+contrib) and Go modules
#   scripts/install-deps.sh bench    also PgBouncer and the benchmark tools
set -euo pipefail
want=()
[ -x /usr/lib/postgresql/15/bin/postgres ] || want+=(postgresql-15)
[ -f /usr/share/postgresql/15/extension/pg_buffercache.control ] || want+=(postgresql-contrib)
command -v psql >/dev/null || want+=(postgresql-client-15)
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
