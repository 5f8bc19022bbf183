#!/usr/bin/env bash
# Builds the pod fingerprint oracle into <repo>/target/podfingerprint-oracle/podfingerprint-oracle, once per
# go.mod/go.sum/main.go content: a stamp file holds their hash and a matching stamp reuses
# the binary. A flock serialises concurrent builds (several test processes, CI steps).
# Prints the binary's path on stdout; exits non-zero with Go's error when the build fails.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out="${NODETOPO_PODFINGERPRINT_DIR:-$repo/target/podfingerprint-oracle}"
mkdir -p "$out"
bin="$out/podfingerprint-oracle"
if ! command -v go >/dev/null 2>&1; then
    echo "podfingerprint-oracle: go is not installed (needed to build the pod fingerprint oracle)" >&2
    exit 127
fi
exec 9>"$out/.lock"
flock 9
stamp="$(cd "$here" && cat go.mod go.sum ./*.go | sha256sum | cut -d' ' -f1)-$(go env GOVERSION)"
if [[ -x "$bin" && -f "$out/stamp" && "$(cat "$out/stamp")" == "$stamp" ]]; then
    echo "$bin"
    exit 0
fi
start=$(date +%s)
(cd "$here" && GOFLAGS=-mod=readonly go build -o "$bin.tmp" .)
mv "$bin.tmp" "$bin"
echo "$stamp" >"$out/stamp"
echo "podfingerprint-oracle: built in $(( $(date +%s) - start )) s" >&2
echo "$bin"
