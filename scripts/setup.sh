#!/usr/bin/env bash
# Installs everything Tandem needs on Debian 12 and prepares the machine:
# packages (apt), 1024 x 2 MB hugepages on /dev/hugepages, bpffs for AF_XDP, and
# the Debian kernel that scripts/rxe-peer.sh boots (rxe, the independent RoCE peer).
# Idempotent: a second run changes nothing and says so.
set -uo pipefail

PACKAGES=(
  build-essential meson ninja-build pkg-config
  dpdk dpdk-dev libdpdk-dev
  rdma-core libibverbs-dev libbpf-dev libxdp-dev ibverbs-utils perftest ucx-utils python3-pyverbs
  openmpi-bin netpipe-openmpi
  libspdlog-dev libcli11-dev catch2 libbenchmark-dev
  libsqlite3-dev nlohmann-json3-dev libyaml-cpp-dev
  libisal-dev zlib1g-dev libpcap-dev
  clang libclang-rt-14-dev
  python3 python3-scapy python3-matplotlib python3-yaml tshark tcpreplay prometheus
  iproute2 procps
  etcd-server etcd-client protobuf-compiler protobuf-compiler-grpc libgrpc++-dev libprotobuf-dev
  golang-etcd-server-dev
  qemu-system-x86 busybox-static kmod
)
HUGEPAGES=${TANDEM_HUGEPAGES:-1024}
# --packages-only: install packages and stop (image builds, where /proc/sys
# and mounts belong to the host).
PACKAGES_ONLY=0
[[ ${1:-} == --packages-only ]] && PACKAGES_ONLY=1

say() { printf 'setup: %s\n' "$*"; }
fail=0

if [[ $(id -u) -ne 0 ]]; then
  say "not root: cannot install packages or reserve hugepages (run as root or with sudo)"
  exit 1
fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  say "installing ${#missing[@]} package(s): ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get update -qq; then say "apt-get update failed"; fail=1; fi
  if ! apt-get install -y -qq --no-install-recommends "${missing[@]}" >/tmp/tandem-apt.log 2>&1; then
    say "apt-get install failed (log: /tmp/tandem-apt.log):"
    tail -5 /tmp/tandem-apt.log
    fail=1
  fi
else
  say "all ${#PACKAGES[@]} packages already installed"
fi

# The kernel image package for the rxe guest (apt-get download, unpacked into a cache outside the repo).
if ! "$(dirname "$0")/rxe-peer.sh" prepare; then say "rxe-peer kernel not prepared (interop tests will fail)"; fail=1; fi

if ((PACKAGES_ONLY)); then
  ((fail)) && exit 1
  say "packages ready (--packages-only: hugepages and mounts left to the host)"
  exit 0
fi

have=$(cat /proc/sys/vm/nr_hugepages 2>/dev/null || echo 0)
if ((have < HUGEPAGES)); then
  echo "$HUGEPAGES" > /proc/sys/vm/nr_hugepages 2>/dev/null
  have=$(cat /proc/sys/vm/nr_hugepages)
  if ((have < HUGEPAGES)); then
    say "asked for $HUGEPAGES hugepages, kernel gave $have (memory fragmented or too small)"
    fail=1
  else
    say "reserved $have x 2 MB hugepages"
  fi
else
  say "hugepages: $have reserved already"
fi

mkdir -p /dev/hugepages
if ! mountpoint -q /dev/hugepages; then
  if mount -t hugetlbfs nodev /dev/hugepages; then say "mounted hugetlbfs on /dev/hugepages"
  else say "could not mount hugetlbfs on /dev/hugepages"; fail=1; fi
else
  say "hugetlbfs already mounted on /dev/hugepages"
fi

if ! mountpoint -q /sys/fs/bpf 2>/dev/null; then
  if mount -t bpf bpf /sys/fs/bpf 2>/dev/null; then say "mounted bpffs on /sys/fs/bpf"
  else say "could not mount bpffs (AF_XDP will not work; everything else does)"; fi
fi

if ((fail)); then say "finished with errors"; exit 1; fi
say "ready"
