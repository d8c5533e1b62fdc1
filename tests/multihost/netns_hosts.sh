#!/usr/bin/env bash
# netns_hosts.sh — pretend "hosts" on one Linux machine, for multi-host tests of rgrun.
#
#   tests/multihost/netns_hosts.sh check                 exit 0 if this machine can, else print why
#   tests/multihost/netns_hosts.sh up STATE H            make hosts h0..h(H-1); STATE: a new dir
#   tests/multihost/netns_hosts.sh exec STATE HOST cmd…  run cmd on HOST (h0, h1, …)
#   tests/multihost/netns_hosts.sh partition STATE HOST  cut HOST off the network (permanently)
#   tests/multihost/netns_hosts.sh down STATE            remove everything `up` made (idempotent)
#
# Each host is one process (`sleep`) that holds its own namespaces:
#   network — its own interfaces: lo and eth0 (10.213.0.<i+1>/24), a veth pair whose other
#             end is a port of the bridge br0 in a separate "switch" namespace;
#   UTS     — its own hostname (h<i>), which is what OpenMPI and ringgrad's shared-memory
#             code group ranks by;
#   mount   — its own /dev/shm (a fresh tmpfs: no shared memory between hosts) and its own
#             /etc/hosts naming every host. The rest of the file system is shared (like a
#             cluster's shared home), so the build and the data are where they are here.
# Nothing is added to the machine's own network namespace: when the holder processes end,
# the kernel removes the namespaces, their mounts, the veth pairs and the bridge with them.
# `down` kills the holders listed in STATE (and `up` first runs `down` on a STATE left by
# an interrupted run), so a run that dies leaves nothing behind once the next one starts.
#
# STATE/agent is an ssh stand-in for mpirun (`--mca plm_rsh_agent STATE/agent`): mpirun calls
# `agent [ssh options] HOST command…` to start its daemon there; the agent enters HOST's
# namespaces and runs the command with a clean environment (PATH and HOME only, as a
# non-interactive ssh login would), so variables reach remote ranks only if the launcher
# forwards them. STATE/hostfile lists the hosts (`h<i> slots=<S>`, S from `up`'s SLOTS).
# A partition takes a host's port off the bridge: its link stays up, packets vanish, as
# when a switch fails — nothing tells either side.
set -euo pipefail

need() { command -v "$1" > /dev/null 2>&1 || { echo "no '$1' command"; return 1; }; }

check() {
  [ "$(uname -s)" = Linux ] || { echo "not Linux"; return 1; }
  [ "$(id -u)" -eq 0 ] || { echo "not root (namespaces need CAP_SYS_ADMIN and CAP_NET_ADMIN)"; return 1; }
  need ip && need unshare && need nsenter && need mpirun || return 1
  # Try it: a holder with all three namespaces, and a veth pair into it.
  local pid out
  unshare --net --uts --mount --propagation private sleep 30 < /dev/null > /dev/null 2>&1 &
  pid=$!
  sleep 0.1
  if ! out=$(nsenter -t "$pid" -n -u -m sh -c 'hostname rgprobe && mount -t tmpfs none /dev/shm' 2>&1) ||
     ! out=$(nsenter -t "$pid" -n ip link add rgprobe0 type veth peer name rgprobe1 2>&1 &&
             nsenter -t "$pid" -n ip link add rgprobebr type bridge 2>&1); then
    kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true
    echo "cannot create namespaces, veth pairs or bridges here: $out"
    return 1
  fi
  kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true
  return 0
}

# The pid of the process holding HOST's namespaces (or the switch's: HOST=switch).
holder() {
  local state=$1 host=$2 pid
  pid=$(cat "$state/$host.pid" 2>/dev/null) || { echo "netns_hosts: no host '$host' in $state" >&2; return 1; }
  [ -d "/proc/$pid" ] || { echo "netns_hosts: host '$host' is gone (pid $pid)" >&2; return 1; }
  echo "$pid"
}

