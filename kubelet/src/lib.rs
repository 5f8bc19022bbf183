//! The kubelet's files and flags as the kubelet reads them: its configuration file and
//! drop-in directory ([`config`], YAML as in [`yaml`]) and its command line ([`cmdline`]); pod manifests as the kubelet reads their fields
//! ([`pods`]).
//! No cluster, no kube client, no async runtime.

pub mod cmdline;
pub mod config;
pub mod cpu_checkpoint;
pub mod gohash;
pub mod gojson;
pub mod pods;
pub mod yaml;
