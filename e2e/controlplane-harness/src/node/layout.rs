//! The node's files: containerd's configuration, the CNI bridge network and the kubelet's
//! configuration, all under the node's temp directory.

use super::*;

impl LocalNode {
    pub(super) fn lay_out(&self, opts: &NodeOptions) -> Result<()> {
        let d = self.dir.path();
        for sub in [
            "var-lib/kubelet/conf.d",
            "var-log",
            "containerd-root",
            "containerd-state",
            "cni/net.d",
            "cni/ipam",
            "sysctl",
            "bin",
        ] {
            fs::create_dir_all(d.join(sub)).map_err(io(|| format!("creating {sub}")))?;
        }
        // A hard link where it can be one: the kubelet's executable (`/proc/<pid>/exe`) is
        // then a file named `kubelet`, which is how nodetopo's apply finds the kubelet.
        fs::hard_link(&self.kubelet_bin, d.join("bin/kubelet"))
            .or_else(|_| std::os::unix::fs::symlink(&self.kubelet_bin, d.join("bin/kubelet")))
            .map_err(io(|| "linking bin/kubelet".into()))?;
        let p = |s: &str| d.join(s).display().to_string();
        write(
            &d.join("containerd.toml"),
            &format!(
                r#"version = 2
root = "{root}"
state = "{state}"
# Plugins that would touch host paths outside the node's directory.
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "{sock}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{TESTNODE_IMAGE}"
  # The pause container's oom_score_adj -998 needs CAP_SYS_RESOURCE, which root lacks here.
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{cni}"
"#,
                root = p("containerd-root"),
                state = p("containerd-state"),
                sock = p("containerd.sock"),
                cni = p("cni/net.d"),
            ),
        )?;
        // A bridge with no address on the host, no gateway, no masquerading: pods on it
        // reach each other and nothing else.
        write(
            &d.join("cni/net.d/10-nodetopo.conflist"),
            &format!(
                r#"{{"cniVersion": "1.0.0", "name": "nodetopo-test", "plugins": [{{"type": "bridge", "bridge": "{bridge}", "isGateway": false, "ipMasq": false, "ipam": {{"type": "host-local", "dataDir": "{ipam}", "ranges": [[{{"subnet": "10.253.0.0/24"}}]]}}}}]}}
"#,
                bridge = self.bridge,
                ipam = p("cni/ipam"),
            ),
        )?;
        write(
            &d.join("var-lib/kubelet/config.yaml"),
            &format!(
                "apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failSwapOn: false
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /{cgroup}
containerRuntimeEndpoint: unix://{sock}
address: 127.0.0.1
port: {port}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: {healthz}
authentication:
  anonymous: {{enabled: true}}
  webhook: {{enabled: false}}
authorization:
  mode: AlwaysAllow
makeIPTablesUtilChains: false
# The host's disk is shared with everything else on the machine: no eviction or image
# garbage collection because of its fill level (the test images are imported, never pulled).
evictionHard:
  memory.available: \"100Mi\"
  nodefs.available: \"1%\"
  nodefs.inodesFree: \"1%\"
  imagefs.available: \"1%\"
imageGCHighThresholdPercent: 100
volumePluginDir: /var/lib/kubelet/volume-plugins
cpuManagerPolicy: static
reservedSystemCPUs: \"{reserved}\"
{extra}",
                cgroup = self.cgroup,
                sock = p("containerd.sock"),
                port = self.kubelet_port,
                healthz = self.healthz_port,
                reserved = opts.reserved_cpus,
                extra = opts.kubelet_config,
            ),
        )?;
        Ok(())
    }
}
