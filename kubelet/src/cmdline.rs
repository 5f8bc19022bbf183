//! The running kubelet's command line, read from `/proc` (the host's, mounted read-only in
//! the agent's pod): which `--config` and `--config-dir` it was started with, and the
//! configuration flags that override its files and drop-ins (cmd/kubelet/app
//! `kubeletConfigFlagPrecedence`: after loading the files, the kubelet parses its command
//! line again into the loaded configuration, so every configuration flag given wins).
//!
//! Without this, a kubelet started without `--config-dir`, or with another directory, would
//! ignore nodetopo's drop-in while every file nodetopo reads says the change was made; a
//! gate turned off on the command line would only show when the kubelet refused to start;
//! and a `--reserved-cpus` on the command line would silently override the drop-in.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use nodetopo_engine::options::go_parse_bool;

pub mod flag_set;

/// The most bytes of one `/proc/PID/cmdline` read.
const MAX_CMDLINE_BYTES: u64 = 1 << 20;

/// One NUMA node's `--reserved-memory` entry (`<node>:<type>=<quantity>[,...]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryReservation {
    /// The NUMA node, converted to 32 bits as the kubelet does (`int32(strconv.Atoi(..))`).
    pub numa_node: i32,
    /// `memory` or `hugepages-<size>` to the quantity as written.
    pub limits: BTreeMap<String, String>,
}

/// The configuration flags the kubelet re-applies over its files (`None`: not on the
/// command line). Each is what the kubelet's flag type leaves after every occurrence:
/// a string flag keeps the last value; a map flag (`--kube-reserved`, ...) replaces the
/// files' whole map at its first occurrence and adds the pairs of later ones.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigFlags {
    /// `--cpu-manager-policy`.
    pub cpu_manager_policy: Option<String>,
    /// `--cpu-manager-policy-options` (one `key=value` per occurrence: the kubelet does not
    /// split this flag's value at commas).
    pub cpu_manager_policy_options: Option<BTreeMap<String, String>>,
    /// `--reserved-cpus`.
    pub reserved_cpus: Option<String>,
    /// `--kube-reserved`.
    pub kube_reserved: Option<BTreeMap<String, String>>,
    /// `--system-reserved`.
    pub system_reserved: Option<BTreeMap<String, String>>,
    /// `--topology-manager-policy`.
    pub topology_manager_policy: Option<String>,
    /// `--topology-manager-scope`.
    pub topology_manager_scope: Option<String>,
    /// `--topology-manager-policy-options`.
    pub topology_manager_policy_options: Option<BTreeMap<String, String>>,
    /// `--memory-manager-policy`.
    pub memory_manager_policy: Option<String>,
    /// `--reserved-memory`, occurrences appended in order.
    pub reserved_memory: Option<Vec<MemoryReservation>>,
    /// `--feature-gates`, every occurrence merged in order; they override the files' gates
    /// one by one (the files' other gates stay).
    pub feature_gates: BTreeMap<String, bool>,
}

impl ConfigFlags {
    /// The flags given, as `--name=value` words (for messages).
    pub fn describe(&self) -> Vec<String> {
        let map = |m: &BTreeMap<String, String>| {
            m.iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",")
        };
        let mut out = Vec::new();
        let mut s = |name: &str, v: &Option<String>| {
            if let Some(v) = v {
                out.push(format!("--{name}={v}"));
            }
        };
        s("cpu-manager-policy", &self.cpu_manager_policy);
        s(
            "cpu-manager-policy-options",
            &self.cpu_manager_policy_options.as_ref().map(map),
        );
        s("reserved-cpus", &self.reserved_cpus);
        s("kube-reserved", &self.kube_reserved.as_ref().map(map));
        s("system-reserved", &self.system_reserved.as_ref().map(map));
        s("topology-manager-policy", &self.topology_manager_policy);
        s("topology-manager-scope", &self.topology_manager_scope);
        s(
            "topology-manager-policy-options",
            &self.topology_manager_policy_options.as_ref().map(map),
        );
        s("memory-manager-policy", &self.memory_manager_policy);
        s(
            "reserved-memory",
            &self.reserved_memory.as_ref().map(|r| {
                r.iter()
                    .map(|m| format!("{}:{}", m.numa_node, map(&m.limits)))
                    .collect::<Vec<_>>()
                    .join(";")
            }),
        );
        if !self.feature_gates.is_empty() {
            out.push(format!(
                "--feature-gates={}",
                self.feature_gates
                    .iter()
                    .map(|(g, v)| format!("{g}={v}"))
                    .collect::<Vec<_>>()
                    .join(",")
            ));
        }
        out
    }
}

