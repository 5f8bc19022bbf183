//! The two shells around the core: cluster mode ([`kube`]) and local mode ([`local`]), with
//! the parts both share: one processing cycle ([`cycle`]) and the checkpoint at start
//! ([`restore`]).

pub mod cycle;
pub mod kube;
pub mod local;
pub mod restore;
