// Start-up validation cases (-validate-state): does the kubelet start over this checkpoint
// file under this configuration?
//
// One JSON case per line on stdin, one answer per line on stdout. The case's checkpoint
// text is written as the kubelet's cpu_manager_state in a fresh directory; then, exactly as
// the kubelet's CPU manager starts, the policy is built (cpumanager.NewStaticPolicy or
// NewNonePolicy, with the topology manager as its affinity store), the state is restored
// with state.NewCheckpointState (policy name, checksums, migration v2/v3 -> v4, CPU set
// parsing) and the policy's Start runs (the static policy's validateState). The answer says
// whether it was accepted and, if so, the state the kubelet runs with.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/kubelet/cm/cpumanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/cpumanager/state"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
	"k8s.io/utils/cpuset"
)

type validateCase struct {
	ID           string            `json:"id"`
	Machine      machineJSON       `json:"machine"`
	CPUPolicy    string            `json:"cpuPolicy"`
	CPUOptions   map[string]string `json:"cpuOptions,omitempty"`
	ReservedCPUs string            `json:"reservedCPUs,omitempty"`
	NumReserved  int               `json:"numReserved"`
	TMPolicy     string            `json:"tmPolicy"`
	TMScope      string            `json:"tmScope"`
	TMOptions    map[string]string `json:"tmOptions,omitempty"`
	// The checkpoint file's bytes; absent means no file.
	Checkpoint *string `json:"checkpoint,omitempty"`
}

type validateAnswer struct {
	ID          string                       `json:"id"`
	ConfigError string                       `json:"configError,omitempty"`
	Accepted    bool                         `json:"accepted"`
	Refusal     string                       `json:"refusal,omitempty"`
	Default     string                       `json:"defaultCPUSet"`
	Assignments map[string]map[string]string `json:"assignments,omitempty"`
	Error       string                       `json:"error,omitempty"`
}

func validateOne(c *validateCase, dir string) validateAnswer {
	ans := validateAnswer{ID: c.ID}
	logger := klog.Background()
	topo, nodes, err := buildTopology(c.Machine)
	if err != nil {
		ans.Error = err.Error()
		return ans
	}
	reserved := cpuset.New()
	if c.ReservedCPUs != "" {
		if reserved, err = cpuset.Parse(c.ReservedCPUs); err != nil {
			ans.Error = fmt.Sprintf("reservedCPUs: %v", err)
			return ans
		}
	}
	tm, err := topologymanager.NewManager(logger, nodes, c.TMPolicy, c.TMScope, c.TMOptions)
	if err != nil {
		ans.ConfigError = "topology manager: " + err.Error()
		return ans
	}
	var policy cpumanager.Policy
	switch c.CPUPolicy {
	case "none", "":
		policy, err = cpumanager.NewNonePolicy(c.CPUOptions)
	case "static":
		policy, err = cpumanager.NewStaticPolicy(logger, topo, c.NumReserved, reserved, tm, c.CPUOptions)
	default:
		err = fmt.Errorf("unknown policy %q", c.CPUPolicy)
	}
	if err != nil {
		ans.ConfigError = "cpu manager: " + err.Error()
		return ans
	}
	if c.Checkpoint != nil {
		if err := os.WriteFile(filepath.Join(dir, checkpointName), []byte(*c.Checkpoint), 0o644); err != nil {
			ans.Error = err.Error()
			return ans
		}
	}
	st, err := state.NewCheckpointState(logger, dir, checkpointName, policy.Name(), nil)
	if err != nil {
		ans.Refusal = err.Error()
		return ans
	}
	if err := policy.Start(logger, st); err != nil {
		ans.Refusal = err.Error()
		return ans
	}
	ans.Accepted = true
	ans.Default, ans.Assignments = snapshot(st)
	return ans
}

// runValidate answers validate cases until stdin ends; the exit status is 0 unless the
// input could not be read.
func runValidate() int {
	tmp, err := os.MkdirTemp("", "kubelet-oracle-validate-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "kubelet-oracle: temp dir: %v\n", err)
		return 2
	}
	defer os.RemoveAll(tmp)
	bad := func(msg string) any { return validateAnswer{Error: msg} }
	return serveCases(tmp, "validate case", bad, func(c *validateCase, dir string, write func(any)) {
		write(validateOne(c, dir))
	})
}
