//! The layers of this crate only use the ones below them: machinery (client, informer,
//! workqueue, events, metrics, instrumented, files) → controllers → app. The provider surface
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
        ],
    ),
    ("controllers", &["controllers"]),
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
