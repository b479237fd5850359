#!/usr/bin/env bash
# `make deploy-check`: does a real Kubernetes API server accept deploy/k8s?
#
# Runs etcd (Debian's etcd-server) and a kube-apiserver built from the Go module proxy, both on loopback
# only, installs the KEDA and Strimzi CRDs of the releases in versions.env, then for each overlay (dev,
# prod, plain) sends the rendered manifests to the server as a dry run with strict field validation. It
# also sends broken variants of the rendered objects (manifests.py), which the server must refuse, and
# refuse for the mistake in them: a check that accepted anything would otherwise pass unnoticed.
#
# Progress goes to stderr, the summary to stdout; exit 0 only when every overlay is accepted and every
# broken variant refused. etcd and kube-apiserver are stopped on the way out, whatever happened.
#
# Cached under .run/deploy-check: bin/kube-apiserver (rebuilt when apiserver/ changes), crds/ (the CRD
# files, checked against versions.env each run), m2/ (Strimzi's jars). Each run's state (certificates,
# etcd's data, logs, the rendered manifests) is in .run/deploy-check/work, replaced by the next run.
#
# Environment:
#   DOCSUM_STATE_DIR                        state dir (default <repo>/.run)
#   DOCSUM_DEPLOY_CHECK_ETCD_PORT           etcd's client port (default: a free one)
#   DOCSUM_DEPLOY_CHECK_ETCD_PEER_PORT      etcd's peer port (default: a free one)
#   DOCSUM_DEPLOY_CHECK_APISERVER_PORT      kube-apiserver's port (default: a free one)
#   DOCSUM_DEPLOY_CHECK_START_TIMEOUT       seconds to wait for the API server to be ready (default 120)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
state="${DOCSUM_STATE_DIR:-$root/.run}/deploy-check"

# The pins, read as data (NAME=value lines), not run.
pin() {
  local value
  value="$(sed -n "s/^$1=//p" "$here/versions.env")"
  [[ -n "$value" ]] || { echo "deploy-check: error: no $1 in $here/versions.env" >&2; exit 1; }
  echo "$value"
}
KEDA_VERSION="$(pin KEDA_VERSION)"
KEDA_MODULE_SUM="$(pin KEDA_MODULE_SUM)"
STRIMZI_VERSION="$(pin STRIMZI_VERSION)"
STRIMZI_KAFKATOPIC_CRD_SHA256="$(pin STRIMZI_KAFKATOPIC_CRD_SHA256)"

apiserver="$state/bin/kube-apiserver"
keda_crd="$state/crds/keda-$KEDA_VERSION/keda.sh_scaledobjects.yaml"
strimzi_crd="$state/crds/strimzi-$STRIMZI_VERSION/043-Crd-kafkatopic.yaml"
work="$state/work"
python="$root/.venv/bin/python"
start_timeout="${DOCSUM_DEPLOY_CHECK_START_TIMEOUT:-120}"
overlays=(dev prod plain)
# The broken variants are made from this overlay's objects: it has every kind they break.
broken_from=dev

started=$SECONDS
log() { echo "deploy-check: $*" >&2; }
die() { log "error: $*"; exit 1; }

# ---- tools -------------------------------------------------------------------------------------------

apt_install() {
  [[ $EUID -eq 0 ]] || die "missing $*; install as root: apt-get install -y --no-install-recommends $*"
  log "installing $* with apt-get"
  # apt's output goes to stderr: stdout carries only the summary.
  apt-get update -q >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" >&2
}

find_go() {
  # /usr/local/go is where the official Go distribution installs, often not in a non-login PATH.
  local go
  go="$(command -v go || true)"
  [[ -n "$go" ]] || [[ ! -x /usr/local/go/bin/go ]] || go=/usr/local/go/bin/go
  [[ -n "$go" ]] || die "Go 1.22 or newer is needed (to build kube-apiserver and fetch KEDA's CRD module)"
  echo "$go"
}