/// What nodetopo needs from a kubelet's command line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KubeletCommandLine {
    /// The process.
    pub pid: u32,
    /// `--config`.
    pub config: Option<String>,
    /// `--config-dir`.
    pub config_dir: Option<String>,
    /// The configuration flags, which override the files.
    pub flags: ConfigFlags,
    /// Why its command line could not be read as a kubelet's (a flag without a value, a
    /// bad value of a configuration flag); it matters only for the kubelet nodetopo checks
    /// ([`decide`]), so a broken command line elsewhere blocks nothing.
    pub error: Option<String>,
}

impl KubeletCommandLine {
    /// `process <pid> with --config <file>` (`(none)` without one), as errors name a kubelet.
    pub fn describe_process(&self) -> String {
        format!(
            "process {} with --config {}",
            self.pid,
            self.config.as_deref().unwrap_or("(none)")
        )
    }
}

/// The words of a command line: NUL-separated as in `/proc/PID/cmdline` (each argument
/// ends with a NUL; an empty argument, as in `--reserved-cpus ""`, is an empty word, a
/// value the kubelet takes), or, without a NUL, whitespace-separated text (`ps -o args=`).
pub fn words(bytes: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(bytes);
    if text.contains('\0') {
        let text = text.strip_suffix('\0').unwrap_or(&text);
        text.split('\0').map(String::from).collect()
    } else {
        text.split_whitespace().map(String::from).collect()
    }
}

/// Go's `strings.TrimSpace` (Unicode white space).
fn trim(s: &str) -> &str {
    s.trim_matches(char::is_whitespace)
}

/// component-base's `MapStringString.Set`: the first occurrence replaces the files' map;
/// pairs are split at commas unless `no_split`; empty pieces are skipped; key and value
/// are trimmed.
fn set_map(
    target: &mut Option<BTreeMap<String, String>>,
    value: &str,
    no_split: bool,
) -> Result<(), String> {
    let map = target.get_or_insert_with(BTreeMap::new);
    let pieces: Vec<&str> = if no_split {
        vec![value]
    } else {
        value.split(',').filter(|p| !p.is_empty()).collect()
    };
    for piece in pieces {
        let Some((k, v)) = piece.split_once('=') else {
            return Err(format!("{piece:?} is not KEY=VALUE"));
        };
        map.insert(trim(k).to_string(), trim(v).to_string());
    }
    Ok(())
}

/// component-base's `MapStringBool.Set` into `gates` (merged over earlier occurrences).
fn set_gates(gates: &mut BTreeMap<String, bool>, value: &str) -> Result<(), String> {
    for piece in value.split(',').filter(|p| !p.is_empty()) {
        let Some((gate, v)) = piece.split_once('=') else {
            return Err(format!("{piece:?} is not GATE=BOOL"));
        };
        let (gate, v) = (trim(gate), trim(v));
        let Some(b) = go_parse_bool(v) else {
            return Err(format!("{piece:?}: {v:?} is not a boolean"));
        };
        gates.insert(gate.to_string(), b);
    }
    Ok(())
}

