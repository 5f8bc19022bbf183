// Command kubelet-oracle answers CPU-manager and topology-manager questions with the
// kubelet's own code (k8s.io/kubernetes, the version pinned in go.mod).
//
// It reads one JSON case per line on stdin and writes one JSON answer per line on stdout.
// A case is a machine, a CPU-manager static-policy configuration, a topology-manager
// configuration and a sequence of operations (admit a pod, remove a pod). Every decision
// is taken by the kubelet's packages through their exported entry points:
//
//   - cpumanager.NewStaticPolicy builds the real static policy on a topology.CPUTopology
//     made from the case, with the real option parsing and validation;
//   - state.NewMemoryState (or state.NewCheckpointState when the case asks for the
//     checkpoint file) holds the assignments;
//   - topologymanager.NewManager builds the real topology manager (policy, scope, options)
//     and is the policy's affinity store; the static policy is registered as its hint
//     provider through a forwarding adapter, and pods are admitted with Manager.Admit.
//
// Nothing of the kubelet's allocation or merge logic is reimplemented here. After a
// rejected admission the pod's containers are removed from the policy, as the kubelet's
// stale-state cleanup does before the next allocation.
//
// A case that runs longer than the per-case timeout (-timeout) is answered with
// "timeout": true and the process exits with status 3, because a goroutine stuck in the
// kubelet's code cannot be stopped; the caller restarts the oracle.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	cadvisorapi "github.com/google/cadvisor/lib/model"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/klog/v2"
	kubeletconfig "k8s.io/kubernetes/pkg/kubelet/apis/config"
	"k8s.io/kubernetes/pkg/kubelet/cm/containermap"
	"k8s.io/kubernetes/pkg/kubelet/cm/cpumanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/cpumanager/state"
	"k8s.io/kubernetes/pkg/kubelet/cm/cpumanager/topology"
	"k8s.io/kubernetes/pkg/kubelet/cm/memorymanager"
	memstate "k8s.io/kubernetes/pkg/kubelet/cm/memorymanager/state"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
	"k8s.io/utils/cpuset"
)

// featureGates are the gates a node needs for every CPU and topology manager option.
const featureGates = "CPUManagerPolicyAlphaOptions=true,CPUManagerPolicyBetaOptions=true," +
	"TopologyManagerPolicyAlphaOptions=true,TopologyManagerPolicyBetaOptions=true"

// checkpointName is the kubelet's CPU manager checkpoint file name.
const checkpointName = "cpu_manager_state"

// memoryCheckpointName is the file the memory manager's checkpoint code writes.
const memoryCheckpointName = "memory_manager_state"

type numaJSON struct {
	ID int `json:"id"`
	// Distances indexed by NUMA node id (what the kubelet's NUMADistances expects).
	Distances []uint64 `json:"distances,omitempty"`
	// Memory of the node in bytes (cadvisor's Node.Memory; the memory manager's input).
	Memory uint64 `json:"memory,omitempty"`
	// Huge pages as [page size in KiB, number of pages] (cadvisor's HugePagesInfo).
	HugePages [][2]uint64 `json:"hugepages,omitempty"`
}

type machineJSON struct {
	// CPUs as [id, core, socket, numa, uncore].
	CPUs [][5]int   `json:"cpus"`
	NUMA []numaJSON `json:"numa"`
	// Declared counts; zero means "derive from the CPU list".
	NumCores  int `json:"numCores,omitempty"`
	NumSocket int `json:"numSockets,omitempty"`
}

type resourcesJSON struct {
	CPU          string `json:"cpu,omitempty"`
	Memory       string `json:"memory,omitempty"`
	HugePages2Mi string `json:"hugepages-2Mi,omitempty"`
	HugePages1Gi string `json:"hugepages-1Gi,omitempty"`
	// Extended resources (device-plugin resources such as example.com/gpu) -> quantity.
	Extended map[string]string `json:"extended,omitempty"`
}

type containerJSON struct {
	Name        string        `json:"name"`
	Requests    resourcesJSON `json:"requests"`
	Limits      resourcesJSON `json:"limits"`
	Restartable bool          `json:"restartable,omitempty"`
}

type podJSON struct {
	UID        string          `json:"uid"`
	Name       string          `json:"name"`
	Init       []containerJSON `json:"init,omitempty"`
	Containers []containerJSON `json:"containers"`
}

type opJSON struct {
	// "admit", "readmit" (uid: admit an admitted pod again), "retry" (uid: admit a rejected
	// pod again, same UID) or "remove".
	Op  string   `json:"op"`
	Pod *podJSON `json:"pod,omitempty"`
	UID string   `json:"uid,omitempty"`
}

