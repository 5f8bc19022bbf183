//! The kubelet's Memory Manager checkpoint (`memory_manager_state`), read and written as
//! k8s.io/kubernetes v1.37.2 does (`pkg/kubelet/cm/memorymanager/state/checkpoint.go` and
//! `state_checkpoint.go`). The one reader of this file: the agent (its NodeResourceTopology
//! memory when the kubelet's PodResources API is not read) uses it.
//!
//! The versions the kubelet writes or migrates:
//! - v3 (kubelet 1.37, kubernetes PR #139626): the v1 fields (`policyName`, `machineState`,
//!   `entries`, `checksum`) kept at the top level for older kubelets, plus `data` (the state,
//!   with `podEntries`, as a JSON string) and `dataChecksum` over `data`;
//! - v2: v1 plus `podEntries` (pod-level resource managers), one `checksum`;
//! - v1: `policyName`, `machineState`, `entries`, `checksum`.
//!
//! Reading follows the kubelet's `restoreState`:
//! - v3 first: the text is decoded (Go's JSON rules, [`crate::gojson`]), then `data`; only
//!   `dataChecksum` is verified, over `data`, and the state is `data`'s (the top-level v1
//!   view and its `checksum` are not used, though they must still decode). When `data` or
//!   `dataChecksum` is set, a failure is final: the kubelet does not fall back;
//! - else v2, whose `checksum` must match (no zero exemption) the Go print under the legacy
//!   struct name `MemoryManagerCheckpoint`;
//! - else v1, the same without `podEntries`; a recorded checksum of 0 is accepted
//!   unverified (so a v2 file whose checksum is 0 loads as v1, without its pod entries).
//!
//! The kubelet restores `podEntries` only with the `PodLevelResourceManagers` feature gate
//! on; [`MemoryCheckpoint::state`] holds what the file says either way.
//!
//! A file the kubelet would refuse only for a checksum is returned with
//! [`ChecksumCheck::Mismatch`]; any other refusal is an error naming what is wrong. A memory
//! table written as `null`, which the kubelet v1.37.2 dereferences while restoring (it
//! crashes), is refused here.
//!
//! Writing ([`render`]) produces the bytes of the kubelet's own `MarshalCheckpoint` for v1,
//! v2 and v3.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use nodetopo_engine::memorymanager::{MemoryResource, MemoryTable as EngineTable};
use serde_json::value::RawValue;

pub use crate::cpu_checkpoint::ChecksumCheck;
use crate::gohash::{data_checksum, fnv32a};
use crate::gojson::{self, go_json_string, GoObject};

/// A checkpoint version the kubelet writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MemoryCheckpointFormat {
    /// v1: kubelets before pod-level resource managers.
    V1,
    /// v2: v1 with `podEntries`.
    V2,
    /// v3: kubelet 1.37 (`data` + `dataChecksum`, the v1 fields embedded for older kubelets).
    V3,
}

/// One NUMA node's table for one memory type (`state.MemoryTable`), in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemoryTable {
    /// `total`.
    pub total: u64,
    /// `systemReserved`.
    pub system_reserved: u64,
    /// `allocatable`.
    pub allocatable: u64,
    /// `reserved` (given out).
    pub reserved: u64,
    /// `free`.
    pub free: u64,
}

/// One NUMA node (`state.NUMANodeState`); `None` fields are Go's nil.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NumaNodeState {
    /// `numberOfAssignments`.
    pub number_of_assignments: i64,
    /// `memoryMap`: memory type (`memory`, `hugepages-2Mi`) -> table (`None`: `null`).
    pub memory_map: Option<BTreeMap<String, Option<MemoryTable>>>,
    /// `cells`: the NUMA nodes grouped with this one.
    pub cells: Option<Vec<i64>>,
}

/// One block of pinned memory (`state.Block`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Block {
    /// `numaAffinity`.
    pub numa_affinity: Option<Vec<i64>>,
    /// `type`: `memory` or `hugepages-<size>`.
    pub resource: String,
    /// `size` in bytes.
    pub size: u64,
}

