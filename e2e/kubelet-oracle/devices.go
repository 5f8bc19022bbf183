// The device kind: the kubelet's device manager (pkg/kubelet/cm/devicemanager), built with
// NewManagerImpl, started with Start (its registration server listens on the hard-coded
// /var/lib/kubelet/device-plugins/kubelet.sock and keeps its checkpoint there) and fed by an
// in-process device plugin through PluginConnected and PluginListAndWatchReceiver.
//
// Because the manager's paths are fixed, the oracle runs device cases only inside a private
// mount namespace with a tmpfs on /var/lib/kubelet (flag -devices): it re-executes itself
// in a new mount namespace (as root), or in a new user and mount namespace (not root), and
// the child checks that /var/lib/kubelet is a tmpfs before it answers anything. When
// neither works the oracle exits with a message saying so; it never touches the host's
// /var/lib/kubelet.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	cadvisorapi "github.com/google/cadvisor/lib/model"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/kubernetes/pkg/kubelet/cm/containermap"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"

	"google.golang.org/grpc"
)

// nsEnv marks the re-executed oracle that runs inside its private mount namespace.
const nsEnv = "NODETOPO_KUBELET_ORACLE_NS"

// nsSetupFailed is the child's exit status when it could not set up its private
// /var/lib/kubelet (the parent then tries the next way, or gives up).
const nsSetupFailed = 5

// tmpfsMagic is TMPFS_MAGIC from linux/magic.h.
const tmpfsMagic = 0x01021994

// kubeletDir is the directory the device manager's paths live under.
const kubeletDir = "/var/lib/kubelet"

// deviceJSON is one device the in-process plugin advertises.
type deviceJSON struct {
	Resource string `json:"resource"`
	ID       string `json:"id"`
	// NUMA node ids of the device's TopologyInfo; empty: no topology (Topology nil).
	NUMA []int `json:"numa,omitempty"`
	// Unhealthy: the plugin lists the device with Health "Unhealthy".
	Unhealthy bool `json:"unhealthy,omitempty"`
}

// devicesAnswer is what the device manager holds for a pod: container -> resource -> ids.
type devicesAnswer map[string]map[string][]string

// inPlacePlugin is a device plugin living in the oracle's process: the manager talks to
// it through the DevicePluginClient interface, the same calls it makes over gRPC.
// GetPreferredAllocation is offered and prefers the devices it must include, then devices
// with a NUMA topology before those without, each by id: that makes the manager's choice
// among equally good devices (Go set order otherwise) deterministic.
type inPlacePlugin struct {
	resource string
	devices  map[string]deviceJSON
	// noPreferred: the plugin does not offer GetPreferredAllocation (the manager then
	// picks within each group in Go set order).
	noPreferred bool
	// socket names the plugin's endpoint (several plugins may serve one resource).
	socket string
}

func (p *inPlacePlugin) API() pluginapi.DevicePluginClient { return p }
func (p *inPlacePlugin) Resource() string                  { return p.resource }
func (p *inPlacePlugin) SocketPath() string                { return "in-process:" + p.socket }

func (p *inPlacePlugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty, ...grpc.CallOption) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: !p.noPreferred}, nil
}

func (p *inPlacePlugin) ListAndWatch(context.Context, *pluginapi.Empty, ...grpc.CallOption) (grpc.ServerStreamingClient[pluginapi.ListAndWatchResponse], error) {
	return nil, errors.New("in-process plugin: devices are pushed with PluginListAndWatchReceiver")
}

func (p *inPlacePlugin) GetPreferredAllocation(_ context.Context, req *pluginapi.PreferredAllocationRequest, _ ...grpc.CallOption) (*pluginapi.PreferredAllocationResponse, error) {
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, r := range req.ContainerRequests {
		must := sets.New(r.MustIncludeDeviceIDs...)
		out := sets.List(must)
		var rest []string
		for _, id := range r.AvailableDeviceIDs {
			if !must.Has(id) {
				rest = append(rest, id)
			}
		}
		sort.Slice(rest, func(i, j int) bool {
			ti, tj := len(p.devices[rest[i]].NUMA) > 0, len(p.devices[rest[j]].NUMA) > 0
			if ti != tj {
				return ti
			}
			return rest[i] < rest[j]
		})
		for _, id := range rest {
			if len(out) >= int(r.AllocationSize) {
				break
			}
			out = append(out, id)
		}
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: out})
	}
	return resp, nil
}

func (p *inPlacePlugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest, _ ...grpc.CallOption) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, r := range req.ContainerRequests {
		for _, id := range r.DevicesIds {
			if _, ok := p.devices[id]; !ok {
				return nil, fmt.Errorf("in-process plugin %s: unknown device %q", p.resource, id)
			}
		}
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{})
	}
	return resp, nil
}

func (p *inPlacePlugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest, ...grpc.CallOption) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

