#!/usr/bin/env bash
# Build the Kubernetes control plane Tidal tests and runs against, from Go modules pinned in versions.env:
# kube-apiserver, kube-controller-manager, kube-scheduler, kubectl (k8s.io/kubernetes), etcd, kwok, helm.
#
#   platform/kube/build.sh          build what is missing, print a line per component
#   platform/kube/build.sh bindir   the same, then print the directory the binaries are in
#   platform/kube/build.sh where    print that directory only (nothing is built)
#
# Binaries are built once per machine into a cache outside the clone, keyed by the versions, the go.mod/go.sum
# files and the Go version: ${TIDAL_KUBE_CACHE:-~/.cache/tidal/kube}/<key>/bin. A second clone, a second
# `make test` and CI reuse them. Go's module and build caches (GOMODCACHE, GOCACHE) are Go's own defaults.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "$HERE/versions.env"
export PATH="$PATH:/usr/local/go/bin" GOTOOLCHAIN=local GOFLAGS=-buildvcs=false

# name | module folder | main package | version
COMPONENTS=(
  "etcd|etcd|go.etcd.io/etcd/server/v3|$ETCD_VERSION"
  "kube-apiserver|kubernetes|k8s.io/kubernetes/cmd/kube-apiserver|$KUBERNETES_VERSION"
  "kube-controller-manager|kubernetes|k8s.io/kubernetes/cmd/kube-controller-manager|$KUBERNETES_VERSION"
  "kwok|kwok|sigs.k8s.io/kwok/cmd/kwok|$KWOK_VERSION"
  "kubectl|kubernetes|k8s.io/kubernetes/cmd/kubectl|$KUBERNETES_VERSION"
  "kube-scheduler|kubernetes|k8s.io/kubernetes/cmd/kube-scheduler|$KUBERNETES_VERSION"
  "helm|helm|helm.sh/helm/v4/cmd/helm|$HELM_VERSION"
)

say() { printf '[kube-build] %s\n' "$*" >&2; }
die() { printf '[kube-build] ERROR: %s\n' "$*" >&2; exit 1; }

command -v go >/dev/null || die "go not found (Go 1.26 is expected at /usr/local/go)"

cache_dir() {
  local key
  key="$( { cat "$HERE/versions.env" "$HERE"/*/go.mod "$HERE"/*/go.sum; go env GOVERSION GOOS GOARCH; } \
    | sha256sum | cut -c1-12)"
  echo "${TIDAL_KUBE_CACHE:-$HOME/.cache/tidal/kube}/kubernetes-$KUBERNETES_VERSION-$key"
}

build_one() {  # name module package version
  local name="$1" module="$2" package="$3" version="$4" t0=$SECONDS
  local bin="$CACHE/bin/$name" log="$CACHE/logs/$name.log"
  if [[ -x $bin ]]; then
    return
  fi
  say "building $name $version …"
  if ! (cd "$HERE/$module" && go build -trimpath -ldflags='-s -w' -o "$bin.tmp" "$package") >"$log" 2>&1; then
    rm -f "$bin.tmp"
    die "$name $version failed to build; see $log"
  fi
  mv "$bin.tmp" "$bin"
  say "building $name $version … done in $((SECONDS - t0)) s"
}

main() {
  CACHE="$(cache_dir)"
  mkdir -p "$CACHE/bin" "$CACHE/logs"
  # One build at a time per cache: two clones starting together wait for each other instead of building twice.
  exec 9>"$CACHE/.lock"
  flock 9
  local row name module package version built=0
  for row in "${COMPONENTS[@]}"; do
    IFS='|' read -r name module package version <<<"$row"
    [[ -x $CACHE/bin/$name ]] || built=1
    build_one "$name" "$module" "$package" "$version"
  done
  (( built )) || say "cached: ${#COMPONENTS[@]} binaries in $CACHE/bin"
  flock -u 9
}

case "${1:-build}" in
  build) main ;;
  bindir) main && echo "$CACHE/bin" ;;
  where) echo "$(cache_dir)/bin" ;;
  *) echo "usage: $0 [build|bindir|where]" >&2; exit 2 ;;
esac