/// NUMA node id -> state (`None`: `null`).
pub type NumaNodeMap = BTreeMap<i64, Option<NumaNodeState>>;
/// pod UID -> container -> blocks (`state.ContainerMemoryAssignments`).
pub type ContainerAssignments = BTreeMap<String, Option<BTreeMap<String, Option<Vec<Block>>>>>;
/// pod UID -> the pod-level blocks (`state.PodMemoryAssignments`, `PodEntry.memoryBlocks`).
pub type PodAssignments = BTreeMap<String, Option<Vec<Block>>>;

/// The checkpoint's state, as Go holds it after decoding (`None` maps and lists are nil,
/// which the checksums tell apart from empty ones).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MemoryState {
    /// `Static` or `None` (the kubelet refuses to start when it differs from its policy).
    pub policy_name: String,
    /// Per NUMA node, the Memory Manager's tables.
    pub machine_state: Option<NumaNodeMap>,
    /// Container-level assignments.
    pub entries: Option<ContainerAssignments>,
    /// Pod-level assignments (v2 and v3; restored by the kubelet only with the
    /// `PodLevelResourceManagers` gate on).
    pub pod_entries: Option<PodAssignments>,
}

/// A Memory Manager checkpoint as the kubelet would restore it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryCheckpoint {
    /// The state the kubelet runs with (v3: `data`'s).
    pub state: MemoryState,
    /// The checksum the kubelet verifies (`dataChecksum` for v3).
    pub checksum: u64,
    /// The version the kubelet loads the file as.
    pub format: MemoryCheckpointFormat,
    /// The verdict on that checksum.
    pub checksum_check: ChecksumCheck,
}

/// The engine's tables per NUMA node and memory resource.
pub type Tables = BTreeMap<usize, BTreeMap<MemoryResource, EngineTable>>;

/// A memory type name as a resource (`memory`, `hugepages-<size>`).
fn resource(name: &str) -> Option<MemoryResource> {
    if name == "memory" {
        return Some(MemoryResource::Memory);
    }
    let size = name.strip_prefix("hugepages-")?;
    match nodetopo_engine::quantity::parse_units(size) {
        Ok(page_bytes) if page_bytes > 0 => Some(MemoryResource::HugePages { page_bytes }),
        _ => None,
    }
}

impl MemoryCheckpoint {
    /// The checkpoint as the kubelet would run with it: an error naming the checksum when
    /// the kubelet would refuse the file for it.
    pub fn trusted(&self) -> Result<&MemoryState, String> {
        match &self.checksum_check {
            ChecksumCheck::Mismatch {
                field,
                recorded,
                computed,
            } => Err(format!(
                "{field} {recorded} does not match the content (computed {computed}); the kubelet would refuse this file"
            )),
            ChecksumCheck::Verified | ChecksumCheck::NotRecorded => Ok(&self.state),
        }
    }
}

impl MemoryState {
    /// The Memory Manager's tables per NUMA node (the machine state), in the engine's
    /// types. Errors name a node id that cannot be one, a node or table written as `null`,
    /// a memory type that is neither `memory` nor `hugepages-<size>`, and a table whose
    /// numbers contradict each other (free + reserved must be allocatable, allocatable
    /// plus system-reserved at most total).
    pub fn tables(&self) -> Result<Tables, String> {
        let mut out = Tables::new();
        for (id, node) in self.machine_state.iter().flatten() {
            let n = usize::try_from(*id)
                .ok()
                .filter(|n| *n < 1024)
                .ok_or_else(|| format!("machineState: {id} is not a NUMA node id"))?;
            let node = node
                .as_ref()
                .ok_or_else(|| format!("machineState[{id}] is null"))?;
            let t = out.entry(n).or_default();
            for (name, table) in node.memory_map.iter().flatten() {
                let r = resource(name).ok_or_else(|| {
                    format!(
                        "machineState[{id}].memoryMap: {name:?} is not memory or hugepages-<size>"
                    )
                })?;
                let m = table
                    .as_ref()
                    .ok_or_else(|| format!("machineState[{id}].memoryMap[{name}] is null"))?;
                let consistent = m.free.checked_add(m.reserved) == Some(m.allocatable)
                    && m.allocatable
                        .checked_add(m.system_reserved)
                        .is_some_and(|s| s <= m.total);
                if !consistent {
                    return Err(format!(
                        "machineState[{id}].memoryMap[{name}]: total {}, systemReserved {}, allocatable {}, reserved {}, free {} do not add up (free + reserved = allocatable, allocatable + systemReserved <= total)",
                        m.total, m.system_reserved, m.allocatable, m.reserved, m.free
                    ));
                }
                t.insert(
                    r,
                    EngineTable {
                        total: m.total,
                        system_reserved: m.system_reserved,
                        allocatable: m.allocatable,
                        free: m.free,
                        reserved: m.reserved,
                    },
                );
            }
        }
        Ok(out)
    }

