//! The architecture, checked: reads the sources of every crate of the
//! workspace, builds the graph of which module uses which (`crate::...`,
//! `super::...` and the crate root's re-exports), and fails on
//!
//! - any import circle between modules of one crate (a private child
//!   module, `mod x;`, is part of its parent: one type split over files);
//! - a data-path layer of uraid-core that uses a layer above it: the order
//!   is io < raid < cache < volume < control (see ARCHITECTURE.md).
//!
//! Comments and test modules (inline or in files of their own) are not
//! read: tests may use anything.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One crate's modules: path ("a::b") -> (file text, public?).
struct Crate {
    name: String,
    modules: BTreeMap<String, (String, bool)>,
    /// Root re-exports: name -> module it comes from.
    reexports: BTreeMap<String, String>,
}

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            if p.file_name().unwrap() != "bin" {
                rs_files(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The text that counts: no comment lines, no inline test module
/// (`#[cfg(test)] mod tests { ... }`, at the end of a file).
fn code(text: &str) -> String {
    let text = text.split("#[cfg(test)]\nmod tests {").next().unwrap();
    text.lines().filter(|l| !l.trim_start().starts_with("//")).map(|l| format!("{l}\n")).collect()
}

fn load(dir: &Path) -> Crate {
    let src = dir.join("src");
    let mut files = Vec::new();
    rs_files(&src, &mut files);
    let mut modules = BTreeMap::new();
    let mut raw = BTreeMap::new();
    for f in &files {
        let rel = f.strip_prefix(&src).unwrap().with_extension("");
        let mut parts: Vec<String> = rel.iter().map(|c| c.to_string_lossy().into_owned()).collect();
        if parts.last().is_some_and(|l| l == "mod" || l == "lib" || l == "main") {
            parts.pop();
        }
        let text = std::fs::read_to_string(f).unwrap();
        modules.insert(parts.join("::"), (code(&text), false));
        raw.insert(parts.join("::"), text);
    }
    // Test modules in files of their own (`#[cfg(test)] mod tests;`) are
    // tests: not read.
    let tests: Vec<String> = raw
        .keys()
        .filter(|m| {
            let Some((parent, leaf)) = m.rsplit_once("::").or(Some(("", m.as_str()))) else { return false };
            raw.get(parent).is_some_and(|t| t.contains(&format!("#[cfg(test)]\nmod {leaf};")))
        })
        .cloned()
        .collect();
    for t in tests {
        modules.remove(&t);
    }
    // Which modules are declared `pub mod` (the others are private parts of
    // their parent).
    let names: Vec<String> = modules.keys().cloned().collect();
    for m in &names {
        let parent = m.rsplit_once("::").map_or("", |(p, _)| p).to_string();
        let leaf = m.rsplit("::").next().unwrap().to_string();
        if m.is_empty() {
            continue;
        }
        let ptext = modules.get(&parent).map(|x| x.0.clone()).unwrap_or_default();
        let public = ptext.contains(&format!("pub mod {leaf};"));
        modules.get_mut(m).unwrap().1 = public;
    }
    let mut reexports = BTreeMap::new();
    let root = modules.get("").map(|x| x.0.clone()).unwrap_or_default();
    for line in root.lines() {
        let Some(rest) = line.trim().strip_prefix("pub use ") else { continue };
        let rest = rest.trim_end_matches(';');
        let (path, items) = match rest.split_once("::{") {
            Some((p, items)) => (p.to_string(), items.trim_end_matches('}').split(',').map(|s| s.trim().to_string()).collect()),
            None => {
                let (p, item) = rest.rsplit_once("::").unwrap_or(("", rest));
                (p.to_string(), vec![item.to_string()])
            }
        };
        for it in items {
            reexports.insert(it, path.clone());
        }
    }
    Crate { name: dir.file_name().unwrap().to_string_lossy().into_owned(), modules, reexports }
}

/// The unit a module belongs to: itself, or the nearest ancestor of which
/// it is a private part.
fn unit(c: &Crate, m: &str) -> String {
    let mut m = m.to_string();
    while let Some((false, Some((parent, _)))) = c.modules.get(&m).map(|x| (x.1, m.rsplit_once("::"))) {
        m = parent.to_string();
    }
    m
}

/// The longest module that `path` (segments after `crate::`) names.
fn resolve(c: &Crate, segs: &[&str]) -> Option<String> {
    for n in (1..=segs.len()).rev() {
        let p = segs[..n].join("::");
        if c.modules.contains_key(&p) {
            return Some(p);
        }
    }
    let first = segs.first()?;
    c.reexports.get(*first).and_then(|p| resolve(c, &p.split("::").collect::<Vec<_>>()))
}

/// Paths after `crate::` in `text`, `use crate::{a::b, c}` groups opened.
fn crate_paths(text: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("crate::") {
        let before = rest[..i].chars().last();
        rest = &rest[i + 7..];
        if before.is_some_and(|ch| ch.is_alphanumeric() || ch == '_') {
            continue; // some_crate::
        }
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let segs: Vec<String> = item.trim().split("::").map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect();
                if !segs.is_empty() {
                    out.push(segs);
                }
            }
            continue;
        }
        let end = rest.find(|ch: char| !(ch.is_alphanumeric() || ch == '_' || ch == ':')).unwrap_or(rest.len());
        out.push(rest[..end].split("::").filter(|s| !s.is_empty()).map(String::from).collect());
    }
    out
}

