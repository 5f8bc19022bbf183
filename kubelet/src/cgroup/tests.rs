use std::fs;

use super::*;

const UID: &str = "1f2e3d4c-0000-4aaa-8bbb-123456789abc";
const ID: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn layout(
    root: &Path,
    version: CgroupVersion,
    driver: CgroupDriver,
    kubelet_root: &str,
) -> CgroupLayout {
    CgroupLayout {
        root: root.to_path_buf(),
        version,
        driver,
        kubelet_root: kubelet_root.into(),
    }
}

fn id(runtime: Runtime) -> ContainerId {
    ContainerId {
        runtime,
        id: ID.into(),
    }
}

/// Writes a cgroup directory by hand (the path spelled out, not computed by the code under
/// test) with the given files.
fn make(dir: &Path, files: &[(&str, &str)]) {
    fs::create_dir_all(dir).unwrap();
    for (name, text) in files {
        fs::write(dir.join(name), text).unwrap();
    }
}

#[test]
fn cgroupfs_v1_containerd_burstable() {
    let t = tempfile::tempdir().unwrap();
    let dir = t
        .path()
        .join("cpuset/kubepods/burstable")
        .join(format!("pod{UID}"))
        .join(ID);
    make(
        &dir,
        &[("cpuset.cpus", "0-3\n"), ("cpuset.effective_cpus", "0-3\n")],
    );
    let l = layout(t.path(), CgroupVersion::V1, CgroupDriver::Cgroupfs, "/");
    let got = l
        .read_cpuset(UID, QosClass::Burstable, &id(Runtime::Containerd))
        .unwrap();
    assert_eq!(got.dir, dir);
    assert_eq!(got.effective.to_string(), "0-3");
    assert_eq!(got.configured.unwrap().to_string(), "0-3");
}

#[test]
fn cgroupfs_v1_guaranteed_under_a_kubelet_cgroup_root() {
    // The real node's kubelet runs with cgroupRoot /nodetopo-node-<pid>-<n>; Guaranteed pods
    // have no QoS level.
    let t = tempfile::tempdir().unwrap();
    let dir = t
        .path()
        .join("cpuset/nodetopo-node-1-0/kubepods")
        .join(format!("pod{UID}"))
        .join(ID);
    // An old kernel without effective_cpus: the written set applies.
    make(&dir, &[("cpuset.cpus", "5")]);
    let l = layout(
        t.path(),
        CgroupVersion::V1,
        CgroupDriver::Cgroupfs,
        "/nodetopo-node-1-0",
    );
    let got = l
        .read_cpuset(UID, QosClass::Guaranteed, &id(Runtime::Containerd))
        .unwrap();
    assert_eq!(got.effective.to_string(), "5");
}

#[test]
fn cgroupfs_v2_crio_besteffort() {
    let t = tempfile::tempdir().unwrap();
    fs::write(t.path().join("cgroup.controllers"), "cpuset cpu memory\n").unwrap();
    let dir = t
        .path()
        .join("kubepods/besteffort")
        .join(format!("pod{UID}"))
        .join(format!("crio-{ID}"));
    make(
        &dir,
        &[("cpuset.cpus", "\n"), ("cpuset.cpus.effective", "0-7\n")],
    );
    assert_eq!(detect_version(t.path()), Some(CgroupVersion::V2));
    let l = layout(t.path(), CgroupVersion::V2, CgroupDriver::Cgroupfs, "");
    let got = l
        .read_cpuset(UID, QosClass::BestEffort, &id(Runtime::CriO))
        .unwrap();
    assert_eq!(
        got.configured, None,
        "an empty v2 cpuset.cpus was never written"
    );
    assert_eq!(got.effective.to_string(), "0-7");
}

#[test]
fn systemd_v2_containerd_escapes_the_uid() {
    let t = tempfile::tempdir().unwrap();
    let escaped = UID.replace('-', "_");
    let dir = t
        .path()
        .join("kubepods.slice/kubepods-burstable.slice")
        .join(format!("kubepods-burstable-pod{escaped}.slice"))
        .join(format!("cri-containerd-{ID}.scope"));
    make(
        &dir,
        &[("cpuset.cpus", "2-3"), ("cpuset.cpus.effective", "2-3")],
    );
    let l = layout(t.path(), CgroupVersion::V2, CgroupDriver::Systemd, "/");
    let got = l
        .read_cpuset(UID, QosClass::Burstable, &id(Runtime::Containerd))
        .unwrap();
    assert_eq!(got.dir, dir);
    assert_eq!(got.configured.unwrap().to_string(), "2-3");
}