down() {
  local state=$1 f pid
  [ -d "$state" ] || return 0
  for f in "$state"/*.pid; do
    [ -e "$f" ] || continue
    pid=$(cat "$f")
    # Only our own holders: a sleep whose command line carries this state's tag.
    if [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' < "/proc/$pid/cmdline" | grep -q "rgmh-holder"; then
      # Whatever still runs inside the host (orted, ranks) goes first.
      local inside
      for inside in $(ls /proc | grep -E '^[0-9]+$'); do
        [ "$inside" = "$pid" ] && continue
        [ "$(readlink "/proc/$inside/ns/uts" 2>/dev/null)" = "$(readlink "/proc/$pid/ns/uts" 2>/dev/null)" ] &&
          [ "$(readlink "/proc/$inside/ns/net" 2>/dev/null)" = "$(readlink "/proc/$pid/ns/net" 2>/dev/null)" ] &&
          kill -9 "$inside" 2>/dev/null || true
      done
      kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$f"
  done
  rm -rf "$state"
}

up() {
  local state=$1 hosts=$2 slots=${3:-}
  [[ "$hosts" =~ ^[1-9]$ ]] || { echo "netns_hosts: expected 1-9 hosts, got '$hosts'" >&2; return 2; }
  down "$state"
  mkdir -p "$state"
  state=$(cd "$state" && pwd)
  local tag="rgmh-holder"
  # The holders: `sleep` under a name that marks it as ours (argv[0] via exec -a).
  local i pid
  unshare --net bash -c "exec -a $tag sleep infinity" < /dev/null > /dev/null 2>&1 &
  echo $! > "$state/switch.pid"
  for ((i = 0; i < hosts; i++)); do
    unshare --net --uts --mount --propagation private bash -c "exec -a $tag sleep infinity" \
      < /dev/null > /dev/null 2>&1 &
    echo $! > "$state/h$i.pid"
  done
  # Wait until each has exec'd into its namespaces: `sleep` under our tag, in a network
  # namespace that is not this one. Until then nsenter -t PID would enter this machine's
  # own namespace (seen on a loaded CI machine: br0 made here, "br0 does not exist" in
  # the switch), so a holder not there within 30 s is an error, not a guess.
  local own_net ready
  own_net=$(readlink /proc/$$/ns/net)
  for f in "$state"/*.pid; do
    pid=$(cat "$f")
    ready=0
    for _ in $(seq 1500); do
      if tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q "$tag" &&
         [ "$(readlink "/proc/$pid/ns/net" 2>/dev/null)" != "$own_net" ]; then
        ready=1
        break
      fi
      sleep 0.02
    done
    [ "$ready" = 1 ] || { echo "netns_hosts: holder $f (pid $pid) not in its namespaces after 30 s" >&2; return 1; }
  done
  local sw
  sw=$(cat "$state/switch.pid")
  nsenter -t "$sw" -n sh -c 'ip link set lo up && ip link add br0 type bridge && ip link set br0 up'
  : > "$state/hosts"
  echo "127.0.0.1 localhost" >> "$state/hosts"
  for ((i = 0; i < hosts; i++)); do echo "10.213.0.$((i + 1)) h$i" >> "$state/hosts"; done
  : > "$state/hostfile"
  for ((i = 0; i < hosts; i++)); do
    pid=$(cat "$state/h$i.pid")
    nsenter -t "$sw" -n ip link add "p$i" type veth peer name eth0 netns "$pid"
    nsenter -t "$sw" -n sh -c "ip link set p$i master br0 && ip link set p$i up"
    nsenter -t "$pid" -n sh -c "ip link set lo up && ip addr add 10.213.0.$((i + 1))/24 dev eth0 && ip link set eth0 up"
    nsenter -t "$pid" -u -m sh -c "hostname h$i && mount -t tmpfs -o mode=1777 tmpfs /dev/shm &&
                                    mount --bind '$state/hosts' /etc/hosts"
    if [ -n "$slots" ]; then echo "h$i slots=$slots" >> "$state/hostfile"; else echo "h$i" >> "$state/hostfile"; fi
  done
  # The ssh stand-in (see the header).
  cat > "$state/agent" << EOF
#!/usr/bin/env bash
# ssh stand-in for mpirun: agent [ssh options] HOST command...
while [ \$# -gt 0 ] && [ "\${1#-}" != "\$1" ]; do shift; done
host=\$1; shift
pid=\$(cat "$state/\$host.pid") || { echo "agent: no host '\$host'" >&2; exit 255; }
exec nsenter -t "\$pid" -n -u -m -- env -i PATH="\$PATH" HOME="\${HOME:-/root}" sh -c "\$*"
EOF
  chmod +x "$state/agent"
  # Every host reaches every other.
  command -v ping > /dev/null || return 0
  for ((i = 1; i < hosts; i++)); do
    nsenter -t "$(cat "$state/h0.pid")" -n ping -c 1 -W 2 "10.213.0.$((i + 1))" > /dev/null ||
      { echo "netns_hosts: h0 cannot reach h$i" >&2; return 1; }
  done
}

cmd=${1:-}
shift || true
case "$cmd" in
  check) check ;;
  up) [ $# -ge 2 ] || { echo "usage: $0 up STATE HOSTS [SLOTS]" >&2; exit 2; }; up "$@" ;;
  down) [ $# -eq 1 ] || { echo "usage: $0 down STATE" >&2; exit 2; }; down "$1" ;;
  exec)
    [ $# -ge 3 ] || { echo "usage: $0 exec STATE HOST cmd..." >&2; exit 2; }
    state=$1 host=$2; shift 2
    pid=$(holder "$state" "$host")
    exec nsenter -t "$pid" -n -u -m --wd="$PWD" -- "$@" ;;
  partition)
    [ $# -eq 2 ] || { echo "usage: $0 partition STATE HOST" >&2; exit 2; }
    nsenter -t "$(holder "$1" switch)" -n ip link set "p${2#h}" nomaster ;;
  *) echo "usage: $0 check | up STATE HOSTS [SLOTS] | exec STATE HOST cmd... | partition STATE HOST | down STATE" >&2
     exit 2 ;;
esac
