// Test oracle: the reference pod-set fingerprint answering JSON cases (tests only, never shipped).
module nodetopo.io/e2e/podfingerprint

go 1.26.0

require github.com/k8stopologyawareschedwg/podfingerprint v0.2.2

require github.com/OneOfOne/xxhash v1.2.8 // indirect
