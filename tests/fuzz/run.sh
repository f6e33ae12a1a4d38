#!/usr/bin/env bash
# Builds the libFuzzer targets (parse_roce + frame decoder, pcap reader, the RNIC's channel end,
# the CRC kernels against zlib/ISA-L, the fused CRC-and-copy kernel against the plain CRC and
# memcpy, the worker's host interface fed by a hostile application, the connection manager fed
# hostile MADs, the agent's channel end under a worker that scribbles on the file) with
# clang++-14 and ASan/UBSan, then runs each for FUZZ_SECONDS (default 20) from
# a seed corpus made on the fly, after replaying tests/fuzz/regressions/. Exits non-zero if a
# target crashes.
# Output: build/fuzz/ (or $FUZZ_OUT); crash inputs are kept there.
# --long SECONDS (scripts/fuzz.sh): each target that long in libFuzzer's fork
# mode, which goes on past a crash, and one line per target
# "TARGET: N executions, M crashes" (M counts crashes, timeouts and OOMs; a timeout whose
# input runs in time when replayed was the machine's load and is not counted).
set -euo pipefail
LONG=0
if [[ ${1:-} == --long ]]; then
  [[ ${2:-} =~ ^[0-9]+$ ]] || { echo "usage: $0 [--long SECONDS]"; exit 2; }
  LONG=1; FUZZ_SECONDS=$2
fi
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${FUZZ_OUT:-$ROOT/build/fuzz}
SECONDS_EACH=${FUZZ_SECONDS:-20}
CXX=${FUZZ_CXX:-clang++-14}
mkdir -p "$OUT"

if ! command -v "$CXX" >/dev/null; then
  echo "fuzz: $CXX not found (scripts/setup.sh installs clang)"; exit 1
fi
CRC_FLAGS=()
CRC_LIBS=(-lz)
if [[ -f /usr/include/isa-l/crc.h ]]; then CRC_FLAGS=(-DTANDEM_HAVE_ISAL); CRC_LIBS=(-lisal -lz); fi
# common/log (spdlog, Debian's shared build over fmt): the ICRC kernel choice logs a warning.
CRC_FLAGS+=(-DSPDLOG_SHARED_LIB -DSPDLOG_COMPILED_LIB -DSPDLOG_FMT_EXTERNAL)
CRC_LIBS+=(-lspdlog -lfmt -pthread)
FLAGS=(-std=c++20 -O1 -g -I"$ROOT" "${CRC_FLAGS[@]}" -fno-omit-frame-pointer)
SAN=(-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined)
WIRE=(common/wire/headers.cc common/wire/icrc.cc common/wire/opcode.cc common/wire/roce_packet.cc common/log/log.cc)
PCAP=(common/pcap/pcap_reader.cc common/pcap/pcap_writer.cc)
AGENT=(dpu/channel/agent_channel.cc dpu/txn/level2_shadow.cc dpu/txn/txn_builder.cc)
HOST=(rnic/host/host_server.cc rnic/host/control_server.cc rnic/host/control_objects.cc rnic/host/fast_apply.cc
      rnic/host/fast_path.cc rnic/host/resource_quota.cc rnic/host/shm_region.cc
      rnic/host/memory_guard.cc rnic/host/unix_channel.cc)

# Rebuilds $1 from the remaining sources only when one of them (or a header
# they may include) is newer.
build() {
  local bin=$1; shift
  local kind=$1; shift
  if [[ -x $bin ]] && [[ -z $(find common rnic/table rnic/host rnic/cm dpu/channel dpu/txn dpu/agent tests/fuzz tests/lib -newer "$bin" \( -name '*.cc' -o -name '*.h' \) -print -quit) ]]; then
    return 0
  fi
  echo "fuzz: building $(basename "$bin")"
  if [[ $kind == fuzz ]]; then
    "$CXX" "${FLAGS[@]}" "${SAN[@]}" "$@" "${CRC_LIBS[@]}" -o "$bin"
  else
    "$CXX" "${FLAGS[@]}" "$@" "${CRC_LIBS[@]}" -o "$bin"
  fi
}

