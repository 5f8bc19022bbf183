//! Every `nodetopo` command shown in README.md and docs/*.md runs as written and prints what
//! the page shows, so the docs cannot drift from the program.
//!
//! A command is a fenced block whose first line starts with `$ nodetopo ` (a line ending in
//! `\` continues on the next); the lines up to the next `$ ` line or the end of the block
//! are its expected output (stdout, then stderr). In the expected output a line `...`
//! stands for any number of lines, so long outputs can be trimmed. An HTML comment on the
//! line before the fence changes how a block is checked:
//!
//! - `<!-- docs-test: skip: REASON -->`: not run (for output of this machine's /sys, which
//!   differs between machines); the test prints `SKIPPED: file:line: REASON`.
//! - `<!-- docs-test: exit N -->`: the command must exit with status N (default 0).
//!
//! Commands run with `sh` from the repository root, with the built `nodetopo` first on
//! PATH. Blocks that read `../shared` are skipped, saying so, when the shared data is not
//! beside the repository; `NODETOPO_SHARED=DIR` points at it from elsewhere (the commands
//! then run in a scratch directory that links the repository's entries and `../shared`).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One command and what the page says it prints.
#[derive(Debug)]
struct DocCommand {
    /// `file:line` of the command.
    place: String,
    command: String,
    expected: Vec<String>,
    exit: i32,
    skip: Option<String>,
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .expect("repository root")
}

/// The pages whose commands are checked.
fn pages(repo: &Path) -> Vec<PathBuf> {
    let mut v = vec![repo.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo.join("docs"))
        .expect("docs/ is readable")
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    v.extend(docs);
    v
}

/// The commands of one page.
fn commands(name: &str, text: &str) -> Vec<DocCommand> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if !lines[i].trim_start().starts_with("```") {
            i += 1;
            continue;
        }
        // The marker comment, if any, is the line before the fence.
        let marker = i
            .checked_sub(1)
            .map(|j| lines[j].trim())
            .and_then(|l| l.strip_prefix("<!-- docs-test:"))
            .and_then(|l| l.strip_suffix("-->"))
            .map(|l| l.trim().to_string());
        let start = i + 1;
        let mut end = start;
        while end < lines.len() && !lines[end].trim_start().starts_with("```") {
            end += 1;
        }
        let block = &lines[start..end];
        i = end + 1;
        if !block.first().is_some_and(|l| l.starts_with("$ nodetopo ")) {
            continue;
        }
        let mut k = 0;
        while k < block.len() {
            let Some(first) = block[k].strip_prefix("$ ") else {
                k += 1;
                continue;
            };
            let place = format!("{name}:{}", start + k + 1);
            let mut command = String::new();
            let mut line = first;
            loop {
                match line.strip_suffix('\\') {
                    Some(head) if k + 1 < block.len() => {
                        command.push_str(head.trim_end());
                        command.push(' ');
                        k += 1;
                        line = block[k].trim_start();
                    }
                    _ => {
                        command.push_str(line);
                        break;
                    }
                }
            }
            k += 1;
            let mut expected = Vec::new();
            while k < block.len() && !block[k].starts_with("$ ") {
                expected.push(block[k].trim_end().to_string());
                k += 1;
            }
            let (mut exit, mut skip) = (0, None);
            match marker.as_deref() {
                Some(m) if m.starts_with("skip:") => {
                    skip = Some(m["skip:".len()..].trim().to_string())
                }
                Some(m) if m.starts_with("exit ") => {
                    exit = m["exit ".len()..]
                        .trim()
                        .parse()
                        .unwrap_or_else(|_| panic!("{place}: bad marker {m:?}: expected `exit N`"))
                }
                Some(m) => panic!("{place}: unknown docs-test marker {m:?}"),
                None => {}
            }
            out.push(DocCommand {
                place,
                command,
                expected,
                exit,
                skip,
            });
        }
    }
    out
}

/// Whether `actual` matches `expected`, where a `...` line matches any run of lines.
fn matches(expected: &[String], actual: &[&str]) -> bool {
    match expected.split_first() {
        None => actual.is_empty(),
        Some((e, rest)) if e == "..." => (0..=actual.len()).any(|n| matches(rest, &actual[n..])),
        Some((e, rest)) => actual
            .split_first()
            .is_some_and(|(a, tail)| a.trim_end() == e && matches(rest, tail)),
    }
}

