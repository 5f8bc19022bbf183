//! Kubernetes resource quantities (`500m`, `1Gi`, `2`) as integers.
