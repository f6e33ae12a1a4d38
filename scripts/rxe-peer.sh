#!/usr/bin/env bash
# An independent RoCEv2 peer on this machine: Linux's rxe (the Debian kernel's rdma_rxe) in a
# QEMU TCG guest whose virtio NIC is a tap in a network namespace, where a Tandem worker's
# net_af_packet port (or a second guest, through a bridge) meets it. The guest's root is the
# host's / over read-only 9p, so it runs the host's rdma-core, perftest and rdmacm-utils.
#
#   scripts/rxe-peer.sh prepare                  kernel + modules into the cache (setup.sh runs it)
#   scripts/rxe-peer.sh [-d DIR] start [OPTS]    boots a guest (~15-60 s under TCG), returns when rxe0 is up
#   scripts/rxe-peer.sh [-d DIR] gid             the guest's RoCE v2 GID (::ffff:IP, index 1)
#   scripts/rxe-peer.sh [-d DIR] run CMD...      runs CMD in the guest (sh -c), prints its stdout/stderr,
#                                                exits with its exit code (several may run at once;
#                                                SIGTERM/SIGINT to run kills the job in the guest)
#   scripts/rxe-peer.sh [-d DIR] stop            stops the guest by its PID, removes what start made
#
# DIR (default /tmp/rxe-peer, or $RXE_PEER_DIR) is the state of one guest: pid, console.log, the
# exchange folder the guest shares (jobs), env (what start chose). start options:
#   --netns NS        namespace of the tap (made if missing, removed at stop if made; default rxe<PID>)
#   --tap NAME        tap device (default tq0); --bridge BR: also enslave it to bridge BR in NS
#   --ip A.B.C.D      the guest's eth0 address, /24 (default 10.99.0.2)
#   --mac MAC         the guest's eth0 MAC (default 52:54:00:99:00:<last octet of IP>)
#   --neigh IP=MAC    a static neighbour in the guest (the Tandem worker does not answer ARP), repeatable
#   --fwd PORT        TCP port forwarded from NS's 127.0.0.1:PORT to the guest (QEMU user network on a
#                     second NIC; the guest reaches NS's loopback at 10.0.2.2), repeatable
#                     (default 18515-18520: perftest's and the pingpongs' default port and 5 more)
#   --mem MB          guest memory (default 768); --timeout S: boot wait (default 300: a loaded 2-core host slows TCG a lot)
# The cache (kernel package unpacked, depmod'ed) is $RXE_PEER_CACHE, default /var/cache/tandem/rxe-peer.
set -euo pipefail

cache=${RXE_PEER_CACHE:-/var/cache/tandem/rxe-peer}
dir=${RXE_PEER_DIR:-/tmp/rxe-peer}
# Modules in dependency order (modprobe --show-depends on the package's modules.dep); crc32_generic
# first: rxe needs the kernel's "crc32" hash, else `rdma link add` fails with "failed to add eth0".
mods_wanted=(crc32_generic virtio_pci 9pnet_virtio 9p virtio_net rdma_rxe ib_uverbs rdma_ucm ib_umad)