    /// Every pod-level block: pod UID -> blocks (empty pods left out).
    pub fn pod_level_blocks(&self) -> BTreeMap<&str, &[Block]> {
        self.pod_entries
            .iter()
            .flatten()
            .filter_map(|(uid, b)| {
                b.as_deref()
                    .filter(|b| !b.is_empty())
                    .map(|b| (uid.as_str(), b))
            })
            .collect()
    }
}

// ------------------------------------------------------------------ decoding (Go's rules)

/// A value's text cut for an error message (a hostile file can hold megabytes).
fn shown(raw: &RawValue) -> String {
    let t = raw.get();
    match t.char_indices().nth(40) {
        Some((i, _)) => format!("{}...", &t[..i]),
        None => t.to_string(),
    }
}

fn is_null(raw: &RawValue) -> bool {
    raw.get().trim() == "null"
}

/// An integer field (Go `int`/`uint64`: `strconv.Parse{Int,Uint}` of the literal, so no
/// fraction or exponent); `null` leaves the slot as it was.
fn int<T: std::str::FromStr>(raw: &RawValue, what: &str, slot: &mut T, errors: &mut Vec<String>) {
    if is_null(raw) {
        return;
    }
    match raw.get().trim().parse::<T>() {
        Ok(v) => *slot = v,
        Err(_) => errors.push(format!(
            "{what}: {} is not a {}",
            shown(raw),
            std::any::type_name::<T>()
        )),
    }
}

fn string(raw: &RawValue, what: &str, slot: &mut String, errors: &mut Vec<String>) {
    match serde_json::from_str::<Option<String>>(raw.get()) {
        Ok(Some(s)) => *slot = s,
        Ok(None) => {}
        Err(_) => errors.push(format!("{what}: {} is not a string", shown(raw))),
    }
}

/// An object as Go decodes it into a struct: `None` for `null` (the struct is left as it
/// was) and for a value of another type (an error).
fn object(raw: &RawValue, what: &str, errors: &mut Vec<String>) -> Option<GoObject> {
    if is_null(raw) {
        return None;
    }
    match GoObject::parse(raw.get()) {
        Ok(o) => Some(o),
        Err(e) => {
            errors.push(format!("{what}: {e}"));
            None
        }
    }
}

/// A slice as Go decodes it: `null` makes it nil; an array reuses the elements already
/// there (each decoded into in place, `null` leaving it) and is cut to the array's length.
fn slice<T: Default>(
    raw: &RawValue,
    what: &str,
    slot: &mut Option<Vec<T>>,
    errors: &mut Vec<String>,
    mut elem: impl FnMut(&RawValue, &str, &mut T, &mut Vec<String>),
) {
    if is_null(raw) {
        *slot = None;
        return;
    }
    let items: Vec<&RawValue> = match serde_json::from_str(raw.get()) {
        Ok(v) => v,
        Err(_) => {
            errors.push(format!("{what}: {} is not a list", shown(raw)));
            return;
        }
    };
    let v = slot.get_or_insert_with(Vec::new);
    for (i, item) in items.iter().enumerate() {
        if i >= v.len() {
            v.push(T::default());
        }
        elem(item, &format!("{what}[{i}]"), &mut v[i], errors);
    }
    v.truncate(items.len());
}

