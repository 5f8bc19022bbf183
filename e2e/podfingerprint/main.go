// Test oracle: the reference pod-set fingerprint (github.com/k8stopologyawareschedwg/podfingerprint)
// answering JSON cases, so that nodetopo's Rust implementation can be compared with it
// (tests only, never shipped).
//
// stdin:  {"sets": [[{"namespace": "ns", "name": "pod"}, ...], ...]}
// stdout: {"signs": ["pfp0v001...", ...]}   (one per set, same order)
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/k8stopologyawareschedwg/podfingerprint"
)

type pod struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

type request struct {
	Sets [][]pod `json:"sets"`
}

type response struct {
	Signs []string `json:"signs"`
}

func main() {
	var req request
	dec := json.NewDecoder(os.Stdin)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		fmt.Fprintf(os.Stderr, "podfingerprint-oracle: bad request on stdin: %v\n", err)
		os.Exit(2)
	}
	resp := response{Signs: make([]string, 0, len(req.Sets))}
	for _, set := range req.Sets {
		fp := podfingerprint.NewFingerprint(len(set))
		for _, p := range set {
			if err := fp.Add(p.Namespace, p.Name); err != nil {
				fmt.Fprintf(os.Stderr, "podfingerprint-oracle: adding %s/%s: %v\n", p.Namespace, p.Name, err)
				os.Exit(1)
			}
		}
		resp.Signs = append(resp.Signs, fp.Sign())
	}
	if err := json.NewEncoder(os.Stdout).Encode(resp); err != nil {
		fmt.Fprintf(os.Stderr, "podfingerprint-oracle: writing the answer: %v\n", err)
		os.Exit(1)
	}
}
