// Test oracle: the kubelet's own configuration loading (its --config file and the KEP-3983
// drop-in directory --config-dir), answering "what are the effective owned fields?" for
// JSON cases on stdin, one per line. Tests only, never shipped.
//
// It runs the kubelet's own functions from k8s.io/kubernetes/cmd/kubelet/app (pinned in
// go.mod): loadConfigFile and mergeKubeletConfigurations are unexported there, so they are
// bound by go:linkname rather than copied, then the kubelet's own validation runs over the
// result. Input line: {"config": "<path>", "configDir": "<path or empty>"}. Output line:
// {"ok": true, "owned": {...}} or {"ok": false, "error": "..."}.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	_ "unsafe" // go:linkname

	"github.com/go-logr/logr"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/klog/v2"
	_ "k8s.io/kubernetes/cmd/kubelet/app" // links the functions bound below
	kubeletconfiginternal "k8s.io/kubernetes/pkg/kubelet/apis/config"
	kubeletconfigvalidation "k8s.io/kubernetes/pkg/kubelet/apis/config/validation"
)

//go:linkname loadConfigFile k8s.io/kubernetes/cmd/kubelet/app.loadConfigFile
func loadConfigFile(ctx context.Context, name string) (*kubeletconfiginternal.KubeletConfiguration, error)

//go:linkname mergeKubeletConfigurations k8s.io/kubernetes/cmd/kubelet/app.mergeKubeletConfigurations
func mergeKubeletConfigurations(kc *kubeletconfiginternal.KubeletConfiguration, dir string) ([]string, error)

type request struct {
	Config    string `json:"config"`
	ConfigDir string `json:"configDir"`
}

type owned struct {
	CPUManagerPolicy             string            `json:"cpuManagerPolicy"`
	CPUManagerPolicyOptions      map[string]string `json:"cpuManagerPolicyOptions"`
	ReservedSystemCPUs           string            `json:"reservedSystemCPUs"`
	TopologyManagerPolicy        string            `json:"topologyManagerPolicy"`
	TopologyManagerScope         string            `json:"topologyManagerScope"`
	TopologyManagerPolicyOptions map[string]string `json:"topologyManagerPolicyOptions"`
	KubeReservedCPU              string            `json:"kubeReservedCpu"`
	SystemReservedCPU            string            `json:"systemReservedCpu"`
	FeatureGates                 map[string]bool   `json:"featureGates"`
	SkippedFiles                 []string          `json:"skippedFiles"`
}

type response struct {
	OK    bool   `json:"ok"`
	Owned *owned `json:"owned,omitempty"`
	Error string `json:"error,omitempty"`
}

// effective follows the kubelet command's order: the config file, then the drop-ins, then
// validation of the result.
func effective(req request) (*owned, error) {
	kc, err := loadConfigFile(context.Background(), req.Config)
	if err != nil {
		return nil, fmt.Errorf("failed to load kubelet config file, path: %s, error: %w", req.Config, err)
	}
	var skipped []string
	if req.ConfigDir != "" {
		skipped, err = mergeKubeletConfigurations(kc, req.ConfigDir)
		if err != nil {
			return nil, fmt.Errorf("failed to merge kubelet configs: %w", err)
		}
	}
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(kc.FeatureGates); err != nil {
		return nil, err
	}
	// The one host-dependent check (this host's cgroup version) is left out: the cases
	// describe a node, not the machine the oracle runs on.
	kc.FailCgroupV1 = false
	if err := kubeletconfigvalidation.ValidateKubeletConfiguration(kc, utilfeature.DefaultFeatureGate); err != nil {
		return nil, fmt.Errorf("failed to validate kubelet configuration: %w", err)
	}
	o := &owned{
		CPUManagerPolicy:             kc.CPUManagerPolicy,
		CPUManagerPolicyOptions:      kc.CPUManagerPolicyOptions,
		ReservedSystemCPUs:           kc.ReservedSystemCPUs,
		TopologyManagerPolicy:        kc.TopologyManagerPolicy,
		TopologyManagerScope:         kc.TopologyManagerScope,
		TopologyManagerPolicyOptions: kc.TopologyManagerPolicyOptions,
		FeatureGates:                 kc.FeatureGates,
		SkippedFiles:                 skipped,
	}
	if q, ok := kc.KubeReserved["cpu"]; ok {
		o.KubeReservedCPU = q
	}
	if q, ok := kc.SystemReserved["cpu"]; ok {
		o.SystemReservedCPU = q
	}
	return o, nil
}

func main() {
	// The kubelet's loading logs as it goes ("Using lenient decoding as strict decoding
	// failed"); the answers carry every error, so the log is dropped.
	klog.SetLogger(logr.Discard())
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<24)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var req request
		var resp response
		if err := json.Unmarshal(in.Bytes(), &req); err != nil {
			resp = response{Error: fmt.Sprintf("bad request: %v", err)}
		} else if o, err := effective(req); err != nil {
			resp = response{Error: err.Error()}
		} else {
			resp = response{OK: true, Owned: o}
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
