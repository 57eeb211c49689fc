//! The secure-serving, authentication and authorization flags, named, typed and defaulted
//! as `k8s.io/apiserver`'s `SecureServingOptions`, `DelegatingAuthenticationOptions` and
//! `DelegatingAuthorizationOptions` declare them for Go's v1.36 `cloud-controller-manager`,
//! with Go's value syntax (the same parsers as every other flag): booleans as
//! `strconv.ParseBool`, integers as `strconv.ParseInt` with base prefixes (`0x10`),
//! durations as `time.ParseDuration`, each occurrence of a list flag one CSV record appended
//! to the list (pflag's `stringSlice`, `int32Slice`), `--tls-sni-cert-key` as
//! `namedCertKey`, empty strings as unset; plus our `--insecure-serving`.
//! [`ServingOptions::validate`] checks what clap cannot and
//! [`ServingOptions::tls_settings`] maps the TLS flags onto what rustls implements; see
//! [`tls`] for that mapping and [`auth`](super::auth) for the delegation.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Args};

use super::tls::{self, TlsSettings};
use crate::flags::FlagError;
use crate::flags::duration::parse_go_duration;
use crate::flags::goflag;

fn duration(s: &str) -> Result<Duration, String> {
    parse_go_duration(s)
}

/// A pflag list flag as given on the command line: each occurrence is one CSV record (an
/// empty value is an empty list), and occurrences add up. The value parsers refuse what is
/// not CSV; a value set in code that is not is an error naming the flag.
fn list_flag_values(flag: &'static str, values: &[String]) -> Result<Vec<String>, FlagError> {
    let mut items = Vec::new();
    for value in values {
        items.extend(goflag::go_string_slice(value).map_err(|m| bad(flag, m))?);
    }
    Ok(items)
}

/// [`list_flag_values`] for the accessors, which cannot fail: a value that is not CSV (only possible
/// when set in code, and refused by [`ServingOptions::validate`]) adds nothing.
fn list_flag_values_lenient(values: &[String]) -> Vec<String> {
    values
        .iter()
        .flat_map(|v| goflag::go_string_slice(v).unwrap_or_default())
        .collect()
}