/// Unit -> units it uses.
fn graph(c: &Crate) -> BTreeMap<String, BTreeSet<String>> {
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (m, (text, _)) in &c.modules {
        let from = unit(c, m);
        let deps = g.entry(from.clone()).or_default();
        let mut targets = Vec::new();
        for segs in crate_paths(text) {
            targets.push(resolve(c, &segs.iter().map(|s| s.as_str()).collect::<Vec<_>>()));
        }
        // super:: from this module.
        let mut rest = text.as_str();
        while let Some(i) = rest.find("super::") {
            rest = &rest[i + 7..];
            let end = rest.find(|ch: char| !(ch.is_alphanumeric() || ch == '_' || ch == ':')).unwrap_or(rest.len());
            let parent = m.rsplit_once("::").map_or("", |(p, _)| p);
            let mut segs: Vec<&str> = parent.split("::").filter(|s| !s.is_empty()).collect();
            segs.extend(rest[..end].split("::").filter(|s| !s.is_empty()));
            targets.push(resolve(c, &segs).or(Some(parent.to_string())));
        }
        for t in targets.into_iter().flatten() {
            let t = unit(c, &t);
            if t != from && !t.is_empty() {
                deps.insert(t);
            }
        }
    }
    g
}

/// A circle in `g`, if any, as the list of units along it.
fn find_cycle(g: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        v: &str,
        g: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(v.to_string(), 1);
        stack.push(v.to_string());
        for w in g.get(v).into_iter().flatten() {
            match state.get(w.as_str()).copied().unwrap_or(0) {
                1 => {
                    let i = stack.iter().position(|x| x == w).unwrap();
                    let mut c = stack[i..].to_vec();
                    c.push(w.clone());
                    return Some(c);
                }
                0 => {
                    if let Some(c) = visit(w, g, state, stack) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(v.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for v in g.keys() {
        if state.get(v.as_str()).copied().unwrap_or(0) == 0 {
            let mut stack = Vec::new();
            if let Some(c) = visit(v, g, &mut state, &mut stack) {
                return Some(c);
            }
        }
    }
    None
}

fn crates() -> Vec<Crate> {
    // URAID_GRAPH_ROOT: another checkout's crates/ (for `print_the_graph`).
    let root = std::env::var_os("URAID_GRAPH_ROOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf());
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root).unwrap().map(|e| e.unwrap().path()).filter(|p| p.join("src").is_dir()).collect();
    dirs.sort();
    dirs.iter().map(|d| load(d)).collect()
}

#[test]
fn no_crate_has_an_import_circle() {
    let all = crates();
    assert!(all.len() >= 4, "found only {} crates", all.len());
    let mut bad = Vec::new();
    for c in &all {
        let g = graph(c);
        assert!(g.len() > 2, "{}: too few modules read ({})", c.name, g.len());
        if let Some(cycle) = find_cycle(&g) {
            bad.push(format!("{}: {}", c.name, cycle.join(" -> ")));
        }
    }
    assert!(bad.is_empty(), "import circles (move the shared item down a layer):\n{}", bad.join("\n"));
}

#[test]
fn no_data_path_layer_uses_a_layer_above_it() {
    let core = crates().into_iter().find(|c| c.name == "uraid-core").expect("uraid-core");
    let g = graph(&core);
    // The data path, bottom to top; `control` configures it from above.
    let order = ["io", "raid", "cache", "volume", "control"];
    let rank = |m: &str| order.iter().position(|l| m == *l || m.starts_with(&format!("{l}::")));
    let mut bad = Vec::new();
    for (from, deps) in &g {
        let Some(rf) = rank(from) else { continue };
        for to in deps {
            if let Some(rt) = rank(to) {
                if rt > rf {
                    bad.push(format!("{from} uses {to}"));
                }
            }
        }
    }
    assert!(bad.is_empty(), "a layer uses one above it (order {order:?}):\n{}", bad.join("\n"));
}

#[test]
fn the_checker_sees_a_circle_and_a_layer_breach() {
    // The checks above must be able to fail: a made-up crate with a circle
    // and an upward use.
    let mut modules = BTreeMap::new();
    modules.insert(String::new(), ("pub mod io;\npub mod raid;\npub use raid::Thing;\n".to_string(), true));
    modules.insert("io".to_string(), ("use crate::Thing;\n".to_string(), true));
    modules.insert("raid".to_string(), ("use crate::io::X;\npub struct Thing;\n".to_string(), true));
    let mut reexports = BTreeMap::new();
    reexports.insert("Thing".to_string(), "raid".to_string());
    let c = Crate { name: "made-up".into(), modules, reexports };
    let g = graph(&c);
    assert_eq!(g["io"], BTreeSet::from(["raid".to_string()]));
    assert!(find_cycle(&g).is_some(), "{g:?}");
}

/// Prints uraid-core's import graph (unit -> units it uses, test code not
/// read) and its size: issue 30's before/after figure. `cargo test -p
/// uraid-core --test module_graph -- --ignored --nocapture`; with
/// URAID_GRAPH_ROOT=DIR/crates, of another checkout.
#[test]
#[ignore = "prints a figure; checks nothing"]
fn print_the_graph() {
    let core = crates().into_iter().find(|c| c.name == "uraid-core").expect("uraid-core");
    let g = graph(&core);
    let edges: usize = g.values().map(|d| d.len()).sum();
    println!("uraid-core: {} units, {} edges", g.len(), edges);
    for (from, deps) in &g {
        let from = if from.is_empty() { "(root)" } else { from.as_str() };
        println!("  {from} -> {}", deps.iter().cloned().collect::<Vec<_>>().join(", "));
    }
}
