package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// fakeKubelet is the kubelet's Registration service, recording each RegisterRequest.
type fakeKubelet struct {
	pluginapi.UnimplementedRegistrationServer
	reqs chan *pluginapi.RegisterRequest
}

func (k *fakeKubelet) Register(_ context.Context, r *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	k.reqs <- r
	return &pluginapi.Empty{}, nil
}

func startFakeKubelet(t *testing.T, sock string, reqs chan *pluginapi.RegisterRequest) *grpc.Server {
	t.Helper()
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterRegistrationServer(srv, &fakeKubelet{reqs: reqs})
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return srv
}

func waitRegister(t *testing.T, reqs chan *pluginapi.RegisterRequest) *pluginapi.RegisterRequest {
	t.Helper()
	select {
	case r := <-reqs:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("the plugin did not register")
		return nil
	}
}

// checkPlugin checks the plugin's registration, then ListAndWatch and Allocate on its socket.
func checkPlugin(t *testing.T, r *pluginapi.RegisterRequest, sock string) {
	t.Helper()
	if r.Version != pluginapi.Version || r.Endpoint != "p.sock" || r.ResourceName != "nodetopo.io/test" ||
		r.Options == nil || r.Options.GetPreferredAllocationAvailable || r.Options.PreStartRequired {
		t.Fatalf("bad RegisterRequest: %v", r)
	}
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := pluginapi.NewDevicePluginClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := client.ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range resp.Devices {
		if d.Health != pluginapi.Healthy || d.Topology == nil || len(d.Topology.Nodes) != 1 {
			t.Fatalf("bad device %v", d)
		}
		got = append(got, fmt.Sprintf("%s:%d", d.ID, d.Topology.Nodes[0].ID))
	}
	if strings.Join(got, ",") != "gpu0:0,gpu1:1" {
		t.Fatalf("ListAndWatch devices = %v, want gpu0:0,gpu1:1", got)
	}
	alloc, err := client.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{
		{DevicesIds: []string{"gpu0", "gpu1"}}, {DevicesIds: []string{"gpu1"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(alloc.ContainerResponses) != 2 || alloc.ContainerResponses[0].Envs[devicesEnv] != "gpu0,gpu1" ||
		alloc.ContainerResponses[1].Envs[devicesEnv] != "gpu1" {
		t.Fatalf("bad AllocateResponse: %v", alloc)
	}
}

func TestDevicePluginRegistersServesAndReregisters(t *testing.T) {
	dir := t.TempDir()
	kubeletSock, sock := filepath.Join(dir, "kubelet.sock"), filepath.Join(dir, "p.sock")
	if err := os.WriteFile(sock, nil, 0o600); err != nil { // a stale socket file to replace
		t.Fatal(err)
	}
	reqs := make(chan *pluginapi.RegisterRequest, 4)
	kubelet := startFakeKubelet(t, kubeletSock, reqs)
	cfg, err := parseDevicePluginFlags([]string{"--resource", "nodetopo.io/test",
		"--devices", "gpu0:0,gpu1:1", "--plugin-dir", dir, "--socket", "p.sock"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- serveDevicePlugin(ctx, cfg) }()
	checkPlugin(t, waitRegister(t, reqs), sock)

	// A kubelet restart: the old kubelet.sock goes away, the new kubelet deletes every socket
	// in the directory (the plugin's too) and listens on a new kubelet.sock.
	kubelet.Stop() // unlinks kubelet.sock
	os.Remove(sock)
	startFakeKubelet(t, kubeletSock, reqs)
	checkPlugin(t, waitRegister(t, reqs), sock)

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serveDevicePlugin: %v", err)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Fatalf("socket not removed at exit: %v", err)
	}
}

func TestDevicePluginFlagsNameTheBadValue(t *testing.T) {
	for bad, args := range map[string][]string{
		"noslash":      {"--resource", "noslash", "--devices", "a:0"},
		"a:zero":       {"--resource", "x.io/r", "--devices", "a:zero"},
		"a:1":          {"--resource", "x.io/r", "--devices", "a:0,a:1"},
		"sub/dir.sock": {"--resource", "x.io/r", "--devices", "a:0", "--socket", "sub/dir.sock"},
		"bogus":        {"--resource", "x.io/r", "--devices", "a:0", "--bogus"},
	} {
		if _, err := parseDevicePluginFlags(args); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("%v: error %v does not name %q", args, err, bad)
		}
	}
}