type caseJSON struct {
	ID           string            `json:"id"`
	Machine      machineJSON       `json:"machine"`
	CPUOptions   map[string]string `json:"cpuOptions,omitempty"`
	ReservedCPUs string            `json:"reservedCPUs,omitempty"`
	NumReserved  int               `json:"numReserved"`
	TMPolicy     string            `json:"tmPolicy"`
	TMScope      string            `json:"tmScope"`
	TMOptions    map[string]string `json:"tmOptions,omitempty"`
	Ops          []opJSON          `json:"ops"`
	// Checkpoint: keep the state in the kubelet's checkpoint file and return its bytes.
	Checkpoint bool `json:"checkpoint,omitempty"`
	// Memory: when present, the memory manager runs with the Static policy as the second
	// hint provider (after the CPU manager).
	Memory *memoryJSON `json:"memory,omitempty"`
	// Devices: when present, the device manager runs (devices.go), registered as the first
	// hint provider, as the kubelet's container manager registers it.
	Devices []deviceJSON `json:"devices,omitempty"`
	// DeviceResources: resources whose plugin registers and lists no device.
	DeviceResources []string `json:"deviceResources,omitempty"`
	// NoPreferred: resources whose plugin does not offer GetPreferredAllocation.
	NoPreferred []string `json:"noPreferred,omitempty"`
	// Shadowed: resources served by two plugins: a first one (its own socket) lists a
	// different device set, then the case's plugin registers and lists the case's devices.
	Shadowed []string `json:"shadowed,omitempty"`
}

// memoryJSON is the memory manager's configuration: --reserved-memory per NUMA node id,
// resource name -> bytes. The node-allocatable reservation is the per-resource sum (what a
// kubelet whose configuration passes validation has).
type memoryJSON struct {
	Reserved map[string]map[string]uint64 `json:"reserved"`
}

type blockJSON struct {
	NUMAAffinity []int  `json:"numaAffinity"`
	Type         string `json:"type"`
	Size         uint64 `json:"size"`
}

type hintJSON struct {
	// NUMA node ids of the affinity; null for "any".
	Affinity  []int `json:"affinity"`
	Preferred bool  `json:"preferred"`
}

