#!/usr/bin/env bash
# tandem-fabric's command line: --help explains the flags and the run-time
# commands; bad input gives one clear error line and exit code 2, before
# the EAL is touched (so no hugepages are taken).
set -uo pipefail
FABRIC=$1
fail=0
check() { if eval "$2"; then echo "ok   $1"; else echo "FAIL $1"; fail=1; fi; }

help=$("$FABRIC" --help)
check "--help exits 0 and names the run-time path command" '[[ $help == *"/tandem/fabric/path_set"* ]]'
check "--help explains the path spec keys" '[[ $help == *"ecn_kb"* && $help == *"loss"* ]]'

out=$("$FABRIC" --route 10.0.0.300=1 -- --no-pci 2>&1); rc=$?
check "a bad route address exits 2 ($rc)" '[[ $rc -eq 2 && $out == *"10.0.0.300"* ]]'
out=$("$FABRIC" --paths 2 --path 5:loss=0.1 -- --no-pci 2>&1); rc=$?
check "a path index out of range exits 2 ($rc)" '[[ $rc -eq 2 && $out == *"only 2 paths"* ]]'
out=$("$FABRIC" --path-default loss=3 -- --no-pci 2>&1); rc=$?
check "a loss above 1 exits 2 ($rc)" '[[ $rc -eq 2 && $out == *"loss"* ]]'
out=$("$FABRIC" --route 10.0.0.1=0 2>&1); rc=$?
check "missing EAL arguments exit 2 ($rc)" '[[ $rc -eq 2 && $out == *"EAL arguments"* ]]'
bad=$(mktemp --suffix=.yaml); trap 'rm -f "$bad"' EXIT
printf 'paths: ["delay_us=oops"]\n' >"$bad"
out=$("$FABRIC" --config "$bad" -- --no-pci 2>&1); rc=$?
check "a bad YAML path spec exits 2 and names the file ($rc)" '[[ $rc -eq 2 && $out == *"$bad"* && $out == *"delay_us"* ]]'

# The shipped example configuration loads and runs (net_null ports, 0.3 s).
SRC=$(cd "$(dirname "$0")/../.." && pwd)
PREFIX=tandem-fabric-cli-$$
trap 'rm -f "$bad"; rm -f /dev/hugepages/${PREFIX}*; rm -rf /var/run/dpdk/${PREFIX}' EXIT
out=$("$FABRIC" --config "$SRC/common/fabric/dpdk/lab-4paths.yaml" --duration 0.3 --no-pdump -- \
      --no-pci --file-prefix=$PREFIX -l 0 -m 32 --vdev=net_null0 --vdev=net_null1 2>&1); rc=$?
check "the example lab-4paths.yaml runs ($rc)" '[[ $rc -eq 0 && $out == *"4 path(s), 2 route(s)"* && $out == *"loss=0.001"* ]]'
exit $fail