/// A map as Go decodes it: `null` makes it nil; an object adds its members to the map
/// (created when nil), each value decoded into a fresh element, a repeated key replacing.
fn map<K: Ord, V>(
    raw: &RawValue,
    what: &str,
    slot: &mut Option<BTreeMap<K, V>>,
    errors: &mut Vec<String>,
    key: impl Fn(&str) -> Option<K>,
    mut value: impl FnMut(&RawValue, &str, &mut Vec<String>) -> V,
) {
    if is_null(raw) {
        *slot = None;
        return;
    }
    let Some(o) = object(raw, what, errors) else {
        return;
    };
    let m = slot.get_or_insert_with(BTreeMap::new);
    for (k, v) in o.members() {
        let what = format!("{what}[{k:?}]");
        let decoded = value(v, &what, errors);
        match key(k) {
            Some(k) => {
                m.insert(k, decoded);
            }
            None => errors.push(format!("{what}: the key is not an integer")),
        }
    }
}

fn ints(raw: &RawValue, what: &str, slot: &mut Option<Vec<i64>>, errors: &mut Vec<String>) {
    slice(raw, what, slot, errors, int);
}

const TABLE_FIELDS: &[&str] = &["total", "systemReserved", "allocatable", "reserved", "free"];
const NODE_FIELDS: &[&str] = &["numberOfAssignments", "memoryMap", "cells"];
const BLOCK_FIELDS: &[&str] = &["numaAffinity", "type", "size"];

/// A pointer element (`*T` in a map): `null` is nil, an object a new value.
fn pointer<T: Default>(
    raw: &RawValue,
    what: &str,
    errors: &mut Vec<String>,
    fields: impl FnOnce(&GoObject, &str, &mut T, &mut Vec<String>),
) -> Option<T> {
    let o = object(raw, what, errors)?;
    let mut t = T::default();
    fields(&o, what, &mut t, errors);
    Some(t)
}

fn table_fields(o: &GoObject, what: &str, t: &mut MemoryTable, errors: &mut Vec<String>) {
    let slots: [(&str, &mut u64); 5] = [
        ("total", &mut t.total),
        ("systemReserved", &mut t.system_reserved),
        ("allocatable", &mut t.allocatable),
        ("reserved", &mut t.reserved),
        ("free", &mut t.free),
    ];
    for (name, slot) in slots {
        for v in o.values(name, TABLE_FIELDS) {
            int(v, &format!("{what}.{name}"), slot, errors);
        }
    }
}

fn node_fields(o: &GoObject, what: &str, n: &mut NumaNodeState, errors: &mut Vec<String>) {
    for v in o.values("numberOfAssignments", NODE_FIELDS) {
        let w = format!("{what}.numberOfAssignments");
        int(v, &w, &mut n.number_of_assignments, errors);
    }
    for v in o.values("memoryMap", NODE_FIELDS) {
        let w = format!("{what}.memoryMap");
        map(
            v,
            &w,
            &mut n.memory_map,
            errors,
            |k| Some(k.to_string()),
            |r, w, e| pointer(r, w, e, table_fields),
        );
    }
    for v in o.values("cells", NODE_FIELDS) {
        ints(v, &format!("{what}.cells"), &mut n.cells, errors);
    }
}

fn block(raw: &RawValue, what: &str, b: &mut Block, errors: &mut Vec<String>) {
    let Some(o) = object(raw, what, errors) else {
        return;
    };
    for v in o.values("numaAffinity", BLOCK_FIELDS) {
        ints(
            v,
            &format!("{what}.numaAffinity"),
            &mut b.numa_affinity,
            errors,
        );
    }
    for v in o.values("type", BLOCK_FIELDS) {
        string(v, &format!("{what}.type"), &mut b.resource, errors);
    }
    for v in o.values("size", BLOCK_FIELDS) {
        int(v, &format!("{what}.size"), &mut b.size, errors);
    }
}

