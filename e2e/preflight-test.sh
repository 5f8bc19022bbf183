#!/usr/bin/env bash
# Checks e2e/run.sh's preflight with stub `docker` and `kind` commands, so the paths a real
# user meets (no permission on the Docker socket, another kind, too few CPUs, no daemon, no
# cargo) are exercised where no Docker engine exists. Nothing is built: every case stops in
# the preflight. Prints one line per case and "preflight: N passed, M failed".
set -uo pipefail
cd "$(dirname "$0")/.."
stubs=$(mktemp -d)
trap 'rm -rf "$stubs"' EXIT
mkdir "$stubs/bin"
stub() { printf '#!/bin/sh\n%s\n' "$2" >"$stubs/bin/$1"; chmod +x "$stubs/bin/$1"; }
passed=0 failed=0
# case NAME WANT_RC WANT_TEXT [ENV...]: runs run.sh with only the stubs and the system tools.
case_() {
  local name=$1 want_rc=$2 want=$3
  shift 3
  local out rc
  out=$(env -i HOME="$HOME" PATH="$stubs/bin:/usr/bin:/bin" "$@" bash e2e/run.sh 2>&1)
  rc=$?
  if [[ $rc == "$want_rc" && $out == *"$want"* ]]; then
    passed=$((passed + 1))
    echo "ok   - $name"
  else
    failed=$((failed + 1))
    echo "FAIL - $name: exit $rc (want $want_rc), output: $out" >&2
  fi
}
stub kind 'echo "kind v0.33.0 go1.24 linux/amd64"'
stub docker 'echo "permission denied while trying to connect to the Docker daemon socket" >&2; exit 1'
case_ "no access to the Docker socket is an error" 1 "add it to the 'docker' group"
stub docker 'echo "Cannot connect to the Docker daemon. Is the docker daemon running?" >&2; exit 1'
case_ "no Docker daemon is a skip" 0 "SKIPPED: e2e: no working Docker engine"
case_ "no Docker daemon with NODETOPO_E2E_REQUIRED=1 is an error" 1 "cannot run: no working Docker engine" NODETOPO_E2E_REQUIRED=1
stub docker 'case "$*" in *NCPU*) echo 2;; *) echo 28.0;; esac'
case_ "fewer than 4 CPUs stops before building" 1 "Docker has 2 CPU(s); the kind cluster needs at least 4"
stub kind 'echo "kind v0.29.0 go1.24 linux/amd64"'
case_ "another kind version stops" 1 "kind v0.29.0 found, the suite is pinned to v0.33.0"
stub kind 'echo "kind v0.33.0 go1.24 linux/amd64"'
stub docker 'case "$*" in *NCPU*) echo 8;; *) echo 28.0;; esac'
if PATH=/usr/bin:/bin command -v cargo >/dev/null 2>&1; then
  echo "SKIPPED: no cargo stops: cargo is in /usr/bin or /bin, which the cases keep on PATH"
else
  case_ "no cargo stops" 1 "cargo is not installed"
fi

# Past the preflight, to the image load: every tool a stub that logs its arguments. `kind load
# docker-image` fails (as under Docker's containerd image store), so the images go through
# `docker save` into a temp directory and `kind load image-archive`. mktemp is BSD-like
# (macOS): it refuses GNU's long options such as --suffix.
log=$stubs/calls.log
stub mktemp 'for a in "$@"; do case "$a" in --*) echo "mktemp: illegal option -- ${a#--}" >&2; exit 1;; esac; done; exec /usr/bin/mktemp "$@"'
stub cargo "echo \"cargo \$*\" >>'$log'"
stub helm "echo \"helm \$*\" >>'$log'; case \"\$*\" in *version*) echo v4.1.4;; esac"
stub kubectl "echo \"kubectl \$*\" >>'$log'"
stub kind "echo \"kind \$*\" >>'$log'
case \"\$*\" in
  version*) echo 'kind v0.33.0 go1.24 linux/amd64';;
  'load docker-image'*) exit 1;;
  'load image-archive'*) a=\"\$(eval echo \\\${\$#})\"; [ -s \"\$a\" ] && echo \"archive ok \$a\" >>'$log';;
esac"
docker_stub() { # $1: what `docker save --platform` does (ok | unknown-flag)
  stub docker "echo \"docker \$*\" >>'$log'
case \"\$*\" in
  *NCPU*) echo 8;;
  *Server.Os*) echo linux/arm64;;
  'save --platform'*) [ $1 = ok ] || { echo 'unknown flag: --platform' >&2; exit 125; }; o=\$5; echo tar >\"\$o\";;
  save*) echo tar >\"\$3\";;
  info*) echo 28.0;;
esac"
}
full_run() { # name, what docker save --platform does, want in the log
  local name=$1 mode=$2 want=$3 out rc
  : >"$log"
  docker_stub "$mode"
  out=$(env -i HOME="$HOME" TMPDIR="$stubs" PATH="$stubs/bin:/usr/bin:/bin" bash e2e/run.sh 2>&1)
  rc=$?
  local leftover
  leftover=$(find "$stubs" -maxdepth 1 -name 'nodetopo-e2e-images.*')
  if [[ $rc == 0 && $out == *"== e2e passed"* && $(grep -c "^archive ok $stubs/nodetopo-e2e-images\..*/images.tar$" "$log") == 2 ]] &&
    grep -qE "$want" "$log" && [[ -z $leftover ]]; then
    passed=$((passed + 1))
    echo "ok   - $name"
  else
    failed=$((failed + 1))
    echo "FAIL - $name: exit $rc, leftover temp dirs: '$leftover', output: $out, calls: $(cat "$log")" >&2
  fi
}
full_run "image load fallback: docker save --platform of the engine's platform into a portable temp dir, removed after" ok \
  "^docker save --platform linux/arm64 -o $stubs/nodetopo-e2e-images\.[^/]+/images\.tar nodetopo/nodetopo-operator:e2e nodetopo/nodetopo-agent:e2e$"
full_run "image load fallback on Docker < 28 (no save --platform): a plain docker save" unknown-flag \
  "^docker save -o $stubs/nodetopo-e2e-images\.[^/]+/images\.tar busybox:1.36$"
rm "$stubs/bin/cargo" "$stubs/bin/helm" "$stubs/bin/kubectl" "$stubs/bin/mktemp"
stub kind 'echo "kind v0.33.0 go1.24 linux/amd64"'
stub docker 'case "$*" in *NCPU*) echo 8;; *) echo 28.0;; esac'

rm "$stubs/bin/kind"
case_ "no kind is a skip" 0 "SKIPPED: e2e: kind is not installed"
echo "preflight: $passed passed, $failed failed"
[[ $failed == 0 ]]
