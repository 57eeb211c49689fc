//! The layers of this crate only use the ones below them: machinery (client, informer,
//! workqueue, events, metrics, instrumented, files, flags, logging) → controllers → serving → app;
//! and no module imports a sibling that imports it back (no import circle). The provider surface
//! (`ccm-provider`) is a crate of its own, so it cannot reach up at all; this test keeps the
//! order inside `ccm-runtime`, where the compiler would allow any edge.

use std::path::{Path, PathBuf};

/// The layers, bottom first: a module's top-level name and its layer's index.
const LAYERS: &[(&str, &[&str])] = &[
    (
        "machinery",
        &[
            "client",
            "informer",
            "workqueue",
            "events",
            "metrics",
            "instrumented",
            "files",
            "flags",
            "logging",
            "shadow",
        ],
    ),
    ("controllers", &["controllers"]),
    ("serving", &["serving"]),
    ("app", &["app"]),
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS
        .iter()
        .position(|(_, modules)| modules.contains(&module))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("readable src") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every `crate::<module>` a file names (in code or in doc links).
fn crate_paths(text: &str) -> Vec<&str> {
    text.match_indices("crate::")
        .filter(|(i, _)| {
            // Not `ccm_crate::` or `$crate::`: only a path that starts at `crate`.
            !text[..*i]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$')
        })
        .map(|(i, m)| {
            let rest = &text[i + m.len()..];
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            &rest[..end]
        })
        .collect()
}

#[test]
fn no_layer_uses_one_above_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    assert!(
        files.len() > 20,
        "found the sources ({} files)",
        files.len()
    );
    let mut violations = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(&src).expect("under src");
        let top = rel
            .components()
            .next()
            .and_then(|c| c.as_os_str().to_str())
            .map(|s| s.trim_end_matches(".rs"))
            .expect("a path");
        if top == "lib" {
            continue;
        }
        let own = layer_of(top).unwrap_or_else(|| {
            panic!("src/{top} is in no layer: add it to LAYERS in tests/layers.rs")
        });
        let text = std::fs::read_to_string(file).expect("readable source");
        for used in crate_paths(&text) {
            if let Some(theirs) = layer_of(used).filter(|&theirs| theirs > own) {
                violations.push(format!(
                    "src/{} ({}) uses crate::{used} ({})",
                    rel.display(),
                    LAYERS[own].0,
                    LAYERS[theirs].0
                ));
            }
        }
    }
    assert!(
        violations.is_empty(),
        "layer violations:\n{}",
        violations.join("\n")
    );
}

#[test]
fn the_scanner_sees_upward_edges() {
    let text = "use crate::app::Options; /// [`x`](crate::controllers::node)\n ccm_crate::app; $crate::app";
    assert_eq!(crate_paths(text), ["app", "controllers"]);
}

/// The sibling modules a file of folder `dir` names: `super::x` (from a file of the folder)
/// and `crate::<dir path>::x`, `x` being a file or folder beside it.
fn sibling_uses(text: &str, dir_path: &str, siblings: &[String]) -> Vec<String> {
    let mut used = Vec::new();
    for prefix in ["super::".to_owned(), format!("crate::{dir_path}::")] {
        for (i, m) in text.match_indices(prefix.as_str()) {
            if text[..i]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':')
            {
                continue;
            }
            let rest = &text[i + m.len()..];
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            let name = &rest[..end];
            if siblings.iter().any(|s| s == name) && !used.iter().any(|u| u == name) {
                used.push(name.to_owned());
            }
        }
    }
    used
}

/// A folder's modules, each with the siblings it imports.
type Graph = Vec<(String, Vec<String>)>;

/// Each folder's modules and the siblings each imports, below `dir` (relative path `rel`).
fn module_graphs(dir: &Path, rel: &str, out: &mut Vec<(String, Graph)>) {
    let mut modules = Vec::new();
    for entry in std::fs::read_dir(dir).expect("readable src") {
        let path = entry.expect("dir entry").path();
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("a name")
            .to_owned();
        if path.is_dir() {
            let child = if rel.is_empty() {
                name.clone()
            } else {
                format!("{rel}::{name}")
            };
            module_graphs(&path, &child, out);
            // A folder beside `name.rs` (its unit tests) is that file's module, not another.
            if path.join("mod.rs").is_file() {
                modules.push((name, path.join("mod.rs")));
            }
        } else if path.extension().is_some_and(|e| e == "rs") && name != "mod" && name != "lib" {
            modules.push((name, path));
        }
    }
    let siblings: Vec<String> = modules.iter().map(|(n, _)| n.clone()).collect();
    let mut graph = Vec::new();
    for (name, file) in &modules {
        // A file's own `mod tests` uses `super::` for the file itself, not its siblings.
        let text = std::fs::read_to_string(file).unwrap_or_default();
        let code = text
            .split("#[cfg(test)]\nmod tests")
            .next()
            .unwrap_or_default();
        // Imports and paths in code; a doc link is no dependency.
        let code: String = code
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        let mut uses = sibling_uses(&code, rel, &siblings);
        uses.retain(|u| u != name);
        graph.push((name.clone(), uses));
    }
    out.push((rel.to_owned(), graph));
}

/// A circle in `graph`, as the modules along it, if there is one.
fn find_circle(graph: &[(String, Vec<String>)]) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &[(String, Vec<String>)],
        path: &mut Vec<String>,
        done: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == node) {
            let mut circle = path[at..].to_vec();
            circle.push(node.to_owned());
            return Some(circle);
        }
        if done.iter().any(|d| d == node) {
            return None;
        }
        path.push(node.to_owned());
        let uses = graph
            .iter()
            .find(|(n, _)| n == node)
            .map(|(_, u)| u.as_slice())
            .unwrap_or_default();
        for next in uses {
            if let Some(circle) = visit(next, graph, path, done) {
                return Some(circle);
            }
        }
        path.pop();
        done.push(node.to_owned());
        None
    }
    let mut done = Vec::new();
    graph
        .iter()
        .find_map(|(n, _)| visit(n, graph, &mut Vec::new(), &mut done))
}

#[test]
fn no_module_imports_a_sibling_that_imports_it_back() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut graphs = Vec::new();
    module_graphs(&src, "", &mut graphs);
    let circles: Vec<String> = graphs
        .iter()
        .filter_map(|(dir, graph)| {
            find_circle(graph).map(|c| format!("src/{dir}: {}", c.join(" → ")))
        })
        .collect();
    assert!(
        circles.is_empty(),
        "import circles:\n{}",
        circles.join("\n")
    );
}

#[test]
fn the_circle_finder_finds_one() {
    let graph = vec![
        ("a".to_owned(), vec!["b".to_owned()]),
        ("b".to_owned(), vec!["c".to_owned()]),
        ("c".to_owned(), vec!["a".to_owned()]),
        ("d".to_owned(), vec![]),
    ];
    assert_eq!(find_circle(&graph).unwrap(), ["a", "b", "c", "a"]);
    assert_eq!(find_circle(&graph[3..]), None);
    let text = "use super::tls; use crate::app::manager::X; ccm::super::no";
    let siblings = vec!["tls".to_owned(), "manager".to_owned(), "no".to_owned()];
    assert_eq!(sibling_uses(text, "app", &siblings), ["tls", "manager"]);
}
