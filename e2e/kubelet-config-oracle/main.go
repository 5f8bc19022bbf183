// Test oracle: the kubelet's own configuration loading (its command line, its --config file,
// the KEP-3983 drop-in directory --config-dir, then the command line's configuration flags
// over both), answering "what are the effective owned fields?" for JSON cases on stdin, one
// per line. Tests only, never shipped.
//
// It runs the kubelet's own functions from k8s.io/kubernetes/cmd/kubelet/app (pinned in
// go.mod) in the order of the kubelet command's Run: the command line parsed into the
// kubelet's flag set (built by the kubelet's own AddFlags functions), the flags' feature
// gates set, loadConfigFile, mergeKubeletConfigurations, kubeletConfigFlagPrecedence (the
// three are unexported there, so they are bound by go:linkname rather than copied), the
// merged feature gates set, then the kubelet's own validation over the result. Each case
// starts from a fresh copy of the global feature gates; a kubelet panic is a refusal.
// Input line: {"args": ["--config=...", ...]} (the
// kubelet's arguments without the program name), or the older {"config": "<path>",
// "configDir": "<path or empty>"}, or {"flagSet": true} for the kubelet's flag set
// ({"ok": true, "flags": [{"name", "shorthand", "type", "noOptDefVal"}, ...]}). Output line: {"ok": true, "owned": {...}} or
// {"ok": false, "error": "..."}.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	_ "unsafe" // go:linkname

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/featuregate"
	"k8s.io/klog/v2"
	_ "k8s.io/kubernetes/cmd/kubelet/app" // links the functions bound below
	"k8s.io/kubernetes/cmd/kubelet/app/options"
	kubeletconfiginternal "k8s.io/kubernetes/pkg/kubelet/apis/config"
	kubeletconfigvalidation "k8s.io/kubernetes/pkg/kubelet/apis/config/validation"
)

//go:linkname loadConfigFile k8s.io/kubernetes/cmd/kubelet/app.loadConfigFile
func loadConfigFile(ctx context.Context, name string) (*kubeletconfiginternal.KubeletConfiguration, error)

//go:linkname mergeKubeletConfigurations k8s.io/kubernetes/cmd/kubelet/app.mergeKubeletConfigurations
func mergeKubeletConfigurations(kc *kubeletconfiginternal.KubeletConfiguration, dir string) ([]string, error)

//go:linkname kubeletConfigFlagPrecedence k8s.io/kubernetes/cmd/kubelet/app.kubeletConfigFlagPrecedence
func kubeletConfigFlagPrecedence(kc *kubeletconfiginternal.KubeletConfiguration, args []string) error

type request struct {
	// FlagSet asks for the kubelet's flag set instead (every flag the command line may
	// carry, with its shorthand, value type and the value a bare flag takes).
	FlagSet   bool     `json:"flagSet"`
	Args      []string `json:"args"`
	Config    string   `json:"config"`
	ConfigDir string   `json:"configDir"`
}

type memoryReservation struct {
	NumaNode int32            `json:"numaNode"`
	Limits   map[string]int64 `json:"limits"` // bytes (Quantity.Value)
}

type owned struct {
	CPUManagerPolicy             string              `json:"cpuManagerPolicy"`
	CPUManagerPolicyOptions      map[string]string   `json:"cpuManagerPolicyOptions"`
	ReservedSystemCPUs           string              `json:"reservedSystemCPUs"`
	TopologyManagerPolicy        string              `json:"topologyManagerPolicy"`
	TopologyManagerScope         string              `json:"topologyManagerScope"`
	TopologyManagerPolicyOptions map[string]string   `json:"topologyManagerPolicyOptions"`
	KubeReservedCPU              string              `json:"kubeReservedCpu"`
	SystemReservedCPU            string              `json:"systemReservedCpu"`
	FeatureGates                 map[string]bool     `json:"featureGates"`
	SkippedFiles                 []string            `json:"skippedFiles"`
	KubeReserved                 map[string]string   `json:"kubeReserved"`
	SystemReserved               map[string]string   `json:"systemReserved"`
	MemoryManagerPolicy          string              `json:"memoryManagerPolicy"`
	ReservedMemory               []memoryReservation `json:"reservedMemory"`
}

type flagInfo struct {
	Name        string `json:"name"`
	Shorthand   string `json:"shorthand,omitempty"`
	Type        string `json:"type"`
	NoOptDefVal string `json:"noOptDefVal,omitempty"`
	// Global: registered by AddGlobalFlags, so a value-taking no-op in the re-parse of
	// kubeletConfigFlagPrecedence (newFakeFlagSet drops NoOptDefVal).
	Global bool `json:"global,omitempty"`
}

