#!/usr/bin/env bash
# Path health under host jitter (tandem-sim path-failure-jitter, jitter-no-failure, seeds 1-5): live-path removals by cause, time to take the dead path out, goodput vs the same run without jitter.
# Usage: benchmarks/path-health-jitter/run.sh [--json] [--seeds N] [--sim BINARY]
# (default binary ${TANDEM_BUILD:-build}/apps/tandem-sim/tandem-sim). The
# *-nojit rows of each scenario are the same-run baseline: the same fabric,
# workload and seed without the hosts' stalls, late application and late ACKs.
set -euo pipefail
cd "$(dirname "$0")/../.."
sim="${TANDEM_BUILD:-build}/apps/tandem-sim/tandem-sim"
seeds=5
json=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --json) json=1 ;;
    --seeds) seeds="$2"; shift ;;
    --sim) sim="$2"; shift ;;
    -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
if [[ ! -x "$sim" ]]; then
  ninja -C "${TANDEM_BUILD:-build}" apps/tandem-sim/tandem-sim >/dev/null
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for sc in path-failure-jitter jitter-no-failure; do
  for s in $(seq 1 "$seeds"); do
    "$sim" run "$sc" --seed "$s" --json > "$out/$sc-$s.json"
  done
done
exec python3 - "$out" "$seeds" "$json" <<'PY'
import json, sys
out, seeds, as_json = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
FAIL_AT, HEAL_AT, DEAD, QPS = 2000.0, 12000.0, 1, 8
rows = []
for sc in ("path-failure-jitter", "jitter-no-failure"):
    runs = [json.load(open(f"{out}/{sc}-{s}.json"))["results"] for s in range(1, seeds + 1)]
    for r0 in runs[0]:
        name = r0["policy"]
        if name.endswith("-nojit"):
            continue
        live = loss = sil = exc = 0
        qp_s = 0.0
        outs, back, ratios, ok = [], [], [], True
        kicks = kicks_exc = cstalls = 0
        for res in runs:
            r = next(x for x in res if x["policy"] == name)
            base = next(x for x in res if x["policy"] == name + "-nojit")
            ok = ok and r["data_ok"] and base["data_ok"]
            dead = DEAD if sc == "path-failure-jitter" else None
            for k, n in enumerate(r["path_removals_per_path"]):
                if k != dead:
                    live += n
                    loss += r["path_loss_removals_per_path"][k]
                    sil += r["path_silent_removals_per_path"][k]
            exc += sum(r["path_stall_excused_per_path"])
            qp_s += QPS * r["sim_time_us"] / 1e6
            if dead is not None:
                t = r["path_first_removal_us"][dead]
                outs.append(t - FAIL_AT if t else None)
                back.append(r["last_path_return_us"] > HEAL_AT)
            ratios.append(r["goodput_gbps"] / base["goodput_gbps"] if base["goodput_gbps"] else 0)
            kicks += r["credit_kicks"]; kicks_exc += r["credit_kicks_excused"]; cstalls += r["credit_stalls"]
        rows.append(dict(scenario=sc, policy=name, seeds=seeds, data_ok=ok, live_removals=live,
                         live_loss=loss, live_silence=sil, stall_excused=exc,
                         live_per_qp_s=live / qp_s if qp_s else 0,
                         dead_out_ms=[round(x / 1000, 3) if x is not None else None for x in outs],
                         dead_back=back, goodput_ratio=[round(x, 3) for x in ratios],
                         credit_kicks=kicks, credit_kicks_excused=kicks_exc, credit_stalls=cstalls))
if as_json:
    print(json.dumps(rows, indent=1))
    sys.exit(0)
print("| scenario | policy | live-path removals (loss/silence) | per QP per sim. s | stall-excused | dead path out after failure, ms | back after heal | goodput / no-jitter | credit kicks (held back) | data_ok |")
print("|---|---|---:|---:|---:|---|---|---|---:|---|")
for x in rows:
    dead = " ".join("-" if v is None else f"{v:.2f}" for v in x["dead_out_ms"]) or "n/a"
    back = f'{sum(x["dead_back"])}/{len(x["dead_back"])}' if x["dead_back"] else "n/a"
    print(f'| {x["scenario"]} | {x["policy"]} | {x["live_removals"]} ({x["live_loss"]}/{x["live_silence"]}) | '
          f'{x["live_per_qp_s"]:.2f} | {x["stall_excused"]} | {dead} | {back} | '
          f'{" ".join(f"{v:.2f}" for v in x["goodput_ratio"])} | {x["credit_kicks"]} ({x["credit_kicks_excused"]}) | '
          f'{"yes" if x["data_ok"] else "NO"} |')
PY
