// Test tooling: the real kubelet (k8s.io/kubernetes/cmd/kubelet/app, pinned in go.mod) run
// standalone (no API server) against a fake CRI runtime served from this same process on a
// unix socket, so nodetopo's actuation (drop-in, cpu_manager_state, restart) can be checked
// against the kubelet's own start-up: its config loading, validation and container manager
// including the CPU manager and its state file. Tests only, never shipped.
//
// Usage: kubelet-standalone --fake-cri-socket PATH -- <kubelet flags...>
// The fake runtime listens on PATH (removed first if it is a stale socket); the kubelet
// flags must point --container-runtime-endpoint at unix://PATH. The process exits with the
// kubelet's exit code (non-zero when the kubelet refuses its configuration).
package main

import (
	"context"
	"fmt"
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	fakecri "k8s.io/cri-client/pkg/fake"
	"k8s.io/kubernetes/cmd/kubelet/app"
)

func main() {
	args := os.Args[1:]
	if len(args) < 3 || args[0] != "--fake-cri-socket" || args[2] != "--" {
		fmt.Fprintln(os.Stderr, "usage: kubelet-standalone --fake-cri-socket PATH -- <kubelet flags...>")
		os.Exit(2)
	}
	socket := args[1]
	if info, err := os.Lstat(socket); err == nil {
		if info.Mode()&os.ModeSocket == 0 {
			fmt.Fprintf(os.Stderr, "kubelet-standalone: %s exists and is not a socket\n", socket)
			os.Exit(2)
		}
		if err := os.Remove(socket); err != nil {
			fmt.Fprintf(os.Stderr, "kubelet-standalone: cannot remove stale socket %s: %v\n", socket, err)
			os.Exit(2)
		}
	}
	runtime := fakecri.NewFakeRemoteRuntime()
	if err := runtime.Start("unix://" + socket); err != nil {
		fmt.Fprintf(os.Stderr, "kubelet-standalone: fake CRI runtime on %s: %v\n", socket, err)
		os.Exit(2)
	}
	defer runtime.Stop()

	command := app.NewKubeletCommand(context.Background())
	command.SetArgs(args[3:])
	os.Exit(cli.Run(command))
}
