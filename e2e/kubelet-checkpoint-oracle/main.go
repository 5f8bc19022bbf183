// Test oracle: the kubelet's own CPU manager and memory manager checkpoint code
// (k8s.io/kubernetes v1.37.2, pinned in go.mod): it writes checkpoint files of every version
// with the kubelet's MarshalCheckpoint, and restores a given file with the kubelet's
// NewCheckpointState (load, version fallback, checksum verification, migration), answering
// what the kubelet would run with. JSON requests on stdin, one per line; one JSON answer per
// line on stdout. Tests only, never shipped.
//
// Requests:
//
//	{"op":"write-cpu","version":2|3|4,"policyName":..,"defaultCpuSet":..,
//	 "entries":{uid:{container:cpus}},"podEntries":{uid:cpus}}      -> {"ok":true,"file":".."}
//	{"op":"read-cpu","file":"..","podLevelResourceManagers":bool}
//	                                -> {"ok":true,"policyName":..,"defaultCpuSet":..,"entries":{..},"podEntries":{uid:cpus}}
//	{"op":"write-memory","version":1|2|3,"policyName":..,"machineState":{..},"entries":{..},
//	 "podEntries":{..}}                                              -> {"ok":true,"file":".."}
//	{"op":"read-memory","file":"..","podLevelResourceManagers":bool}
//	                                -> {"ok":true,"policyName":..,"machineState":{..},"entries":{..},"podEntries":{..}}
//
// Reads run with the PodLevelResourceManagers feature gate as the request sets it (off when
// absent, its v1.37 default): the kubelet restores pod entries only with it on. A refused
// file answers {"ok":false,"error":".."} with the kubelet's error; a file the kubelet's code
// panics on answers {"ok":false,"panic":true,"error":"panic: .."}.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"

	"github.com/go-logr/logr"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/kubelet/cm/containermap"
	cpustate "k8s.io/kubernetes/pkg/kubelet/cm/cpumanager/state"
	memstate "k8s.io/kubernetes/pkg/kubelet/cm/memorymanager/state"
	"k8s.io/utils/cpuset"
)

type request struct {
	Op            string          `json:"op"`
	Version       int             `json:"version"`
	PolicyName    string          `json:"policyName"`
	DefaultCPUSet string          `json:"defaultCpuSet"`
	Entries       json.RawMessage `json:"entries"`
	PodEntries    json.RawMessage `json:"podEntries"`
	MachineState  json.RawMessage `json:"machineState"`
	File          string          `json:"file"`
	// The PodLevelResourceManagers feature gate for a read.
	PodLevelResourceManagers bool `json:"podLevelResourceManagers"`
}

type response struct {
	OK            bool            `json:"ok"`
	File          string          `json:"file,omitempty"`
	PolicyName    string          `json:"policyName,omitempty"`
	DefaultCPUSet string          `json:"defaultCpuSet,omitempty"`
	Entries       json.RawMessage `json:"entries,omitempty"`
	MachineState  json.RawMessage `json:"machineState,omitempty"`
	PodEntries    json.RawMessage `json:"podEntries,omitempty"`
	Error         string          `json:"error,omitempty"`
	Panic         bool            `json:"panic,omitempty"`
}

const checkpointName = "checkpoint"

// decodeInto decodes raw (absent: leaves out as is).
func decodeInto(raw json.RawMessage, out any) error {
	if len(raw) == 0 {
		return nil
	}
	return json.Unmarshal(raw, out)
}

func writeCPU(req request) ([]byte, error) {
	// As the kubelet's constructors: maps are never nil (a nil map hashes differently).
	entries := map[string]map[string]string{}
	if err := decodeInto(req.Entries, &entries); err != nil {
		return nil, fmt.Errorf("entries: %w", err)
	}
	podSets := map[string]string{}
	if err := decodeInto(req.PodEntries, &podSets); err != nil {
		return nil, fmt.Errorf("podEntries: %w", err)
	}
	podEntries := cpustate.PodCPUAssignments{}
	for uid, s := range podSets {
		set, err := cpuset.Parse(s)
		if err != nil {
			return nil, fmt.Errorf("podEntries[%q]: %w", uid, err)
		}
		podEntries[uid] = cpustate.PodEntry{CPUSet: set}
	}
	switch req.Version {
	case 2:
		cp := &cpustate.CPUManagerCheckpointV2{PolicyName: req.PolicyName, DefaultCPUSet: req.DefaultCPUSet, Entries: entries}
		return cp.MarshalCheckpoint()
	case 3:
		cp := &cpustate.CPUManagerCheckpointV3{PolicyName: req.PolicyName, DefaultCPUSet: req.DefaultCPUSet, Entries: entries, PodEntries: podEntries}
		return cp.MarshalCheckpoint()
	case 4:
		cp := &cpustate.CPUManagerCheckpoint{
			CPUManagerCheckpointV2: cpustate.CPUManagerCheckpointV2{Entries: map[string]map[string]string{}},
			CheckpointData: cpustate.CPUManagerCheckpointData{
				PolicyName:    req.PolicyName,
				DefaultCPUSet: req.DefaultCPUSet,
				Entries:       entries,
				PodEntries:    podEntries,
				Baselines:     map[string]map[string]cpustate.ContainerCPUs{},
			},
		}
		return cp.MarshalCheckpoint()
	}
	return nil, fmt.Errorf("cpu checkpoint version %d: the kubelet writes 2, 3 and 4", req.Version)
}

