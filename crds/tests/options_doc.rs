//! The option tables in docs/operator.md are the engine's tables, rendered: a new option (or
//! a changed maturity, value kind or conflict) fails here until the docs are regenerated.
//! `NODETOPO_BLESS=1 cargo test -p nodetopo-crds --test options_doc` rewrites them.

use std::path::Path;

use nodetopo_engine::cpumanager::options::CPU_OPTION_TABLE;
use nodetopo_engine::options::OptionTable;
use nodetopo_engine::topologymanager::options::TM_OPTION_TABLE;

const SECTIONS: [(&str, &OptionTable); 2] = [
    ("cpu manager options", &CPU_OPTION_TABLE),
    ("topology manager options", &TM_OPTION_TABLE),
];

/// The text between the section's markers, and where it starts and ends.
fn section<'a>(doc: &'a str, name: &str) -> (usize, usize, &'a str) {
    let begin = format!("<!-- BEGIN generated: {name} -->\n");
    let end = format!("<!-- END generated: {name} -->");
    let b = doc
        .find(&begin)
        .unwrap_or_else(|| panic!("docs/operator.md lacks the marker {begin:?}"))
        + begin.len();
    let e = doc[b..]
        .find(&end)
        .unwrap_or_else(|| panic!("docs/operator.md lacks the marker {end:?}"))
        + b;
    (b, e, &doc[b..e])
}

#[test]
fn docs_option_tables_equal_the_engine_tables() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/operator.md");
    let mut doc = std::fs::read_to_string(&path).expect("docs/operator.md is readable");
    let bless = std::env::var_os("NODETOPO_BLESS").is_some();
    let mut rows = 0;
    for (name, table) in SECTIONS {
        let want = table.markdown();
        rows += table.options.len();
        let (b, e, got) = section(&doc, name);
        if bless {
            doc.replace_range(b..e, &want);
        } else {
            assert_eq!(got, want, "docs/operator.md section {name:?} differs from the engine's table (NODETOPO_BLESS=1 regenerates it)");
        }
    }
    if bless {
        std::fs::write(&path, doc).expect("docs/operator.md is writable");
    }
    println!("{} option tables, {rows} rows checked", SECTIONS.len());
}

/// The generated CEL option lists and rules name exactly the engine's options.
#[test]
fn generated_rules_follow_the_engine_tables() {
    use nodetopo_crds::rules;
    let mut cpu: Vec<&str> = CPU_OPTION_TABLE.options.iter().map(|o| o.name).collect();
    cpu.sort_unstable();
    assert_eq!(rules::CPU_MANAGER_OPTIONS.to_vec(), cpu);
    let mut tm: Vec<&str> = TM_OPTION_TABLE.options.iter().map(|o| o.name).collect();
    tm.sort_unstable();
    assert_eq!(rules::TOPOLOGY_MANAGER_OPTIONS.to_vec(), tm);
    for name in cpu.iter().chain(&tm) {
        let known = if cpu.contains(name) {
            rules::CPU_OPTIONS_KNOWN
        } else {
            rules::TM_OPTIONS_KNOWN
        };
        assert!(known.rule.contains(&format!("'{name}': true")), "{name}");
        assert!(known.message.contains(name), "{name}");
    }
    assert_eq!(
        rules::CPU_OPTIONS_INCOMPATIBLE.len(),
        CPU_OPTION_TABLE.conflicts.len()
    );
    for ((a, b), r) in CPU_OPTION_TABLE
        .conflicts
        .iter()
        .zip(rules::CPU_OPTIONS_INCOMPATIBLE)
    {
        assert!(r.rule.contains(a) && r.rule.contains(b), "{}", r.rule);
        assert!(r.message.contains(&format!("{a} and {b}")), "{}", r.message);
    }
    println!(
        "{} CPU and {} topology-manager options, {} conflicts checked",
        cpu.len(),
        tm.len(),
        CPU_OPTION_TABLE.conflicts.len()
    );
}