build "$OUT/seed_writer" plain tests/fuzz/seed_writer.cc "${WIRE[@]}" "${PCAP[@]}"
build "$OUT/fuzz_parse_roce" fuzz tests/fuzz/fuzz_parse_roce.cc common/wiretool/frame_decoder.cc "${WIRE[@]}"
build "$OUT/fuzz_pcap_reader" fuzz tests/fuzz/fuzz_pcap_reader.cc "${WIRE[@]}" "${PCAP[@]}"
build "$OUT/fuzz_icrc" fuzz tests/fuzz/fuzz_icrc.cc "${WIRE[@]}"
build "$OUT/fuzz_crc_copy" fuzz tests/fuzz/fuzz_crc_copy.cc "${WIRE[@]}"
build "$OUT/fuzz_rnic_channel" fuzz tests/fuzz/fuzz_rnic_channel.cc rnic/table/level2_table.cc rnic/table/rnic_channel.cc
build "$OUT/fuzz_host_server" fuzz tests/fuzz/fuzz_host_server.cc "${HOST[@]}"
build "$OUT/fuzz_cm" fuzz tests/fuzz/fuzz_cm.cc rnic/cm/mad.cc rnic/cm/cm_engine.cc
build "$OUT/fuzz_agent_channel" fuzz tests/fuzz/fuzz_agent_channel.cc "${AGENT[@]}"

WORK=$(mktemp -d /tmp/tandem-fuzz-XXXXXX)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/frames" "$WORK/pcaps" "$WORK/new-frames" "$WORK/new-pcaps" "$WORK/cmds" "$WORK/new-cmds" "$WORK/new-crc" "$WORK/new-crc-copy" "$WORK/host" "$WORK/new-host" \
  "$WORK/cm" "$WORK/new-cm" "$WORK/agent" "$WORK/new-agent"
"$OUT/seed_writer" "$WORK/frames" "$WORK/pcaps"
# Channel seeds (fuzz_rnic_channel's record format): HEARTBEAT, BEGIN, PUT x2, COMMIT, DEL, COMMIT.
python3 tests/fuzz/channel_seeds.py "$WORK/cmds"
# Host seeds (fuzz_host_server's op records): an application that sets up QPs, an SRQ and MRs
# and posts good WQEs, so fuzzing starts past the handshake.
python3 tests/fuzz/host_seeds.py "$WORK/host"
# CM seeds (fuzz_cm's records): a REQ to its listener, a REP, an RTU and a DREQ.
python3 tests/fuzz/cm_seeds.py "$WORK/cm"
# Agent seeds (fuzz_agent_channel's op records): a worker that answers HELLO, then scribbles.
python3 tests/fuzz/agent_seeds.py "$WORK/agent"

