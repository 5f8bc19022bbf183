// Command nodetopo-testnode is test tooling for nodetopo's single-node Kubernetes test
// cluster (containerd + the real kubelet), built as one static binary by build.sh:
//
//	nodetopo-testnode pause         the sandbox (pause) process: waits for SIGTERM/SIGINT,
//	                                reaping zombie children when it runs as PID 1
//	nodetopo-testnode workload      prints cpus_allowed_list=<Cpus_allowed_list of
//	                                /proc/self/status>, then waits like pause
//	nodetopo-testnode affinity      prints cpus_allowed_list=<...> and exits 0 (init containers)
//	nodetopo-testnode deviceplugin  a kubelet device plugin with NUMA-placed fake devices
//	                                (see deviceplugin.go)
//	nodetopo-testnode kubelet-ctl URL
//	                                asks the test's kubelet supervisor (GET URL, e.g.
//	                                http://127.0.0.1:PORT/stop) and exits 0 on 200: the
//	                                agent's stop/start/health commands on the test node
//	nodetopo-testnode podresources --socket FILE
//	                                prints the kubelet's PodResources List answer as JSON
//	                                (see podresources.go)
package main

import (
	"bufio"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

const usage = `usage: nodetopo-testnode pause
       nodetopo-testnode workload
       nodetopo-testnode affinity
       nodetopo-testnode podresources --socket FILE
       nodetopo-testnode kubelet-ctl URL
       nodetopo-testnode deviceplugin --resource NAME --devices ID:NUMA[,ID:NUMA...]
                         [--plugin-dir DIR] [--socket FILE]
`

func main() {
	log.SetPrefix("nodetopo-testnode: ")
	// Handle SIGTERM/SIGINT from the very start, so that one arriving early still exits 0.
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	switch os.Args[1] {
	case "pause":
		waitForStop(stop)
	case "workload":
		cpus, err := cpusAllowedList()
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("cpus_allowed_list=%s\n", cpus)
		waitForStop(stop)
	case "affinity":
		cpus, err := cpusAllowedList()
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("cpus_allowed_list=%s\n", cpus)
	case "kubelet-ctl":
		os.Exit(runKubeletCtl(os.Args[2:]))
	case "podresources":
		os.Exit(runPodResources(os.Args[2:]))
	case "deviceplugin":
		os.Exit(runDevicePlugin(os.Args[2:], stop))
	default:
		fmt.Fprintf(os.Stderr, "nodetopo-testnode: unknown subcommand %q\n%s", os.Args[1], usage)
		os.Exit(2)
	}
}

// waitForStop blocks until SIGTERM or SIGINT. As PID 1 (a pod's sandbox) it also reaps the
// zombie children that are re-parented to it.
func waitForStop(stop <-chan os.Signal) {
	var children chan os.Signal // nil (never ready) unless PID 1
	if os.Getpid() == 1 {
		children = make(chan os.Signal, 1)
		signal.Notify(children, syscall.SIGCHLD)
		reapZombies()
	}
	for {
		select {
		case <-stop:
			return
		case <-children:
			reapZombies()
		}
	}
}

func reapZombies() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
	}
}

// cpusAllowedList returns the Cpus_allowed_list field of /proc/self/status, e.g. "0-1".
func cpusAllowedList() (string, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v), nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("no Cpus_allowed_list in /proc/self/status")
}