fn blocks(raw: &RawValue, what: &str, errors: &mut Vec<String>) -> Option<Vec<Block>> {
    let mut out = None;
    slice(raw, what, &mut out, errors, block);
    out
}

/// The fields of one decoding attempt, as Go leaves them.
#[derive(Debug, Default)]
struct Decoded {
    state: MemoryState,
    checksum: u64,
    data: String,
    data_checksum: u64,
    errors: Vec<String>,
}

const V1_FIELDS: &[&str] = &["policyName", "machineState", "entries", "checksum"];
const V2_FIELDS: &[&str] = &[
    "policyName",
    "machineState",
    "entries",
    "podEntries",
    "checksum",
];
const V3_FIELDS: &[&str] = &[
    "policyName",
    "machineState",
    "entries",
    "checksum",
    "data",
    "dataChecksum",
];
const DATA_FIELDS: &[&str] = &["policyName", "machineState", "entries", "podEntries"];

/// Decodes the fields `fields` names into a struct whose maps start empty (the kubelet's
/// constructors), as `json.Unmarshal` does.
fn decode(obj: &GoObject, fields: &[&str]) -> Decoded {
    let mut d = Decoded::default();
    let s = &mut d.state;
    let e = &mut d.errors;
    s.machine_state = Some(BTreeMap::new());
    s.entries = Some(BTreeMap::new());
    if fields.contains(&"podEntries") {
        s.pod_entries = Some(BTreeMap::new());
    }
    for v in obj.values("policyName", fields) {
        string(v, "policyName", &mut s.policy_name, e);
    }
    for v in obj.values("machineState", fields) {
        map(
            v,
            "machineState",
            &mut s.machine_state,
            e,
            |k| k.parse::<i64>().ok(),
            |r, w, e| pointer(r, w, e, node_fields),
        );
    }
    for v in obj.values("entries", fields) {
        map(
            v,
            "entries",
            &mut s.entries,
            e,
            |k| Some(k.to_string()),
            |r, w, e| {
                let mut inner = None;
                map(r, w, &mut inner, e, |k| Some(k.to_string()), blocks);
                inner
            },
        );
    }
    if fields.contains(&"podEntries") {
        for v in obj.values("podEntries", fields) {
            map(
                v,
                "podEntries",
                &mut s.pod_entries,
                e,
                |k| Some(k.to_string()),
                |r, w, e| {
                    let mut out = None;
                    if let Some(o) = object(r, w, e) {
                        for b in o.values("memoryBlocks", &["memoryBlocks"]) {
                            slice(b, &format!("{w}.memoryBlocks"), &mut out, e, block);
                        }
                    }
                    out
                },
            );
        }
    }
    for (name, slot) in [
        ("checksum", &mut d.checksum),
        ("dataChecksum", &mut d.data_checksum),
    ] {
        if fields.contains(&name) {
            gojson::scalar(obj, name, fields, slot, e);
        }
    }
    if fields.contains(&"data") {
        gojson::scalar(obj, "data", fields, &mut d.data, e);
    }
    d
}

/// Refuses a state the kubelet v1.37.2 crashes on while restoring it (`NUMANodeMap.Clone`
/// dereferences every memory table).
fn check_restorable(s: &MemoryState, prefix: &str) -> Result<(), String> {
    for (id, node) in s.machine_state.iter().flatten() {
        for (name, t) in node.iter().flat_map(|n| n.memory_map.iter().flatten()) {
            if t.is_none() {
                return Err(format!(
                    "{prefix}machineState[{id}].memoryMap[{name:?}] is null (the kubelet crashes restoring it)"
                ));
            }
        }
    }
    Ok(())
}

// ------------------------------------------------------------------ Go's print (checksums)

fn print_ints(v: Option<&Vec<i64>>) -> String {
    match v {
        None => "<nil>".into(),
        Some(v) => {
            let items: Vec<String> = v.iter().map(i64::to_string).collect();
            format!("[{}]", items.join(" "))
        }
    }
}

