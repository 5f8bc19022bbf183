//! nodetopo-agent: the node agent and the offline `discover`, `plan` and `conformance` commands.

fn main() {
    eprintln!("nodetopo-agent: not built yet");
    std::process::exit(2);
}
