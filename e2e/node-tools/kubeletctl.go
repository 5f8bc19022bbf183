package main

// The kubelet-ctl subcommand is the agent's `command` restarter on the test node: the kubelet
// runs under the test's supervision, outside the agent's container, so each hook asks the
// supervisor over loopback (the agent runs with hostNetwork) and reports its answer.

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

func runKubeletCtl(args []string) int {
	if len(args) != 1 {
		fmt.Fprint(os.Stderr, "usage: nodetopo-testnode kubelet-ctl URL\n")
		return 2
	}
	client := &http.Client{Timeout: 3 * time.Minute}
	resp, err := client.Get(args[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "kubelet-ctl: %v\n", err)
		return 1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Printf("%s", body)
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(os.Stderr, "kubelet-ctl: GET %s: %s\n", args[0], resp.Status)
		return 1
	}
	return 0
}
