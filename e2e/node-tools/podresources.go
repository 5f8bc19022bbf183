package main

// The podresources subcommand asks the kubelet's PodResources API (v1 List) what it gave
// every container and prints one JSON document, so that a test compares the kubelet's own
// answer with the container's cgroup and nodetopo's status without a gRPC client of its own:
//
//	{"pods":[{"namespace":"ns","name":"p","containers":[
//	  {"name":"c","cpu_ids":[1],"devices":[{"resource":"r","ids":["d0"],"numa":[0]}]}]}]}

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
)

type prDevice struct {
	Resource string   `json:"resource"`
	IDs      []string `json:"ids"`
	NUMA     []int64  `json:"numa"`
}

type prContainer struct {
	Name    string     `json:"name"`
	CPUIDs  []int64    `json:"cpu_ids"`
	Devices []prDevice `json:"devices"`
}

type prPod struct {
	Namespace  string        `json:"namespace"`
	Name       string        `json:"name"`
	Containers []prContainer `json:"containers"`
}

func runPodResources(args []string) int {
	fl := flag.NewFlagSet("podresources", flag.ContinueOnError)
	socket := fl.String("socket", "/var/lib/kubelet/pod-resources/kubelet.sock", "the kubelet's PodResources socket")
	if err := fl.Parse(args); err != nil {
		return 2
	}
	conn, err := grpc.NewClient("unix://"+*socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintf(os.Stderr, "nodetopo-testnode podresources: connecting to %s: %v\n", *socket, err)
		return 1
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := podresourcesapi.NewPodResourcesListerClient(conn).List(ctx, &podresourcesapi.ListPodResourcesRequest{})
	if err != nil {
		fmt.Fprintf(os.Stderr, "nodetopo-testnode podresources: List on %s: %v\n", *socket, err)
		return 1
	}
	out := struct {
		Pods []prPod `json:"pods"`
	}{Pods: []prPod{}}
	for _, p := range resp.GetPodResources() {
		pod := prPod{Namespace: p.GetNamespace(), Name: p.GetName(), Containers: []prContainer{}}
		for _, c := range p.GetContainers() {
			ct := prContainer{Name: c.GetName(), CPUIDs: c.GetCpuIds(), Devices: []prDevice{}}
			if ct.CPUIDs == nil {
				ct.CPUIDs = []int64{}
			}
			for _, d := range c.GetDevices() {
				dev := prDevice{Resource: d.GetResourceName(), IDs: d.GetDeviceIds(), NUMA: []int64{}}
				for _, n := range d.GetTopology().GetNodes() {
					dev.NUMA = append(dev.NUMA, n.GetID())
				}
				ct.Devices = append(ct.Devices, dev)
			}
			pod.Containers = append(pod.Containers, ct)
		}
		out.Pods = append(out.Pods, pod)
	}
	enc := json.NewEncoder(os.Stdout)
	if err := enc.Encode(out); err != nil {
		fmt.Fprintf(os.Stderr, "nodetopo-testnode podresources: %v\n", err)
		return 1
	}
	return 0
}
