//! `kubectl-nodetopo`: the offline commands as a kubectl plugin (`kubectl nodetopo plan`).

fn main() -> std::process::ExitCode {
    nodetopo_cli::main("kubectl-nodetopo")
}
