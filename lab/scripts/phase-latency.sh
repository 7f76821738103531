#!/usr/bin/env bash
# Mean transaction latency of a benchmark's migrations by trial and phase,
# from its series.csv (sluice bench slack-sweep/step40/...): the seconds
# with migrating = 1 and t >= FROM (workload seconds, default 0), each
# second weighted by its transactions.
#   scripts/phase-latency.sh out/bench/step40/series.csv 62
set -euo pipefail
[ $# -ge 1 ] && [ -r "$1" ] || { echo "usage: $0 SERIES.CSV [FROM_SECONDS]" >&2; exit 2; }
awk -F, -v from="${2:-0}" '
NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i
          if (!("trial" in col) || !("phase" in col) || !("tps" in col)) { print "phase-latency: not a bench series.csv" > "/dev/stderr"; exit 2 }
          next }
$col["migrating"] == 1 && $col["t"] >= from {
  k = $col["trial"] SUBSEP $col["phase"]
  if (!(k in secs)) order[++n] = k
  secs[k]++; txs[k] += $col["tps"]; sum[k] += $col["tps"] * $col["mean_latency_ms"]
}
END { printf "%-28s %-10s %8s %10s\n", "trial", "phase", "seconds", "mean ms"
      for (i = 1; i <= n; i++) { k = order[i]; split(k, p, SUBSEP)
        printf "%-28s %-10s %8d %10.2f\n", p[1], (p[2] == "" ? "-" : p[2]), secs[k], (txs[k] > 0 ? sum[k] / txs[k] : 0) } }
' "$1"
