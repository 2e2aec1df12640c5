//! The house's layout holds: within every crate, the top-level modules depend on one another in
//! one direction only (no module reaches, through `crate::…` paths in code, a module that
//! reaches it back, directly or around a longer circle). Doc comments are not dependencies.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Each crate's source root (the command line's modules are `src/cli`'s, which name each other
/// as `super::…`).
const ROOTS: &[(&str, &str)] = &[
    ("protocol", "protocol/src"),
    ("toolchain", "toolchain/src"),
    ("daemon", "daemon/src"),
    ("client", "client/src"),
    ("gp", "gp/src"),
    ("kernels", "kernels/src"),
    ("evolve", "evolve/src"),
    ("improve", "improve/src"),
    ("benches", "benches/src"),
    ("python", "python/src"),
    ("cli", "src/cli"),
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The identifiers that follow `prefix` in `code`.
fn named_after<'a>(code: &'a str, prefix: &str) -> Vec<&'a str> {
    code.match_indices(prefix)
        .filter(|(at, _)| *at == 0 || !code[..*at].ends_with(|c: char| c.is_alphanumeric() || c == '_'))
        .map(|(at, _)| {
            let rest = &code[at + prefix.len()..];
            &rest[..rest.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(rest.len())]
        })
        .collect()
}

/// Top-level module -> the top-level modules its code names.
fn graph(root: &Path, cli: bool) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(root, &mut files);
    let is_module = |m: &str| root.join(format!("{m}.rs")).is_file() || root.join(m).is_dir();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let rel = file.strip_prefix(root).unwrap();
        let first = rel.components().next().unwrap().as_os_str().to_string_lossy().into_owned();
        let from = first.trim_end_matches(".rs").to_owned();
        let text = std::fs::read_to_string(&file).unwrap();
        let code: String =
            text.lines().filter(|l| !l.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n");
        let mut names = named_after(&code, "crate::");
        // In src/cli a top-level module's own file names its siblings as super:: or
        // crate::cli::.
        if cli {
            names.extend(named_after(&code, "crate::cli::"));
            if rel.components().count() == 1 {
                names.extend(named_after(&code, "super::"));
            }
        }
        for to in names {
            if to != from && is_module(to) {
                edges.entry(from.clone()).or_default().insert(to.to_owned());
            }
        }
    }
    edges
}

/// A circle through `edges`, if there is one.
fn circle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == n) {
            return Some(path[at..].iter().cloned().chain(std::iter::once(n.to_owned())).collect());
        }
        if done.contains(n) {
            return None;
        }
        path.push(n.to_owned());
        for next in edges.get(n).into_iter().flatten() {
            if let Some(c) = visit(next, edges, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(n.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    edges.keys().find_map(|n| visit(n, edges, &mut Vec::new(), &mut done))
}

#[test]
fn no_crate_has_an_import_circle_between_its_modules() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    let mut dependencies = 0;
    for (name, root) in ROOTS {
        assert!(workspace.join(root).is_dir(), "{name}: no {root}");
        let edges = graph(&workspace.join(root), *name == "cli");
        dependencies += edges.values().map(BTreeSet::len).sum::<usize>();
        if let Some(c) = circle(&edges) {
            found.push(format!("{name}: {}", c.join(" -> ")));
        }
    }
    // The scan sees the house's dependencies at all (a wrong root or pattern would see none).
    assert!(dependencies > 50, "only {dependencies} dependencies between modules found");
    assert!(found.is_empty(), "import circles:\n{}", found.join("\n"));
}

#[test]
fn the_circle_finder_finds_a_circle() {
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (a, b) in [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")] {
        edges.entry(a.into()).or_default().insert(b.into());
    }
    assert_eq!(circle(&edges), Some(vec!["a".into(), "b".into(), "c".into(), "a".into()]));
    edges.get_mut("c").unwrap().remove("a");
    assert_eq!(circle(&edges), None);
}

/// `results/` holds what a reader uses: at most 5 MB tracked in all, no empty file, and no raw
/// logs or binaries (the history keeps those). Needs the checkout's git; without it, skipped.
#[test]
fn results_hold_what_a_reader_uses() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let listed =
        std::process::Command::new("git").arg("-C").arg(root).args(["ls-files", "-z", "results"]).output();
    let Some(out) = listed.ok().filter(|o| o.status.success()) else {
        eprintln!("skipped: results_hold_what_a_reader_uses needs a git checkout");
        return;
    };
    let files: Vec<String> = out
        .stdout
        .split(|&b| b == 0)
        .filter(|f| !f.is_empty())
        .map(|f| String::from_utf8_lossy(f).into_owned())
        .collect();
    assert!(!files.is_empty(), "no tracked results");
    let mut total = 0;
    for file in &files {
        let Ok(meta) = std::fs::metadata(root.join(file)) else { continue }; // removed, not committed
        assert!(meta.len() > 0, "{file} is empty");
        total += meta.len();
        let raw = [".err", ".gz", ".cubin", ".fatbin", ".o"];
        assert!(!raw.iter().any(|r| file.ends_with(r)), "{file} is a raw log or binary");
    }
    assert!(total <= 5 * 1024 * 1024, "results/ tracks {total} bytes, more than 5 MiB");
}