/// The serving and delegated authentication/authorization flags of Go's
/// `cloud-controller-manager`, flattened into the app's `Options`.
#[derive(Clone, Debug, Args)]
#[non_exhaustive]
pub struct ServingOptions {
    /// The IP address on which to listen for the --secure-port port; 0.0.0.0 or :: for all
    /// interfaces.
    #[arg(
        long,
        value_name = "IP",
        value_parser = goflag::go_ip,
        default_value = "0.0.0.0",
        help_heading = "Secure serving"
    )]
    pub bind_address: IpAddr,
    /// The port on which to serve HTTPS with authentication and authorization. If 0, don't
    /// serve HTTPS at all.
    #[arg(
        long,
        value_name = "PORT",
        value_parser = goflag::go_int_as_i32,
        default_value_t = 10258,
        allow_negative_numbers = true,
        help_heading = "Secure serving"
    )]
    pub secure_port: i32,
    /// The directory where the generated self-signed certificate is written to (and reused
    /// from) when --tls-cert-file is not given (cloud-controller-manager.crt/.key). Empty:
    /// the certificate is kept in memory.
    #[arg(
        long,
        value_name = "DIR",
        default_value = "",
        help_heading = "Secure serving"
    )]
    pub cert_dir: String,
    /// File containing the default x509 certificate for HTTPS (CA cert, if any, concatenated
    /// after the server cert). Empty: a self-signed certificate is generated.
    #[arg(
        long,
        value_name = "FILE",
        default_value = "",
        help_heading = "Secure serving"
    )]
    pub tls_cert_file: String,
    /// File containing the default x509 private key matching --tls-cert-file.
    #[arg(
        long,
        value_name = "FILE",
        default_value = "",
        help_heading = "Secure serving"
    )]
    pub tls_private_key_file: String,
    /// Comma-separated list of cipher suites for the server (Go's IANA names). Go names that
    /// rustls does not implement (CBC, RSA key exchange, RC4, 3DES) are skipped with a
    /// warning. If omitted, rustls' defaults.
    #[arg(
        long,
        value_name = "NAMES",
        value_parser = goflag::go_string_slice_flag,
        action = ArgAction::Append,
        help_heading = "Secure serving"
    )]
    pub tls_cipher_suites: Vec<String>,
    /// Comma-separated list of Go crypto/tls CurveID values (23 P-256, 24 P-384, 29 X25519)
    /// allowed for key exchange. If omitted, rustls' defaults.
    #[arg(
        long,
        value_name = "IDS",
        value_parser = goflag::go_int32_slice,
        action = ArgAction::Append,
        help_heading = "Secure serving"
    )]
    pub tls_curve_preferences: Vec<String>,
    /// Minimum TLS version supported: VersionTLS12 or VersionTLS13 (VersionTLS10 and
    /// VersionTLS11 are accepted with a warning and serve TLS 1.2 as the minimum).
    #[arg(
        long,
        value_name = "VERSION",
        default_value = "",
        help_heading = "Secure serving"
    )]
    pub tls_min_version: String,
    /// A pair of x509 certificate and private key file paths, optionally suffixed with a
    /// list of domain patterns (`foo.crt,foo.key:*.foo.com,foo.com`). Repeatable.
    #[arg(
        long,
        value_name = "CERT,KEY[:NAMES]",
        value_parser = goflag::named_cert_key,
        action = ArgAction::Append,
        help_heading = "Secure serving"
    )]
    pub tls_sni_cert_key: Vec<String>,
    /// Ignored: the endpoints are served over HTTP/1.1 only (must not be negative, as in
    /// Go). Reported by `Options::ignored_flags` when not 0.
    #[arg(
        long,
        value_name = "N",
        value_parser = goflag::go_int_as_i32,
        default_value_t = 0,
        allow_negative_numbers = true,
        help_heading = "Secure serving"
    )]
    pub http2_max_streams_per_connection: i32,
    /// Ignored: the endpoints are served over HTTP/1.1 only. Reported by
    /// `Options::ignored_flags` when true.
    #[arg(long, value_parser = goflag::go_bool, num_args = 0..=1, default_value = "false", default_missing_value = "true", require_equals = true, help_heading = "Secure serving")]
    pub disable_http2_serving: bool,
    /// If true, SO_REUSEPORT is used when binding the port.
    #[arg(long, value_parser = goflag::go_bool, num_args = 0..=1, default_value = "false", default_missing_value = "true", require_equals = true, help_heading = "Secure serving")]
    pub permit_port_sharing: bool,
    /// If true, SO_REUSEADDR is used when binding the port.
    #[arg(long, value_parser = goflag::go_bool, num_args = 0..=1, default_value = "false", default_missing_value = "true", require_equals = true, help_heading = "Secure serving")]
    pub permit_address_sharing: bool,
    /// FOR LOCAL DEMOS ONLY: serve the endpoints over plain HTTP with no authentication or
    /// authorization at all (not a Go flag).
    #[arg(long, value_parser = goflag::go_bool, num_args = 0..=1, default_value = "false", default_missing_value = "true", require_equals = true, help_heading = "Secure serving")]
    pub insecure_serving: bool,

    /// kubeconfig file pointing at the 'core' kubernetes server with enough rights to create
    /// tokenreviews.authentication.k8s.io. Empty: the manager's own connection.
    #[arg(
        long,
        value_name = "FILE",
        default_value = "",
        help_heading = "Authentication"
    )]
    pub authentication_kubeconfig: String,
    /// The duration to cache responses from the token authenticator.
    #[arg(long, value_name = "DURATION", value_parser = duration, default_value = "10s", help_heading = "Authentication")]
    pub authentication_token_webhook_cache_ttl: Duration,
    /// If false, missing authentication configuration (client CA, request-header settings)
    /// is looked up in the cluster (kube-system/extension-apiserver-authentication).
    #[arg(long, value_parser = goflag::go_bool, num_args = 0..=1, default_value = "false", default_missing_value = "true", require_equals = true, help_heading = "Authentication")]
    pub authentication_skip_lookup: bool,
    /// If true, failures to look up missing authentication configuration from the cluster
    /// are not fatal.
    #[arg(long, value_parser = goflag::go_bool, num_args = 0..=1, default_value = "false", default_missing_value = "true", require_equals = true, help_heading = "Authentication")]
    pub authentication_tolerate_lookup_failure: bool,
    /// If set, any request presenting a client certificate signed by one of the authorities
    /// in this file is authenticated with an identity corresponding to the CommonName of the
    /// client certificate (groups: its Organizations).
    #[arg(
        long,
        value_name = "FILE",
        default_value = "",
        help_heading = "Authentication"
    )]
    pub client_ca_file: String,
    /// Root certificate bundle to use to verify client certificates on incoming requests
    /// before trusting usernames in headers specified by --requestheader-username-headers.
    #[arg(
        long,
        value_name = "FILE",
        default_value = "",
        help_heading = "Authentication"
    )]
    pub requestheader_client_ca_file: String,
    /// List of client certificate common names to allow to provide usernames in headers.
    /// Empty: any client certificate validated by --requestheader-client-ca-file.
    #[arg(long, value_name = "NAMES", value_parser = goflag::go_string_slice_flag, action = ArgAction::Append, help_heading = "Authentication")]
    pub requestheader_allowed_names: Vec<String>,
    /// List of request headers to inspect for usernames. X-Remote-User is common.
    #[arg(long, value_name = "HEADERS", value_parser = goflag::go_string_slice_flag, action = ArgAction::Append, default_value = "x-remote-user", help_heading = "Authentication")]
    pub requestheader_username_headers: Vec<String>,
    /// List of request headers to inspect for UIDs. X-Remote-Uid is suggested.
    #[arg(long, value_name = "HEADERS", value_parser = goflag::go_string_slice_flag, action = ArgAction::Append, help_heading = "Authentication")]
    pub requestheader_uid_headers: Vec<String>,
    /// List of request headers to inspect for groups. X-Remote-Group is suggested.
    #[arg(long, value_name = "HEADERS", value_parser = goflag::go_string_slice_flag, action = ArgAction::Append, default_value = "x-remote-group", help_heading = "Authentication")]
    pub requestheader_group_headers: Vec<String>,
    /// List of request header prefixes to inspect. X-Remote-Extra- is suggested.
    #[arg(long, value_name = "PREFIXES", value_parser = goflag::go_string_slice_flag, action = ArgAction::Append, default_value = "x-remote-extra-", help_heading = "Authentication")]
    pub requestheader_extra_headers_prefix: Vec<String>,

    /// kubeconfig file pointing at the 'core' kubernetes server with enough rights to create
    /// subjectaccessreviews.authorization.k8s.io. Empty: the manager's own connection.
    #[arg(
        long,
        value_name = "FILE",
        default_value = "",
        help_heading = "Authorization"
    )]
    pub authorization_kubeconfig: String,
    /// The duration to cache 'authorized' responses from the authorizer.
    #[arg(long, value_name = "DURATION", value_parser = duration, default_value = "10s", help_heading = "Authorization")]
    pub authorization_webhook_cache_authorized_ttl: Duration,
    /// The duration to cache 'unauthorized' responses from the authorizer.
    #[arg(long, value_name = "DURATION", value_parser = duration, default_value = "10s", help_heading = "Authorization")]
    pub authorization_webhook_cache_unauthorized_ttl: Duration,
    /// A list of HTTP paths to skip during authorization, i.e. these are authorized without
    /// contacting the 'core' kubernetes server. A trailing `*` matches a prefix.
    #[arg(long, value_name = "PATHS", value_parser = goflag::go_string_slice_flag, action = ArgAction::Append, default_value = "/healthz,/readyz,/livez", help_heading = "Authorization")]
    pub authorization_always_allow_paths: Vec<String>,
}

