#!/usr/bin/env bash
# Builds docker/Dockerfile with podman (Debian 12's own container tool) where no
# Docker engine or registry is reachable: the debian:12 base is made locally with
# debootstrap from Debian's archive, then imported. This is how the image was
# built and run on the development VMs (see docs/operations.md "Docker and podman").
#   docker/podman-build.sh [TAG]        (default localhost/tandem:dev)
# The build context is a clean clone of HEAD, so uncommitted files never leak in.
set -euo pipefail
tag="${1:-localhost/tandem:dev}"
root="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
need=()
for p in podman runc debootstrap; do command -v "$p" >/dev/null || need+=("$p"); done
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}"
fi
# crun refuses hybrid cgroup v1/v2 hosts; runc copes. Without CAP_SYS_RESOURCE
# (as in many VMs and CI sandboxes) the default rlimits cannot be raised: ask
# for values at or below the caller's.
run_opts=(--runtime runc)
lim=(--ulimit "nofile=1024:1024" --ulimit "nproc=4096:4096")
if ! podman image exists localhost/debian:12; then
  debootstrap --variant=minbase bookworm "$work/rootfs" http://deb.debian.org/debian
  rm -f "$work"/rootfs/var/cache/apt/archives/*.deb
  tar -C "$work/rootfs" -c . | podman import --change 'CMD ["bash"]' - localhost/debian:12
fi
git clone -q "$root" "$work/src"
podman "${run_opts[@]}" build --pull=never --network host "${lim[@]}" \
  -f "$work/src/docker/Dockerfile" -t "$tag" "$work/src"
echo "built $tag; run a worker with:"
echo "  podman ${run_opts[*]} run --rm -it --privileged --network host ${lim[*]} \\"
echo "    -v /dev/hugepages:/dev/hugepages $tag tandem-rnic --help"