/// Go's `strconv.Atoi` then `int32(...)`, as the kubelet reads a NUMA node of
/// `--reserved-memory`.
fn go_atoi_i32(s: &str) -> Option<i32> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse::<i64>().ok().map(|v| v as i32)
}

/// The kubelet's `ReservedMemoryVar.Set`. Its quirk kept: an empty value does not clear
/// the reservations but detaches the flag, so the files' `reservedMemory` stays and a later
/// `--reserved-memory` is an error.
fn set_reserved_memory(
    target: &mut Option<Vec<MemoryReservation>>,
    detached: &mut bool,
    value: &str,
) -> Result<(), String> {
    if *detached {
        return Err(
            "given again after an empty --reserved-memory, which the kubelet refuses (no target)"
                .into(),
        );
    }
    if value.is_empty() {
        *detached = true;
        return Ok(());
    }
    let list = target.get_or_insert_with(Vec::new);
    for reservation in value.split(';') {
        let parts: Vec<&str> = reservation.split(':').collect();
        let [node, limits] = parts[..] else {
            return Err(format!(
                "{reservation:?} is not NUMA-NODE:TYPE=QUANTITY[,TYPE=QUANTITY...]"
            ));
        };
        let Some(numa_node) = go_atoi_i32(node) else {
            return Err(format!("NUMA node {node:?} is not an integer"));
        };
        let mut m = MemoryReservation {
            numa_node,
            limits: BTreeMap::new(),
        };
        for limit in limits.split(',') {
            let parts: Vec<&str> = limit.split('=').collect();
            let [name, q] = parts[..] else {
                return Err(format!("{limit:?} is not TYPE=QUANTITY"));
            };
            if name != "memory" && !name.starts_with("hugepages-") {
                return Err(format!(
                    "{name:?} is not a memory type (memory or hugepages-<size>)"
                ));
            }
            nodetopo_engine::quantity::Quantity::parse(q).map_err(|e| format!("{name}: {e}"))?;
            m.limits.insert(name.to_string(), q.to_string());
        }
        list.push(m);
    }
    Ok(())
}

/// Parses a kubelet's arguments (without the program name) as its flag library (pflag)
/// parses them into the kubelet's flag set ([`flag_set::KUBELET_FLAGS`], every flag of the
/// kubelet v1.37.2 with whether it takes a value): `--name=value`, or `--name value` (the
/// next word, whatever it is) for a flag that needs a value, a bare `--name` for one that
/// does not (the booleans, `--version`); `_` in a long name read as `-`; the shorthands
/// `-v 2`, `-v=2`, `-v2`, `-h` (also run together, `-hv2`). As the kubelet, it refuses an
/// unknown flag (it could not tell whether the next word is the flag's value), a word that
/// is not a flag and anything after a lone `--` (the kubelet's "unknown command"), a flag
/// without its value, a boolean flag whose value is not Go's boolean, a log level (`-v`)
/// that is not a number, `--help` and `--version` (the kubelet prints and exits), and a bad
/// value of a configuration flag it reads; each error names the flag. The values of the
/// other flags (numbers, durations, addresses ...) are not checked.
pub fn parse(pid: u32, args: &[String]) -> Result<KubeletCommandLine, String> {
    let k = parse_lenient(pid, args);
    match k.error {
        Some(e) => Err(e),
        None => Ok(k),
    }
}

/// [`parse`] that keeps what it read when a flag is broken, the first problem in `error`.
pub fn parse_lenient(pid: u32, args: &[String]) -> KubeletCommandLine {
    let mut out = KubeletCommandLine {
        pid,
        ..Default::default()
    };
    if let Err(e) = parse_into(&mut out, args) {
        out.error = Some(e);
    }
    out
}

/// The kubelet's flag named `name` (after `_` -> `-`, as the kubelet normalises names).
fn long_flag(name: &str) -> Option<&'static flag_set::FlagSpec> {
    let name = name.replace('_', "-");
    flag_set::KUBELET_FLAGS.iter().find(|f| f.name == name)
}

