#!/usr/bin/env bash
# tandem-sim's DCQCN+w and HPCC FCT slowdown on HPCC's fat-tree and web-search workload (30 % load) beside HPCC's published ns-3 curves (published.json), per flow-size decile at p50/p95/p99, ratio ours/published (goal within 1.2x at p50 and p95).
# Usage: scripts/bench.sh sim-hpcc [--json] [--quick] [--from FILE]
#   --quick      arrivals for 8 ms instead of 20 (the flows measured still start at 2-6 ms): ~2.5x less time
#   --from FILE  compare a `tandem-sim run hpcc-websearch --json` output already made
# Binaries from ${TANDEM_BUILD:-build}. The full run takes tens of minutes on one core.
set -euo pipefail
cd "$(dirname "$0")/../.."
build="${TANDEM_BUILD:-build}"
sim="$build/apps/tandem-sim/tandem-sim"
json=0 quick=0 from=""
while (($#)); do
  case $1 in
    --json) json=1 ;;
    --quick) quick=1 ;;
    --from) from=$2; shift ;;
    -h|--help) sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "sim-hpcc: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [[ -z $from ]]; then
  [[ -x $sim ]] || ninja -C "$build" apps/tandem-sim/tandem-sim >/dev/null
  scen=rnic/sim/scenarios/hpcc-websearch.yaml
  if ((quick)); then
    sed 's/^  duration_us: 20000$/  duration_us: 8000/' "$scen" > "$tmp/hpcc-websearch-quick.yaml"
    grep -q 'duration_us: 8000' "$tmp/hpcc-websearch-quick.yaml" || { echo "sim-hpcc: cannot shorten $scen" >&2; exit 1; }
    scen="$tmp/hpcc-websearch-quick.yaml"
  fi
  start=$(date +%s)
  "$sim" run "$scen" --json > "$tmp/ours.json"
  echo "sim-hpcc: tandem-sim took $(( $(date +%s) - start )) s" >&2
  from="$tmp/ours.json"
fi
args=(--ours "$from" --published benchmarks/sim-hpcc/published.json)
((json)) && args+=(--json)
((quick)) && args+=(--note "quick: arrivals for 8 ms")
exec /usr/bin/python3 benchmarks/sim-hpcc/compare.py "${args[@]}"
