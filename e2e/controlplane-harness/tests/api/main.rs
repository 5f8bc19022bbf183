//! Tests against one real kube-apiserver + etcd shared by this test binary: the CRDs and
//! their validation rules ([`crds`], [`differential`]) and the Helm chart's RBAC and
//! ValidatingAdmissionPolicy ([`security`], and with NodeResourceTopology and actuation on
//! [`security_scope`]), `helm install`/`uninstall` and kubectl output
//! ([`helm`]), the constraints of both status schemas through the status subresource
//! ([`status_rules`]). Each test uses its own object names, so they run in parallel.

mod common;
mod crds;
mod differential;
mod helm;
mod nrt;
mod security;
mod security_scope;
mod status_rules;