type response struct {
	OK    bool       `json:"ok"`
	Owned *owned     `json:"owned,omitempty"`
	Flags []flagInfo `json:"flags,omitempty"`
	Error string     `json:"error,omitempty"`
}

// kubeletFlagSet builds the kubelet's flag set as NewKubeletCommand builds it, over fresh
// flags and a fresh default configuration.
func kubeletFlagSet() (*pflag.FlagSet, *options.KubeletFlags, *kubeletconfiginternal.KubeletConfiguration, error) {
	cleanFlagSet := pflag.NewFlagSet("kubelet", pflag.ContinueOnError)
	cleanFlagSet.SetNormalizeFunc(cliflag.WordSepNormalizeFunc)
	cleanFlagSet.SetOutput(io.Discard)
	kubeletFlags := options.NewKubeletFlags()
	kubeletConfig, err := options.NewKubeletConfiguration()
	if err != nil {
		return nil, nil, nil, err
	}
	kubeletFlags.AddFlags(cleanFlagSet)
	options.AddKubeletConfigFlags(cleanFlagSet, kubeletConfig)
	options.AddGlobalFlags(cleanFlagSet)
	cleanFlagSet.BoolP("help", "h", false, "help for kubelet")
	return cleanFlagSet, kubeletFlags, kubeletConfig, nil
}

// flagSet lists the kubelet's flags (hidden and deprecated ones included: pflag parses them).
func flagSet() ([]flagInfo, error) {
	fs, _, _, err := kubeletFlagSet()
	if err != nil {
		return nil, err
	}
	globals := pflag.NewFlagSet("", pflag.ContinueOnError)
	globals.SetNormalizeFunc(cliflag.WordSepNormalizeFunc)
	options.AddGlobalFlags(globals)
	var out []flagInfo
	fs.VisitAll(func(f *pflag.Flag) {
		out = append(out, flagInfo{Name: f.Name, Shorthand: f.Shorthand, Type: f.Value.Type(), NoOptDefVal: f.NoOptDefVal, Global: globals.Lookup(f.Name) != nil})
	})
	return out, nil
}

// pristine is the feature gates as the kubelet starts with them; each case sets a copy.
var pristine featuregate.MutableVersionedFeatureGate