fn print_blocks(v: Option<&Vec<Block>>) -> String {
    match v {
        None => "<nil>".into(),
        Some(v) => {
            let items: Vec<String> = v
                .iter()
                .map(|b| {
                    format!(
                        "{{NUMAAffinity:([]int){} Type:(v1.ResourceName){} Size:(uint64){}}}",
                        print_ints(b.numa_affinity.as_ref()),
                        b.resource,
                        b.size
                    )
                })
                .collect();
            format!("[{}]", items.join(" "))
        }
    }
}

/// `map[k:v ...]` (keys in the map's order, which is Go's sort for ints and strings), or
/// `<nil>`.
fn print_map<K: std::fmt::Display, V>(
    m: Option<&BTreeMap<K, V>>,
    value: impl Fn(&V) -> String,
) -> String {
    match m {
        None => "<nil>".into(),
        Some(m) => {
            let items: Vec<String> = m.iter().map(|(k, v)| format!("{k}:{}", value(v))).collect();
            format!("map[{}]", items.join(" "))
        }
    }
}

fn print_machine(m: Option<&NumaNodeMap>) -> String {
    print_map(m, |n| {
        match n {
        None => "<nil>".into(),
        Some(n) => format!(
            "<*>{{NumberOfAssignments:(int){} MemoryMap:(map[v1.ResourceName]*state.MemoryTable){} Cells:([]int){}}}",
            n.number_of_assignments,
            print_map(n.memory_map.as_ref(), |t| match t {
                None => "<nil>".into(),
                Some(t) => format!(
                    "<*>{{TotalMemSize:(uint64){} SystemReserved:(uint64){} Allocatable:(uint64){} Reserved:(uint64){} Free:(uint64){}}}",
                    t.total, t.system_reserved, t.allocatable, t.reserved, t.free
                ),
            }),
            print_ints(n.cells.as_ref())
        ),
    }
    })
}

/// `dump.ForHash` of the v1 (`with_pods` false) or v2 struct with a zero checksum, under
/// the legacy name `MemoryManagerCheckpoint` the kubelet hashes both under.
fn struct_print(s: &MemoryState, with_pods: bool) -> String {
    let mut out = format!(
        "(*state.MemoryManagerCheckpoint){{PolicyName:(string){} MachineState:(state.NUMANodeMap){} Entries:(state.ContainerMemoryAssignments){} ",
        s.policy_name,
        print_machine(s.machine_state.as_ref()),
        print_map(s.entries.as_ref(), |c| print_map(c.as_ref(), |b| print_blocks(b.as_ref()))),
    );
    if with_pods {
        let _ = write!(
            out,
            "PodEntries:(state.PodMemoryAssignments){} ",
            print_map(s.pod_entries.as_ref(), |b| format!(
                "{{MemoryBlocks:([]state.Block){}}}",
                print_blocks(b.as_ref())
            ))
        );
    }
    out.push_str("Checksum:(checksum.Checksum)0}");
    out
}

fn struct_checksum(s: &MemoryState, with_pods: bool) -> u64 {
    u64::from(fnv32a(struct_print(s, with_pods).as_bytes()))
}

// ------------------------------------------------------------------ reading

/// v3: `Ok(None)` when the kubelet falls back to v2 (neither `data` nor `dataChecksum` set).
fn load_v3(obj: &GoObject) -> Result<Option<MemoryCheckpoint>, String> {
    let outer = decode(obj, V3_FIELDS);
    if outer.data.is_empty() && outer.data_checksum == 0 {
        return Ok(None);
    }
    let fail = |e: &str| format!("could not load v3 checkpoint: {e}");
    if let Some(e) = outer.errors.first() {
        return Err(fail(e));
    }
    let inner = GoObject::parse(&outer.data).map_err(|e| fail(&format!("data: {e}")))?;
    let d = decode(&inner, DATA_FIELDS);
    if let Some(e) = d.errors.first() {
        return Err(fail(&format!("data.{e}")));
    }
    let computed = u64::from(data_checksum(&outer.data));
    let checksum_check = if computed == outer.data_checksum {
        ChecksumCheck::Verified
    } else {
        ChecksumCheck::Mismatch {
            field: "dataChecksum",
            recorded: outer.data_checksum,
            computed,
        }
    };
    check_restorable(&d.state, "data.")?;
    Ok(Some(MemoryCheckpoint {
        state: d.state,
        checksum: outer.data_checksum,
        format: MemoryCheckpointFormat::V3,
        checksum_check,
    }))
}

