# Sourced by e2e/<module>/build.sh (not run on its own). `go_build_once NAME DIR OUT` builds
# the Go module in DIR into OUT/NAME once per content of its go.mod, go.sum and *.go files
# plus the Go version: a stamp file OUT/stamp holds their hash and a matching stamp reuses
# the binary. A flock on OUT/.lock serialises concurrent builds (several test processes, CI
# steps). Prints the binary's path on stdout; exits the calling script with 127 when go is
# missing and non-zero with Go's error when the build fails (`set -euo pipefail` is set).
set -euo pipefail

go_build_once() {
    local name="$1" dir="$2" out="$3" purpose="$4"
    mkdir -p "$out"
    local bin="$out/$name"
    if ! command -v go >/dev/null 2>&1; then
        echo "$name: go is not installed (needed to build $purpose)" >&2
        exit 127
    fi
    exec 9>"$out/.lock"
    flock 9
    local stamp
    stamp="$(cd "$dir" && cat go.mod go.sum ./*.go | sha256sum | cut -d' ' -f1)-$(go env GOVERSION)"
    if [[ -x "$bin" && -f "$out/stamp" && "$(cat "$out/stamp")" == "$stamp" ]]; then
        echo "$bin"
        exit 0
    fi
    local start
    start=$(date +%s)
    (cd "$dir" && GOFLAGS=-mod=readonly go build -o "$bin.tmp" .)
    mv "$bin.tmp" "$bin"
    echo "$stamp" >"$out/stamp"
    echo "$name: built in $(($(date +%s) - start)) s" >&2
    echo "$bin"
    exit 0
}
