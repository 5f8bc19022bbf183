// Command etcd runs a single-member etcd server from go.etcd.io/etcd/server/v3/embed
// for nodetopo's control-plane tests. It listens on loopback only and stops on
// SIGTERM or SIGINT.
package main

import (
	"flag"
	"fmt"
	"log"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

func main() {
	dataDir := flag.String("data-dir", "", "directory for etcd's data (required)")
	clientURL := flag.String("listen-client-url", "", "client URL, e.g. http://127.0.0.1:2379 (required)")
	peerURL := flag.String("listen-peer-url", "", "peer URL, e.g. http://127.0.0.1:2380 (required)")
	flag.Parse()
	if *dataDir == "" || *clientURL == "" || *peerURL == "" {
		fmt.Fprintln(os.Stderr, "etcd: --data-dir, --listen-client-url and --listen-peer-url are required")
		os.Exit(2)
	}
	client, err := url.Parse(*clientURL)
	if err != nil {
		log.Fatalf("etcd: --listen-client-url %q: %v", *clientURL, err)
	}
	peer, err := url.Parse(*peerURL)
	if err != nil {
		log.Fatalf("etcd: --listen-peer-url %q: %v", *peerURL, err)
	}

	cfg := embed.NewConfig()
	cfg.Name = "nodetopo-test"
	cfg.Dir = *dataDir
	cfg.ListenClientUrls = []url.URL{*client}
	cfg.AdvertiseClientUrls = []url.URL{*client}
	cfg.ListenPeerUrls = []url.URL{*peer}
	cfg.AdvertisePeerUrls = []url.URL{*peer}
	cfg.InitialCluster = cfg.Name + "=" + peer.String()
	cfg.LogLevel = "warn"
	// Tests write little and restart often: keep the WAL small and snapshots rare.
	cfg.SnapshotCount = 10000
	cfg.QuotaBackendBytes = 2 << 30

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		log.Fatalf("etcd: start: %v", err)
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
		fmt.Fprintf(os.Stderr, "etcd: ready on %s\n", client)
	case <-time.After(60 * time.Second):
		e.Server.Stop()
		log.Fatal("etcd: not ready after 60s")
	}

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case s := <-sig:
		fmt.Fprintf(os.Stderr, "etcd: %v, stopping\n", s)
	case err := <-e.Err():
		log.Fatalf("etcd: %v", err)
	}
}
