#!/usr/bin/env bash
# tandem-sysfs installed set-uid (here: owned by uid 65534, mode 4755, run by root, so its
# effective uid differs from the real one) refuses to run, before it parses anything.
# usage: sysfs_setuid_test.sh TANDEM_SYSFS. Exit 77 (skipped) when set-uid cannot be tried here.
set -euo pipefail
exe=$1
[[ $(id -u) == 0 ]] || { echo "not root: cannot make a set-uid copy (skipped)"; exit 77; }
# LeakSanitizer cannot run in a set-uid process: the sanitized build skips, the plain one tests.
if grep -q __asan_init "$exe"; then echo "sanitized build: LeakSanitizer cannot run set-uid (skipped)"; exit 77; fi
d=$(mktemp -d "${TMPDIR:-/tmp}/tandem-suid-XXXXXX")
trap 'rm -rf "$d"' EXIT
chmod 755 "$d"
cp /usr/bin/id "$d/id"
cp "$exe" "$d/tandem-sysfs"
chown 65534:65534 "$d/id" "$d/tandem-sysfs"
chmod 4755 "$d/id" "$d/tandem-sysfs"
if [[ $("$d/id" -u) != 65534 ]]; then
  echo "set-uid has no effect on $d (nosuid mount): skipped"; exit 77
fi
rc=0
out=$("$d/tandem-sysfs" -- /usr/bin/touch "$d/ran" 2>&1) || rc=$?
echo "set-uid tandem-sysfs: exit $rc: $out"
[[ $rc == 126 && $out == *"refusing to run set-uid"* && ! -e $d/ran ]] || { echo FAIL; exit 1; }
rc=0
out=$("$exe" -- /usr/bin/touch "$d/ran" 2>&1) || rc=$?
echo "plain tandem-sysfs: exit $rc"
[[ $rc == 0 && -e $d/ran ]] || { echo "FAIL: the plain binary did not run the command: $out"; exit 1; }
echo ok