fail=0
# Inputs that once crashed a target (tests/fuzz/regressions/<target>/) are replayed first, each
# on its own: they must pass before any fuzzing counts.
replay() {
  local name=$1 dir=tests/fuzz/regressions/$1
  [[ -d $dir ]] || return 0
  local f
  for f in "$dir"/*; do
    if ! "$OUT/$name" "$f" >"$OUT/$name.replay.log" 2>&1; then
      echo "fuzz: $name regression $(basename "$f") FAILED (log: $OUT/$name.replay.log)"
      grep -E "ERROR|SUMMARY" "$OUT/$name.replay.log" | head -5
      fail=1
    fi
  done
  echo "fuzz: $name: $(ls "$dir" | wc -l) regression input(s) replayed"
}
run_one() {
  local name=$1 corpus=$2 seeds=$3
  echo "fuzz: running $name for ${SECONDS_EACH}s"
  if ! "$OUT/$name" -max_total_time="$SECONDS_EACH" -max_len=9100 -timeout=10 -rss_limit_mb=1024 \
        -print_final_stats=1 -artifact_prefix="$OUT/$name-" "$corpus" "$seeds" \
        >"$OUT/$name.log" 2>&1; then
    echo "fuzz: $name FAILED (log: $OUT/$name.log)"
    grep -E "ERROR|SUMMARY|Test unit written" "$OUT/$name.log" | head -10
    fail=1
  else
    echo "fuzz: $name ok: $(grep -E '^stat::number_of_executed_units' "$OUT/$name.log" | awk '{print $2}') inputs, $(grep -E '^#[0-9]+.*cov:' "$OUT/$name.log" | tail -1 | grep -oE 'cov: [0-9]+')"
  fi
}
# Long mode: fork mode keeps fuzzing past crashes (each kept as an artifact),
# one job per core (FUZZ_JOBS to change it),
# and reports totals over its jobs on "#N: cov: ... oom/timeout/crash: a/b/c" lines.
run_long() {
  local name=$1 corpus=$2 seeds=$3 log=$OUT/$1.long.log mark=$OUT/.$1.long.start
  touch "$mark"
  "$OUT/$name" -fork="${FUZZ_JOBS:-$(nproc)}" -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 \
    -max_total_time="$SECONDS_EACH" -max_len=9100 -timeout=10 -rss_limit_mb=1024 \
    -artifact_prefix="$OUT/$name-" "$corpus" "$seeds" >"$log" 2>&1 || true
  local last execs found
  last=$(grep -E '^#[0-9]+: cov:' "$log" | tail -1)
  execs=$(sed -E 's/^#([0-9]+):.*/\1/' <<<"$last")
  found=$(grep -oE 'oom/timeout/crash: [0-9]+/[0-9]+/[0-9]+' <<<"$last" | awk '{split($2, a, "/"); print a[1] + a[2] + a[3]}')
  if [[ -z $execs ]]; then
    echo "$name: 0 executions, 1 crashes (no fuzzing stats; log: $log)"; fail=1; return
  fi
  # A timeout (10 s of wall clock) can be the machine's doing: other jobs starving this niced
  # one. Each timeout input this run kept is replayed once; one that passes is not counted.
  local a
  while IFS= read -r a; do
    if "$OUT/$name" -timeout=10 -rss_limit_mb=1024 "$a" >"$a.replay.log" 2>&1; then
      echo "fuzz: $name: $(basename "$a") ran in time on replay (machine load): not counted"
      ((found > 0)) && found=$((found - 1))
    fi
  done < <(find "$OUT" -maxdepth 1 -name "$name-timeout-*" ! -name '*.log' -newer "$mark")
  echo "$name: $execs executions, ${found:-0} crashes"
  ((${found:-0} == 0)) || fail=1
}
for t in fuzz_parse_roce fuzz_pcap_reader fuzz_rnic_channel fuzz_icrc fuzz_crc_copy fuzz_host_server fuzz_cm fuzz_agent_channel; do replay "$t"; done
run=run_one
((LONG)) && run=run_long
# FUZZ_TARGETS="a b": only those (e.g. one target's long run again).
pick() { [[ -z ${FUZZ_TARGETS:-} ]] || [[ " $FUZZ_TARGETS " == *" $1 "* ]]; }
pick fuzz_parse_roce && $run fuzz_parse_roce "$WORK/new-frames" "$WORK/frames"
pick fuzz_pcap_reader && $run fuzz_pcap_reader "$WORK/new-pcaps" "$WORK/pcaps"
pick fuzz_rnic_channel && $run fuzz_rnic_channel "$WORK/new-cmds" "$WORK/cmds"
pick fuzz_icrc && $run fuzz_icrc "$WORK/new-crc" "$WORK/frames"
pick fuzz_crc_copy && $run fuzz_crc_copy "$WORK/new-crc-copy" "$WORK/frames"
pick fuzz_host_server && $run fuzz_host_server "$WORK/new-host" "$WORK/host"
pick fuzz_cm && $run fuzz_cm "$WORK/new-cm" "$WORK/cm"
pick fuzz_agent_channel && $run fuzz_agent_channel "$WORK/new-agent" "$WORK/agent"
exit $fail