ensure_tools() {
  local missing=()
  command -v etcd >/dev/null || missing+=(etcd-server)
  command -v openssl >/dev/null || missing+=(openssl)
  if ((${#missing[@]})); then apt_install "${missing[@]}"; fi
  command -v kubectl >/dev/null || die "kubectl is needed (it renders the overlays and talks to the server)"
  "$python" -c 'import yaml' 2>/dev/null || die "$python with PyYAML is needed: run make setup"
  go="$(find_go)"
}

# ---- kube-apiserver ----------------------------------------------------------------------------------

build_apiserver() {
  # The binary is rebuilt only when the module that defines it changes.
  local key
  key="$(cd "$here/apiserver" && cat go.mod go.sum main.go | sha256sum | cut -d' ' -f1)"
  if [[ -x "$apiserver" && "$(cat "$apiserver.key" 2>/dev/null || true)" == "$key" ]]; then
    return
  fi
  local version ldflags
  version="$(cd "$here/apiserver" && "$go" list -mod=readonly -m -f '{{.Version}}' k8s.io/kubernetes)"
  # What `kube-apiserver --version` and /version report; a module build leaves them at v0.0.0-master.
  ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$version"
  ldflags+=" -X k8s.io/component-base/version.gitMajor=$(cut -d. -f1 <<<"${version#v}")"
  ldflags+=" -X k8s.io/component-base/version.gitMinor=$(cut -d. -f2 <<<"$version")"
  log "building kube-apiserver $version through the Go module proxy (the first time takes minutes)"
  mkdir -p "$state/bin"
  # A build cache of its own (~2 GB for this build), removed once the binary is there: only the binary
  # is worth keeping, and a new Kubernetes version recompiles nearly everything anyway.
  local gocache="$state/go-build"
  (cd "$here/apiserver" && GOCACHE="$gocache" "$go" build -mod=readonly -trimpath -ldflags "$ldflags" \
    -o "$apiserver.new" .) >&2
  mv "$apiserver.new" "$apiserver"
  echo "$key" >"$apiserver.key"
  rm -rf "$gocache"
}

# ---- CRDs --------------------------------------------------------------------------------------------

fetch_keda_crd() {
  [[ -s "$keda_crd" ]] && return
  log "fetching KEDA $KEDA_VERSION's CRDs (Go module github.com/kedacore/keda/v2)"
  local info sum dir
  # A module path with a version: fetched as such, whatever module or workspace the directory is in.
  info="$(cd "$state" && GOWORK=off "$go" mod download -json "github.com/kedacore/keda/v2@$KEDA_VERSION")"
  sum="$("$python" -c 'import json, sys; print(json.load(sys.stdin)["Sum"])' <<<"$info")"
  dir="$("$python" -c 'import json, sys; print(json.load(sys.stdin)["Dir"])' <<<"$info")"
  [[ "$sum" == "$KEDA_MODULE_SUM" ]] ||
    die "KEDA $KEDA_VERSION's module sum is $sum, versions.env pins $KEDA_MODULE_SUM"
  mkdir -p "$(dirname "$keda_crd")"
  cp "$dir/config/crd/bases/keda.sh_scaledobjects.yaml" "$keda_crd.new"
  mv -f "$keda_crd.new" "$keda_crd"
}

strimzi_crd_pinned() {
  echo "$STRIMZI_KAFKATOPIC_CRD_SHA256  $strimzi_crd" | sha256sum --check --status
}

generate_strimzi_crd() {
  [[ -s "$strimzi_crd" ]] && strimzi_crd_pinned && return
  log "generating Strimzi $STRIMZI_VERSION's KafkaTopic CRD (io.strimzi:api and crd-generator from Maven Central)"
  local missing=()
  command -v java >/dev/null || missing+=(openjdk-17-jre-headless)
  command -v mvn >/dev/null || missing+=(maven)
  if ((${#missing[@]})); then apt_install "${missing[@]}"; fi
  local dir classpath mvn_log
  dir="$(dirname "$strimzi_crd")"
  classpath="$dir/classpath"
  mvn_log="$dir/mvn.log"
  mkdir -p "$dir"
  # mvn's output goes to a file (even -q prints stray colour codes) and is shown on failure.
  if ! mvn -B -Dstyle.color=never -f "$here/strimzi/pom.xml" -Dmaven.repo.local="$state/m2" \
    -Dstrimzi.version="$STRIMZI_VERSION" dependency:build-classpath -Dmdep.outputFile="$classpath" \
    >"$mvn_log" 2>&1; then
    tail -n 40 "$mvn_log" >&2
    die "mvn could not resolve Strimzi $STRIMZI_VERSION's api and crd-generator (full output: $mvn_log)"
  fi
  # The arguments of the execution generate-crd-co-install-v1-eo in io.strimzi:api's own pom (in its jar,
  # META-INF/maven/io.strimzi/api/pom.xml): the step of Strimzi's build that writes the release's
  # install/cluster-operator/043-Crd-kafkatopic.yaml.
  if ! java -cp "$(cat "$classpath")" io.strimzi.crdgenerator.CrdGenerator \
    --label app:strimzi --label strimzi.io/crd-install:true --target-kube 1.16+ --crd-api-version v1 \
    --api-versions v1alpha1,v1beta1,v1beta2 --storage-version v1beta2 \
    --yaml "io.strimzi.api.kafka.model.topic.KafkaTopic=$strimzi_crd" >"$dir/generator.log" 2>&1; then
    cat "$dir/generator.log" >&2
    die "Strimzi's CRD generator failed"
  fi
  strimzi_crd_pinned ||
    die "the generated $strimzi_crd is not the one versions.env pins (STRIMZI_KAFKATOPIC_CRD_SHA256)"
}

# ---- the servers -------------------------------------------------------------------------------------

etcd_pid=""
apiserver_pid=""
ports=()

# The script's own stderr, kept aside: a signal's trap runs inside whatever redirection the interrupted
# command had (`... >/dev/null 2>&1`), and what stop_servers says must not vanish with it.
exec {stderr_copy}>&2

stop_servers() {
  local rc=$? pid port
  exec 2>&"$stderr_copy"
  # kube-apiserver first: it would otherwise spend its shutdown retrying a stopped etcd.
  for pid in "$apiserver_pid" "$etcd_pid"; do
    [[ -n "$pid" ]] || continue
    kill -TERM "$pid" 2>/dev/null || continue
    for _ in $(seq 1 100); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.2
    done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  for port in "${ports[@]}"; do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      log "error: something still listens on 127.0.0.1:$port"
      rc=1
    fi
  done
  if ((${#ports[@]})); then
    # etcd's data (64 MB of preallocated log) is of no use once it is stopped; the logs stay.
    rm -rf "$work/etcd"
    log "stopped etcd and kube-apiserver (${SECONDS}s in all)"
  fi
  exit "$rc"
}
trap stop_servers EXIT
# Background jobs of a script ignore SIGINT: the trap above is what stops them on Ctrl-C.
trap 'exit 130' INT
trap 'exit 143' TERM

free_ports() {
  # Three at once, each held until all are picked, so that they differ.
  "$python" -c '
import socket
socks = [socket.socket() for _ in range(3)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))
'
}

# sign NAME SUBJECT EXTENSIONS: a key and a certificate signed by the run's CA, in $work/pki.
sign() {
  local d="$work/pki"
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "$2" \
    -keyout "$d/$1.key" -out "$d/$1.csr" >/dev/null 2>&1
  openssl x509 -req -in "$d/$1.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -days 1 \
    -set_serial "0x$(openssl rand -hex 8)" -extfile <(printf '%s\n' "$3") -out "$d/$1.crt" >/dev/null 2>&1
}

make_pki() {
  # A throwaway CA per run: it signs the server's certificate and kubectl's, whose organization
  # system:masters is the group the API server grants everything (no RBAC objects needed).
  local d="$work/pki"
  mkdir -p "$d"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 \
    -subj "/CN=docsum-deploy-check-ca" \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign \
    -keyout "$d/ca.key" -out "$d/ca.crt" >/dev/null 2>&1
  sign apiserver "/CN=kube-apiserver" $'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth'
  sign admin "/O=system:masters/CN=docsum-deploy-check" "extendedKeyUsage=clientAuth"
  # The key pair the API server signs and verifies service account tokens with (it will not start without).
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$d/sa.key" 2>/dev/null
  openssl pkey -in "$d/sa.key" -pubout -out "$d/sa.pub" 2>/dev/null
}

kc() { kubectl --kubeconfig="$work/kubeconfig" --cache-dir="$work/kube-cache" "$@"; }

write_kubeconfig() {
  local d="$work/pki" k=(kubectl config --kubeconfig="$work/kubeconfig")
  "${k[@]}" set-cluster deploy-check --server="https://127.0.0.1:$api_port" \
    --certificate-authority="$d/ca.crt" --embed-certs=true >/dev/null
  "${k[@]}" set-credentials deploy-check --client-certificate="$d/admin.crt" --client-key="$d/admin.key" \
    --embed-certs=true >/dev/null
  "${k[@]}" set-context deploy-check --cluster=deploy-check --user=deploy-check >/dev/null
  "${k[@]}" use-context deploy-check >/dev/null
}

# exited NAME PID: fail with the end of NAME's log if it is gone.
exited() {
  kill -0 "$2" 2>/dev/null && return
  tail -n 30 "$work/$1.log" >&2
  die "$1 exited (log: $work/$1.log)"
}

start_servers() {
  local picked etcd_peer_port
  picked="$(free_ports)"
  read -r etcd_port etcd_peer_port api_port <<<"$picked"
  etcd_port="${DOCSUM_DEPLOY_CHECK_ETCD_PORT:-$etcd_port}"
  etcd_peer_port="${DOCSUM_DEPLOY_CHECK_ETCD_PEER_PORT:-$etcd_peer_port}"
  api_port="${DOCSUM_DEPLOY_CHECK_APISERVER_PORT:-$api_port}"
  ports=("$etcd_port" "$etcd_peer_port" "$api_port")
  make_pki
  write_kubeconfig

  log "starting etcd $(etcd --version | sed -n 's/^etcd Version: //p') on 127.0.0.1:$etcd_port"
  # Both URLs on loopback: etcd's defaults would take 2379/2380, maybe a system etcd's.
  etcd --name deploy-check --data-dir "$work/etcd" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$etcd_peer_port" \
    --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer_port" \
    --initial-cluster "deploy-check=http://127.0.0.1:$etcd_peer_port" \
    --logger zap --log-outputs stderr --log-level warn >"$work/etcd.log" 2>&1 &
  etcd_pid=$!

  log "starting kube-apiserver $("$apiserver" --version | cut -d' ' -f2) on 127.0.0.1:$api_port"
  local d="$work/pki"
  # --endpoint-reconciler-type=none: the `kubernetes` Service's endpoint would be the advertised
  # 127.0.0.1, which Endpoints refuse (loopback), so the server would log that error over and over.
  # --cert-dir: where it would write a self-signed pair (it has ours), instead of /var/run/kubernetes.
  "$apiserver" \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$api_port" \
    --etcd-servers="http://127.0.0.1:$etcd_port" \
    --tls-cert-file="$d/apiserver.crt" --tls-private-key-file="$d/apiserver.key" --cert-dir="$d" \
    --client-ca-file="$d/ca.crt" --anonymous-auth=false --authorization-mode=RBAC \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$d/sa.pub" --service-account-signing-key-file="$d/sa.key" \
    --service-cluster-ip-range=10.96.0.0/24 --endpoint-reconciler-type=none \
    --profiling=false >"$work/kube-apiserver.log" 2>&1 &
  apiserver_pid=$!

  local deadline=$((SECONDS + start_timeout))
  until kc get --raw=/readyz >/dev/null 2>&1; do
    exited etcd "$etcd_pid"
    exited kube-apiserver "$apiserver_pid"
    if ((SECONDS > deadline)); then
      tail -n 30 "$work/kube-apiserver.log" >&2
      die "kube-apiserver not ready after ${start_timeout}s (log: $work/kube-apiserver.log)"
    fi
    sleep 0.5
  done
  log "kube-apiserver ready"
}

install_crds() {
  # create, not apply: a fresh server has none, and apply's last-applied annotation would hold a copy of
  # each CRD (KEDA's is larger than an annotation may be).
  kc create -f "$keda_crd" -f "$strimzi_crd" >&2
  kc wait --for condition=established --timeout=60s -f "$keda_crd" -f "$strimzi_crd" >&2
  # kubectl's discovery cache was filled before the CRDs were there.
  rm -rf "$work/kube-cache"
}

# ---- the checks --------------------------------------------------------------------------------------

summary=()
failed=0

# What kubectl says besides the accepted objects (their names, or "... (server dry run)") and the
# warnings: the server's refusals, each as
# "Error from server (Reason): error when creating "FILE": MESSAGE" (MESSAGE kept) or, for a 422, as
# "The KIND "NAME" is invalid: MESSAGE".
server_errors() {
  grep -v -E -e '\(server dry run\)$' -e '^[a-z0-9.]+/[a-z0-9.-]+$' -e '^Warning:' |
    sed -E 's/^Error from server \([^)]*\): error when [a-z]+ "[^"]*": //' || true
}

# lines TEXT: how many lines (none in an empty text).
lines() {
  if [[ -z "$1" ]]; then echo 0; else wc -l <<<"$1"; fi
}

check_overlay() {
  local overlay=$1 rendered="$work/$1.yaml" names out status=0 refused line
  kubectl kustomize "$root/deploy/k8s/overlays/$overlay" >"$rendered"
  # A dry run creates nothing, so the overlay's objects in its own new namespace would all be refused
  # ("namespaces not found"): its Namespace objects are created for real first, the rest only dry-run.
  "$python" "$here/manifests.py" namespaces <"$rendered" >"$work/$overlay.namespaces.yaml"
  if [[ -s "$work/$overlay.namespaces.yaml" ]]; then
    kc apply -f "$work/$overlay.namespaces.yaml" >&2
  fi
  # Every object's name as kubectl prints it (deployment.apps/NAME), from the file alone.
  names="$(kc apply --dry-run=client --validate=false -o name -f "$rendered")"
  log "$overlay: sending $(lines "$names") objects (dry run, strict field validation)"
  out="$(kc apply --dry-run=server --validate=strict -o name -f "$rendered" 2>&1)" || status=$?
  echo "$out" >&2
  # The server's dry run prints back the name of each object it accepted: the others were refused.
  refused="$(grep -Fxv -f <(printf '%s\n' "$out") <<<"$names" || true)"
  if ((status == 0)) && [[ -z "$refused" ]]; then
    summary+=("overlay $overlay: accepted (all $(lines "$names") objects)")
  else
    failed=1
    line="$(paste -sd' ' <<<"$refused")"
    summary+=("overlay $overlay: REFUSED $(lines "$refused") of $(lines "$names") objects: $line")
    while IFS= read -r line; do summary+=("  $line"); done < <(server_errors <<<"$out")
  fi
  # Warnings (deprecations and the like) do not fail the check, but belong in the summary.
  while IFS= read -r line; do summary+=("  $line"); done < <(grep '^Warning:' <<<"$out" || true)
}

check_broken() {
  local name=$1 refusal=$2 file="$work/broken-$1.yaml" out message
  if ! "$python" "$here/manifests.py" broken "$name" <"$work/$broken_from.yaml" >"$file"; then
    failed=1
    summary+=("broken $name: not made (its object is missing from the $broken_from overlay)")
    return
  fi
  if out="$(kc apply --dry-run=server --validate=strict -f "$file" 2>&1)"; then
    failed=1
    summary+=("broken $name: ACCEPTED, but the server should have refused it ($file)")
    return
  fi
  message="$(server_errors <<<"$out")"
  if [[ -n "$message" ]] && grep -F -- "$refusal" <<<"$message" >/dev/null; then
    summary+=("broken $name: refused: $message")
  else
    failed=1
    summary+=("broken $name: refused, but not for its mistake (expected \"$refusal\"): $out")
  fi
}

main() {
  ensure_tools
  build_apiserver
  fetch_keda_crd
  generate_strimzi_crd
  log "tools ready (${SECONDS}s)"

  rm -rf "$work"
  mkdir -p "$work"
  start_servers
  install_crds

  local overlay variants name refusal
  for overlay in "${overlays[@]}"; do
    check_overlay "$overlay"
  done
  variants="$("$python" "$here/manifests.py" variants)"
  while IFS=$'\t' read -r name refusal; do
    check_broken "$name" "$refusal"
  done <<<"$variants"

  echo "deploy-check: kube-apiserver $("$apiserver" --version | cut -d' ' -f2)," \
    "KEDA $KEDA_VERSION and Strimzi $STRIMZI_VERSION CRDs, $((SECONDS - started))s"
  printf '%s\n' "${summary[@]}"
  if ((failed)); then
    echo "deploy-check: FAILED"
    exit 1
  fi
  echo "deploy-check: OK"
}

main "$@"
