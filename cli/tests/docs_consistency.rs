//! The README and docs/ stay true to the repository: every page is in the index, every
//! relative link and every source path a page names exists, the README's two set-up commands
//! are the ones CI runs, the RBAC tables sit only where `.ci/chart-check.sh` compares them with
//! the chart, and docs/agent.md's map names every folder of the agent's code.
//! (The commands the pages show are run by `docs_commands.rs`.)

use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .expect("repository root")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// README.md and every docs/*.md, as (path relative to the repository, text).
fn pages(repo: &Path) -> Vec<(String, String)> {
    let mut names: Vec<String> = std::fs::read_dir(repo.join("docs"))
        .expect("docs/ is readable")
        .map(|e| {
            e.expect("directory entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    names.sort();
    names.insert(0, "README.md".to_string());
    names
        .into_iter()
        .map(|n| {
            let text = read(&repo.join(&n));
            (n, text)
        })
        .collect()
}

/// The targets of the markdown links `[text](target)` in one line.
fn link_targets(line: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(i) = rest.find("](") {
        let after = &rest[i + 2..];
        match after.find(')') {
            Some(j) => {
                out.push(&after[..j]);
                rest = &after[j + 1..];
            }
            None => break,
        }
    }
    out
}

/// `a/{b,c}.rs` -> `a/b.rs`, `a/c.rs` (one level of braces, as the pages write them).
fn expand_braces(path: &str) -> Vec<String> {
    match (path.find('{'), path.find('}')) {
        (Some(open), Some(close)) if open < close => path[open + 1..close]
            .split(',')
            .flat_map(|alt| {
                expand_braces(&format!(
                    "{}{}{}",
                    &path[..open],
                    alt.trim(),
                    &path[close + 1..]
                ))
            })
            .collect(),
        _ => vec![path.to_string()],
    }
}

/// The repository folders whose paths the pages name; a path counts only where it starts a
/// word (so `/var/lib/kubelet/config.yaml` is a host path, not `kubelet/`).
const ROOTS: [&str; 11] = [
    "engine/",
    "crds/",
    "cli/",
    "kubelet/",
    "runtime/",
    "operator/",
    "agent/",
    "e2e/",
    "charts/",
    "examples/",
    ".ci/",
];

/// The repository paths one line names, braces expanded, trailing punctuation dropped.
fn named_paths(line: &str) -> Vec<String> {
    let bytes = line.as_bytes();
    let mut out = Vec::new();
    for (i, _) in line.char_indices() {
        let starts_word = i == 0 || matches!(bytes[i - 1], b' ' | b'\t' | b'`' | b'(' | b'[');
        if !starts_word || !ROOTS.iter().any(|r| line[i..].starts_with(r)) {
            continue;
        }
        let end = line[i..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || "_./{},-".contains(c)))
            .map_or(line.len(), |n| i + n);
        let path = line[i..end].trim_end_matches(['.', ',', ':', ';']);
        out.extend(expand_braces(path));
    }
    out
}

#[test]
fn every_docs_page_is_in_the_index_with_one_line() {
    let repo = repo();
    let index = read(&repo.join("docs/README.md"));
    let mut missing = Vec::new();
    for (name, _) in pages(&repo) {
        let Some(page) = name.strip_prefix("docs/") else {
            continue;
        };
        if page == "README.md" {
            continue;
        }
        let entry = format!("- [{page}]({page}): ");
        let n = index.lines().filter(|l| l.starts_with(&entry)).count();
        if n != 1 {
            missing.push(format!("{page} ({n} lines starting {entry:?})"));
        }
    }
    assert!(
        missing.is_empty(),
        "docs/README.md must give every page one line `- [page.md](page.md): what it holds`; wrong for: {}",
        missing.join(", ")
    );
}

#[test]
fn every_relative_link_resolves() {
    let repo = repo();
    let mut broken = Vec::new();
    for (name, text) in pages(&repo) {
        let dir = repo
            .join(&name)
            .parent()
            .expect("a page has a folder")
            .to_path_buf();
        for (n, line) in text.lines().enumerate() {
            for target in link_targets(line) {
                if target.is_empty()
                    || target.starts_with('#')
                    || target.contains("://")
                    || target.starts_with("mailto:")
                {
                    continue;
                }
                let file = target.split('#').next().unwrap_or(target);
                if !dir.join(file).exists() {
                    broken.push(format!("{name}:{}: {target}", n + 1));
                }
            }
        }
    }
    assert!(
        broken.is_empty(),
        "links to nothing:\n{}",
        broken.join("\n")
    );
}

#[test]
fn source_paths_named_in_the_docs_exist() {
    let repo = repo();
    let mut stale = Vec::new();
    for (name, text) in pages(&repo) {
        for (n, line) in text.lines().enumerate() {
            for path in named_paths(line) {
                // Created by the chart checks, gitignored; globs are patterns, not paths.
                if path.starts_with(".ci/tools") || path.contains('*') {
                    continue;
                }
                if !repo.join(&path).exists() {
                    stale.push(format!("{name}:{}: {path}", n + 1));
                }
            }
        }
    }
    assert!(
        stale.is_empty(),
        "the docs name paths that do not exist (moved or removed?):\n{}",
        stale.join("\n")
    );
}

#[test]
fn the_source_path_reader_reads_what_the_pages_write() {
    let line = "see `kubelet/src/{config,yaml}.rs` and (agent/src/daemon/) or /var/lib/kubelet/config.yaml.";
    assert_eq!(
        named_paths(line),
        [
            "kubelet/src/config.rs",
            "kubelet/src/yaml.rs",
            "agent/src/daemon/"
        ]
    );
    assert_eq!(
        link_targets("[a](a.md) and [b](../b.md#x)"),
        ["a.md", "../b.md#x"]
    );
}

/// The two commands of the README's "## Set-up" block, comments dropped.
fn readme_setup_commands(readme: &str) -> Vec<String> {
    let section = readme
        .split("\n## Set-up")
        .nth(1)
        .expect("README.md has a `## Set-up` section");
    let block = section
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.split("\n```").next())
        .expect("README.md's Set-up section opens with a ```sh block");
    block
        .lines()
        .map(|l| l.split(" #").next().unwrap_or(l).trim().to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

#[test]
fn the_readme_set_up_commands_are_what_ci_runs() {
    let repo = repo();
    let commands = readme_setup_commands(&read(&repo.join("README.md")));
    assert_eq!(
        commands.len(),
        2,
        "README.md's Set-up block must hold exactly two commands (the main job and the tests): {commands:?}"
    );
    let ci = read(&repo.join(".ci/run"));
    let ci_lines: Vec<String> = ci
        .lines()
        .map(|l| {
            l.split_whitespace()
                .filter(|w| *w != "-q")
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    let test = commands
        .iter()
        .find(|c| c.starts_with("cargo test"))
        .expect("one of README.md's set-up commands runs the tests (`cargo test ...`)");
    // .ci/run runs the README's test command as written (its own line, under the banner
    // naming it), so a change to either shows here.
    let banner = ci
        .lines()
        .position(|l| l.contains("the README's test command"))
        .expect(".ci/run has the banner \"the README's test command\"");
    assert!(
        ci.lines().skip(banner).any(|l| l.trim() == test),
        ".ci/run does not run README.md's test command {test:?} after its banner"
    );
    let main = commands
        .iter()
        .find(|c| !c.starts_with("cargo test"))
        .expect("the other set-up command runs the main job");
    assert!(
        main.ends_with(" plan") && main.contains("-p nodetopo-cli"),
        "README.md's first set-up command should run the offline `plan` of nodetopo-cli: {main:?}"
    );
    assert!(
        ci_lines.iter().any(|l| l == main),
        ".ci/run does not run README.md's first set-up command {main:?} (`-q` aside)"
    );
}

#[test]
fn rbac_tables_are_only_where_the_chart_check_compares_them() {
    // .ci/chart-check.sh compares the `| resource | verbs | why |` tables of docs/install.md
    // with the rendered chart; a table anywhere else would be unchecked.
    let repo = repo();
    let mut elsewhere = Vec::new();
    let mut in_install = 0;
    for (name, text) in pages(&repo) {
        for (n, line) in text.lines().enumerate() {
            let compact: String = line.chars().filter(|c| !c.is_whitespace()).collect();
            if compact.starts_with("|resource|verbs|") {
                if name == "docs/install.md" {
                    in_install += 1;
                } else {
                    elsewhere.push(format!("{name}:{}", n + 1));
                }
            }
        }
    }
    assert!(
        elsewhere.is_empty(),
        "RBAC tables outside docs/install.md, which .ci/chart-check.sh does not compare with the chart (link to docs/install.md instead): {}",
        elsewhere.join(", ")
    );
    assert!(
        in_install >= 2,
        "docs/install.md should hold the operator's and the agent's RBAC tables (found {in_install})"
    );
}

/// Production source files of a crate: not `tests.rs`, nothing under a `tests/` folder.
fn production_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if path.is_dir() {
            if name != "tests" {
                production_files(&path, out);
            }
        } else if name.ends_with(".rs") && name != "tests.rs" {
            out.push(path);
        }
    }
}

/// The paths docs/agent.md's map names: a line starting at column 0 names a path from the
/// repository root (a folder when it ends in `/`); an indented line under a folder names a
/// path inside that folder.
fn agent_map_paths(agent_md: &str) -> Vec<String> {
    let map = agent_md
        .split("\n## Shape\n")
        .nth(1)
        .and_then(|s| s.split("```\n").nth(1))
        .expect("docs/agent.md's Shape section holds the map in a ``` block");
    let mut folder: Option<String> = None;
    let mut out = Vec::new();
    for line in map.lines() {
        let Some(first) = line.split_whitespace().next() else {
            continue;
        };
        if !line.starts_with(' ') {
            folder = first.ends_with('/').then(|| first.to_string());
            out.push(first.to_string());
        } else if let Some(dir) = &folder {
            // Continuation lines of a description are indented further and start with a word,
            // not a file name.
            let indent = line.len() - line.trim_start().len();
            if indent == 2 && (first.ends_with(".rs") || first.ends_with('/')) {
                out.push(format!("{dir}{first}"));
            }
        }
    }
    out
}

#[test]
fn the_agent_map_names_every_folder_of_the_agent_and_only_real_paths() {
    let repo = repo();
    let named = agent_map_paths(&read(&repo.join("docs/agent.md")));
    let gone: Vec<&String> = named.iter().filter(|p| !repo.join(p).exists()).collect();
    assert!(
        gone.is_empty(),
        "docs/agent.md's map names paths that do not exist: {gone:?}"
    );
    let mut files = Vec::new();
    production_files(&repo.join("agent/src"), &mut files);
    assert!(
        files.len() > 10,
        "agent/src: only {} files found",
        files.len()
    );
    let mut unnamed = Vec::new();
    for file in &files {
        let rel = file
            .strip_prefix(&repo)
            .expect("under the repository")
            .to_string_lossy()
            .into_owned();
        let parent = rel.rsplit_once('/').map_or("", |(p, _)| p);
        // Files directly in agent/src by name; deeper ones by their folder.
        let wanted = if parent == "agent/src" {
            rel.clone()
        } else {
            format!("{parent}/")
        };
        let found = named.iter().any(|p| p == &wanted || p.starts_with(&wanted));
        if !found && !unnamed.contains(&wanted) {
            unnamed.push(wanted);
        }
    }
    assert!(
        unnamed.is_empty(),
        "docs/agent.md's map (Shape) does not name: {}",
        unnamed.join(", ")
    );
}

#[test]
fn the_agent_map_reader_resolves_indented_entries() {
    let md = "# Agent\n\n## Shape\n\n```\nagent/src/a.rs     x\nagent/src/b/       folder:\n  c.rs               y\n                     more words\n  d/e.rs             z\n```\n";
    assert_eq!(
        agent_map_paths(md),
        [
            "agent/src/a.rs",
            "agent/src/b/",
            "agent/src/b/c.rs",
            "agent/src/b/d/e.rs"
        ]
    );
}