func writeMemory(req request) ([]byte, error) {
	machine := memstate.NUMANodeMap{}
	if err := decodeInto(req.MachineState, &machine); err != nil {
		return nil, fmt.Errorf("machineState: %w", err)
	}
	entries := memstate.ContainerMemoryAssignments{}
	if err := decodeInto(req.Entries, &entries); err != nil {
		return nil, fmt.Errorf("entries: %w", err)
	}
	podEntries := memstate.PodMemoryAssignments{}
	if err := decodeInto(req.PodEntries, &podEntries); err != nil {
		return nil, fmt.Errorf("podEntries: %w", err)
	}
	switch req.Version {
	case 1:
		cp := &memstate.MemoryManagerCheckpointV1{PolicyName: req.PolicyName, MachineState: machine, Entries: entries}
		return cp.MarshalCheckpoint()
	case 2:
		cp := &memstate.MemoryManagerCheckpointV2{PolicyName: req.PolicyName, MachineState: machine, Entries: entries, PodEntries: podEntries}
		return cp.MarshalCheckpoint()
	case 3:
		cp := &memstate.MemoryManagerCheckpoint{
			MemoryManagerCheckpointV1: memstate.MemoryManagerCheckpointV1{Entries: memstate.ContainerMemoryAssignments{}, MachineState: memstate.NUMANodeMap{}},
			CheckpointData: memstate.MemoryManagerCheckpointData{
				PolicyName: req.PolicyName, MachineState: machine, Entries: entries, PodEntries: podEntries,
			},
		}
		return cp.MarshalCheckpoint()
	}
	return nil, fmt.Errorf("memory checkpoint version %d: the kubelet writes 1, 2 and 3", req.Version)
}

var policyDiffers = regexp.MustCompile(`differs from state checkpoint policy "([^"]*)"`)

// restore writes file into a fresh directory and runs open(policy) there; when the kubelet
// refuses the file only because its configured policy differs from the file's, it runs
// again with the file's policy (the question is what the file holds, not a configuration).
func restore[S any](file string, open func(dir, policy string) (S, error)) (S, string, error) {
	var zero S
	dir, err := os.MkdirTemp("", "kubelet-checkpoint-oracle-")
	if err != nil {
		return zero, "", err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, checkpointName)
	policy := "static"
	for attempt := 0; attempt < 2; attempt++ {
		if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
			return zero, "", err
		}
		st, err := open(dir, policy)
		if err == nil {
			return st, policy, nil
		}
		m := policyDiffers.FindStringSubmatch(err.Error())
		if m == nil || attempt == 1 {
			return zero, "", err
		}
		policy = m[1]
	}
	return zero, "", fmt.Errorf("unreachable")
}

func readCPU(req request) (response, error) {
	st, policy, err := restore(req.File, func(dir, policy string) (cpustate.State, error) {
		return cpustate.NewCheckpointState(logr.Discard(), dir, checkpointName, policy, containermap.NewContainerMap())
	})
	if err != nil {
		return response{}, err
	}
	entries := map[string]map[string]string{}
	for uid, cs := range st.GetCPUAssignments() {
		entries[uid] = map[string]string{}
		for name, set := range cs {
			entries[uid][name] = set.String()
		}
	}
	raw, err := json.Marshal(entries)
	if err != nil {
		return response{}, err
	}
	podSets := map[string]string{}
	for uid, e := range st.GetPodCPUAssignments() {
		podSets[uid] = e.CPUSet.String()
	}
	pods, err := json.Marshal(podSets)
	if err != nil {
		return response{}, err
	}
	return response{OK: true, PolicyName: policy, DefaultCPUSet: st.GetDefaultCPUSet().String(), Entries: raw, PodEntries: pods}, nil
}

func readMemory(req request) (response, error) {
	st, policy, err := restore(req.File, func(dir, policy string) (memstate.State, error) {
		return memstate.NewCheckpointState(logr.Discard(), dir, checkpointName, policy)
	})
	if err != nil {
		return response{}, err
	}
	machine, err := json.Marshal(st.GetMachineState())
	if err != nil {
		return response{}, err
	}
	entries, err := json.Marshal(st.GetMemoryAssignments())
	if err != nil {
		return response{}, err
	}
	pods, err := json.Marshal(st.GetPodMemoryAssignments())
	if err != nil {
		return response{}, err
	}
	return response{OK: true, PolicyName: policy, MachineState: machine, Entries: entries, PodEntries: pods}, nil
}

func answer(req request) (resp response) {
	defer func() {
		if p := recover(); p != nil {
			resp = response{OK: false, Panic: true, Error: fmt.Sprintf("panic: %v", p)}
		}
	}()
	if req.Op == "read-cpu" || req.Op == "read-memory" {
		gates := map[string]bool{string(features.PodLevelResourceManagers): req.PodLevelResourceManagers}
		if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(gates); err != nil {
			return response{OK: false, Error: "feature gates: " + err.Error()}
		}
	}
	return answerOp(req)
}

func answerOp(req request) response {
	var (
		resp response
		file []byte
		err  error
	)
	switch req.Op {
	case "write-cpu":
		file, err = writeCPU(req)
		resp = response{OK: true, File: string(file)}
	case "write-memory":
		file, err = writeMemory(req)
		resp = response{OK: true, File: string(file)}
	case "read-cpu":
		resp, err = readCPU(req)
	case "read-memory":
		resp, err = readMemory(req)
	default:
		err = fmt.Errorf("unknown op %q", req.Op)
	}
	if err != nil {
		return response{OK: false, Error: err.Error()}
	}
	return resp
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 64<<20)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var req request
		var resp response
		if err := json.Unmarshal(in.Bytes(), &req); err != nil {
			resp = response{OK: false, Error: "request: " + err.Error()}
		} else {
			resp = answer(req)
		}
		if err := out.Encode(resp); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	if err := in.Err(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
