#!/usr/bin/env python3
"""Footprint of `nodetopo-agent run --local` on a 512-CPU preset (epyc-9754-2p).

Measures RSS (VmRSS, VmHWM) and CPU time of the agent idle, then under 1,000 pod events
(additions and deletions of Guaranteed pods, up to 200 live), and the event-to-status
latency: from the atomic rename of a pod file to the status file showing the change.
Usage: footprint.py PATH/TO/nodetopo-agent [poll_ms [more agent flags, e.g. --no-watch]]
(the agent watches its files unless --no-watch; the poll is then only its fallback)
"""
import os, random, statistics, subprocess, sys, tempfile, time

BIN = sys.argv[1]
POLL = sys.argv[2] if len(sys.argv) > 2 else "100"
EXTRA = sys.argv[3:]
CLK = os.sysconf("SC_CLK_TCK")

def rss(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmRSS", "VmHWM")):
                k, v = line.split(":")
                out[k] = int(v.split()[0]) / 1024.0
    return out

def cpu(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK

d = tempfile.mkdtemp()
pods = os.path.join(d, "pods"); os.makedirs(pods)
spec = os.path.join(d, "spec.yaml"); status = os.path.join(d, "status.yaml")
open(spec, "w").write("apiVersion: nodetopo.io/v1alpha1\nkind: NodeTopology\nmetadata: {name: bench, generation: 1}\n"
                      "spec:\n  cpuManager: {policy: static, reservedSystemCPUs: \"0,256\"}\n"
                      "  topologyManager: {policy: single-numa-node}\n")
p = subprocess.Popen([BIN, "run", "--local", "--preset", "epyc-9754-2p", "--poll-ms", POLL,
                      "--pods-dir", pods, "--spec", spec, "--status-file", status,
                      "--state-dir", os.path.join(d, "state"), "--kubelet-state", os.path.join(d, "none"),
                      "--admin-addr", "127.0.0.1:19465"] + EXTRA,
                     stderr=subprocess.DEVNULL)
while not os.path.exists(status):
    time.sleep(0.01)
time.sleep(1)
c0 = cpu(p.pid); t0 = time.time()
time.sleep(10)
idle_cpu = (cpu(p.pid) - c0) / (time.time() - t0)
idle = rss(p.pid)

def write_pod(n, cpus):
    text = (f"apiVersion: v1\nkind: Pod\nmetadata: {{name: p{n}, uid: u{n}, creationTimestamp: \"2024-01-01T00:00:00Z\"}}\n"
            f"spec:\n  containers:\n  - name: app\n    resources: {{limits: {{cpu: \"{cpus}\", memory: 1Gi}}}}\n")
    tmp = os.path.join(pods, f".p{n}.tmp")
    open(tmp, "w").write(text)
    os.rename(tmp, os.path.join(pods, f"p{n}.yaml"))

def wait_for(pred):
    while True:
        try:
            if pred(open(status).read()):
                return
        except FileNotFoundError:
            pass
        time.sleep(0.001)

random.seed(1)
live = []; lat = []; n = 0
c0 = cpu(p.pid); t0 = time.time()
for i in range(1000):
    if len(live) >= 200 or (live and random.random() < 0.4):
        v = live.pop(random.randrange(len(live)))
        s = time.time(); os.remove(os.path.join(pods, f"p{v}.yaml"))
        wait_for(lambda t, v=v: f"podUID: u{v}\n" not in t)
    else:
        n += 1; live.append(n)
        s = time.time(); write_pod(n, random.choice([1, 2, 2, 4]))
        wait_for(lambda t, n=n: f"podUID: u{n}\n" in t)
    lat.append((time.time() - s) * 1000)
busy_cpu = (cpu(p.pid) - c0) / (time.time() - t0)
busy = rss(p.pid)
import urllib.request
m = urllib.request.urlopen("http://127.0.0.1:19465/metrics").read().decode()
cyc = {l.split()[0]: float(l.split()[1]) for l in m.splitlines() if l.startswith("nodetopo_event_cycle_duration_seconds_") and "bucket" not in l}
adm = {l.split()[0]: float(l.split()[1]) for l in m.splitlines() if l.startswith("nodetopo_topology_manager_admission_duration_seconds_") and "bucket" not in l}
p.terminate(); p.wait()
lat.sort()
print(f"cycles: {cyc}, admission batches: {adm}")
print(f"poll {POLL} ms {' '.join(EXTRA)}, 512 CPUs (epyc-9754-2p), single-numa-node, up to 200 live pods")
print(f"idle: RSS {idle['VmRSS']:.1f} MiB, CPU {idle_cpu*100:.2f} %")
print(f"1000 events: RSS {busy['VmRSS']:.1f} MiB (peak {busy['VmHWM']:.1f} MiB), CPU {busy_cpu*100:.1f} % over {time.time()-t0:.1f} s")
print(f"event-to-status: median {statistics.median(lat):.1f} ms, p95 {lat[949]:.1f} ms, p99 {lat[989]:.1f} ms, max {lat[-1]:.1f} ms")
