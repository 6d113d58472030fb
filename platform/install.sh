#!/usr/bin/env bash
# Install what Tidal needs on this machine: Debian packages, the Python venv and
# the Flink Kafka connector jars (from Maven Central). Idempotent: every step checks before acting,
# so a second run with everything in place takes a few seconds.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
REQS="$ROOT/requirements.txt"
JARS="$ROOT/.run/jars"
APT_PACKAGES=(postgresql redis-server prometheus prometheus-pushgateway chromium)  # chromium: browser tests
JAR_LIST="$ROOT/platform/jars.txt"

say() { printf '[install] %s\n' "$*"; }
die() { printf '[install] ERROR: %s\n' "$*" >&2; exit 1; }

java_major() {
  # "openjdk version "17.0.15" ..." -> 17; prints 0 when java is missing.
  local v
  v="$(java -version 2>&1 | awk -F'"' '/version/ {print $2; exit}')" || true
  v="${v#1.}"
  echo "${v%%.*}" | grep -E '^[0-9]+$' || echo 0
}

missing_apt_packages() {
  local pkg
  local wanted=("${APT_PACKAGES[@]}")
  (( $(java_major) >= 17 )) || wanted+=(openjdk-17-jre-headless)
  command -v mvn >/dev/null || wanted+=(maven)
  for pkg in "${wanted[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q '^install ok installed$' || echo "$pkg"
  done
}

# Debian maintainer scripts try to start services through invoke-rc.d; there is
# no init system here, so a policy-rc.d answering 101 ("action forbidden") makes
# them skip the start instead of hanging or failing.
with_services_blocked() {
  local policy=/usr/sbin/policy-rc.d ours=0
  if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod 755 "$policy" && ours=1
  fi
  local rc=0
  "$@" || rc=$?
  if (( ours )); then rm -f "$policy"; fi
  return $rc
}

install_apt() {
  local missing
  mapfile -t missing < <(missing_apt_packages)
  if (( ${#missing[@]} == 0 )); then
    say "apt: ${APT_PACKAGES[*]} already installed"
    return
  fi
  say "apt: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  with_services_blocked apt-get install -y -qq --no-install-recommends \
    -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "${missing[@]}" >/dev/null
  say "apt: done"
}

install_venv() {
  [[ -f $REQS ]] || die "$REQS not found (the pinned requirements live there)"
  if [[ ! -x $VENV/bin/python ]]; then
    say "venv: creating $VENV with $(command -v python3) ($(python3 --version 2>&1))"
    python3 -m venv "$VENV"
  fi
  local stamp="$VENV/.requirements.sha256" want
  want="$( { sha256sum < "$REQS"; "$VENV/bin/python" --version; } | sha256sum | cut -d' ' -f1)"
  if [[ -f $stamp && "$(cat "$stamp")" == "$want" ]]; then
    say "venv: requirements.txt unchanged, nothing to install"
    return
  fi
  # uv (pinned in requirements.txt) installs the same pins in a fraction of pip's time: downloads in parallel,
  # wheels from its cache on a second machine setup (CI's fresh clone)
  local uv
  uv="$(grep -oE '^uv==[^ ]+' "$REQS")" || die "$REQS pins no uv"
  say "venv: $uv pip install -r requirements.txt"
  quiet_pip "$VENV/bin/python" install "$uv" || die "pip install $uv failed"
  "$VENV/bin/uv" pip install -q --python "$VENV/bin/python" -r "$REQS" || die "uv pip install -r requirements.txt failed"
  echo "$want" > "$stamp"
  say "venv: done"
}

# The `tidal` command line (client/, a package of its own) into the venv, editable: its code is this checkout's.
# Its dependencies are pinned in requirements.txt (installed above), hence --no-deps; a second run only checks where
# `tidal_cli` is imported from.
install_client() {
  if [[ -x $VENV/bin/tidal ]] && "$VENV/bin/python" -c \
      "import sys, tidal_cli; sys.exit(not tidal_cli.__file__.startswith('$ROOT/client/'))" 2>/dev/null; then
    say "client: tidal installed"
    return
  fi
  say "client: uv pip install -e client/"
  "$VENV/bin/uv" pip install -q --python "$VENV/bin/python" --no-deps -e "$ROOT/client" \
    || die "uv pip install -e client/ failed"
}

# pip with its output kept in a log, shown only on failure (minus the noise about
# this machine's absent local indexes).
quiet_pip() {
  local python="$1"; shift
  local log rc=0
  log="$(mktemp)"
  "$python" -m pip -q --disable-pip-version-check "$@" >"$log" 2>&1 || rc=$?
  (( rc == 0 )) || grep -v "^WARNING: Location 'file://" "$log" >&2 || true
  rm -f "$log"
  return $rc
}

# The jars named in platform/jars.txt, fetched from Maven Central by mvn (its repository ~/.m2 is the cache a second
# clone reuses) and checked against their pinned sha256; a jar in .run/jars that the list does not name is removed,
# since the Flink job loads every jar there.
jar_lines() { grep -vE '^\s*(#|$)' "$JAR_LIST"; }
jar_name() { local g a v; IFS=: read -r g a v <<<"$1"; echo "$a-$v.jar"; }

install_jars() {
  [[ -f $JAR_LIST ]] || die "$JAR_LIST not found (the jar pins live there)"
  mkdir -p "$JARS"
  local coord sha name wanted=() fetched=0
  while read -r coord sha; do
    name="$(jar_name "$coord")"
    wanted+=("$name")
    [[ -f $JARS/$name ]] && sha256sum -c --status <<<"$sha  $JARS/$name" && continue
    [[ -n $TMP_DIR ]] || TMP_DIR="$(mktemp -d)"
    say "jars: mvn dependency:copy $coord"
    mvn -q -B dependency:copy -Dartifact="$coord" -DoutputDirectory="$TMP_DIR" >"$TMP_DIR/mvn.log" 2>&1 \
      || { cat "$TMP_DIR/mvn.log" >&2; die "mvn could not fetch $coord"; }
    sha256sum -c --status <<<"$sha  $TMP_DIR/$name" \
      || die "$coord: sha256 $(sha256sum "$TMP_DIR/$name" | cut -d' ' -f1) is not the pinned $sha"
    mv "$TMP_DIR/$name" "$JARS/$name"
    fetched=$((fetched + 1))
  done < <(jar_lines)
  for name in "$JARS"/*.jar; do
    [[ -e $name ]] || continue
    printf '%s\n' "${wanted[@]}" | grep -qxF "$(basename "$name")" || { rm -f "$name"; say "jars: removed $(basename "$name") (not in jars.txt)"; }
  done
  say "jars: ${wanted[*]} ($fetched fetched, sha256 checked)"
}

TMP_DIR=""
cleanup() { [[ -z $TMP_DIR ]] || rm -rf "$TMP_DIR"; }

main() {
  trap cleanup EXIT
  install_apt
  install_venv
  install_client
  install_jars
  say "ok"
}

main "$@"
