// Test tooling: the real kubelet (k8s.io/kubernetes/cmd/kubelet/app, pinned in go.mod) run
// standalone (no API server) against the fake CRI runtime of k8s.io/cri-client/pkg/fake,
// so nodetopo's actuation (drop-in, cpu_manager_state, restart) can be checked against the
// kubelet's own start-up: its config loading, validation and container manager including
// the CPU manager and its state file. Tests only, never shipped.
//
// Usage, one of:
//
//	kubelet-standalone --fake-cri-socket PATH -- <kubelet flags...>
//	    the fake runtime on PATH and the kubelet in one process (the runtime's pods and
//	    containers go when the kubelet stops);
//	kubelet-standalone --fake-cri-only PATH
//	    only the fake runtime, until SIGTERM or SIGINT: its pods and containers outlive
//	    kubelet restarts, as a real runtime's do;
//	kubelet-standalone -- <kubelet flags...>
//	    only the kubelet;
//	kubelet <kubelet flags...>  (run through a link named kubelet)
//	    only the kubelet, with a kubelet's own command line (what nodetopo reads from
//	    /proc/PID/cmdline), and the fake runtime in the same process when
//	    NODETOPO_FAKE_CRI_SOCKET names its socket.
//
// A stale socket at PATH is removed first; the kubelet flags (or its config file) must point
// the container runtime endpoint at unix://PATH. The kubelet modes exit with the kubelet's
// exit code (non-zero when the kubelet refuses its configuration).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	fakecri "k8s.io/cri-client/pkg/fake"
	"k8s.io/kubernetes/cmd/kubelet/app"
)

const usage = "usage: kubelet-standalone --fake-cri-socket PATH -- <kubelet flags...> | --fake-cri-only PATH | -- <kubelet flags...>"

func fail(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "kubelet-standalone: "+format+"\n", a...)
	os.Exit(2)
}

// serveFakeCRI starts the fake runtime on socket, replacing a stale socket file.
func serveFakeCRI(socket string) *fakecri.RemoteRuntime {
	if info, err := os.Lstat(socket); err == nil {
		if info.Mode()&os.ModeSocket == 0 {
			fail("%s exists and is not a socket", socket)
		}
		if err := os.Remove(socket); err != nil {
			fail("cannot remove stale socket %s: %v", socket, err)
		}
	}
	runtime := fakecri.NewFakeRemoteRuntime()
	// The kubelet refuses an image without a size ("Id or size of image ... is not set");
	// pulled images are fakes with this size.
	runtime.ImageService.SetFakeImageSize(1 << 20)
	if err := runtime.Start("unix://" + socket); err != nil {
		fail("fake CRI runtime on %s: %v", socket, err)
	}
	return runtime
}

func runKubelet(args []string) int {
	command := app.NewKubeletCommand(context.Background())
	command.SetArgs(args)
	return cli.Run(command)
}

func main() {
	args := os.Args[1:]
	if filepath.Base(os.Args[0]) == "kubelet" {
		if socket := os.Getenv("NODETOPO_FAKE_CRI_SOCKET"); socket != "" {
			runtime := serveFakeCRI(socket)
			code := runKubelet(args)
			runtime.Stop()
			os.Exit(code)
		}
		os.Exit(runKubelet(args))
	}
	switch {
	case len(args) >= 3 && args[0] == "--fake-cri-socket" && args[2] == "--":
		runtime := serveFakeCRI(args[1])
		code := runKubelet(args[3:])
		runtime.Stop()
		os.Exit(code)
	case len(args) == 2 && args[0] == "--fake-cri-only":
		runtime := serveFakeCRI(args[1])
		signals := make(chan os.Signal, 1)
		signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
		fmt.Fprintf(os.Stderr, "kubelet-standalone: fake CRI runtime serving on %s\n", args[1])
		<-signals
		runtime.Stop()
		_ = os.Remove(args[1])
	case len(args) >= 1 && args[0] == "--":
		os.Exit(runKubelet(args[1:]))
	default:
		fail("%s", usage)
	}
}