// devProvider forwards the topology manager's hint-provider calls to the device manager
// and records the hints it answers (nil list: no topology preference).
type devProvider struct {
	dm       *devicemanager.ManagerImpl
	recorded map[string]map[string][]hintJSON
}

func (d *devProvider) GetTopologyHints(logger klog.Logger, pod *v1.Pod, container *v1.Container, op lifecycle.Operation) map[string][]topologymanager.TopologyHint {
	h := d.dm.GetTopologyHints(logger, pod, container, op)
	d.record(container.Name, h)
	return h
}

func (d *devProvider) GetPodTopologyHints(logger klog.Logger, pod *v1.Pod, op lifecycle.Operation) map[string][]topologymanager.TopologyHint {
	h := d.dm.GetPodTopologyHints(logger, pod, op)
	d.record("", h)
	return h
}

func (d *devProvider) AllocatePod(logger klog.Logger, pod *v1.Pod, op lifecycle.Operation) error {
	return d.dm.AllocatePod(logger, pod, op)
}

func (d *devProvider) Allocate(ctx context.Context, pod *v1.Pod, container *v1.Container, op lifecycle.Operation) error {
	return d.dm.Allocate(ctx, pod, container, op)
}

func (d *devProvider) record(key string, h map[string][]topologymanager.TopologyHint) {
	if d.recorded == nil || len(h) == 0 {
		return
	}
	d.recorded[key] = hintMap(h, true)
}

// startDeviceManager builds and starts the device manager on the case's NUMA nodes with tm
// as its affinity store, and registers the case's devices, one in-process plugin per
// resource. The caller stops it.
func startDeviceManager(ctx context.Context, c *caseJSON, tm topologymanager.Manager, nodes []cadvisorapi.Node, active func() []*v1.Pod) (*devicemanager.ManagerImpl, error) {
	if os.Getenv(nsEnv) != "1" {
		return nil, errors.New("device cases need the oracle's private /var/lib/kubelet: run it with -devices")
	}
	logger := klog.FromContext(ctx)
	// A fresh manager per case: no checkpoint or socket of an earlier case.
	dir := filepath.Dir(pluginapi.KubeletSocket)
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("clearing %s: %w", dir, err)
	}
	dm, err := devicemanager.NewManagerImpl(logger, nodes, tm)
	if err != nil {
		return nil, fmt.Errorf("device manager: %w", err)
	}
	if err := dm.Start(logger, active, allSourcesReady{}, containermap.NewContainerMap(), sets.New[string]()); err != nil {
		return nil, fmt.Errorf("device manager start: %w", err)
	}
	byResource := map[string]map[string]deviceJSON{}
	var names []string
	for _, d := range c.Devices {
		if byResource[d.Resource] == nil {
			byResource[d.Resource] = map[string]deviceJSON{}
			names = append(names, d.Resource)
		}
		if _, dup := byResource[d.Resource][d.ID]; dup {
			_ = dm.Stop(logger)
			return nil, fmt.Errorf("devices: %s/%s listed twice", d.Resource, d.ID)
		}
		byResource[d.Resource][d.ID] = d
	}
	for _, r := range c.DeviceResources {
		if byResource[r] != nil {
			_ = dm.Stop(logger)
			return nil, fmt.Errorf("deviceResources: %s also has devices", r)
		}
		byResource[r] = map[string]deviceJSON{}
		names = append(names, r)
	}
	sort.Strings(names)
	noPreferred := sets.New(c.NoPreferred...)
	shadowed := sets.New(c.Shadowed...)
	for _, r := range names {
		if shadowed.Has(r) {
			// A first plugin for the same resource on its own socket: it lists one ghost
			// device on every NUMA node. The manager keeps one device list per resource,
			// replaced by each plugin's ListAndWatch, and allocates through the plugin
			// that connected last.
			ghost := &inPlacePlugin{resource: r, devices: map[string]deviceJSON{}, socket: r + "#shadow"}
			var list []*pluginapi.Device
			for _, n := range nodes {
				id := fmt.Sprintf("ghost-%d", n.Id)
				ghost.devices[id] = deviceJSON{Resource: r, ID: id, NUMA: []int{n.Id}}
				list = append(list, &pluginapi.Device{ID: id, Health: pluginapi.Healthy, Topology: &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: int64(n.Id)}}}})
			}
			if err := dm.PluginConnected(ctx, r, ghost); err != nil {
				_ = dm.Stop(logger)
				return nil, fmt.Errorf("shadow plugin %s: %w", r, err)
			}
			dm.PluginListAndWatchReceiver(logger, r, &pluginapi.ListAndWatchResponse{Devices: list})
		}
		p := &inPlacePlugin{resource: r, devices: byResource[r], noPreferred: noPreferred.Has(r), socket: r}
		if err := dm.PluginConnected(ctx, r, p); err != nil {
			_ = dm.Stop(logger)
			return nil, fmt.Errorf("plugin %s: %w", r, err)
		}
		list := []*pluginapi.Device{}
		ids := make([]string, 0, len(p.devices))
		for id := range p.devices {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		for _, id := range ids {
			d := &pluginapi.Device{ID: id, Health: pluginapi.Healthy}
			if p.devices[id].Unhealthy {
				d.Health = pluginapi.Unhealthy
			}
			if n := p.devices[id].NUMA; len(n) > 0 {
				d.Topology = &pluginapi.TopologyInfo{}
				for _, x := range n {
					d.Topology.Nodes = append(d.Topology.Nodes, &pluginapi.NUMANode{ID: int64(x)})
				}
			}
			list = append(list, d)
		}
		dm.PluginListAndWatchReceiver(logger, r, &pluginapi.ListAndWatchResponse{Devices: list})
	}
	return dm, nil
}