fn short_flag(c: u8) -> Option<&'static flag_set::FlagSpec> {
    flag_set::KUBELET_FLAGS
        .iter()
        .find(|f| f.shorthand.is_some_and(|s| s as u32 == u32::from(c)))
}

/// A flag of the kubelet's flag set with its value.
type FlagValue = (&'static flag_set::FlagSpec, String);

/// pflag's `parseArgs` over the kubelet's flag set: each flag with its value, in order, up to
/// the first word the kubelet would refuse (its error beside the flags read before it).
fn flags_of(args: &[String]) -> (Vec<FlagValue>, Option<String>) {
    let mut out = Vec::new();
    let error = read_flags(args, &mut out).err();
    (out, error)
}

fn read_flags(args: &[String], out: &mut Vec<FlagValue>) -> Result<(), String> {
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        if arg == "--" {
            // The rest are arguments, which the kubelet refuses.
            if let Some(word) = args.get(i) {
                return Err(format!(
                    "{word:?} after \"--\" is not a flag: the kubelet refuses to start on it (unknown command)"
                ));
            }
            break;
        }
        if arg.len() < 2 || !arg.starts_with('-') {
            return Err(format!(
                "{arg:?} is not a flag: the kubelet refuses to start on it (unknown command)"
            ));
        }
        if let Some(long) = arg.strip_prefix("--") {
            if long.starts_with(['-', '=']) {
                return Err(format!(
                    "{arg:?}: bad flag syntax, which the kubelet refuses"
                ));
            }
            let (name, inline) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (long, None),
            };
            let Some(spec) = long_flag(name) else {
                return Err(format!(
                    "--{name} is not a flag of the kubelet (v1.37.2), which refuses to start on it; nodetopo cannot tell whether the next word is its value"
                ));
            };
            let value = match (inline, spec.bare) {
                (Some(v), _) => v.to_string(),
                (None, Some(bare)) => bare.to_string(),
                (None, None) => {
                    let Some(v) = args.get(i) else {
                        return Err(format!("--{} has no value", spec.name));
                    };
                    i += 1;
                    v.clone()
                }
            };
            out.push((spec, value));
            continue;
        }
        // Shorthands, one letter after the other.
        let mut shorts = &arg.as_bytes()[1..];
        if shorts.starts_with(b"test.") {
            continue; // pflag skips Go test flags
        }
        while let Some(&c) = shorts.first() {
            let Some(spec) = short_flag(c) else {
                return Err(format!(
                    "-{} in {arg:?} is not a shorthand flag of the kubelet, which refuses to start on it",
                    char::from(c)
                ));
            };
            let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
            let value = if shorts.len() > 2 && shorts[1] == b'=' {
                let v = text(&shorts[2..]);
                shorts = &[];
                v
            } else if let Some(bare) = spec.bare {
                shorts = &shorts[1..];
                bare.to_string()
            } else if shorts.len() > 1 {
                let v = text(&shorts[1..]);
                shorts = &[];
                v
            } else {
                shorts = &[];
                let Some(v) = args.get(i) else {
                    return Err(format!("-{} has no value", char::from(c)));
                };
                i += 1;
                v.clone()
            };
            out.push((spec, value));
        }
    }
    Ok(())
}

