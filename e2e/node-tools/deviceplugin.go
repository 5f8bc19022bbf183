package main

// The deviceplugin subcommand: a real kubelet device plugin (API v1beta1) that advertises
// fake devices, each on a given NUMA node, so that tests can drive the kubelet's Topology
// Manager and device manager without hardware.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// devicesEnv is set in each container to the comma-joined IDs of the devices allocated to it.
const devicesEnv = "NODETOPO_TEST_DEVICES"

type device struct {
	id   string
	numa int64
}

type pluginConfig struct {
	resource  string
	devices   []device
	pluginDir string // absolute
	socket    string // file name in pluginDir
}

func parseDevicePluginFlags(args []string) (pluginConfig, error) {
	var cfg pluginConfig
	var devices string
	fl := flag.NewFlagSet("deviceplugin", flag.ContinueOnError)
	fl.SetOutput(io.Discard)
	fl.StringVar(&cfg.resource, "resource", "", "extended resource name, DOMAIN/NAME")
	fl.StringVar(&devices, "devices", "", "ID:NUMA[,ID:NUMA...]")
	fl.StringVar(&cfg.pluginDir, "plugin-dir", pluginapi.DevicePluginPath, "the kubelet's device plugin directory")
	fl.StringVar(&cfg.socket, "socket", "nodetopo-test.sock", "this plugin's socket file name in --plugin-dir")
	if err := fl.Parse(args); err != nil {
		return cfg, err
	}
	if fl.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q", fl.Arg(0))
	}
	if domain, name, ok := strings.Cut(cfg.resource, "/"); !ok || domain == "" || name == "" {
		return cfg, fmt.Errorf("bad --resource %q: want DOMAIN/NAME", cfg.resource)
	}
	seen := map[string]bool{}
	for _, spec := range strings.Split(devices, ",") {
		id, numa, ok := strings.Cut(spec, ":")
		n, err := strconv.ParseInt(numa, 10, 64)
		if !ok || id == "" || err != nil || n < 0 || seen[id] {
			return cfg, fmt.Errorf("bad --devices entry %q in %q: want unique ID:NUMA, NUMA a node number", spec, devices)
		}
		seen[id] = true
		cfg.devices = append(cfg.devices, device{id, n})
	}
	if cfg.socket == "" || strings.Contains(cfg.socket, "/") || cfg.socket == "kubelet.sock" {
		return cfg, fmt.Errorf("bad --socket %q: want a file name other than kubelet.sock", cfg.socket)
	}
	dir, err := filepath.Abs(cfg.pluginDir)
	if cfg.pluginDir == "" || err != nil {
		return cfg, fmt.Errorf("bad --plugin-dir %q", cfg.pluginDir)
	}
	cfg.pluginDir = dir
	return cfg, nil
}

func runDevicePlugin(args []string, stop <-chan os.Signal) int {
	cfg, err := parseDevicePluginFlags(args)
	if err != nil {
		fmt.Fprintf(os.Stderr, "nodetopo-testnode: deviceplugin: %v\n%s", err, usage)
		return 2
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-stop; cancel() }()
	if err := serveDevicePlugin(ctx, cfg); err != nil {
		log.Printf("deviceplugin: %v", err)
		return 1
	}
	return 0
}

// serveDevicePlugin serves the plugin and keeps it registered until ctx ends. Every 500 ms it
// restarts the server if its socket is gone (a starting kubelet deletes every socket in the
// directory) and registers again if kubelet.sock changed (a new kubelet) since the last
// successful registration. At the end it stops the server and removes its socket.
func serveDevicePlugin(ctx context.Context, cfg pluginConfig) error {
	sock := filepath.Join(cfg.pluginDir, cfg.socket)
	kubeletSock := filepath.Join(cfg.pluginDir, "kubelet.sock")
	var srv *grpc.Server
	defer func() {
		if srv != nil {
			srv.Stop()
		}
		os.Remove(sock)
		log.Printf("deviceplugin: stopped, removed %s", sock)
	}()
	registered, failed := "", "" // identities of the kubelet.sock last registered with / failed on
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := os.Stat(sock); srv == nil || err != nil {
			if srv != nil {
				log.Printf("deviceplugin: %s is gone, restarting the server", sock)
				srv.Stop() // before listening again: closing the old listener unlinks sock
			}
			if srv, err = startServer(cfg, sock); err != nil {
				return err
			}
			registered = ""
		}
		if id := fileIdentity(kubeletSock); id == "" {
			registered = ""
		} else if id != registered {
			err := register(ctx, cfg, kubeletSock)
			switch {
			case err == nil:
				registered = id
				log.Printf("deviceplugin: registered %s (%d devices) with %s", cfg.resource, len(cfg.devices), kubeletSock)
			case id != failed: // once per kubelet.sock; retried on every tick
				failed = id
				log.Printf("deviceplugin: registering with %s: %v (retrying)", kubeletSock, err)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

func startServer(cfg pluginConfig, sock string) (*grpc.Server, error) {
	if err := os.MkdirAll(cfg.pluginDir, 0o750); err != nil {
		return nil, err
	}
	if err := os.Remove(sock); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("removing stale socket: %w", err)
	}
	lis, err := net.Listen("unix", sock)
	if err != nil {
		return nil, err
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, &devicePlugin{cfg: cfg})
	go srv.Serve(lis) // returns when srv is stopped
	log.Printf("deviceplugin: serving %s on %s", cfg.resource, sock)
	return srv, nil
}

// fileIdentity tells files apart even when a new one reuses a deleted one's inode number.
func fileIdentity(path string) string {
	var st syscall.Stat_t
	if syscall.Stat(path, &st) != nil {
		return ""
	}
	return fmt.Sprintf("%d:%d:%d.%d", st.Dev, st.Ino, st.Ctim.Sec, st.Ctim.Nsec)
}

func register(ctx context.Context, cfg pluginConfig, kubeletSock string) error {
	conn, err := grpc.NewClient("unix://"+kubeletSock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     cfg.socket,
		ResourceName: cfg.resource,
		Options:      pluginOptions(),
	})
	return err
}

func pluginOptions() *pluginapi.DevicePluginOptions {
	return &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: false, PreStartRequired: false}
}

type devicePlugin struct {
	pluginapi.UnimplementedDevicePluginServer
	cfg pluginConfig
}

func (p *devicePlugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return pluginOptions(), nil
}

// ListAndWatch sends every device once, healthy and on its NUMA node, then waits for the
// stream to end (the kubelet going away or the server stopping).
func (p *devicePlugin) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	resp := &pluginapi.ListAndWatchResponse{}
	for _, d := range p.cfg.devices {
		resp.Devices = append(resp.Devices, &pluginapi.Device{
			ID:       d.id,
			Health:   pluginapi.Healthy,
			Topology: &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: d.numa}}},
		})
	}
	if err := stream.Send(resp); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

func (p *devicePlugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, c := range req.ContainerRequests {
		ids := strings.Join(c.DevicesIds, ",")
		log.Printf("deviceplugin: allocating %s", ids)
		resp.ContainerResponses = append(resp.ContainerResponses,
			&pluginapi.ContainerAllocateResponse{Envs: map[string]string{devicesEnv: ids}})
	}
	return resp, nil
}

func (p *devicePlugin) GetPreferredAllocation(context.Context, *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	return &pluginapi.PreferredAllocationResponse{}, nil
}

func (p *devicePlugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}
