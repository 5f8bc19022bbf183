//! nodetopo end-to-end suite (see e2e/run.sh).