type opResult struct {
	Admit bool `json:"admit"`
	// Skipped: a readmit of a pod that is not admitted.
	Skipped bool   `json:"skipped,omitempty"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// Exclusive CPUs of the pod's containers after the operation.
	CPUs map[string]string `json:"cpus,omitempty"`
	// The topology manager's merged hint per container (admitted pods, policy not none).
	Hints map[string]hintJSON `json:"hints,omitempty"`
	// The raw CPU-manager hints the topology manager received, per container (container
	// scope) or under "" (pod scope).
	CPUHints map[string][]hintJSON `json:"cpuHints,omitempty"`
	// The CPU state right after the operation (for a rejected pod: before its cleanup).
	StateDefault     string                       `json:"stateDefault"`
	StateAssignments map[string]map[string]string `json:"stateAssignments,omitempty"`
	// The raw memory-manager hints per container (container scope) or under "" (pod
	// scope), resource name -> hints; a nil map (not Guaranteed) is absent.
	MemHints map[string]map[string][]hintJSON `json:"memHints,omitempty"`
	// The memory blocks of the pod's containers after an admission.
	Memory map[string][]blockJSON `json:"memory,omitempty"`
	// The raw device-manager hints per container (container scope) or under "" (pod
	// scope), resource name -> hints (null: no topology preference).
	DevHints map[string]map[string][]hintJSON `json:"devHints,omitempty"`
	// The devices of the pod's containers after an admission.
	Devices devicesAnswer `json:"devices,omitempty"`
}

type answerJSON struct {
	ID          string                       `json:"id"`
	ConfigError string                       `json:"configError,omitempty"`
	Results     []opResult                   `json:"results,omitempty"`
	Default     string                       `json:"defaultCPUSet"`
	Assignments map[string]map[string]string `json:"assignments,omitempty"`
	Checkpoint  string                       `json:"checkpoint,omitempty"`
	// The memory manager's machine state at the end (state.NUMANodeMap as JSON) and the
	// memory_manager_state file its checkpoint code wrote.
	MemoryState      json.RawMessage `json:"memoryState,omitempty"`
	MemoryCheckpoint string          `json:"memoryCheckpoint,omitempty"`
	// The devices every pod of the case holds at the end (pod uid -> container ->
	// resource -> ids), after the device manager's cleanup of inactive pods.
	FinalDevices map[string]devicesAnswer `json:"finalDevices,omitempty"`
	Timeout      bool                     `json:"timeout,omitempty"`
	// Panic: the kubelet's code panicked on this case (the value it panicked with).
	Panic string `json:"panic,omitempty"`
	Error string `json:"error,omitempty"`
}

// cpuProvider forwards the topology manager's hint-provider calls to the static policy and
// its state (what cpumanager's manager does, minus the stale-state reconciliation against
// a container runtime). It records the hints the topology manager receives.
type cpuProvider struct {
	policy   cpumanager.Policy
	state    state.State
	recorded map[string][]hintJSON
}

func (c *cpuProvider) GetTopologyHints(logger klog.Logger, pod *v1.Pod, container *v1.Container, op lifecycle.Operation) map[string][]topologymanager.TopologyHint {
	h := c.policy.GetTopologyHints(logger, c.state, pod, container, op)
	c.record(container.Name, h)
	return h
}

func (c *cpuProvider) GetPodTopologyHints(logger klog.Logger, pod *v1.Pod, op lifecycle.Operation) map[string][]topologymanager.TopologyHint {
	h := c.policy.GetPodTopologyHints(logger, c.state, pod, op)
	c.record("", h)
	return h
}

func (c *cpuProvider) AllocatePod(logger klog.Logger, pod *v1.Pod, op lifecycle.Operation) error {
	return c.policy.AllocatePod(logger, c.state, pod, op)
}

func (c *cpuProvider) Allocate(ctx context.Context, pod *v1.Pod, container *v1.Container, op lifecycle.Operation) error {
	return c.policy.Allocate(klog.FromContext(ctx), c.state, pod, container, op)
}

func (c *cpuProvider) record(key string, h map[string][]topologymanager.TopologyHint) {
	if c.recorded == nil {
		return
	}
	hints, ok := h[string(v1.ResourceCPU)]
	if !ok {
		return
	}
	c.recorded[key] = hintList(hints)
}

// memProvider forwards the topology manager's hint-provider calls to the real memory
// manager (memorymanager.NewManager with the Static policy, started with the kubelet's
// checkpoint state) and records the hints it answers.
type memProvider struct {
	mm       memorymanager.Manager
	recorded map[string]map[string][]hintJSON
}

func (m *memProvider) GetTopologyHints(logger klog.Logger, pod *v1.Pod, container *v1.Container, op lifecycle.Operation) map[string][]topologymanager.TopologyHint {
	h := m.mm.GetTopologyHints(logger, pod, container, op)
	m.record(container.Name, h)
	return h
}

func (m *memProvider) GetPodTopologyHints(logger klog.Logger, pod *v1.Pod, op lifecycle.Operation) map[string][]topologymanager.TopologyHint {
	h := m.mm.GetPodTopologyHints(logger, pod, op)
	m.record("", h)
	return h
}

func (m *memProvider) AllocatePod(logger klog.Logger, pod *v1.Pod, op lifecycle.Operation) error {
	return m.mm.AllocatePod(logger, pod, op)
}

func (m *memProvider) Allocate(ctx context.Context, pod *v1.Pod, container *v1.Container, op lifecycle.Operation) error {
	return m.mm.Allocate(ctx, pod, container, op)
}

func (m *memProvider) record(key string, h map[string][]topologymanager.TopologyHint) {
	if m.recorded == nil || h == nil {
		return
	}
	m.recorded[key] = hintMap(h, false)
}

// hintList is the JSON of a hint list (never null).
func hintList(hints []topologymanager.TopologyHint) []hintJSON {
	out := []hintJSON{}
	for _, th := range hints {
		out = append(out, toHint(th))
	}
	return out
}

// hintMap is the JSON of a provider's hints per resource; a nil list stays null when
// keepNil (the device manager's "no preference"), else becomes an empty list.
func hintMap(h map[string][]topologymanager.TopologyHint, keepNil bool) map[string][]hintJSON {
	out := map[string][]hintJSON{}
	for r, hints := range h {
		if hints == nil && keepNil {
			out[r] = nil
			continue
		}
		out[r] = hintList(hints)
	}
	return out
}

// allSourcesReady lets the memory manager's stale-state cleanup run (a kubelet whose pod
// sources have all been seen).
type allSourcesReady struct{}

func (allSourcesReady) AddSource(string) {}
func (allSourcesReady) AllReady() bool   { return true }

// memoryReservations turns the case's reserved memory into --reserved-memory entries and
// the node-allocatable reservation they must add up to.
func memoryReservations(m *memoryJSON) ([]kubeletconfig.MemoryReservation, v1.ResourceList, error) {
	ids := make([]string, 0, len(m.Reserved))
	for id := range m.Reserved {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var out []kubeletconfig.MemoryReservation
	total := v1.ResourceList{}
	for _, id := range ids {
		n, err := strconv.ParseInt(id, 10, 32)
		if err != nil {
			return nil, nil, fmt.Errorf("memory.reserved: NUMA node %q is not a number", id)
		}
		limits := v1.ResourceList{}
		for name, bytes := range m.Reserved[id] {
			if bytes > 1<<62 {
				return nil, nil, fmt.Errorf("memory.reserved[%s].%s: %d bytes is too large", id, name, bytes)
			}
			q := *resource.NewQuantity(int64(bytes), resource.BinarySI)
			limits[v1.ResourceName(name)] = q
			sum := total[v1.ResourceName(name)]
			sum.Add(q)
			total[v1.ResourceName(name)] = sum
		}
		out = append(out, kubeletconfig.MemoryReservation{NumaNode: int32(n), Limits: limits})
	}
	return out, total, nil
}

func blocksJSON(blocks []memstate.Block) []blockJSON {
	out := make([]blockJSON, 0, len(blocks))
	for _, b := range blocks {
		aff := append([]int{}, b.NUMAAffinity...)
		sort.Ints(aff)
		out = append(out, blockJSON{NUMAAffinity: aff, Type: string(b.Type), Size: b.Size})
	}
	return out
}

func toHint(th topologymanager.TopologyHint) hintJSON {
	h := hintJSON{Preferred: th.Preferred}
	if th.NUMANodeAffinity != nil {
		h.Affinity = th.NUMANodeAffinity.GetBits()
		sort.Ints(h.Affinity)
	}
	return h
}

func buildTopology(m machineJSON) (*topology.CPUTopology, []cadvisorapi.Node, error) {
	if len(m.CPUs) == 0 {
		return nil, nil, errors.New("machine has no CPUs")
	}
	details := topology.CPUDetails{}
	cores, sockets, numas, uncores := map[int]bool{}, map[int]bool{}, map[int]bool{}, map[int]bool{}
	for _, c := range m.CPUs {
		if _, dup := details[c[0]]; dup {
			return nil, nil, fmt.Errorf("CPU %d listed twice", c[0])
		}
		details[c[0]] = topology.CPUInfo{CoreID: c[1], SocketID: c[2], NUMANodeID: c[3], UncoreCacheID: c[4]}
		cores[c[1]], sockets[c[2]], numas[c[3]], uncores[c[4]] = true, true, true, true
	}
	topo := &topology.CPUTopology{
		NumCPUs:        len(m.CPUs),
		NumCores:       len(cores),
		NumSockets:     len(sockets),
		NumNUMANodes:   len(numas),
		NumUncoreCache: len(uncores),
		CPUDetails:     details,
	}
	if m.NumCores > 0 {
		topo.NumCores = m.NumCores
	}
	if m.NumSocket > 0 {
		topo.NumSockets = m.NumSocket
	}
	nodes := make([]cadvisorapi.Node, 0, len(m.NUMA))
	for _, n := range m.NUMA {
		node := cadvisorapi.Node{Id: n.ID, Distances: n.Distances, Memory: n.Memory}
		for _, hp := range n.HugePages {
			node.HugePages = append(node.HugePages, cadvisorapi.HugePagesInfo{PageSize: hp[0], NumPages: hp[1]})
		}
		nodes = append(nodes, node)
	}
	return topo, nodes, nil
}

func quantity(field, s string) (resource.Quantity, error) {
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return q, fmt.Errorf("%s: bad quantity %q: %w", field, s, err)
	}
	return q, nil
}

func resourceList(field string, r resourcesJSON) (v1.ResourceList, error) {
	out := v1.ResourceList{}
	if r.CPU != "" {
		q, err := quantity(field+".cpu", r.CPU)
		if err != nil {
			return nil, err
		}
		out[v1.ResourceCPU] = q
	}
	if r.Memory != "" {
		q, err := quantity(field+".memory", r.Memory)
		if err != nil {
			return nil, err
		}
		out[v1.ResourceMemory] = q
	}
	for name, v := range map[v1.ResourceName]string{"hugepages-2Mi": r.HugePages2Mi, "hugepages-1Gi": r.HugePages1Gi} {
		if v == "" {
			continue
		}
		q, err := quantity(field+"."+string(name), v)
		if err != nil {
			return nil, err
		}
		out[name] = q
	}
	for name, v := range r.Extended {
		q, err := quantity(field+"."+name, v)
		if err != nil {
			return nil, err
		}
		out[v1.ResourceName(name)] = q
	}
	return out, nil
}

func buildContainer(c containerJSON, init bool) (v1.Container, error) {
	req, err := resourceList(c.Name+".requests", c.Requests)
	if err != nil {
		return v1.Container{}, err
	}
	lim, err := resourceList(c.Name+".limits", c.Limits)
	if err != nil {
		return v1.Container{}, err
	}
	out := v1.Container{Name: c.Name, Resources: v1.ResourceRequirements{Requests: req, Limits: lim}}
	if c.Restartable {
		if !init {
			return out, fmt.Errorf("container %s: only init containers can be restartable", c.Name)
		}
		always := v1.ContainerRestartPolicyAlways
		out.RestartPolicy = &always
	}
	return out, nil
}

func buildPod(p podJSON) (*v1.Pod, error) {
	pod := &v1.Pod{}
	pod.Name, pod.Namespace, pod.UID = p.Name, "default", types.UID(p.UID)
	for _, c := range p.Init {
		vc, err := buildContainer(c, true)
		if err != nil {
			return nil, err
		}
		pod.Spec.InitContainers = append(pod.Spec.InitContainers, vc)
	}
	for _, c := range p.Containers {
		vc, err := buildContainer(c, false)
		if err != nil {
			return nil, err
		}
		pod.Spec.Containers = append(pod.Spec.Containers, vc)
	}
	return pod, nil
}

func allContainers(pod *v1.Pod) []v1.Container {
	return append(append([]v1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...)
}

// oracleRun is one case's kubelet: the topology manager with the CPU manager's static
// policy and, when the case asks for them, the device and memory managers, registered in
// the kubelet's order, and the pods it has seen.
type oracleRun struct {
	c        *caseJSON
	logger   klog.Logger
	ctx      context.Context
	tm       topologymanager.Manager
	policy   cpumanager.Policy
	st       state.State
	provider *cpuProvider
	dev      *devProvider
	mem      *memProvider
	// cleanup runs the stale-state cleanups the kubelet runs before the next pod: the
	// device manager's UpdateAllocatedDevices, the memory manager's removeStaleState.
	cleanup  func()
	pods     map[string]*v1.Pod
	admitted map[string]bool
	// active is what the kubelet's pod manager lists: the admitted pods and the one being
	// admitted.
	active []*v1.Pod
}

// caseFailure is why a case ends without all its results: a configuration the kubelet
// refuses (config), or an input the oracle cannot use.
type caseFailure struct {
	config bool
	msg    string
}

func configFailure(msg string) *caseFailure { return &caseFailure{config: true, msg: msg} }

func inputFailure(msg string) *caseFailure { return &caseFailure{msg: msg} }

// run evaluates one case; dir is a fresh directory for the checkpoint file.
func run(c *caseJSON, dir string) answerJSON {
	ans := answerJSON{ID: c.ID}
	r := &oracleRun{
		c:        c,
		logger:   klog.Background(),
		cleanup:  func() {},
		pods:     map[string]*v1.Pod{},
		admitted: map[string]bool{},
	}
	r.ctx = klog.NewContext(context.Background(), r.logger)
	defer r.stop()
	fail := r.start(dir)
	if fail == nil {
		fail = r.runOps(&ans)
	}
	if fail == nil {
		fail = r.finish(dir, &ans)
	}
	if fail != nil {
		if fail.config {
			ans.ConfigError = fail.msg
		} else {
			ans.Error = fail.msg
		}
	}
	return ans
}

// start builds the case's managers as the kubelet's container manager does: the topology
// manager, the static CPU policy over its state (the checkpoint in dir when the case asks),
// then the device manager (registered first, so it allocates first and its errors win),
// the CPU provider and the memory manager.
func (r *oracleRun) start(dir string) *caseFailure {
	c, logger := r.c, r.logger
	topo, nodes, err := buildTopology(c.Machine)
	if err != nil {
		return inputFailure(err.Error())
	}
	reserved := cpuset.New()
	if c.ReservedCPUs != "" {
		reserved, err = cpuset.Parse(c.ReservedCPUs)
		if err != nil {
			return inputFailure(fmt.Sprintf("reservedCPUs: %v", err))
		}
	}
	r.tm, err = topologymanager.NewManager(logger, nodes, c.TMPolicy, c.TMScope, c.TMOptions)
	if err != nil {
		return configFailure("topology manager: " + err.Error())
	}
	r.policy, err = cpumanager.NewStaticPolicy(logger, topo, c.NumReserved, reserved, r.tm, c.CPUOptions)
	if err != nil {
		return configFailure("cpu manager: " + err.Error())
	}
	if c.Checkpoint {
		r.st, err = state.NewCheckpointState(logger, dir, checkpointName, r.policy.Name(), nil)
		if err != nil {
			return inputFailure(fmt.Sprintf("checkpoint state: %v", err))
		}
	} else {
		r.st = state.NewMemoryState(logger)
	}
	if err := r.policy.Start(logger, r.st); err != nil {
		return configFailure("cpu manager: " + err.Error())
	}
	if len(c.Devices) > 0 || len(c.DeviceResources) > 0 {
		dm, err := startDeviceManager(r.ctx, c, r.tm, nodes, r.activePods)
		if err != nil {
			return inputFailure(err.Error())
		}
		r.dev = &devProvider{dm: dm}
		r.tm.AddHintProvider(logger, r.dev)
		// The device manager frees the devices of pods no longer active before every hint
		// request and allocation (UpdateAllocatedDevices); run it now so the state
		// compared after a rejection or removal is the one the next pod sees.
		r.cleanup = func() { dm.UpdateAllocatedDevices(logger) }
	}
	r.provider = &cpuProvider{policy: r.policy, state: r.st}
	r.tm.AddHintProvider(logger, r.provider)
	if c.Memory != nil {
		return r.startMemory(dir, nodes)
	}
	return nil
}

// startMemory starts the memory manager: the kubelet's NewManager and Start
// (reserved-memory validation, the Static policy, the checkpoint state in dir). Its
// stale-state cleanup sees the active pods.
func (r *oracleRun) startMemory(dir string, nodes []cadvisorapi.Node) *caseFailure {
	logger := r.logger
	reservations, allocatable, err := memoryReservations(r.c.Memory)
	if err != nil {
		return inputFailure(err.Error())
	}
	machine := &cadvisorapi.MachineInfo{Topology: nodes}
	mm, err := memorymanager.NewManager(logger, "Static", machine, allocatable, reservations, dir, r.tm)
	if err != nil {
		return configFailure("memory manager: " + err.Error())
	}
	if err := mm.Start(r.ctx, r.activePods, allSourcesReady{}, nil, nil, containermap.NewContainerMap()); err != nil {
		return configFailure("memory manager: " + err.Error())
	}
	r.mem = &memProvider{mm: mm}
	r.tm.AddHintProvider(logger, r.mem)
	// Any hint request runs the manager's removeStaleState; a BestEffort pod asks for
	// nothing else.
	devCleanup := r.cleanup
	r.cleanup = func() {
		devCleanup()
		mm.GetPodTopologyHints(logger, &v1.Pod{}, lifecycle.AddOperation)
	}
	return nil
}

// stop stops what start started (the device manager's plugin server).
func (r *oracleRun) stop() {
	if r.dev != nil {
		_ = r.dev.dm.Stop(r.logger)
	}
}

func (r *oracleRun) activePods() []*v1.Pod { return append([]*v1.Pod{}, r.active...) }

func (r *oracleRun) dropActive(uid string) {
	kept := r.active[:0]
	for _, p := range r.active {
		if string(p.UID) != uid {
			kept = append(kept, p)
		}
	}
	r.active = kept
}

// runOps runs the case's operations in order, one result each; the first operation the
// oracle cannot run ends the case.
func (r *oracleRun) runOps(ans *answerJSON) *caseFailure {
	for i, op := range r.c.Ops {
		var res opResult
		var err error
		switch op.Op {
		case "admit", "readmit", "retry":
			res, err = r.admit(i, op)
		case "remove":
			res, err = r.remove(i, op)
		default:
			err = fmt.Errorf("ops[%d]: unknown op %q", i, op.Op)
		}
		if err != nil {
			return inputFailure(err.Error())
		}
		ans.Results = append(ans.Results, res)
	}
	return nil
}

// admit admits a new pod, or an admitted one again ("readmit", as after a kubelet restart:
// its containers already hold their CPUs, memory and devices; a pod not admitted is
// skipped), through the topology manager. The result has the hints every provider gave,
// the CPU state after, and what the pod got; a rejected pod's partial allocations are
// released as the kubelet's stale-state cleanup does.
func (r *oracleRun) admit(i int, op opJSON) (opResult, error) {
	var pod *v1.Pod
	if op.Op == "readmit" {
		if !r.admitted[op.UID] {
			return opResult{Admit: true, Skipped: true}, nil
		}
		pod = r.pods[op.UID]
	} else if op.Op == "retry" {
		// A rejected pod (same UID) admitted again; skipped when it is admitted or gone.
		p, known := r.pods[op.UID]
		if !known || r.admitted[op.UID] {
			return opResult{Admit: true, Skipped: true}, nil
		}
		pod = p
		r.active = append(r.active, pod)
	} else {
		if op.Pod == nil {
			return opResult{}, fmt.Errorf("ops[%d]: admit without pod", i)
		}
		var err error
		pod, err = buildPod(*op.Pod)
		if err != nil {
			return opResult{}, fmt.Errorf("ops[%d]: %v", i, err)
		}
		r.active = append(r.active, pod)
	}
	r.startRecording()
	verdict := r.tm.Admit(r.ctx, &lifecycle.PodAdmitAttributes{Pod: pod, Operation: lifecycle.AddOperation})
	res := r.recorded(pod, verdict)
	res.StateDefault, res.StateAssignments = snapshot(r.st)
	r.pods[string(pod.UID)] = pod
	r.admitted[string(pod.UID)] = verdict.Admit
	if verdict.Admit {
		r.placements(pod, &res)
	} else if err := r.release(i, pod); err != nil {
		return opResult{}, err
	}
	return res, nil
}

// startRecording starts recording the hints each provider gives.
func (r *oracleRun) startRecording() {
	r.provider.recorded = map[string][]hintJSON{}
	if r.mem != nil {
		r.mem.recorded = map[string]map[string][]hintJSON{}
	}
	if r.dev != nil {
		r.dev.recorded = map[string]map[string][]hintJSON{}
	}
}

// recorded is the verdict with the hints recorded since startRecording (recording stops)
// and, when admitted, the memory blocks and devices the pod's containers got.
func (r *oracleRun) recorded(pod *v1.Pod, verdict lifecycle.PodAdmitResult) opResult {
	res := opResult{Admit: verdict.Admit, Reason: verdict.Reason, Message: verdict.Message, CPUHints: r.provider.recorded}
	r.provider.recorded = nil
	if r.mem != nil {
		res.MemHints = r.mem.recorded
		r.mem.recorded = nil
		if verdict.Admit {
			res.Memory = map[string][]blockJSON{}
			for _, ct := range allContainers(pod) {
				if b := r.mem.mm.GetMemory(r.logger, string(pod.UID), ct.Name); len(b) > 0 {
					res.Memory[ct.Name] = blocksJSON(b)
				}
			}
		}
	}
	if r.dev != nil {
		res.DevHints = r.dev.recorded
		r.dev.recorded = nil
		if verdict.Admit {
			res.Devices = containerDevices(r.dev.dm, pod)
		}
	}
	return res
}

// placements adds an admitted pod's containers' CPUs and, under a topology manager policy,
// their merged hints.
func (r *oracleRun) placements(pod *v1.Pod, res *opResult) {
	res.CPUs = map[string]string{}
	if r.c.TMPolicy != topologymanager.PolicyNone {
		res.Hints = map[string]hintJSON{}
	}
	for _, ct := range allContainers(pod) {
		if cs, ok := r.st.GetCPUSet(string(pod.UID), ct.Name); ok {
			res.CPUs[ct.Name] = cs.String()
		}
		if res.Hints != nil {
			res.Hints[ct.Name] = toHint(r.tm.GetAffinity(r.logger, string(pod.UID), ct.Name))
		}
	}
}

// release removes every container of pod from the CPU state, drops it from the active
// pods and runs the stale-state cleanups (a rejected pod: what its earlier containers took
// is released before the next allocation; a removed pod: everything it held).
func (r *oracleRun) release(i int, pod *v1.Pod) error {
	for _, ct := range allContainers(pod) {
		if err := r.policy.RemoveContainer(r.logger, r.st, string(pod.UID), ct.Name); err != nil {
			return fmt.Errorf("ops[%d]: remove %s: %v", i, ct.Name, err)
		}
	}
	r.dropActive(string(pod.UID))
	r.cleanup()
	return nil
}

// remove removes a pod the case admitted or tried to admit; the result is the CPU state
// after.
func (r *oracleRun) remove(i int, op opJSON) (opResult, error) {
	pod, ok := r.pods[op.UID]
	if !ok {
		return opResult{}, fmt.Errorf("ops[%d]: remove of unknown pod %q", i, op.UID)
	}
	delete(r.pods, op.UID)
	delete(r.admitted, op.UID)
	if err := r.release(i, pod); err != nil {
		return opResult{}, err
	}
	res := opResult{Admit: true}
	res.StateDefault, res.StateAssignments = snapshot(r.st)
	return res, nil
}

// finish adds the final CPU state, the devices each pod holds, the checkpoint files and
// the memory manager's machine state.
func (r *oracleRun) finish(dir string, ans *answerJSON) *caseFailure {
	ans.Default, ans.Assignments = snapshot(r.st)
	if r.dev != nil {
		ans.FinalDevices = map[string]devicesAnswer{}
		for uid, pod := range r.pods {
			if d := containerDevices(r.dev.dm, pod); len(d) > 0 {
				ans.FinalDevices[uid] = d
			}
		}
	}
	if r.c.Checkpoint {
		data, err := os.ReadFile(filepath.Join(dir, checkpointName))
		if err != nil {
			return inputFailure(fmt.Sprintf("reading checkpoint: %v", err))
		}
		ans.Checkpoint = string(data)
	}
	if r.mem != nil {
		ms, err := json.Marshal(r.mem.mm.State().GetMachineState())
		if err != nil {
			return inputFailure(fmt.Sprintf("memory state: %v", err))
		}
		ans.MemoryState = ms
		if r.c.Checkpoint {
			data, err := os.ReadFile(filepath.Join(dir, memoryCheckpointName))
			if err != nil {
				return inputFailure(fmt.Sprintf("reading the memory checkpoint: %v", err))
			}
			ans.MemoryCheckpoint = string(data)
		}
	}
	return nil
}

// snapshot is the state's shared pool and assignments as strings.
func snapshot(st state.State) (string, map[string]map[string]string) {
	out := map[string]map[string]string{}
	for uid, containers := range st.GetCPUAssignments() {
		out[uid] = map[string]string{}
		for name, cs := range containers {
			out[uid][name] = cs.String()
		}
	}
	return st.GetDefaultCPUSet().String(), out
}

// writeLegacy prints a checkpoint in the v2 or v3 format, marshalled by the kubelet's own
// checkpoint types (what kubelets 1.34-1.36 write), from one JSON object on stdin with the
// fields policyName, defaultCpuSet and entries.
func writeLegacy(version string) error {
	var in struct {
		PolicyName    string                       `json:"policyName"`
		DefaultCPUSet string                       `json:"defaultCpuSet"`
		Entries       map[string]map[string]string `json:"entries"`
	}
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		return fmt.Errorf("reading the state: %w", err)
	}
	// The kubelet's loaders start from an empty map (newCPUManagerCheckpointV2/V3), so an
	// absent "entries" hashes as an empty map, not a nil one.
	if in.Entries == nil {
		in.Entries = map[string]map[string]string{}
	}
	var blob []byte
	var err error
	switch version {
	case "v2":
		cp := &state.CPUManagerCheckpointV2{PolicyName: in.PolicyName, DefaultCPUSet: in.DefaultCPUSet, Entries: in.Entries}
		blob, err = cp.MarshalCheckpoint()
	case "v3":
		cp := &state.CPUManagerCheckpointV3{PolicyName: in.PolicyName, DefaultCPUSet: in.DefaultCPUSet, Entries: in.Entries, PodEntries: state.PodCPUAssignments{}}
		blob, err = cp.MarshalCheckpoint()
	default:
		return fmt.Errorf("unknown checkpoint version %q (v2 or v3)", version)
	}
	if err != nil {
		return err
	}
	_, err = os.Stdout.Write(append(blob, '\n'))
	return err
}

func main() {
	timeout := flag.Duration("timeout", 10*time.Second, "per-case time limit")
	legacy := flag.String("legacy-checkpoint", "", "print a v2 or v3 checkpoint of the state on stdin and exit")
	stateDir := flag.String("state-dir", "", "where the per-case checkpoint directories go (default: the system temp dir; "+
		"a tmpfs such as /dev/shm avoids the checkpoint code's fsync on every state change)")
	validate := flag.Bool("validate-state", false, "answer start-up validation cases (validate.go) instead of allocation cases")
	devices := flag.Bool("devices", false, "answer device cases too: run in a private mount namespace with a tmpfs on "+
		"/var/lib/kubelet (the device manager's fixed socket and checkpoint directory); exit when that cannot be set up")
	flag.Parse()
	if *devices {
		if os.Getenv(nsEnv) != "1" {
			err := enterPrivateKubeletDir()
			fmt.Fprintf(os.Stderr, "kubelet-oracle: -devices needs a private mount namespace with a tmpfs on %s "+
				"(root, or unprivileged user namespaces); none could be set up: %v\n", kubeletDir, err)
			os.Exit(2)
		}
		if err := setUpPrivateKubeletDir(); err != nil {
			fmt.Fprintf(os.Stderr, "kubelet-oracle: private %s: %v\n", kubeletDir, err)
			os.Exit(nsSetupFailed)
		}
	}
	if *legacy != "" {
		if err := writeLegacy(*legacy); err != nil {
			fmt.Fprintf(os.Stderr, "kubelet-oracle: %v\n", err)
			os.Exit(2)
		}
		return
	}
	// The kubelet logs every allocation; the oracle answers on stdout only.
	klog.SetLogger(logr.Discard())
	if err := utilfeature.DefaultMutableFeatureGate.Set(featureGates); err != nil {
		fmt.Fprintf(os.Stderr, "kubelet-oracle: feature gates: %v\n", err)
		os.Exit(2)
	}
	if *validate {
		os.Exit(runValidate())
	}
	tmp, err := os.MkdirTemp(*stateDir, "kubelet-oracle-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "kubelet-oracle: temp dir: %v\n", err)
		os.Exit(2)
	}
	defer os.RemoveAll(tmp)

	bad := func(msg string) any { return answerJSON{Error: msg} }
	status := serveCases(tmp, "case", bad, func(c *caseJSON, dir string, write func(any)) {
		done := make(chan answerJSON, 1)
		go func() {
			// A panic in the kubelet's code is an answer too (the kubelet would crash).
			defer func() {
				if r := recover(); r != nil {
					done <- answerJSON{ID: c.ID, Panic: fmt.Sprint(r)}
				}
			}()
			done <- run(c, dir)
		}()
		select {
		case ans := <-done:
			write(ans)
		case <-time.After(*timeout):
			write(answerJSON{ID: c.ID, Timeout: true})
			_ = os.RemoveAll(tmp)
			os.Exit(3)
		}
	})
	if status != 0 {
		os.Exit(status)
	}
}

// serveCases reads stdin one JSON case a line, decodes each into a fresh C and hands it,
// with a directory of its own under tmp (removed afterwards), to handle, which answers
// through write (one JSON line on stdout, flushed). A line that does not decode is
// answered with bad("line N: not a <what>: <error>"). Returns the exit status: 2 when a
// directory cannot be made or stdin cannot be read, else 0.
func serveCases[C any](tmp, what string, bad func(msg string) any, handle func(c *C, dir string, write func(any))) int {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 64<<20)
	out := bufio.NewWriter(os.Stdout)
	enc := json.NewEncoder(out)
	write := func(v any) {
		_ = enc.Encode(v)
		_ = out.Flush()
	}
	for n := 0; in.Scan(); n++ {
		var c C
		if err := json.Unmarshal(in.Bytes(), &c); err != nil {
			write(bad(fmt.Sprintf("line %d: not a %s: %v", n+1, what, err)))
			continue
		}
		dir := filepath.Join(tmp, strconv.Itoa(n))
		if err := os.Mkdir(dir, 0o700); err != nil {
			fmt.Fprintf(os.Stderr, "kubelet-oracle: %v\n", err)
			return 2
		}
		handle(&c, dir, write)
		_ = os.RemoveAll(dir)
	}
	if err := in.Err(); err != nil {
		fmt.Fprintf(os.Stderr, "kubelet-oracle: reading stdin: %v\n", err)
		return 2
	}
	return 0
}