/// Reads a checkpoint's text as the kubelet v1.37.2 restores it (see the module
/// documentation).
pub fn parse(text: &str) -> Result<MemoryCheckpoint, String> {
    // A text Go cannot parse sets no field: every version fails, with the parse error.
    let obj = GoObject::parse(text)?;
    if let Some(v3) = load_v3(&obj)? {
        return Ok(v3);
    }
    let d2 = decode(&obj, V2_FIELDS);
    if d2.errors.is_empty() && struct_checksum(&d2.state, true) == d2.checksum {
        check_restorable(&d2.state, "")?;
        return Ok(MemoryCheckpoint {
            state: d2.state,
            checksum: d2.checksum,
            format: MemoryCheckpointFormat::V2,
            checksum_check: ChecksumCheck::Verified,
        });
    }
    let d1 = decode(&obj, V1_FIELDS);
    if let Some(e) = d1.errors.first() {
        return Err(e.clone());
    }
    let checksum_check = if d1.checksum == 0 {
        ChecksumCheck::NotRecorded
    } else {
        let computed = struct_checksum(&d1.state, false);
        if computed == d1.checksum {
            ChecksumCheck::Verified
        } else {
            ChecksumCheck::Mismatch {
                field: "checksum",
                recorded: d1.checksum,
                computed,
            }
        }
    };
    check_restorable(&d1.state, "")?;
    Ok(MemoryCheckpoint {
        state: d1.state,
        checksum: d1.checksum,
        format: MemoryCheckpointFormat::V1,
        checksum_check,
    })
}

// ------------------------------------------------------------------ writing (Go's JSON)

fn json_ints(v: Option<&Vec<i64>>) -> String {
    match v {
        None => "null".into(),
        Some(v) => {
            let items: Vec<String> = v.iter().map(i64::to_string).collect();
            format!("[{}]", items.join(","))
        }
    }
}

fn json_blocks(v: Option<&Vec<Block>>) -> String {
    match v {
        None => "null".into(),
        Some(v) => {
            let items: Vec<String> = v
                .iter()
                .map(|b| {
                    format!(
                        "{{\"numaAffinity\":{},\"type\":{},\"size\":{}}}",
                        json_ints(b.numa_affinity.as_ref()),
                        go_json_string(&b.resource),
                        b.size
                    )
                })
                .collect();
            format!("[{}]", items.join(","))
        }
    }
}

/// A Go map as JSON: keys sorted by their text (Go sorts `map[int]` keys as strings too).
fn json_map<K: ToString, V>(m: Option<&BTreeMap<K, V>>, value: impl Fn(&V) -> String) -> String {
    let Some(m) = m else {
        return "null".into();
    };
    let mut items: Vec<(String, &V)> = m.iter().map(|(k, v)| (k.to_string(), v)).collect();
    items.sort_by(|a, b| a.0.cmp(&b.0));
    let items: Vec<String> = items
        .into_iter()
        .map(|(k, v)| format!("{}:{}", go_json_string(&k), value(v)))
        .collect();
    format!("{{{}}}", items.join(","))
}