// effective follows the kubelet command's order (cmd/kubelet/app NewKubeletCommand's RunE):
// the command line, its feature gates, the config file, the drop-ins, the configuration
// flags again over the result, the merged feature gates, then validation.
func effective(req request) (o *owned, err error) {
	// The kubelet panics on some configurations (a config file whose featureGates have
	// AllAlpha=true without GenericWorkload panics in its defaulting): it does not start.
	defer func() {
		if r := recover(); r != nil {
			o, err = nil, fmt.Errorf("the kubelet panics: %v", r)
		}
	}()
	// The kubelet sets its flags' gates into the global gate before loading its files,
	// whose defaulting reads it: each case starts from a fresh copy of the pristine one.
	utilfeature.DefaultMutableFeatureGate = pristine.DeepCopy()
	utilfeature.DefaultFeatureGate = utilfeature.DefaultMutableFeatureGate
	gates := utilfeature.DefaultMutableFeatureGate
	args := req.Args
	if args == nil {
		args = []string{"--config=" + req.Config, "--config-dir=" + req.ConfigDir}
	}
	// The kubelet's flag set, as NewKubeletCommand builds it.
	cleanFlagSet, kubeletFlags, kubeletConfig, err := kubeletFlagSet()
	if err != nil {
		return nil, err
	}
	// --version is one flag object shared by every flag set (verflag.AddFlags): reset it.
	version := cleanFlagSet.Lookup("version")
	if err := version.Value.Set("false"); err != nil {
		return nil, err
	}
	version.Changed = false
	if err := cleanFlagSet.Parse(args); err != nil {
		return nil, fmt.Errorf("failed to parse kubelet flag: %w", err)
	}
	if cmds := cleanFlagSet.Args(); len(cmds) > 0 {
		return nil, fmt.Errorf("unknown command %+s", cmds[0])
	}
	// The command's short-circuits: it prints its help, or its version, and exits.
	if help, err := cleanFlagSet.GetBool("help"); err != nil || help {
		return nil, fmt.Errorf("the kubelet prints its help and exits (--help)")
	}
	if v := version.Value.String(); v == "true" || v == "raw" {
		return nil, fmt.Errorf("the kubelet prints its version and exits (--version=%s)", v)
	}
	// kubeletConfigFlagPrecedence re-parses with an ExitOnError flag set that has no
	// "help": pflag's ErrHelp there ends the kubelet (os.Exit(0)), which would end the
	// oracle too, so it is reported here instead of run.
	if cleanFlagSet.Changed("help") && (len(kubeletFlags.KubeletConfigFile) > 0 || len(kubeletFlags.KubeletDropinConfigDirectory) > 0) {
		return nil, fmt.Errorf("the kubelet exits re-reading its flags over its files: --help is no flag there (pflag.ErrHelp)")
	}
	if err := gates.SetFromMap(kubeletConfig.FeatureGates); err != nil {
		return nil, fmt.Errorf("failed to set feature gates from initial flags-based config: %w", err)
	}
	if len(kubeletFlags.KubeletConfigFile) > 0 {
		kubeletConfig, err = loadConfigFile(context.Background(), kubeletFlags.KubeletConfigFile)
		if err != nil {
			return nil, fmt.Errorf("failed to load kubelet config file, path: %s, error: %w", kubeletFlags.KubeletConfigFile, err)
		}
	}
	var skipped []string
	if len(kubeletFlags.KubeletDropinConfigDirectory) > 0 {
		skipped, err = mergeKubeletConfigurations(kubeletConfig, kubeletFlags.KubeletDropinConfigDirectory)
		if err != nil {
			return nil, fmt.Errorf("failed to merge kubelet configs: %w", err)
		}
	}
	if len(kubeletFlags.KubeletConfigFile) > 0 || len(kubeletFlags.KubeletDropinConfigDirectory) > 0 {
		if err := kubeletConfigFlagPrecedence(kubeletConfig, args); err != nil {
			return nil, fmt.Errorf("failed to precedence kubeletConfigFlag: %w", err)
		}
		if err := gates.SetFromMap(kubeletConfig.FeatureGates); err != nil {
			return nil, fmt.Errorf("failed to set feature gates from initial flags-based config: %w", err)
		}
	}
	kc := kubeletConfig
	// The one host-dependent check (this host's cgroup version) is left out: the cases
	// describe a node, not the machine the oracle runs on.
	kc.FailCgroupV1 = false
	if err := kubeletconfigvalidation.ValidateKubeletConfiguration(kc, gates); err != nil {
		return nil, fmt.Errorf("failed to validate kubelet configuration: %w", err)
	}
	o = &owned{
		CPUManagerPolicy:             kc.CPUManagerPolicy,
		CPUManagerPolicyOptions:      kc.CPUManagerPolicyOptions,
		ReservedSystemCPUs:           kc.ReservedSystemCPUs,
		TopologyManagerPolicy:        kc.TopologyManagerPolicy,
		TopologyManagerScope:         kc.TopologyManagerScope,
		TopologyManagerPolicyOptions: kc.TopologyManagerPolicyOptions,
		FeatureGates:                 kc.FeatureGates,
		SkippedFiles:                 skipped,
		KubeReserved:                 kc.KubeReserved,
		SystemReserved:               kc.SystemReserved,
		MemoryManagerPolicy:          kc.MemoryManagerPolicy,
	}
	if q, ok := kc.KubeReserved["cpu"]; ok {
		o.KubeReservedCPU = q
	}
	if q, ok := kc.SystemReserved["cpu"]; ok {
		o.SystemReservedCPU = q
	}
	for _, r := range kc.ReservedMemory {
		m := memoryReservation{NumaNode: r.NumaNode, Limits: map[string]int64{}}
		for name, q := range r.Limits {
			m.Limits[string(name)] = q.Value()
		}
		o.ReservedMemory = append(o.ReservedMemory, m)
	}
	return o, nil
}

func main() {
	// The kubelet's loading logs as it goes ("Using lenient decoding as strict decoding
	// failed"); the answers carry every error, so the log is dropped.
	klog.SetLogger(logr.Discard())
	pristine = utilfeature.DefaultMutableFeatureGate.DeepCopy()
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<24)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var req request
		var resp response
		if err := json.Unmarshal(in.Bytes(), &req); err != nil {
			resp = response{Error: fmt.Sprintf("bad request: %v", err)}
		} else if req.FlagSet {
			if flags, err := flagSet(); err != nil {
				resp = response{Error: err.Error()}
			} else {
				resp = response{OK: true, Flags: flags}
			}
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
