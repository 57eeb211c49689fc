//! Our kubeconfig reader against client-go's: every kubeconfig of `tests/data/kubeconfigs`
//! (every credential kind, precedence conflicts, bad fields, certificate authorities,
//! proxies from the kubeconfig and the environment) is read by client-go's `clientcmd`, as
//! Go's cloud-controller-manager reads `--kubeconfig` (`tools/kubeconfig-go`, built from the
//! Go module proxy), and by ours, as the controller manager reads it
//! (`ccm_runtime::app::describe_kubeconfig`, in a process of its own with the case's
//! environment); each prints what its client would send (the `Authorization` header, the
//! client certificate, the CA, the server name, the proxy, the user impersonated; hashed)
//! or that it refuses the file. They must agree, but for the cases that
//! `data/kubeconfigs/differences.tsv` lists with the reason (docs/app.md, "Kubeconfig
//! credentials", says the same), and no secret planted in a case may appear in anything
//! ours prints, errors and logs included.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use base64::Engine as _;
use ccm_runtime::client::{CaUse, ClientUse};

/// Set in the environment of this binary run again as the probe: the kubeconfig to read.
const PROBE: &str = "CCM_KUBECONFIG_PROBE";
/// The line the probe prints its answer on.
const ANSWER: &str = "kubeconfig-probe: ";
/// What every planted secret starts with.
const SECRET: &str = "SECRET-";
/// The environment variables a case may set, cleared for every other case.
const ENV: [&str; 9] = [
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
    "NO_PROXY",
    "no_proxy",
    "ALL_PROXY",
    "all_proxy",
    "REQUEST_METHOD",
];

