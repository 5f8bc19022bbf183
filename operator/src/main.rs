//! nodetopo-operator: reconciles NodeResourcePolicy objects into per-node NodeTopology specs.

fn main() {
    eprintln!("nodetopo-operator: not built yet");
    std::process::exit(2);
}
