#!/usr/bin/env bash
# Build the Kubernetes control plane Tidal tests and runs against, from Go modules pinned in versions.env:
# kube-apiserver, kube-controller-manager, kube-scheduler, kubectl (k8s.io/kubernetes), etcd, kwok, helm.
#
#   platform/kube/build.sh [build] [NAME…]   build what is missing (of NAME…, default all), a line per component
#   platform/kube/build.sh bindir [NAME…]    the same, then print the directory the binaries are in
#   platform/kube/build.sh where             print that directory only (nothing is built)
#
# Binaries are built once per machine into a cache outside the clone: ${TIDAL_KUBE_CACHE:-~/.cache/tidal/kube}/
# kubernetes-<version>-<hash of versions.env>/bin, so a second clone, a second `make test` and CI reuse them. Beside
# each binary a stamp holds the hash of what it was built from (its module's go.mod and go.sum, the Go version): a
# changed go.sum rebuilds that binary only. Go's module and build caches (GOMODCACHE, GOCACHE) are Go's defaults.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "$HERE/versions.env"
export PATH="$PATH:/usr/local/go/bin" GOTOOLCHAIN=local GOFLAGS=-buildvcs=false

# The version the Kubernetes binaries report (`kubectl version`), set as Kubernetes' own build does (hack/lib/version.sh).
minor="${KUBERNETES_VERSION#v1.}"
KUBE_X=""
for package in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  KUBE_X+=" -X $package.gitVersion=$KUBERNETES_VERSION -X $package.gitMajor=1 -X $package.gitMinor=${minor%%.*}"
  KUBE_X+=" -X $package.gitTreeState=clean"
done

# name | module folder | main package | version | linker flags. What the control plane needs first comes first.
COMPONENTS=(
  "etcd|etcd|go.etcd.io/etcd/server/v3|$ETCD_VERSION|"
  "kube-apiserver|kubernetes|k8s.io/kubernetes/cmd/kube-apiserver|$KUBERNETES_VERSION|$KUBE_X"
  "kube-controller-manager|kubernetes|k8s.io/kubernetes/cmd/kube-controller-manager|$KUBERNETES_VERSION|$KUBE_X"
  "kube-scheduler|kubernetes|k8s.io/kubernetes/cmd/kube-scheduler|$KUBERNETES_VERSION|$KUBE_X"
  "kwok|kubernetes|sigs.k8s.io/kwok/cmd/kwok|$KWOK_VERSION|"
  "kubectl|kubernetes|k8s.io/kubernetes/cmd/kubectl|$KUBERNETES_VERSION|$KUBE_X"
  "helm|helm|helm.sh/helm/v4/cmd/helm|$HELM_VERSION|-X helm.sh/helm/v4/internal/version.version=$HELM_VERSION"
)

say() { printf '[kube-build] %s\n' "$*" >&2; }
die() { printf '[kube-build] ERROR: %s\n' "$*" >&2; exit 1; }

command -v go >/dev/null || die "go not found (Go 1.26 is expected at /usr/local/go)"

cache_dir() {
  echo "${TIDAL_KUBE_CACHE:-$HOME/.cache/tidal/kube}/kubernetes-$KUBERNETES_VERSION-$(sha256sum < "$HERE/versions.env" | cut -c1-12)"
}

stamp_of() {  # module folder, linker flags: the hash of what a binary is built from
  { cat "$HERE/$1/go.mod" "$HERE/$1/go.sum"; echo "$2"; go env GOVERSION GOOS GOARCH; } | sha256sum | cut -c1-16
}

cached() {  # name module ldflags
  [[ -x $CACHE/bin/$1 && "$(cat "$CACHE/bin/.$1.stamp" 2>/dev/null)" == "$(stamp_of "$2" "$3")" ]]
}

build_one() {  # name module package version ldflags
  local name="$1" module="$2" package="$3" version="$4" ldflags="$5" t0=$SECONDS
  local bin="$CACHE/bin/$name" log="$CACHE/logs/$name.log"
  cached "$name" "$module" "$ldflags" && return
  # One build of a binary at a time per machine: two clones starting together wait instead of building it twice.
  exec {lock}>"$CACHE/bin/.$name.lock"
  flock "$lock"
  if ! cached "$name" "$module" "$ldflags"; then
    say "building $name $version …"
    if ! (cd "$HERE/$module" && go build -trimpath -ldflags="-s -w $ldflags" -o "$bin.tmp.$$" "$package") >"$log" 2>&1; then
      rm -f "$bin.tmp.$$"
      die "$name $version failed to build; see $log"
    fi
    stamp_of "$module" "$ldflags" > "$CACHE/bin/.$name.stamp.tmp.$$"
    mv "$bin.tmp.$$" "$bin"
    mv "$CACHE/bin/.$name.stamp.tmp.$$" "$CACHE/bin/.$name.stamp"
    say "building $name $version … done in $((SECONDS - t0)) s"
  fi
  exec {lock}>&-
}

main() {  # NAME… (none: every component)
  CACHE="$(cache_dir)"
  mkdir -p "$CACHE/bin" "$CACHE/logs"
  local row name module package version ldflags built=0 wanted=0
  for row in "${COMPONENTS[@]}"; do
    IFS='|' read -r name module package version ldflags <<<"$row"
    (( $# == 0 )) || [[ " $* " == *" $name "* ]] || continue
    wanted=$((wanted + 1))
    cached "$name" "$module" "$ldflags" || built=1
    build_one "$name" "$module" "$package" "$version" "$ldflags"
  done
  (( built )) || say "cached: $wanted binaries in $CACHE/bin"
}

case "${1:-build}" in
  build) shift || true; main "$@" ;;
  bindir) shift; main "$@" && echo "$CACHE/bin" ;;
  where) echo "$(cache_dir)/bin" ;;
  *) echo "usage: $0 [build|bindir|where] [NAME…]" >&2; exit 2 ;;
esac