fn parse_into(out: &mut KubeletCommandLine, args: &[String]) -> Result<(), String> {
    let mut memory_detached = false;
    // `--help` and `--version` as they end up (the kubelet looks at them after parsing).
    let (mut help, mut version) = (None, None);
    // The flags before a refused word are kept (a lenient read names what it saw); the
    // refusal is returned after them.
    let (flags, refused) = flags_of(args);
    for (spec, value) in flags {
        let name = spec.name;
        if spec.kind == "bool" {
            let Some(b) = go_parse_bool(&value) else {
                return Err(format!(
                    "--{name}={value}: {value:?} is not a boolean, which the kubelet refuses"
                ));
            };
            if name == "help" {
                help = Some(b);
            }
            continue;
        }
        // klog's `Level.Set`: `strconv.ParseUint(value, 10, 32)`.
        if spec.kind == "Level"
            && !(!value.is_empty()
                && value.bytes().all(|b| b.is_ascii_digit())
                && value.parse::<u32>().is_ok())
        {
            return Err(format!(
                "--{name}={value}: {value:?} is not a log level (a number), which the kubelet refuses"
            ));
        }
        if name == "version" {
            // verflag: true, false, `raw`, or `v...` (the version to report; not checked).
            if go_parse_bool(&value).is_none() && value != "raw" && !value.starts_with('v') {
                return Err(format!(
                    "--version={value}: not true, false, raw or vX.Y.Z, which the kubelet refuses"
                ));
            }
            version = Some(value);
            continue;
        }
        let f = &mut out.flags;
        let set = match name {
            "config" => {
                out.config = Some(value.clone());
                Ok(())
            }
            // The kubelet merges drop-ins only when the flag's value is not empty
            // (`len(KubeletConfigDir) > 0`): `--config-dir=` means none, also after an
            // earlier non-empty one (the last occurrence wins).
            "config-dir" => {
                out.config_dir = (!value.is_empty()).then(|| value.clone());
                Ok(())
            }
            "feature-gates" => set_gates(&mut f.feature_gates, &value),
            "cpu-manager-policy" => {
                f.cpu_manager_policy = Some(value.clone());
                Ok(())
            }
            "cpu-manager-policy-options" => {
                set_map(&mut f.cpu_manager_policy_options, &value, true)
            }
            "reserved-cpus" => {
                f.reserved_cpus = Some(value.clone());
                Ok(())
            }
            "kube-reserved" => set_map(&mut f.kube_reserved, &value, false),
            "system-reserved" => set_map(&mut f.system_reserved, &value, false),
            "topology-manager-policy" => {
                f.topology_manager_policy = Some(value.clone());
                Ok(())
            }
            "topology-manager-scope" => {
                f.topology_manager_scope = Some(value.clone());
                Ok(())
            }
            "topology-manager-policy-options" => {
                set_map(&mut f.topology_manager_policy_options, &value, false)
            }
            "memory-manager-policy" => {
                f.memory_manager_policy = Some(value.clone());
                Ok(())
            }
            "reserved-memory" => {
                set_reserved_memory(&mut f.reserved_memory, &mut memory_detached, &value)
            }
            // A flag nodetopo does not read.
            _ => Ok(()),
        };
        set.map_err(|e| format!("--{name}={value}: {e}"))?;
    }
    if let Some(e) = refused {
        return Err(e);
    }
    // With files to read, the kubelet re-reads its command line over them
    // (`kubeletConfigFlagPrecedence`) with a flag set that has no `--help`: pflag ends the
    // kubelet there, whatever the flag's value. (Its global flags take a value in that
    // re-reading; the one that may be bare, `--version`, has ended it before.)
    if help == Some(true) {
        return Err("--help: the kubelet prints its help and exits".into());
    }
    if let Some(v) = version.filter(|v| v == "raw" || go_parse_bool(v) == Some(true)) {
        return Err(format!(
            "--version={v}: the kubelet prints its version and exits"
        ));
    }
    let files = out.config.as_deref().is_some_and(|c| !c.is_empty()) || out.config_dir.is_some();
    if help.is_some() && files {
        return Err(
            "--help: the kubelet exits re-reading its flags over its files (--help is no flag there)"
                .into(),
        );
    }
    Ok(())
}

