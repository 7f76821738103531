#!/usr/bin/env bash
# WAL written per update by sluice's YCSB workload right after a checkpoint
# (the state a migration's backup leaves), and pg_waldump's record mix.
# Starts its own PostgreSQL 15 in a temp dir (as the postgres OS user when
# run as root), loads usertable, optionally sets its fillfactor, runs the
# workload, prints the figures (the five largest record types: count, record
# bytes, full-page-image bytes, combined) and stops the cluster.
#   scripts/wal-per-update.sh [SIZE=1GB] [RATE=210] [SECONDS=30] [FILLFACTOR=100]
set -euo pipefail
size=${1:-1GB} rate=${2:-210} secs=${3:-30} ff=${4:-100}
bin=${PGBIN:-/usr/lib/postgresql/15/bin}
sluice=${SLUICE:-./bin/sluice}
[ -x "$sluice" ] || { echo "wal-per-update: no $sluice (make build, or set SLUICE)" >&2; exit 2; }
dir=$(mktemp -d /tmp/sluice-walprobe.XXXXXX)
chmod 755 "$dir"
as=() && [ "$(id -u)" = 0 ] && { chown postgres "$dir"; as=(runuser -u postgres --); }
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cleanup() { "${as[@]}" "$bin/pg_ctl" -D "$dir/d" -m immediate stop >/dev/null 2>&1 || true; rm -rf "$dir"; }
trap cleanup EXIT
"${as[@]}" "$bin/initdb" -D "$dir/d" -A trust >/dev/null
"${as[@]}" "$bin/pg_ctl" -D "$dir/d" -l "$dir/log" -w -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c shared_buffers=32MB -c max_wal_size=8GB" start >/dev/null
dsn="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
sql() { "$bin/psql" -h 127.0.0.1 -p "$port" -U postgres -qAtX -c "$1"; }
"$sluice" workload load --dsn "$dsn" --size "$size" >/dev/null 2>&1
if [ "$ff" != 100 ]; then sql "ALTER TABLE usertable SET (fillfactor = $ff)"; sql "VACUUM FULL usertable"; fi
sql "VACUUM (ANALYZE) usertable"; sql "CHECKPOINT"
a=$(sql "SELECT pg_current_wal_lsn()")
"$sluice" workload run --dsn "$dsn" --rate "$rate" --duration "${secs}s" --distribution uniform --json >/dev/null 2>&1
b=$(sql "SELECT pg_current_wal_lsn()")
read -r upd hot < <(sql "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'usertable'" | tr '|' ' ')
sql "SELECT format('%s MB of WAL in $secs s, %s updates (%s HOT), %s KB per update (fillfactor $ff)', round(pg_wal_lsn_diff('$b', '$a') / 1e6, 1), $upd, $hot, round(pg_wal_lsn_diff('$b', '$a') / 1e3 / greatest($upd, 1), 1))"
"${as[@]}" "$bin/pg_waldump" --stats=record -p "$dir/d/pg_wal" -s "$a" -e "$b" 2>/dev/null |
  awk '$1 ~ /\// { for (i = NF; i > 0; i--) if ($i ~ /^[0-9]+$/) { print $i, $0; break } }' | sort -rn | head -5 | cut -d' ' -f2-
