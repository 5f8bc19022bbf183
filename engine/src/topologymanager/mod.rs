//! The kubelet-compatible topology manager: NUMA masks, hint providers, merge and admission.
