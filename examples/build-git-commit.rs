// The build script of both bundled providers' binaries (`fake-cloud-controller-manager`,
// `do-like-cloud-controller-manager`), included by each crate's `build.rs`: sets
// `CCM_GIT_COMMIT` (the short hash of `HEAD`) for `--version`, when the build runs in a git
// checkout with git installed; without either, `--version` shows no commit. A
// `CCM_GIT_COMMIT` set in the build's environment (a container build without `.git`) wins.
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (out.status.success() && !text.is_empty()).then_some(text)
}

fn main() {
    println!("cargo:rerun-if-env-changed=CCM_GIT_COMMIT");
    let commit = std::env::var("CCM_GIT_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| git(&["rev-parse", "--short", "HEAD"]));
    if let Some(commit) = commit {
        println!("cargo:rustc-env=CCM_GIT_COMMIT={commit}");
    }
    // Rebuilt when HEAD moves: HEAD itself (a checkout) and the branch it points to (a
    // commit), which may be a file of its own or a line of packed-refs.
    for path in [
        git(&["rev-parse", "--git-path", "HEAD"]),
        git(&["symbolic-ref", "-q", "HEAD"]).and_then(|r| git(&["rev-parse", "--git-path", &r])),
        git(&["rev-parse", "--git-path", "packed-refs"]),
    ]
    .into_iter()
    .flatten()
    {
        if std::path::Path::new(&path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
}