impl Default for ServingOptions {
    fn default() -> Self {
        #[derive(clap::Parser)]
        struct Only {
            #[command(flatten)]
            serving: ServingOptions,
        }
        <Only as clap::Parser>::parse_from(["ccm"]).serving
    }
}

/// The largest number of entries in one list flag: a typo'd loop in a manifest template
/// fails at startup instead of costing memory on every request.
const MAX_LIST_ITEMS: usize = 256;

fn bad(flag: &'static str, message: impl Into<String>) -> FlagError {
    FlagError {
        flag,
        message: message.into(),
    }
}

/// The file named by a string flag, `None` when empty.
fn file(value: &str) -> Option<PathBuf> {
    (!value.is_empty()).then(|| PathBuf::from(value))
}

impl ServingOptions {
    /// The port, or `None` when --secure-port is 0 (not serving).
    #[must_use]
    pub fn port(&self) -> Option<u16> {
        u16::try_from(self.secure_port).ok().filter(|p| *p != 0)
    }

    /// `--tls-cert-file`, `None` when empty.
    #[must_use]
    pub fn tls_cert_file(&self) -> Option<PathBuf> {
        file(&self.tls_cert_file)
    }

    /// `--tls-private-key-file`, `None` when empty.
    #[must_use]
    pub fn tls_private_key_file(&self) -> Option<PathBuf> {
        file(&self.tls_private_key_file)
    }