#[test]
fn systemd_v1_crio_guaranteed() {
    let t = tempfile::tempdir().unwrap();
    let escaped = UID.replace('-', "_");
    let dir = t
        .path()
        .join("cpuset/kubepods.slice")
        .join(format!("kubepods-pod{escaped}.slice"))
        .join(format!("crio-{ID}.scope"));
    make(
        &dir,
        &[("cpuset.cpus", "4-5"), ("cpuset.effective_cpus", "4-5")],
    );
    assert_eq!(detect_version(t.path()), Some(CgroupVersion::V1));
    let l = layout(t.path(), CgroupVersion::V1, CgroupDriver::Systemd, "/");
    let got = l
        .read_cpuset(UID, QosClass::Guaranteed, &id(Runtime::CriO))
        .unwrap();
    assert_eq!(got.effective.to_string(), "4-5");
}

#[test]
fn systemd_names_a_dashed_cgroup_root_as_nested_slices() {
    let l = layout(
        Path::new("/x"),
        CgroupVersion::V2,
        CgroupDriver::Systemd,
        "/my-root",
    );
    let p = l.pod_path("ab-cd", QosClass::BestEffort).unwrap();
    assert_eq!(
        p,
        PathBuf::from(
            "my_root.slice/my_root-kubepods.slice/my_root-kubepods-besteffort.slice/my_root-kubepods-besteffort-podab_cd.slice"
        )
    );
}

#[test]
fn effective_set_wins_over_the_written_one() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("c");
    make(
        &dir,
        &[("cpuset.cpus", "0-7"), ("cpuset.effective_cpus", "0-3")],
    );
    let got = read_dir_cpuset(&dir, CgroupVersion::V1).unwrap();
    assert_eq!(got.effective.to_string(), "0-3");
    assert_eq!(got.configured.unwrap().to_string(), "0-7");
}

#[test]
fn a_missing_cgroup_is_not_found() {
    let t = tempfile::tempdir().unwrap();
    let l = layout(t.path(), CgroupVersion::V1, CgroupDriver::Cgroupfs, "/");
    let e = l
        .read_cpuset(UID, QosClass::Burstable, &id(Runtime::Containerd))
        .unwrap_err();
    assert!(
        matches!(e, CgroupError::NotFound(ref p) if p.ends_with(ID)),
        "{e}"
    );
}

#[test]
fn malformed_files_are_errors_naming_the_file() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("c");
    make(
        &dir,
        &[("cpuset.cpus", "0-"), ("cpuset.cpus.effective", "0-1")],
    );
    let e = read_dir_cpuset(&dir, CgroupVersion::V2).unwrap_err();
    assert!(
        e.to_string().contains("cpuset.cpus") && e.to_string().contains("\"0-\""),
        "{e}"
    );

    make(
        &dir,
        &[("cpuset.cpus", "1"), ("cpuset.cpus.effective", "zz")],
    );
    let e = read_dir_cpuset(&dir, CgroupVersion::V2).unwrap_err();
    assert!(e.to_string().contains("cpuset.cpus.effective"), "{e}");

    make(&dir, &[("cpuset.cpus.effective", "\u{0}\u{ff}")]);
    fs::write(dir.join("cpuset.cpus.effective"), [0xff, 0xfe]).unwrap();
    let e = read_dir_cpuset(&dir, CgroupVersion::V2).unwrap_err();
    assert!(e.to_string().contains("not UTF-8"), "{e}");
}

#[test]
fn an_oversized_file_is_refused_without_reading_it_all() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("c");
    make(&dir, &[]);
    fs::write(dir.join("cpuset.cpus"), "0,".repeat(40_000)).unwrap();
    let e = read_dir_cpuset(&dir, CgroupVersion::V1).unwrap_err();
    assert!(matches!(e, CgroupError::TooLarge { .. }), "{e}");
}

#[test]
fn v2_without_the_cpuset_controller_is_an_error() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("c");
    make(&dir, &[("cgroup.procs", "")]);
    let e = read_dir_cpuset(&dir, CgroupVersion::V2).unwrap_err();
    assert!(matches!(e, CgroupError::NoCpusetController(_)), "{e}");
}

#[test]
fn container_ids_parse_and_refuse_path_tricks() {
    let c = ContainerId::parse(&format!("containerd://{ID}")).unwrap();
    assert_eq!(c.runtime, Runtime::Containerd);
    assert_eq!(c.to_string(), format!("containerd://{ID}"));
    assert_eq!(
        ContainerId::parse("cri-o://abc").unwrap().runtime,
        Runtime::CriO
    );
    assert!(matches!(
        ContainerId::parse("docker://abc"),
        Err(IdError::Scheme(_))
    ));
    assert!(matches!(ContainerId::parse("abc"), Err(IdError::Scheme(_))));
    assert!(matches!(
        ContainerId::parse("containerd://../../etc"),
        Err(IdError::Characters { .. })
    ));
    let l = layout(
        Path::new("/x"),
        CgroupVersion::V1,
        CgroupDriver::Cgroupfs,
        "/",
    );
    assert!(l.pod_path("../x", QosClass::Burstable).is_err());
    assert!(l.pod_path("", QosClass::Burstable).is_err());
}