fn json_machine(m: Option<&NumaNodeMap>) -> String {
    json_map(m, |n| match n {
        None => "null".into(),
        Some(n) => format!(
            "{{\"numberOfAssignments\":{},\"memoryMap\":{},\"cells\":{}}}",
            n.number_of_assignments,
            json_map(n.memory_map.as_ref(), |t| {
                match t {
                None => "null".into(),
                Some(t) => format!(
                    "{{\"total\":{},\"systemReserved\":{},\"allocatable\":{},\"reserved\":{},\"free\":{}}}",
                    t.total, t.system_reserved, t.allocatable, t.reserved, t.free
                ),
            }
            }),
            json_ints(n.cells.as_ref())
        ),
    })
}

/// `{"policyName":..,"machineState":..[,"entries":..][,"podEntries":..]` (no closing brace;
/// `entries` and `podEntries` are `omitempty`).
fn state_fields(s: &MemoryState, with_pods: bool) -> String {
    let mut out = format!(
        "{{\"policyName\":{},\"machineState\":{}",
        go_json_string(&s.policy_name),
        json_machine(s.machine_state.as_ref())
    );
    if let Some(e) = s.entries.as_ref().filter(|e| !e.is_empty()) {
        let _ = write!(
            out,
            ",\"entries\":{}",
            json_map(Some(e), |c| json_map(c.as_ref(), |b| json_blocks(
                b.as_ref()
            )))
        );
    }
    if let Some(p) = s
        .pod_entries
        .as_ref()
        .filter(|p| with_pods && !p.is_empty())
    {
        let pods = json_map(Some(p), |b| match b.as_ref().filter(|b| !b.is_empty()) {
            Some(b) => format!("{{\"memoryBlocks\":{}}}", json_blocks(Some(b))),
            None => "{}".into(),
        });
        let _ = write!(out, ",\"podEntries\":{pods}");
    }
    out
}

/// The checkpoint file's bytes as the kubelet's `MarshalCheckpoint` writes `state` in
/// `format` (no trailing newline; v1 leaves pod entries out).
pub fn render(state: &MemoryState, format: MemoryCheckpointFormat) -> String {
    match format {
        MemoryCheckpointFormat::V1 => format!(
            "{},\"checksum\":{}}}",
            state_fields(state, false),
            struct_checksum(state, false)
        ),
        MemoryCheckpointFormat::V2 => format!(
            "{},\"checksum\":{}}}",
            state_fields(state, true),
            struct_checksum(state, true)
        ),
        MemoryCheckpointFormat::V3 => {
            let data = format!("{}}}", state_fields(state, true));
            format!(
                "{},\"checksum\":{},\"data\":{},\"dataChecksum\":{}}}",
                state_fields(state, false),
                struct_checksum(state, false),
                go_json_string(&data),
                data_checksum(&data)
            )
        }
    }
}

// ------------------------------------------------------------------ the file

/// The largest checkpoint read (the kubelet's own for a node of a few hundred pods is tens
/// of kilobytes).
pub const MAX_BYTES: u64 = 16 << 20;

/// Why the checkpoint file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The file cannot be read.
    #[error("kubelet Memory Manager state {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The kubelet would refuse the content (for another reason than a checksum).
    #[error("kubelet Memory Manager state {path}: {why}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong (names the field).
        why: String,
    },
}

/// Reads the checkpoint file, bounded ([`MAX_BYTES`], regular files only: a FIFO or
/// /dev/zero in its place is an error, not a hang). `Ok(None)` when it does not exist (no
/// Memory Manager state, or not mounted).
pub fn read(path: &Path) -> Result<Option<MemoryCheckpoint>, ReadError> {
    use nodetopo_engine::files::{read_text_bounded, ReadError as R};
    let io = |source| ReadError::Io {
        path: path.to_path_buf(),
        source,
    };
    match read_text_bounded(path, MAX_BYTES) {
        Ok(text) => parse(&text).map(Some).map_err(|why| ReadError::Invalid {
            path: path.to_path_buf(),
            why,
        }),
        Err(R::NotFound) => Ok(None),
        Err(R::Io(source)) => Err(io(source)),
        Err(e) => Err(io(std::io::Error::other(format!("the file {e}")))),
    }
}

#[cfg(test)]
mod tests;