    /// `--cert-dir`, `None` when empty.
    #[must_use]
    pub fn cert_dir(&self) -> Option<PathBuf> {
        file(&self.cert_dir)
    }

    /// `--client-ca-file`, `None` when empty.
    #[must_use]
    pub fn client_ca_file(&self) -> Option<PathBuf> {
        file(&self.client_ca_file)
    }

    /// `--requestheader-client-ca-file`, `None` when empty.
    #[must_use]
    pub fn requestheader_client_ca_file(&self) -> Option<PathBuf> {
        file(&self.requestheader_client_ca_file)
    }

    /// `--authentication-kubeconfig`, `None` when empty.
    #[must_use]
    pub fn authentication_kubeconfig(&self) -> Option<PathBuf> {
        file(&self.authentication_kubeconfig)
    }

    /// `--authorization-kubeconfig`, `None` when empty.
    #[must_use]
    pub fn authorization_kubeconfig(&self) -> Option<PathBuf> {
        file(&self.authorization_kubeconfig)
    }

    /// `--authorization-always-allow-paths` as a list.
    #[must_use]
    pub fn always_allow_paths(&self) -> Vec<String> {
        list_flag_values_lenient(&self.authorization_always_allow_paths)
    }

    /// The request-header lists: allowed names, username, UID and group headers, extra
    /// prefixes.
    #[must_use]
    pub fn request_header_lists(&self) -> [Vec<String>; 5] {
        [
            list_flag_values_lenient(&self.requestheader_allowed_names),
            list_flag_values_lenient(&self.requestheader_username_headers),
            list_flag_values_lenient(&self.requestheader_uid_headers),
            list_flag_values_lenient(&self.requestheader_group_headers),
            list_flag_values_lenient(&self.requestheader_extra_headers_prefix),
        ]
    }

    /// The TLS flags mapped onto rustls (versions, suites, curves, SNI certificates), with
    /// the warnings to log for Go values rustls does not implement.
    pub fn tls_settings(&self) -> Result<(TlsSettings, Vec<String>), FlagError> {
        // pflag's int32Slice takes any base (`0x17`); the mapping knows the decimal IDs.
        let curves: Vec<String> =
            list_flag_values("--tls-curve-preferences", &self.tls_curve_preferences)?
                .into_iter()
                .map(|id| goflag::go_int32(id.trim()).map_or(id, |v| v.to_string()))
                .collect();
        tls::settings(
            &self.tls_min_version,
            &list_flag_values("--tls-cipher-suites", &self.tls_cipher_suites)?,
            &curves,
            &self.tls_sni_cert_key,
        )
    }

