//! `nodetopo`: the offline commands (see the library's documentation).

fn main() -> std::process::ExitCode {
    nodetopo_cli::main("nodetopo")
}