#[test]
fn kubeconfigs_are_read_as_client_go_reads_them() {
    if let Ok(path) = std::env::var(PROBE) {
        probe(Path::new(&path));
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let go = go_reader(&root);
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/kubeconfigs");
    let known = known_differences(&corpus);
    let dir = tempfile::tempdir().unwrap();
    let fixtures = Fixtures::write(dir.path());

    let mut cases: Vec<PathBuf> = std::fs::read_dir(&corpus)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    cases.sort();
    assert!(cases.len() >= 40, "the corpus holds {} cases", cases.len());

    let mut failures = Vec::new();
    let mut differing = BTreeMap::new();
    for case in &cases {
        let name = case.file_stem().unwrap().to_string_lossy().into_owned();
        let text = fixtures.fill(&std::fs::read_to_string(case).unwrap());
        let file = dir.path().join(format!("{name}.yaml"));
        std::fs::write(&file, &text).unwrap();
        let env = case_env(&text);

        let theirs = run(Command::new(&go).arg(&file), &env);
        let theirs = last_json(&theirs.stdout)
            .unwrap_or_else(|| panic!("{name}: client-go's reader printed no answer: {theirs:?}"));
        let ours = run(
            Command::new(std::env::current_exe().unwrap())
                .args([
                    "kubeconfigs_are_read_as_client_go_reads_them",
                    "--exact",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(PROBE, &file),
            &env,
        );
        let printed = format!("{}{}", ours.stdout, ours.stderr);
        if let Some(at) = printed.find(SECRET) {
            let end = printed[at..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                .map_or(printed.len(), |n| at + n);
            failures.push(format!(
                "{name}: ours printed the planted secret {:?}:\n{printed}",
                &printed[at..end]
            ));
        }
        let ours_answer = ours
            .stdout
            .lines()
            .find_map(|l| l.find(ANSWER).map(|at| &l[at + ANSWER.len()..]))
            .and_then(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .unwrap_or_else(|| panic!("{name}: our probe printed no answer:\n{printed}"));

        let (go_view, our_view) = (comparable(&theirs), comparable(&ours_answer));
        println!("{name}\n  client-go: {theirs}\n  ours:      {ours_answer}");
        if go_view != our_view {
            differing.insert(name.clone(), (theirs, ours_answer));
        }
    }

    for (name, (theirs, ours)) in &differing {
        if !known.contains_key(name) {
            failures.push(format!(
                "{name}: ours differs from client-go (fix it, or list it in \
                 tests/data/kubeconfigs/differences.tsv and docs/app.md with the reason)\n  \
                 client-go: {theirs}\n  ours:      {ours}"
            ));
        }
    }
    let docs = std::fs::read_to_string(root.join("docs/app.md")).unwrap();
    for name in known.keys() {
        if !differing.contains_key(name) {
            failures.push(format!(
                "{name}: listed in differences.tsv, but ours now reads it as client-go does: \
                 take it off the list (and docs/app.md)"
            ));
        }
        if !docs.contains(&format!("`{name}`")) {
            failures.push(format!("{name}: docs/app.md does not name this difference"));
        }
    }
    println!(
        "{} kubeconfigs, {} read as client-go reads them, {} known differences",
        cases.len(),
        cases.len() - differing.len(),
        known.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The probe: reads `path` as the controller manager reads `--kubeconfig`, with every log
/// line on standard error, and prints what its client would use, hashed as client-go's
/// reader prints it.
fn probe(path: &Path) {
    let _ = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
    let answer = match ccm_runtime::app::describe_kubeconfig(path) {
        Ok(used) => described(&used),
        Err(e) => serde_json::json!({ "file": file_name(path), "error": e }),
    };
    println!("{ANSWER}{answer}");
}

fn file_name(path: &Path) -> String {
    path.file_name().unwrap().to_string_lossy().into_owned()
}

/// What `tools/kubeconfig-go` prints, from ours.
fn described(used: &ClientUse) -> serde_json::Value {
    let authorization = used.authorization.as_deref().map(|header| {
        let (scheme, rest) = header.split_once(' ').unwrap_or((header, ""));
        format!("{scheme} {}", short(rest.as_bytes()))
    });
    let ca = match &used.ca {
        CaUse::Insecure => "insecure".to_owned(),
        CaUse::Platform => "system".to_owned(),
        CaUse::Certificates(roots) => roots.first().map_or("empty".to_owned(), |c| short(c)),
        CaUse::File(path) => format!("file {}", path.display()),
        other => format!("{other:?}"),
    };
    let proxy = used.proxy.as_ref().map(|p| match &p.credentials {
        Some((user, password)) => {
            let (scheme, rest) = p.url.split_once("://").unwrap();
            format!("{scheme}://{user}:{}@{rest}", short(password.as_bytes()))
        }
        None => p.url.clone(),
    });
    serde_json::json!({
        "server": used.server,
        "authorization": authorization,
        "client_cert": used.client_certificate.as_deref().map(short),
        "ca": ca,
        "server_name": used.server_name,
        "proxy": proxy,
        "impersonate": used.impersonate,
    })
}

/// The first 16 hex digits of `bytes`' SHA-256, as `tools/kubeconfig-go` prints them.
fn short(bytes: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, bytes)
        .as_ref()
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// What is compared of an answer: that it is an error, or what the client would use (the
/// server's URL without a trailing slash).
fn comparable(answer: &serde_json::Value) -> serde_json::Value {
    if answer.get("error").is_some() {
        return serde_json::json!("error");
    }
    let mut view = answer.clone();
    view.as_object_mut().unwrap().remove("file");
    if let Some(server) = view["server"].as_str() {
        view["server"] = server.trim_end_matches('/').into();
    }
    view
}

/// The known differences: a case's name, a tab, the reason.
fn known_differences(corpus: &Path) -> BTreeMap<String, String> {
    std::fs::read_to_string(corpus.join("differences.tsv"))
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (name, why) = l.split_once('\t').expect("a name, a tab, a reason");
            assert!(
                corpus.join(format!("{name}.yaml")).exists(),
                "differences.tsv names {name}, which is not a case"
            );
            (name.to_owned(), why.to_owned())
        })
        .collect()
}

/// The case's `# env: K=V ...` first line.
fn case_env(text: &str) -> Vec<(String, String)> {
    text.lines()
        .next()
        .and_then(|l| l.strip_prefix("# env: "))
        .map(|vars| {
            vars.split_whitespace()
                .map(|kv| {
                    let (k, v) = kv.split_once('=').expect("K=V");
                    assert!(ENV.contains(&k), "a case may set only {ENV:?}, not {k}");
                    (k.to_owned(), v.to_owned())
                })
                .collect()
        })
        .unwrap_or_default()
}

struct Output {
    stdout: String,
    stderr: String,
}

impl std::fmt::Debug for Output {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "stdout:\n{}\nstderr:\n{}", self.stdout, self.stderr)
    }
}

/// Runs `command` with the case's environment alone among the variables of [`ENV`].
fn run(command: &mut Command, env: &[(String, String)]) -> Output {
    for name in ENV {
        command.env_remove(name);
    }
    command.env_remove("KUBECONFIG");
    command.envs(env.iter().map(|(k, v)| (k, v)));
    let out = command.output().unwrap();
    Output {
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn last_json(text: &str) -> Option<serde_json::Value> {
    text.lines()
        .rev()
        .find_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
}

/// client-go's reader, built (once, cached) by `tools/kubeconfig-go/build.sh`; Go is a
/// prerequisite of the test command, so its absence fails the test.
fn go_reader(root: &Path) -> PathBuf {
    let out = Command::new(root.join("tools/kubeconfig-go/build.sh"))
        .output()
        .expect("tools/kubeconfig-go/build.sh runs");
    assert!(
        out.status.success(),
        "building client-go's reader failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// The files the cases name (`@DIR@/…`), and the values they hold in place of `@CA@`,
/// `@OTHER_CA@`, `@CERT@` and `@KEY@`.
struct Fixtures {
    dir: PathBuf,
    ca: String,
    other_ca: String,
    cert: String,
    key: String,
}

impl Fixtures {
    fn write(dir: &Path) -> Self {
        let b64 = |pem: &str| base64::engine::general_purpose::STANDARD.encode(pem);
        let ca = rcgen::generate_simple_self_signed(vec!["ca.test".to_owned()]).unwrap();
        let other = rcgen::generate_simple_self_signed(vec!["other.test".to_owned()]).unwrap();
        let client = rcgen::generate_simple_self_signed(vec!["client.test".to_owned()]).unwrap();
        let (cert_pem, key_pem) = (client.cert.pem(), client.signing_key.serialize_pem());
        let write = |name: &str, text: &str| std::fs::write(dir.join(name), text).unwrap();
        write("ca.pem", &ca.cert.pem());
        write("cert.pem", &cert_pem);
        write("key.pem", &key_pem);
        write("token.txt", "SECRET-file-token\n");
        write("empty.txt", " \n");
        write("empty-ca.pem", "");
        write("spaced.txt", "  SECRET-spaced-token \n\n");
        let credential = |version: &str, status: serde_json::Value| {
            serde_json::json!({
                "apiVersion": format!("client.authentication.k8s.io/{version}"),
                "kind": "ExecCredential",
                "status": status,
            })
            .to_string()
        };
        let plugin = |name: &str, answer: &str| {
            write(name, &format!("cat <<'EOF'\n{answer}\nEOF\n"));
        };
        plugin(
            "plugin-token.sh",
            &credential("v1", serde_json::json!({"token": "SECRET-exec-token"})),
        );
        plugin(
            "plugin-token-beta.sh",
            &credential("v1beta1", serde_json::json!({"token": "SECRET-exec-beta"})),
        );
        plugin(
            "plugin-cert.sh",
            &credential(
                "v1",
                serde_json::json!({"clientCertificateData": cert_pem, "clientKeyData": key_pem}),
            ),
        );
        plugin(
            "plugin-wrong-kind.sh",
            &serde_json::json!({
                "apiVersion": "client.authentication.k8s.io/v1",
                "kind": "Secret",
                "status": {"token": "SECRET-exec-kind"},
            })
            .to_string(),
        );
        plugin("plugin-bare.sh", "SECRET-exec-bare-token");
        write("plugin-fail.sh", "echo 'the plugin failed' >&2\nexit 1\n");
        Self {
            dir: dir.to_owned(),
            ca: b64(&ca.cert.pem()),
            other_ca: b64(&other.cert.pem()),
            cert: b64(&cert_pem),
            key: b64(&key_pem),
        }
    }

    fn fill(&self, text: &str) -> String {
        text.replace("@DIR@", &self.dir.display().to_string())
            .replace("@OTHER_CA@", &self.other_ca)
            .replace("@CA@", &self.ca)
            .replace("@CERT@", &self.cert)
            .replace("@KEY@", &self.key)
    }
}
