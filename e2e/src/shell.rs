//! The two things the suite does through command-line tools, as a user would: read a
//! container's cpuset with `kubectl exec`, and `helm uninstall` the release.

use std::process::Command;

use nodetopo_engine::CpuSet;

/// Where a container's effective cpuset is, inside the container (cgroup v2).
pub const CPUSET_FILE: &str = "/sys/fs/cgroup/cpuset.cpus.effective";

/// A tool that could not be run or reported failure.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// The program could not be started at all.
    #[error("cannot run {program:?}: {source}")]
    Spawn {
        /// Program path or name.
        program: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The program exited unsuccessfully.
    #[error("`{command}` failed ({status}): {stderr}")]
    Failed {
        /// The command line.
        command: String,
        /// Exit status.
        status: std::process::ExitStatus,
        /// What it printed on stderr.
        stderr: String,
    },
    /// The program's output is not what was expected.
    #[error("`{command}` printed {output:?}: {problem}")]
    Output {
        /// The command line.
        command: String,
        /// What it printed.
        output: String,
        /// Why that is unusable.
        problem: String,
    },
}

/// Runs `program args...` to completion and returns its stdout.
pub fn run(program: &str, args: &[&str]) -> Result<String, ToolError> {
    let command = format!("{program} {}", args.join(" "));
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|source| ToolError::Spawn {
            program: program.to_string(),
            source,
        })?;
    if !out.status.success() {
        return Err(ToolError::Failed {
            command,
            status: out.status,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Parses what `cat cpuset.cpus.effective` printed.
pub fn parse_cpuset_output(command: &str, output: &str) -> Result<CpuSet, ToolError> {
    let text = output.trim();
    if text.is_empty() {
        return Err(ToolError::Output {
            command: command.to_string(),
            output: output.to_string(),
            problem: "empty cpuset".to_string(),
        });
    }
    CpuSet::parse(text).map_err(|e| ToolError::Output {
        command: command.to_string(),
        output: output.to_string(),
        problem: format!("not a CPU list: {e}"),
    })
}

/// The cpuset the kernel enforces on `namespace/pod` container `container`, read inside it.
pub fn container_cpuset(
    kubectl: &str,
    namespace: &str,
    pod: &str,
    container: &str,
) -> Result<CpuSet, ToolError> {
    let args = [
        "exec",
        "-n",
        namespace,
        pod,
        "-c",
        container,
        "--",
        "cat",
        CPUSET_FILE,
    ];
    let output = run(kubectl, &args)?;
    parse_cpuset_output(&format!("{kubectl} {}", args.join(" ")), &output)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpuset_output_parses_and_names_bad_output() {
        assert_eq!(
            parse_cpuset_output("cat", "1-2,5\n").unwrap(),
            CpuSet::parse("1,2,5").unwrap()
        );
        let e = parse_cpuset_output("kubectl exec p", "\n").unwrap_err();
        assert!(e.to_string().contains("empty cpuset"), "{e}");
        let e = parse_cpuset_output("kubectl exec p", "cat: can't open").unwrap_err();
        assert!(e.to_string().contains("not a CPU list"), "{e}");
    }

    #[test]
    fn missing_program_is_a_clear_error() {
        let e = run("/nonexistent/nodetopo-e2e-tool", &["version"]).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("cannot run \"/nonexistent/nodetopo-e2e-tool\""),
            "{e}"
        );
    }

    #[test]
    fn failing_program_reports_its_stderr() {
        let e = run("sh", &["-c", "echo boom >&2; exit 3"]).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("boom") && text.contains("failed"), "{text}");
    }
}