    /// Checks what clap cannot, as Go's `Validate` does; the error names the flag.
    pub fn validate(&self) -> Result<(), FlagError> {
        if !(0..=65535).contains(&self.secure_port) {
            return Err(bad(
                "--secure-port",
                format!("must be between 0 and 65535, got {}", self.secure_port),
            ));
        }
        match (self.tls_cert_file(), self.tls_private_key_file()) {
            (Some(_), None) => {
                return Err(bad(
                    "--tls-private-key-file",
                    "is required with --tls-cert-file",
                ));
            }
            (None, Some(_)) => {
                return Err(bad(
                    "--tls-cert-file",
                    "is required with --tls-private-key-file",
                ));
            }
            _ => {}
        }
        if self.http2_max_streams_per_connection < 0 {
            return Err(bad(
                "--http2-max-streams-per-connection",
                format!(
                    "must not be negative, got {}",
                    self.http2_max_streams_per_connection
                ),
            ));
        }
        let lists: [(&'static str, &[String]); 8] = [
            ("--tls-cipher-suites", &self.tls_cipher_suites),
            ("--tls-curve-preferences", &self.tls_curve_preferences),
            (
                "--requestheader-allowed-names",
                &self.requestheader_allowed_names,
            ),
            (
                "--requestheader-username-headers",
                &self.requestheader_username_headers,
            ),
            (
                "--requestheader-uid-headers",
                &self.requestheader_uid_headers,
            ),
            (
                "--requestheader-group-headers",
                &self.requestheader_group_headers,
            ),
            (
                "--requestheader-extra-headers-prefix",
                &self.requestheader_extra_headers_prefix,
            ),
            (
                "--authorization-always-allow-paths",
                &self.authorization_always_allow_paths,
            ),
        ];
        for (flag, values) in lists {
            let items = list_flag_values(flag, values)?;
            if items.len() > MAX_LIST_ITEMS {
                return Err(bad(
                    flag,
                    format!("at most {MAX_LIST_ITEMS} items, got {}", items.len()),
                ));
            }
            // Go: `empty value in "requestheader-username-headers"`.
            if flag.starts_with("--requestheader") && items.iter().any(|i| i.trim().is_empty()) {
                return Err(bad(flag, "empty value"));
            }
            if flag.starts_with("--requestheader")
                && flag != "--requestheader-allowed-names"
                && let Some(h) = items
                    .iter()
                    .find(|h| http::HeaderName::try_from(h.as_str()).is_err())
            {
                return Err(bad(flag, format!("{h:?} is not a valid HTTP header name")));
            }
        }
        let uid = list_flag_values_lenient(&self.requestheader_uid_headers);
        if !uid.is_empty() && !uid.iter().any(|h| h.eq_ignore_ascii_case("X-Remote-Uid")) {
            return Err(bad(
                "--requestheader-uid-headers",
                "is set without specifying the standard X-Remote-Uid header - API aggregation will not work",
            ));
        }
        super::auth::PathMatcher::new(&self.always_allow_paths())
            .map_err(|m| bad("--authorization-always-allow-paths", m))?;
        self.tls_settings()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(clap::Parser)]
    struct Only {
        #[command(flatten)]
        serving: ServingOptions,
    }

    fn parse(args: &[&str]) -> Result<ServingOptions, clap::Error> {
        <Only as clap::Parser>::try_parse_from(std::iter::once("ccm").chain(args.iter().copied()))
            .map(|o| o.serving)
    }

    #[test]
    fn defaults_match_go() {
        let o = ServingOptions::default();
        assert_eq!(o.bind_address.to_string(), "0.0.0.0");
        assert_eq!(o.secure_port, 10258);
        assert_eq!(o.port(), Some(10258));
        assert_eq!(o.cert_dir(), None);
        assert_eq!(o.tls_cert_file(), None);
        assert_eq!(
            o.authentication_token_webhook_cache_ttl,
            Duration::from_secs(10)
        );
        assert_eq!(
            o.authorization_webhook_cache_authorized_ttl,
            Duration::from_secs(10)
        );
        assert_eq!(
            o.authorization_webhook_cache_unauthorized_ttl,
            Duration::from_secs(10)
        );
        assert_eq!(o.always_allow_paths(), ["/healthz", "/readyz", "/livez"]);
        let [allowed, user, uid, group, extra] = o.request_header_lists();
        assert!(allowed.is_empty() && uid.is_empty());
        assert_eq!(
            (user, group, extra),
            (
                vec!["x-remote-user".to_owned()],
                vec!["x-remote-group".to_owned()],
                vec!["x-remote-extra-".to_owned()]
            )
        );
        assert!(!o.authentication_skip_lookup && !o.authentication_tolerate_lookup_failure);
        assert!(!o.insecure_serving && !o.permit_port_sharing && !o.permit_address_sharing);
        assert!(o.validate().is_ok());
    }

    #[test]
    fn go_value_syntax() {
        let o = parse(&[
            "--authentication-skip-lookup=True",
            "--authentication-tolerate-lookup-failure=1",
            "--permit-port-sharing",
            "--insecure-serving=F",
            "--authorization-always-allow-paths=",
            "--requestheader-allowed-names=front-proxy,aggregator",
            "--requestheader-allowed-names=third",
            "--authentication-token-webhook-cache-ttl=1m30s",
            "--tls-cert-file=",
            "--secure-port=0",
        ])
        .unwrap();
        assert!(o.authentication_skip_lookup && o.authentication_tolerate_lookup_failure);
        assert!(o.permit_port_sharing && !o.insecure_serving);
        assert!(o.always_allow_paths().is_empty(), "empty = no paths");
        assert_eq!(
            o.request_header_lists()[0],
            ["front-proxy", "aggregator", "third"]
        );
        assert_eq!(
            o.authentication_token_webhook_cache_ttl,
            Duration::from_secs(90)
        );
        assert_eq!(o.tls_cert_file(), None, "empty = unset");
        assert_eq!(o.port(), None);
        assert!(o.validate().is_ok());
        for bad in [
            "--permit-port-sharing=yes",
            "--authentication-token-webhook-cache-ttl=10",
            "--bind-address=localhost",
        ] {
            let err = parse(&[bad]).unwrap_err().to_string();
            let flag = bad.split('=').next().unwrap();
            assert!(err.contains(flag), "{bad}: {err}");
        }
    }

    #[test]
    fn validation_names_the_flag() {
        for (args, want) in [
            (
                &["--secure-port=-1"][..],
                "--secure-port: must be between 0 and 65535, got -1",
            ),
            (
                &["--tls-cert-file=/c"],
                "--tls-private-key-file: is required with --tls-cert-file",
            ),
            (
                &["--tls-private-key-file=/k"],
                "--tls-cert-file: is required with --tls-private-key-file",
            ),
            (
                &["--requestheader-username-headers=x-remote-user, "],
                "--requestheader-username-headers: empty value",
            ),
            (
                &["--requestheader-group-headers=bad header"],
                "--requestheader-group-headers: \"bad header\" is not a valid HTTP header name",
            ),
            (
                &["--requestheader-uid-headers=x-uid"],
                "--requestheader-uid-headers: is set without specifying the standard X-Remote-Uid header - API aggregation will not work",
            ),
            (
                &["--authorization-always-allow-paths=/a*b"],
                "--authorization-always-allow-paths: only trailing * allowed in \"a*b\"",
            ),
            (
                &["--tls-min-version=VersionTLS14"],
                "--tls-min-version: unknown version \"VersionTLS14\"; use VersionTLS12 or VersionTLS13",
            ),
            (
                &["--tls-cipher-suites=TLS_FOO"],
                "--tls-cipher-suites: unknown cipher suite \"TLS_FOO\"",
            ),
            (
                &["--http2-max-streams-per-connection=-5"],
                "--http2-max-streams-per-connection: must not be negative, got -5",
            ),
        ] {
            let err = parse(args).unwrap().validate().unwrap_err().to_string();
            assert!(err.starts_with(want), "{args:?}: {err}");
        }
        assert!(
            parse(&["--requestheader-uid-headers=X-Remote-Uid"])
                .unwrap()
                .validate()
                .is_ok()
        );
        let many = format!("--requestheader-allowed-names={}", vec!["n"; 300].join(","));
        let err = parse(&[&many]).unwrap().validate().unwrap_err();
        assert_eq!(err.flag, "--requestheader-allowed-names");
    }

    #[test]
    fn go_flag_syntax() {
        // Lists: one CSV record an occurrence, appended; Go's quoting rules.
        let o = parse(&[
            "--authorization-always-allow-paths=\"/a,b\",/c",
            "--authorization-always-allow-paths",
            "/d",
            "--tls-curve-preferences=0x17,29",
            "--tls-curve-preferences=24",
        ])
        .unwrap();
        assert_eq!(o.always_allow_paths(), ["/a,b", "/c", "/d"]);
        let (tls, _) = o.tls_settings().unwrap();
        let curves: Vec<_> = tls.kx_groups.unwrap().iter().map(|g| g.name()).collect();
        assert_eq!(
            curves,
            [
                rustls::NamedGroup::secp256r1,
                rustls::NamedGroup::X25519,
                rustls::NamedGroup::secp384r1
            ]
        );
        // Integers in any base, as strconv.ParseInt(s, 0, 64).
        let o = parse(&[
            "--secure-port=0x2000",
            "--http2-max-streams-per-connection=010",
        ])
        .unwrap();
        assert_eq!(
            (o.secure_port, o.http2_max_streams_per_connection),
            (8192, 8)
        );
        for bad in [
            "--authorization-always-allow-paths=a\"b",
            "--requestheader-allowed-names=\"a",
            "--tls-cipher-suites=\"a\"b",
            "--tls-curve-preferences=1.5",
            "--tls-curve-preferences=2147483648",
            "--tls-sni-cert-key=tls.crt",
            "--tls-sni-cert-key=",
            "--secure-port=1e3",
            "--bind-address=01.2.3.4",
        ] {
            let err = parse(&[bad]).unwrap_err().to_string();
            let flag = bad.split('=').next().unwrap();
            assert!(err.contains(flag), "{bad}: {err}");
        }
        // A value set in code that pflag would not have read is refused by validate.
        let o = ServingOptions {
            requestheader_allowed_names: vec!["a\"b".to_owned()],
            ..ServingOptions::default()
        };
        assert_eq!(
            o.validate().unwrap_err().flag,
            "--requestheader-allowed-names"
        );
    }
}
