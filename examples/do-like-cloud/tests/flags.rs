//! The provider's own flag on the binary's command line: listed by `--help` under its own
//! heading, and checked with the controller manager's (a bad value is a usage error naming
//! it). That its value reaches the provider is `tests/e2e.rs`'s
//! `the_api_url_flag_wins_over_the_cloud_config`.

use std::time::Duration;

use ccm_test::process::CcmProcess;

const BIN: &str = env!("CARGO_BIN_EXE_do-like-cloud-controller-manager");
const WAIT: Duration = Duration::from_secs(30);

#[tokio::test]
async fn help_lists_the_provider_flag() {
    let out = CcmProcess::builder(BIN).arg("--help").run(WAIT).await;
    assert!(out.status.success(), "{}", out.log);
    let help = &out.stdout;
    let heading = help
        .find("\nDigitalOcean-like cloud:\n")
        .unwrap_or_else(|| panic!("no provider heading in:\n{help}"));
    let flag = help
        .find("--do-like-api-url <URL>")
        .unwrap_or_else(|| panic!("no --do-like-api-url in:\n{help}"));
    assert!(heading < flag, "{help}");
    assert!(help.contains("cloud-config's apiUrl"), "{help}");
    // The controller manager's own flags are all still there.
    assert!(help.contains("--cloud-config <FILE>"), "{help}");
}

#[tokio::test]
async fn a_bad_api_url_flag_is_a_usage_error_naming_it() {
    let out = CcmProcess::builder(BIN)
        .args(["--cloud-provider=digitalocean", "--do-like-api-url=ftp://x"])
        .run(WAIT)
        .await;
    assert_eq!(out.status.code(), Some(2), "{}", out.log);
    assert!(
        out.log.contains(
            "invalid value 'ftp://x' for '--do-like-api-url <URL>': must start with http:// or \
             https://"
        ),
        "{}",
        out.log
    );
}