die() { echo "rxe-peer: $*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }

kernel_version() {  # the version linux-image-amd64 depends on, e.g. 6.1.0-57-amd64
  local v
  v=$(apt-cache depends linux-image-amd64 2>/dev/null | sed -n 's/.*Depends: linux-image-\([0-9].*-amd64\)$/\1/p' | head -1)
  [[ -n $v ]] || v=$(ls "$cache/k/lib/modules" 2>/dev/null | sort -V | tail -1)
  [[ -n $v ]] || die "no kernel version: apt-cache knows no linux-image-amd64 (apt-get update) and $cache has none"
  echo "$v"
}

prepare() {
  local v
  v=$(kernel_version)
  if [[ -f $cache/k/boot/vmlinuz-$v && -f $cache/k/lib/modules/$v/modules.dep ]]; then
    echo "rxe-peer: kernel $v ready in $cache"
    return 0
  fi
  mkdir -p "$cache"
  (cd "$cache" && rm -f linux-image-*.deb && apt-get download "linux-image-$v" >/dev/null 2>"$cache/download.log") ||
    die "apt-get download linux-image-$v failed ($cache/download.log)"
  rm -rf "$cache/k"
  dpkg-deb -x "$cache"/linux-image-"$v"_*.deb "$cache/k"
  depmod -b "$cache/k" "$v"
  rm -f "$cache"/linux-image-*.deb
  echo "rxe-peer: kernel $v unpacked into $cache/k"
}

need_tools() {
  local t
  for t in qemu-system-x86_64 busybox depmod modprobe cpio; do
    command -v "$t" >/dev/null || [[ $t == cpio ]] ||
      die "$t missing: run scripts/setup.sh (qemu-system-x86, busybox-static, kmod)"
  done
  # (grep -q would stop reading early: under pipefail, busybox's SIGPIPE then fails the test at random.)
  busybox --list 2>/dev/null | grep -x cpio >/dev/null || die "busybox has no cpio applet (busybox-static)"
}

# The initramfs: busybox, the modules in order, and an init that mounts the host's / (9p, read
# only) and DIR/x (9p, read-write: the job exchange), then switch_roots into DIR/x/guest.sh.
make_initramfs() {
  local v=$1 out=$2 r m
  r=$(mktemp -d)
  mkdir -p "$r"/{bin,proc,sys,dev,newroot,mods}
  cp "$(command -v busybox)" "$r/bin/busybox"
  for m in "${mods_wanted[@]}"; do
    modprobe -d "$cache/k" -S "$v" --show-depends "$m" | awk '$1 == "insmod" {print $2}'
  done | awk '!seen[$0]++' > "$r/modorder.full"
  while read -r m; do cp "$m" "$r/mods/"; basename "$m"; done < "$r/modorder.full" > "$r/modorder"
  rm "$r/modorder.full"
  cat > "$r/init" <<'EOF'
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
for m in $(cat /modorder); do insmod /mods/$m || echo "rxe-peer: insmod $m failed"; done
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144 hostroot /newroot || { echo "rxe-peer: 9p root failed"; sh; }
mount -t tmpfs tmp /newroot/tmp; mount -t tmpfs run /newroot/run
mkdir -p /newroot/run/rxe-peer
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 xchg /newroot/run/rxe-peer || echo "rxe-peer: 9p xchg failed"
mount --move /proc /newroot/proc; mount --move /sys /newroot/sys; mount --move /dev /newroot/dev
exec switch_root /newroot /bin/sh /run/rxe-peer/guest.sh
EOF
  chmod +x "$r/init"
  (cd "$r" && find . | busybox cpio -o -H newc 2>/dev/null | gzip -1 > "$out")
  rm -rf "$r"
}

# What the guest runs after switch_root: its NICs (found by MAC), rxe0 on eth0, then a loop that
# runs each job DIR/x/jobs/N.sh the host drops in (concurrently), writing N.out, N.err and, last, N.rc.
write_guest_script() {
  local f=$1
  cat > "$f" <<EOF
#!/bin/sh
export PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/tmp
X=/run/rxe-peer
byaddr() { for n in /sys/class/net/*; do [ "\$(cat \$n/address)" = "\$1" ] && basename \$n; done; }
ip link set lo up
RD=\$(byaddr $mac); UN=\$(byaddr 52:54:00:12:34:56)
ip link set "\$RD" up; ip addr add $ip/24 dev "\$RD"
ip link set "\$UN" up; ip addr add 10.0.2.15/24 dev "\$UN"
EOF
  local n
  for n in "${neighs[@]}"; do
    echo "ip neigh replace ${n%%=*} lladdr ${n#*=} dev \"\$RD\" nud permanent" >> "$f"
  done
  cat >> "$f" <<'EOF'
if rdma link add rxe0 type rxe netdev "$RD"; then
  i=0; while [ ! -e /sys/class/infiniband/rxe0/ports/1/gids/1 ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done
  cat /sys/class/infiniband/rxe0/ports/1/gids/1 > $X/gid.tmp; mv $X/gid.tmp $X/gid
else
  echo "rdma link add failed" > $X/failed
fi
mkdir -p /tmp/g; cd /tmp/g
while true; do
  for j in $X/jobs/*.sh; do
    [ -e "$j" ] || continue
    b=${j%.sh}; mv "$j" "$b.run" 2>/dev/null || continue
    # setsid: the job leads a process group of its own, so a kill reaches its children too.
    ( setsid sh "$b.run" > "$b.out" 2> "$b.err" & echo $! > "$b.pid"; wait $!; echo $? > "$b.rct"; mv "$b.rct" "$b.rc" ) &
  done
  for k in $X/jobs/*.kill; do
    [ -e "$k" ] || continue
    b=${k%.kill}; rm -f "$k"; [ -s "$b.pid" ] && kill -TERM -- "-$(cat "$b.pid")" 2>/dev/null
  done
  [ -e $X/poweroff ] && { sync; echo o > /proc/sysrq-trigger; }
  sleep 0.1
done
EOF
}

state() { [[ -f $dir/env ]] || die "no guest in $dir (start one first)"; source "$dir/env"; }

start() {
  netns=rxe$$ tap=tq0 bridge="" ip=10.99.0.2 mac="" mem=768 timeout=300
  neighs=() fwds=()
  while (($#)); do
    case $1 in
      --netns) netns=$2; shift 2 ;;
      --tap) tap=$2; shift 2 ;;
      --bridge) bridge=$2; shift 2 ;;
      --ip) ip=$2; shift 2 ;;
      --mac) mac=$2; shift 2 ;;
      --neigh) neighs+=("$2"); shift 2 ;;
      --fwd) fwds+=("$2"); shift 2 ;;
      --mem) mem=$2; shift 2 ;;
      --timeout) timeout=$2; shift 2 ;;
      *) die "start: unknown option $1" ;;
    esac
  done
  ((${#fwds[@]})) || fwds=(18515 18516 18517 18518 18519 18520)
  [[ -n $mac ]] || mac=$(printf '52:54:00:99:00:%02x' "${ip##*.}")
  if [[ -f $dir/pid ]] && kill -0 "$(cat "$dir/pid")" 2>/dev/null; then die "a guest already runs from $dir"; fi
  need_tools
  prepare >/dev/null
  local v
  v=$(kernel_version)
  rm -rf "$dir"; mkdir -p "$dir/x/jobs"
  local made_ns=0
  if ! ip netns list | awk '{print $1}' | grep -x "$netns" >/dev/null; then ip netns add "$netns"; made_ns=1; fi
  {
    echo "netns=$netns"; echo "made_ns=$made_ns"; echo "tap=$tap"; echo "ip=$ip"; echo "mac=$mac"
    echo "bridge=$bridge"; echo "fwds='${fwds[*]}'"
  } > "$dir/env"
  ip netns exec "$netns" ip link set lo up
  ip netns exec "$netns" ip tuntap add dev "$tap" mode tap
  ip netns exec "$netns" ip link set "$tap" up
  if [[ -n $bridge ]]; then
    ip netns exec "$netns" ip link show "$bridge" >/dev/null 2>&1 ||
      { ip netns exec "$netns" ip link add "$bridge" type bridge; ip netns exec "$netns" ip link set "$bridge" up; }
    ip netns exec "$netns" ip link set "$tap" master "$bridge"
  fi
  make_initramfs "$v" "$dir/initrd.gz"
  write_guest_script "$dir/x/guest.sh"
  local hf="" p
  for p in "${fwds[@]}"; do hf+=",hostfwd=tcp:127.0.0.1:$p-:$p"; done
  # TCG: a KVM guest hangs after "Probing EDD" here (nested virtualisation).
  ip netns exec "$netns" qemu-system-x86_64 -accel tcg -cpu max -smp 1 -m "$mem" -nographic -vga none -no-reboot \
    -kernel "$cache/k/boot/vmlinuz-$v" -initrd "$dir/initrd.gz" \
    -append "console=ttyS0 quiet panic=-1" \
    -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
    -virtfs "local,path=$dir/x,mount_tag=xchg,security_model=none,multidevs=remap" \
    -netdev "tap,id=n0,ifname=$tap,script=no,downscript=no" -device "virtio-net-pci,netdev=n0,mac=$mac,romfile=" \
    -netdev "user,id=n1,net=10.0.2.0/24$hf" -device virtio-net-pci,netdev=n1,mac=52:54:00:12:34:56,romfile= \
    </dev/null >"$dir/console.log" 2>&1 &
  echo $! > "$dir/pid"
  local t0=$SECONDS
  while [[ ! -s $dir/x/gid ]]; do
    if [[ -e $dir/x/failed ]] || ! kill -0 "$(cat "$dir/pid")" 2>/dev/null || ((SECONDS - t0 > timeout)); then
      echo "rxe-peer: the guest did not bring rxe0 up in ${timeout}s; console:" >&2
      tail -20 "$dir/console.log" >&2
      stop_guest
      exit 1
    fi
    sleep 0.2
  done
  echo "rxe-peer: guest up in $((SECONDS - t0)) s (pid $(cat "$dir/pid"), netns $netns, tap $tap, $ip, GID $(cat "$dir/x/gid"))"
}

stop_guest() {
  source "$dir/env"
  if [[ -f $dir/pid ]]; then
    local pid
    pid=$(cat "$dir/pid")
    if kill -0 "$pid" 2>/dev/null; then
      : > "$dir/x/poweroff"
      for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$dir/pid"
  fi
  ip netns exec "$netns" ip link del "$tap" 2>/dev/null || true
  if [[ $made_ns == 1 ]]; then
    # A bridge other guests still use stays (they made or share the namespace).
    local left=""
    [[ -n $bridge ]] && left=$(ip netns exec "$netns" ip -o link show master "$bridge" 2>/dev/null || true)
    [[ -z $left ]] && ip netns del "$netns" 2>/dev/null || true
  fi
}

run() {
  (($#)) || die "run: no command"
  state
  [[ -f $dir/pid ]] && kill -0 "$(cat "$dir/pid")" 2>/dev/null || die "the guest of $dir is not running"
  local id="$$.$RANDOM" j
  j=$dir/x/jobs/$id
  printf '%s\n' "$*" > "$j.tmp"
  mv "$j.tmp" "$j.sh"
  # SIGTERM/SIGINT: the guest kills the job's process group (a hung server would hold its port).
  trap 'touch "$j.kill"; for _ in $(seq 50); do [[ -e $j.rc ]] && break; sleep 0.1; done; rm -f "$j".*; exit 143' TERM INT
  while [[ ! -e $j.rc ]]; do
    kill -0 "$(cat "$dir/pid")" 2>/dev/null || die "the guest died while running: $*"
    sleep 0.1
  done
  cat "$j.out"; cat "$j.err" >&2
  local rc
  rc=$(cat "$j.rc")
  rm -f "$j".*
  return "$rc"
}

while [[ ${1:-} == -d ]]; do dir=$2; shift 2; done
cmd=${1:-}; (($#)) && shift
case $cmd in
  prepare) prepare ;;
  start) start "$@" ;;
  stop) state; stop_guest ;;
  gid) state; cat "$dir/x/gid" ;;
  run) run "$@" ;;
  *) usage ;;
esac