// containerDevices is what the device manager holds for each container of pod.
func containerDevices(dm *devicemanager.ManagerImpl, pod *v1.Pod) devicesAnswer {
	out := devicesAnswer{}
	for _, ct := range allContainers(pod) {
		got := dm.GetDevices(string(pod.UID), ct.Name)
		if len(got) == 0 {
			continue
		}
		per := map[string][]string{}
		for r, devs := range got {
			ids := make([]string, 0, len(devs))
			for id := range devs {
				ids = append(ids, id)
			}
			sort.Strings(ids)
			if len(ids) > 0 {
				per[r] = ids
			}
		}
		if len(per) > 0 {
			out[ct.Name] = per
		}
	}
	return out
}

// enterPrivateKubeletDir re-executes the oracle in a private mount namespace (root), or a
// user plus mount namespace (not root), and exits with the child's status. It returns only
// when every way failed, with the reasons.
func enterPrivateKubeletDir() error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding the oracle's own binary: %w", err)
	}
	type way struct {
		name string
		attr *syscall.SysProcAttr
	}
	var ways []way
	if os.Geteuid() == 0 {
		ways = append(ways, way{"mount namespace (root)", &syscall.SysProcAttr{
			Cloneflags: syscall.CLONE_NEWNS,
			Pdeathsig:  syscall.SIGKILL,
		}})
	}
	ways = append(ways, way{"user and mount namespace", &syscall.SysProcAttr{
		Cloneflags:                 syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
		GidMappingsEnableSetgroups: false,
		Pdeathsig:                  syscall.SIGKILL,
	}})
	var why []string
	for _, w := range ways {
		cmd := exec.Command(self, os.Args[1:]...)
		cmd.Env = append(os.Environ(), nsEnv+"=1")
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		cmd.SysProcAttr = w.attr
		if err := cmd.Start(); err != nil {
			why = append(why, fmt.Sprintf("%s: %v", w.name, err))
			continue
		}
		err := cmd.Wait()
		code := 0
		if err != nil {
			var ee *exec.ExitError
			if !errors.As(err, &ee) {
				why = append(why, fmt.Sprintf("%s: %v", w.name, err))
				continue
			}
			code = ee.ExitCode()
			if code < 0 {
				code = 2
			}
		}
		if code == nsSetupFailed {
			why = append(why, w.name+": the child could not mount its tmpfs (see above)")
			continue
		}
		os.Exit(code)
	}
	return errors.New(strings.Join(why, "; "))
}

// setUpPrivateKubeletDir runs in the re-executed child: it makes every mount private to
// this namespace and mounts a tmpfs on /var/lib/kubelet (on its nearest existing parent
// when it does not exist, so nothing is created on the host), then checks the result.
func setUpPrivateKubeletDir() error {
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making / private: %w", err)
	}
	target := kubeletDir
	for {
		if st, err := os.Stat(target); err == nil && st.IsDir() {
			break
		}
		parent := filepath.Dir(target)
		if parent == target {
			return errors.New("no directory to mount a tmpfs on")
		}
		target = parent
	}
	if target == "/" {
		return errors.New("/var does not exist; refusing to mount a tmpfs on /")
	}
	if err := syscall.Mount("tmpfs", target, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "size=64m,mode=0755"); err != nil {
		return fmt.Errorf("mounting a tmpfs on %s: %w", target, err)
	}
	if err := os.MkdirAll(filepath.Dir(pluginapi.KubeletSocket), 0o750); err != nil {
		return err
	}
	var fs syscall.Statfs_t
	if err := syscall.Statfs(kubeletDir, &fs); err != nil {
		return fmt.Errorf("statfs %s: %w", kubeletDir, err)
	}
	if fs.Type != tmpfsMagic {
		return fmt.Errorf("%s is not a tmpfs after mounting (type %#x)", kubeletDir, fs.Type)
	}
	return nil
}