/// A kubelet command line saved to a file (a copy of `/proc/<pid>/cmdline`, NUL-separated,
/// or the same as text, `ps -o args= -p <pid>`), parsed as [`parse`] does. The program name
/// is optional: the arguments start at the first flag. An error names the file.
pub fn read_file(path: &Path) -> anyhow::Result<KubeletCommandLine> {
    let bytes = nodetopo_engine::files::read_bounded(path, MAX_CMDLINE_BYTES)
        .map_err(|e| anyhow::anyhow!("{}: the file {e}", path.display()))?;
    let words = words(&bytes);
    let Some(program) = words.first() else {
        anyhow::bail!("{}: empty", path.display());
    };
    let skip = usize::from(!program.starts_with('-'));
    parse(0, &words[skip..]).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// The effective uid of process `pid` (its `status` file's `Uid:` line), `None` when
/// unreadable.
fn effective_uid(dir: &Path) -> Option<u32> {
    let bytes =
        nodetopo_engine::files::read_bounded(&dir.join("status"), MAX_CMDLINE_BYTES).ok()?;
    let text = String::from_utf8_lossy(&bytes);
    let line = text.lines().find_map(|l| l.strip_prefix("Uid:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The file name of the program process `dir` runs (`exe`, without the ` (deleted)` a
/// replaced binary shows), `None` when the link cannot be read (a process of another
/// user, or a caller without CAP_SYS_PTRACE: the agent's pod).
fn executable_name(dir: &Path) -> Option<String> {
    let target = std::fs::read_link(dir.join("exe")).ok()?;
    let name = target.file_name()?.to_string_lossy().into_owned();
    Some(name.strip_suffix(" (deleted)").unwrap_or(&name).to_string())
}

/// Whether the process in `dir` with command line `argv` is a kubelet: it runs as root
/// (effective uid 0: no other user can start one, whatever it names itself) and its
/// executable is a file named `kubelet`; only when the executable cannot be read does
/// the program name in its command line count instead.
fn is_kubelet(dir: &Path, argv: &[String]) -> bool {
    if effective_uid(dir) != Some(0) {
        return false;
    }
    match executable_name(dir) {
        Some(exe) => exe == "kubelet",
        None => argv
            .first()
            .is_some_and(|p| Path::new(p).file_name().and_then(|n| n.to_str()) == Some("kubelet")),
    }
}

/// The command lines of the kubelet processes under `proc_root` (see [`is_kubelet`]: root
/// processes whose executable is named `kubelet`), by PID. Processes that end while being
/// read are skipped; a command line that cannot be read as a kubelet's is kept with its
/// `error` (only the kubelet nodetopo checks must have a valid one).
pub fn kubelets(proc_root: &Path) -> anyhow::Result<Vec<KubeletCommandLine>> {
    let entries = std::fs::read_dir(proc_root)
        .map_err(|e| anyhow::anyhow!("{}: cannot list processes: {e}", proc_root.display()))?;
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry
            .map_err(|e| anyhow::anyhow!("{}: cannot list processes: {e}", proc_root.display()))?;
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let dir = entry.path();
        let path = dir.join("cmdline");
        // Gone, a kernel thread (empty), or not ours to read: not a kubelet to check.
        let Ok(bytes) = nodetopo_engine::files::read_bounded(&path, MAX_CMDLINE_BYTES) else {
            continue;
        };
        let argv = words(&bytes);
        if argv.is_empty() || !is_kubelet(&dir, &argv) {
            continue;
        }
        let mut k = parse_lenient(pid, &argv[1..]);
        k.error = k
            .error
            .map(|e| format!("the kubelet process {pid} ({}): {e}", path.display()));
        out.push(k);
    }
    out.sort_by_key(|k| k.pid);
    Ok(out)
}

/// Where to look for the kubelet, and its files as the host names them (the agent may see
/// them under other paths).
#[derive(Debug, Clone)]
pub struct ProcessCheck {
    /// The host's `/proc`.
    pub proc_root: PathBuf,
    /// The kubelet's `--config` on the host.
    pub host_config: PathBuf,
    /// The kubelet's `--config-dir` on the host.
    pub host_config_dir: PathBuf,
}

/// What the check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Checked {
    /// The kubelet that reads the config file runs with the drop-in directory.
    Found(Box<KubeletCommandLine>),
    /// No kubelet process is visible: nothing checked (the message says so).
    NoKubelet,
}

impl Checked {
    /// The command line's configuration flags (none when nothing was found).
    pub fn flags(&self) -> ConfigFlags {
        match self {
            Checked::Found(k) => k.flags.clone(),
            Checked::NoKubelet => ConfigFlags::default(),
        }
    }

    /// The command line's feature gates (none when nothing was found).
    pub fn feature_gates(&self) -> BTreeMap<String, bool> {
        match self {
            Checked::Found(k) => k.flags.feature_gates.clone(),
            Checked::NoKubelet => BTreeMap::new(),
        }
    }

    /// One line for the report.
    pub fn describe(&self, check: &ProcessCheck) -> String {
        match self {
            Checked::Found(k) => {
                let flags = k.flags.describe();
                format!(
                    "kubelet process {} runs with --config {} and --config-dir {}{}",
                    k.pid,
                    check.host_config.display(),
                    check.host_config_dir.display(),
                    if flags.is_empty() {
                        String::new()
                    } else {
                        format!(" and {}", flags.join(" "))
                    }
                )
            }
            Checked::NoKubelet => format!(
                "no kubelet process under {}: its command line (--config-dir, configuration flags such as --feature-gates or --reserved-cpus) was not checked",
                check.proc_root.display()
            ),
        }
    }
}

fn same(a: &str, b: &Path) -> bool {
    Path::new(a).components().eq(b.components())
}

/// Decides from the kubelets found: the one started with the host's config file must read
/// the drop-in directory nodetopo writes into. Several kubelets with other config files
/// (and none with this one) are an error, as is a kubelet without `--config-dir` or with
/// another one: a drop-in would be ignored.
pub fn decide(found: Vec<KubeletCommandLine>, check: &ProcessCheck) -> anyhow::Result<Checked> {
    if found.is_empty() {
        return Ok(Checked::NoKubelet);
    }
    let (mut ours, others): (Vec<_>, Vec<_>) = found.into_iter().partition(|k| {
        k.config
            .as_deref()
            .is_some_and(|c| same(c, &check.host_config))
    });
    let Some(k) = ours.pop() else {
        let seen: Vec<String> = others
            .iter()
            .map(KubeletCommandLine::describe_process)
            .collect();
        anyhow::bail!(
            "no kubelet runs with --config {} ({}): nodetopo would change files this node's kubelet does not read",
            check.host_config.display(),
            seen.join(", ")
        );
    };
    if let Some(e) = &k.error {
        anyhow::bail!("{e}");
    }
    if !ours.is_empty() {
        anyhow::bail!(
            "kubelet processes {} and {} both run with --config {}: cannot tell which one to check",
            ours[0].pid,
            k.pid,
            check.host_config.display()
        );
    }
    match &k.config_dir {
        None => anyhow::bail!(
            "the kubelet (process {}) runs without --config-dir, so it would ignore nodetopo's drop-in in {}: start it with --config-dir={}",
            k.pid,
            check.host_config_dir.display(),
            check.host_config_dir.display()
        ),
        Some(d) if !same(d, &check.host_config_dir) => anyhow::bail!(
            "the kubelet (process {}) reads its drop-ins from --config-dir {d}, not {}: nodetopo's drop-in would be ignored; set the agent's kubelet config dir to {d}",
            k.pid,
            check.host_config_dir.display()
        ),
        Some(_) => Ok(Checked::Found(Box::new(k))),
    }
}

/// [`kubelets`] then [`decide`].
pub fn check(check: &ProcessCheck) -> anyhow::Result<Checked> {
    decide(kubelets(&check.proc_root)?, check)
}

#[cfg(test)]
mod tests;