/// Where the commands run and whether `../shared` is there.
fn workdir(repo: &Path) -> (PathBuf, Option<tempfile::TempDir>, bool) {
    if repo.join("../shared").is_dir() {
        return (repo.to_path_buf(), None, true);
    }
    let Some(shared) = std::env::var_os("NODETOPO_SHARED").map(PathBuf::from) else {
        return (repo.to_path_buf(), None, false);
    };
    // A scratch directory whose `work/` links every entry of the repository and whose
    // `shared` links the data, so `../shared/...` and repository paths both resolve.
    let tmp = tempfile::tempdir().expect("tempdir");
    let work = tmp.path().join("work");
    std::fs::create_dir(&work).expect("mkdir");
    for e in std::fs::read_dir(repo).expect("repository is readable") {
        let e = e.expect("directory entry");
        std::os::unix::fs::symlink(e.path(), work.join(e.file_name())).expect("symlink");
    }
    std::os::unix::fs::symlink(&shared, tmp.path().join("shared")).expect("symlink");
    (work, Some(tmp), true)
}

#[test]
fn every_documented_command_prints_what_the_docs_show() {
    let repo = repo();
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_nodetopo"));
    let bin_dir = bin.parent().expect("binary directory");
    let path = std::env::join_paths(std::iter::once(bin_dir.to_path_buf()).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .expect("PATH");
    let (cwd, _guard, have_shared) = workdir(&repo);
    let mut failures = Vec::new();
    let (mut ran, mut skipped) = (0, 0);
    for page in pages(&repo) {
        let name = page
            .strip_prefix(&repo)
            .unwrap_or(&page)
            .display()
            .to_string();
        let text = std::fs::read_to_string(&page).expect("page is readable");
        for c in commands(&name, &text) {
            let why = c.skip.clone().or_else(|| {
                (!have_shared && c.command.contains("../shared")).then(|| {
                    "../shared is not beside the repository (set NODETOPO_SHARED=DIR)".to_string()
                })
            });
            if let Some(why) = why {
                let _ = writeln!(std::io::stderr(), "SKIPPED: {}: {why}", c.place);
                skipped += 1;
                continue;
            }
            let out = Command::new("sh")
                .arg("-c")
                .arg(format!("{} 2>&1", c.command))
                .current_dir(&cwd)
                .env("PATH", &path)
                .output()
                .expect("sh runs");
            ran += 1;
            let text = String::from_utf8_lossy(&out.stdout);
            let actual: Vec<&str> = text.lines().collect();
            let code = out.status.code().unwrap_or(-1);
            if code != c.exit {
                failures.push(format!(
                    "{}: `{}` exited {code}, the docs expect {}:\n{text}",
                    c.place, c.command, c.exit
                ));
            } else if !matches(&c.expected, &actual) {
                failures.push(format!(
                    "{}: `{}` printed:\n{text}\nthe docs show:\n{}",
                    c.place,
                    c.command,
                    c.expected.join("\n")
                ));
            }
        }
    }
    println!("documented commands: {ran} ran, {skipped} skipped");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert!(ran >= 5, "only {ran} documented commands ran");
}

#[test]
fn the_matcher_and_the_parser() {
    let e = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert!(matches(&e(&["a", "...", "d"]), &["a", "b", "c", "d"]));
    assert!(matches(&e(&["a", "...", "d"]), &["a", "d"]));
    assert!(!matches(&e(&["a", "...", "d"]), &["a", "b"]));
    assert!(!matches(&e(&["a", "b"]), &["a", "b", "c"]));
    assert!(matches(&e(&["...", "c"]), &["a", "b", "c"]));
    let page = "text\n<!-- docs-test: exit 2 -->\n```\n$ nodetopo plan \\\n    --x 1\nout 1\n$ nodetopo discover\nout 2\n```\n```\n$ kubectl get x\n```\n";
    let cs = commands("p.md", page);
    assert_eq!(cs.len(), 2);
    assert_eq!(cs[0].command, "nodetopo plan --x 1");
    assert_eq!(cs[0].expected, ["out 1"]);
    assert_eq!((cs[0].exit, cs[0].place.as_str()), (2, "p.md:4"));
    assert_eq!(cs[1].command, "nodetopo discover");
    assert_eq!(cs[1].expected, ["out 2"]);
}
