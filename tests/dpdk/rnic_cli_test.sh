#!/bin/bash
# tandem-rnic's command line: --help explains the flags; a bad table, policy
# name or MTU is one clear error line and exit 2, before any EAL start-up
# (so no hugepages or runtime files are taken).
set -u
RNIC="$1"
D=$(mktemp -d)
PREFIX="rnic-cli-$$"
trap 'rm -rf "$D" /var/run/dpdk/$PREFIX; rm -f /dev/hugepages/${PREFIX}*' EXIT
fail=0
check() { if eval "$2"; then echo "ok   $1"; else echo "FAIL $1"; fail=1; fi; }

out=$("$RNIC" --help 2>&1); rc=$?
check "--help exits 0" "[ $rc -eq 0 ]"
for f in --host-socket --table --mtu --mode --spray --cc --idle --stats-json --duration --tx-copy --table-capacity; do
  check "--help explains $f" "grep -q -- '$f' <<<\"\$out\""
done

cat > "$D/good.yaml" <<'Y'
underlay: {ip: 10.0.0.1, mac: "02:00:00:00:00:01", gateway_mac: "02:00:00:00:00:fe"}
vnics: [{id: 1, ip: 192.168.0.1, vni: 5}]
Y
printf 'underlay: {ip: 10.0.0.1}\nvnics: []\n' > "$D/bad.yaml"
EAL="-- --no-pci --file-prefix=$PREFIX --no-huge -m 64 -l 0"

out=$("$RNIC" --host-socket "$D/s" --table "$D/bad.yaml" $EAL 2>&1); rc=$?
check "a bad table exits 2" "[ $rc -eq 2 ]"
check "the error names the file and the field" "grep -q 'bad.yaml: underlay: missing .mac.' <<<\"\$out\""
check "the error is one line" "[ \$(wc -l <<<\"\$out\") -eq 1 ]"
check "no EAL was started for it" "[ ! -e /var/run/dpdk/$PREFIX ]"

out=$("$RNIC" --host-socket "$D/s" --table "$D/good.yaml" --spray nosuch $EAL 2>&1); rc=$?
check "an unknown --spray policy exits 2 naming it" "[ $rc -eq 2 ] && grep -q \"nosuch\" <<<\"\$out\""
out=$("$RNIC" --host-socket "$D/s" --table "$D/good.yaml" --cc nosuch $EAL 2>&1); rc=$?
check "an unknown --cc policy exits 2" "[ $rc -eq 2 ]"
out=$("$RNIC" --host-socket "$D/s" --table "$D/good.yaml" --mtu 1500 $EAL 2>&1); rc=$?
check "an MTU that is not an IB MTU exits 2" "[ $rc -eq 2 ] && grep -q -- '--mtu' <<<\"\$out\""
out=$("$RNIC" --host-socket "$D/s" --table "$D/good.yaml" --table-capacity 10 $EAL 2>&1); rc=$?
check "a --table-capacity below 64 is refused naming the flag" "[ $rc -ne 0 ] && grep -q -- '--table-capacity' <<<\"\$out\""
check "no EAL was started for it either" "[ ! -e /var/run/dpdk/$PREFIX ]"
out=$("$RNIC" --table "$D/good.yaml" $EAL 2>&1); rc=$?
check "--host-socket is required" "[ $rc -ne 0 ] && grep -q -- '--host-socket' <<<\"\$out\""
exit $fail
