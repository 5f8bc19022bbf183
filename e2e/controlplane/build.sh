#!/usr/bin/env bash
# Builds the test control plane (kube-apiserver, kube-controller-manager and kube-scheduler
# from k8s.io/kubernetes, and an etcd from go.etcd.io/etcd/server/v3/embed, all pinned in this
# module's go.mod/go.sum) into <cargo target dir>/controlplane/. The controller manager and
# the scheduler serve the local-node tests (DaemonSets and Deployments need both). Safe to run concurrently: one build per machine under
# flock; later runs reuse the binaries while the inputs' hash is unchanged.
# Prints the directory holding the binaries on its last line of stdout.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${CARGO_TARGET_DIR:-$root/target}/controlplane"

command -v go >/dev/null 2>&1 || { echo "build.sh: go not found in PATH" >&2; exit 127; }
command -v flock >/dev/null 2>&1 || { echo "build.sh: flock not found in PATH" >&2; exit 127; }

mkdir -p "$out"
exec 9>"$out/.lock"
flock 9

# Everything that changes the binaries: module pins, our sources, this script, the toolchain.
key="$( { cat "$here/go.mod" "$here/go.sum" "$here/build.sh"; find "$here/cmd" -name '*.go' -print0 | sort -z | xargs -0 cat; go version; } | sha256sum | cut -d' ' -f1)"
binaries=(kube-apiserver kube-controller-manager kube-scheduler)
present=1
for b in etcd "${binaries[@]}"; do [[ -x "$out/$b" ]] || present=0; done
if [[ $present == 1 && "$(cat "$out/stamp" 2>/dev/null)" == "$key" ]]; then
  echo "build.sh: control plane up to date in $out" >&2
  echo "$out"
  exit 0
fi

start=$(date +%s)
rm -f "$out/stamp"
cd "$here"
version="v1.37.2"
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37 -X k8s.io/component-base/version.gitTreeState=clean"
echo "build.sh: building etcd (go.etcd.io/etcd/server/v3 embed)" >&2
go build -trimpath -ldflags "-s -w" -o "$out/etcd.tmp" ./cmd/etcd
for b in "${binaries[@]}"; do
  echo "build.sh: building $b $version" >&2
  go build -trimpath -ldflags "$ldflags" -o "$out/$b.tmp" "k8s.io/kubernetes/cmd/$b"
done
mv -f "$out/etcd.tmp" "$out/etcd"
for b in "${binaries[@]}"; do mv -f "$out/$b.tmp" "$out/$b"; done
echo "$key" > "$out/stamp"
echo "build.sh: built in $(( $(date +%s) - start ))s into $out" >&2
echo "$out"
