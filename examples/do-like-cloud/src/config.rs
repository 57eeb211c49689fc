//! The provider's cloud-config.

use std::path::PathBuf;
use std::time::Duration;

use ccm_core::provider::{BoxError, CloudConfig, ConfigError};
use serde::Deserialize;

use crate::api::{ApiToken, ClientOptions, RateWindow};

/// The cloud-config (YAML, camelCase):
///
/// ```yaml
/// apiUrl: http://127.0.0.1:8080   # http(s)://host[:port][/path]; default https://api.digitalocean.com
/// tokenFile: /etc/do-like/token   # or tokenEnv: DO_LIKE_TOKEN (exactly one)
/// region: nyc1                    # the region of new load balancers
/// requestsPerMinute: 250          # at most this many requests in any minute (0: no limit)
/// requestsPerHour: 5000           # and in any hour (0: no limit)
/// requestsPerSecond: 10           # optional: also space requests this far apart
/// cacheTtlSeconds: 10             # how long one droplet list answers lookups (0..=3600)
/// timeoutSeconds: 10              # 1..=3600
/// maxRetryAfterSeconds: 10        # longer Retry-After waits go back to the controller (0..=3600)
/// perPage: 200
/// ```
///
/// Everything is checked at startup, each error naming its field: `apiUrl` must parse as an
/// `http` or `https` URL with a host, and no credentials, query or fragment (request paths
/// are appended to it). The token (the file at most [`MAX_TOKEN_BYTES`](Self::MAX_TOKEN_BYTES),
/// a regular file) must
/// be one line of printable ASCII with no spaces, so that it is a valid `Authorization`
/// header value: one trailing newline, as a file usually ends, is dropped; anything else is
/// refused rather than trimmed.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[non_exhaustive]
pub struct DoLikeConfig {
    /// The API's base URL; DigitalOcean's own ([`DEFAULT_API_URL`](Self::DEFAULT_API_URL))
    /// when absent.
    #[serde(default = "default_api_url")]
    pub api_url: String,
    /// A file holding the token.
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    /// An environment variable holding the token.
    #[serde(default)]
    pub token_env: Option<String>,
    /// The region of new load balancers.
    #[serde(default = "default_region")]
    pub region: String,
    /// The most requests sent in any minute; DigitalOcean's 250 by default
    /// ([`ClientOptions::DIGITALOCEAN_RATE_WINDOWS`]); 0: no limit.
    #[serde(default = "default_per_minute")]
    pub requests_per_minute: u32,
    /// The most requests sent in any hour; DigitalOcean's 5,000 by default; 0: no limit.
    #[serde(default = "default_per_hour")]
    pub requests_per_hour: u32,
    /// When set, requests are also spaced to this many a second (what it was alone before
    /// the windows); unset by default.
    #[serde(default)]
    pub requests_per_second: Option<f64>,
    /// The droplet-list cache's TTL.
    #[serde(default = "default_ttl")]
    pub cache_ttl_seconds: u64,
    /// The per-request timeout.
    #[serde(default = "default_timeout")]
    pub timeout_seconds: u64,
    /// The longest `Retry-After` waited in place.
    #[serde(default = "default_timeout")]
    pub max_retry_after_seconds: u64,
    /// The page size of lists (1..=200).
    #[serde(default = "default_per_page")]
    pub per_page: u32,
}

fn default_api_url() -> String {
    DoLikeConfig::DEFAULT_API_URL.into()
}
fn default_region() -> String {
    "nyc1".into()
}
fn default_per_minute() -> u32 {
    ClientOptions::DIGITALOCEAN_RATE_WINDOWS[0].requests
}
fn default_per_hour() -> u32 {
    ClientOptions::DIGITALOCEAN_RATE_WINDOWS[1].requests
}
fn default_ttl() -> u64 {
    10
}
fn default_timeout() -> u64 {
    10
}
fn default_per_page() -> u32 {
    200
}

impl DoLikeConfig {
    /// DigitalOcean's API, the default `apiUrl`.
    pub const DEFAULT_API_URL: &'static str = "https://api.digitalocean.com";

    /// The largest token file read: 64 KiB. A token is tens of bytes; the cap keeps a wrong
    /// path (a log, `/dev/zero`) from being read whole.
    pub const MAX_TOKEN_BYTES: u64 = ccm_core::provider::file::MAX_TOKEN_BYTES;

    /// The longest `timeoutSeconds`, `cacheTtlSeconds` and `maxRetryAfterSeconds`: an hour.
    /// Longer is never meant (a request, a stale droplet list or a wait of hours); it is a
    /// typo, such as milliseconds written as seconds.
    pub const MAX_SECONDS: u64 = 3600;

    /// The largest `requestsPerMinute` and `requestsPerHour`: the client remembers the start
    /// of each of a window's last requests, so a window's limit is memory.
    pub const MAX_REQUESTS_PER_WINDOW: u32 = 100_000;

    /// Parses and checks the file; errors name the field.
    pub fn parse(config: &CloudConfig) -> Result<Self, ConfigError> {
        let parsed: Self = config.parse_yaml()?;
        check_api_url(&parsed.api_url).map_err(|message| config.invalid("apiUrl", message))?;
        match (&parsed.token_file, &parsed.token_env) {
            (None, None) => {
                return Err(config.invalid("tokenFile", "set tokenFile or tokenEnv"));
            }
            (Some(_), Some(_)) => {
                return Err(config.invalid("tokenEnv", "set tokenFile or tokenEnv, not both"));
            }
            (None, Some(var)) if !valid_env_name(var) => {
                return Err(config.invalid(
                    "tokenEnv",
                    "must be an environment variable name ([A-Za-z_][A-Za-z0-9_]*)",
                ));
            }
            _ => {}
        }
        if parsed
            .requests_per_second
            .is_some_and(|r| !(r > 0.0 && r.is_finite()))
        {
            return Err(config.invalid("requestsPerSecond", "must be a positive number"));
        }
        for (field, value) in [
            ("requestsPerMinute", parsed.requests_per_minute),
            ("requestsPerHour", parsed.requests_per_hour),
        ] {
            if value > Self::MAX_REQUESTS_PER_WINDOW {
                return Err(config.invalid(
                    field,
                    format!(
                        "must be at most {} (0 for no limit), got {value}",
                        Self::MAX_REQUESTS_PER_WINDOW
                    ),
                ));
            }
        }
        for (field, value, min) in [
            ("timeoutSeconds", parsed.timeout_seconds, 1),
            ("cacheTtlSeconds", parsed.cache_ttl_seconds, 0),
            ("maxRetryAfterSeconds", parsed.max_retry_after_seconds, 0),
        ] {
            if !(min..=Self::MAX_SECONDS).contains(&value) {
                return Err(config.invalid(
                    field,
                    format!(
                        "must be between {min} and {}, got {value}",
                        Self::MAX_SECONDS
                    ),
                ));
            }
        }
        if !(1..=200).contains(&parsed.per_page) {
            return Err(config.invalid("perPage", "must be between 1 and 200"));
        }
        if parsed.region.is_empty() {
            return Err(config.invalid("region", "must not be empty"));
        }
        Ok(parsed)
    }

    /// Reads the token from the file (a regular file of at most
    /// [`MAX_TOKEN_BYTES`](Self::MAX_TOKEN_BYTES)) or the
    /// environment variable, and checks it (see [`DoLikeConfig`]). The error names the field
    /// and where it looked, never the token.
    pub fn token(&self) -> Result<ApiToken, BoxError> {
        let (source, token) = match (&self.token_file, &self.token_env) {
            (Some(path), _) => {
                // ANCHOR: token_file
                let source = format!("tokenFile {}", path.display());
                match CloudConfig::read_file(path, Self::MAX_TOKEN_BYTES) {
                    Ok(token) => (source, token),
                    Err(e) => return Err(format!("{source}: {e}").into()),
                }
                // ANCHOR_END: token_file
            }
            (None, Some(var)) => (
                format!("tokenEnv {var}"),
                std::env::var(var)
                    .map_err(|_| format!("tokenEnv: environment variable {var} is not set"))?,
            ),
            (None, None) => return Err("set tokenFile or tokenEnv".into()),
        };
        check_token(&token).map_err(|reason| format!("{source}: {reason}").into())
    }

    /// The client's options with `token`.
    pub fn client_options(&self, token: ApiToken) -> ClientOptions {
        let mut opts = ClientOptions::new(self.api_url.clone(), token);
        opts.requests_per_second = self.requests_per_second;
        opts.rate_windows = vec![
            RateWindow {
                requests: self.requests_per_minute,
                per: Duration::from_secs(60),
            },
            RateWindow {
                requests: self.requests_per_hour,
                per: Duration::from_secs(3600),
            },
        ];
        opts.cache_ttl = Duration::from_secs(self.cache_ttl_seconds);
        opts.timeout = Duration::from_secs(self.timeout_seconds);
        opts.max_retry_after = Duration::from_secs(self.max_retry_after_seconds);
        opts.per_page = self.per_page;
        opts
    }
}

/// Checks `apiUrl` (and `--do-like-api-url`): an `http` or `https` URL with a host, to which
/// request paths can be appended.
pub(crate) fn check_api_url(url: &str) -> Result<(), String> {
    if let Some(at) = url.find(|c: char| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "has whitespace or a control character at byte {at}"
        ));
    }
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err("must start with http:// or https://".into());
    }
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("is not a valid URL: {e}"))?;
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err("has no host".into());
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err("must not hold credentials (the token goes in tokenFile or tokenEnv)".into());
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err("must not have a query or a fragment: request paths are appended to it".into());
    }
    Ok(())
}

fn valid_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The token in `raw` without one trailing newline; it must then be printable ASCII without
/// spaces (a valid header value, nothing a reader would trim or split). The reason never
/// shows the token.
fn check_token(raw: &str) -> Result<ApiToken, String> {
    let token = raw
        .strip_suffix('\n')
        .map_or(raw, |t| t.strip_suffix('\r').unwrap_or(t));
    if token.is_empty() {
        return Err("the API token is empty".into());
    }
    if let Some(at) = token.bytes().position(|b| !b.is_ascii_graphic()) {
        return Err(format!(
            "the API token has a space, a line break, a control or a non-ASCII character at \
             byte {at}; it must be one line of printable ASCII (one trailing newline is allowed)"
        ));
    }
    Ok(ApiToken::new(token))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<DoLikeConfig, String> {
        DoLikeConfig::parse(&CloudConfig::from_string("/c.yaml", s)).map_err(|e| e.to_string())
    }

    #[test]
    fn the_rate_limit_is_digitaloceans_unless_set() {
        let c = parse("tokenEnv: T\n").unwrap();
        let opts = c.client_options(ApiToken::new("t"));
        assert_eq!(opts.rate_windows, ClientOptions::DIGITALOCEAN_RATE_WINDOWS);
        assert_eq!(opts.requests_per_second, None);
        let c = parse(
            "tokenEnv: T\nrequestsPerMinute: 0\nrequestsPerHour: 900\nrequestsPerSecond: 2\n",
        )
        .unwrap();
        let opts = c.client_options(ApiToken::new("t"));
        assert_eq!(
            opts.rate_windows
                .iter()
                .map(|w| w.requests)
                .collect::<Vec<_>>(),
            [0, 900]
        );
        assert_eq!(opts.requests_per_second, Some(2.0));
        for (yaml, field) in [
            ("requestsPerMinute: 100001", "requestsPerMinute"),
            ("requestsPerHour: -1", "requestsPerHour"),
            ("requestsPerSecond: 0", "requestsPerSecond"),
            ("requestsPerSecond: .inf", "requestsPerSecond"),
        ] {
            let e = parse(&format!("tokenEnv: T\n{yaml}\n")).unwrap_err();
            assert!(e.contains(&format!("field `{field}`")), "{yaml}: {e}");
        }
    }

    #[test]
    fn errors_name_the_field() {
        let e = parse("apiUrl: ftp://x\ntokenEnv: T\n").unwrap_err();
        assert!(e.contains("field `apiUrl`"), "{e}");
        let e = parse("apiUrl: http://x\n").unwrap_err();
        assert!(e.contains("field `tokenFile`"), "{e}");
        let e = parse("apiUrl: http://x\ntokenEnv: T\nperPage: 500\n").unwrap_err();
        assert!(e.contains("field `perPage`"), "{e}");
        let e = parse("apiUrl: http://x\ntokenEnv: T\ncacheTtlSeconds: soon\n").unwrap_err();
        assert!(e.contains("field `cacheTtlSeconds`"), "{e}");
        let c = parse("apiUrl: http://x\ntokenEnv: T\n").unwrap();
        assert_eq!(c.region, "nyc1");
        // Without apiUrl: DigitalOcean's own API (never resolved here: parsing only).
        let c = parse("tokenEnv: T\n").unwrap();
        assert_eq!(c.api_url, "https://api.digitalocean.com");
        assert_eq!(c.api_url, DoLikeConfig::DEFAULT_API_URL);
        let e = parse("apiUrl: http://x\ntokenEnv: T\ntimeoutSeconds: 86400\n").unwrap_err();
        assert!(
            e.ends_with("field `timeoutSeconds`: must be between 1 and 3600, got 86400"),
            "{e}"
        );
        let e = parse("apiUrl: http://x\ntokenEnv: T\ncacheTtlSeconds: 18446744073709551615\n")
            .unwrap_err();
        assert!(
            e.contains("field `cacheTtlSeconds`: must be between 0 and 3600"),
            "{e}"
        );
        let e = parse("apiUrl: http://x\ntokenEnv: \"A=B\"\n").unwrap_err();
        assert!(
            e.contains("field `tokenEnv`: must be an environment variable name"),
            "{e}"
        );
    }

    #[test]
    fn api_url_is_checked() {
        for (url, why) in [
            ("http://", "is not a valid URL: empty host"),
            ("http://[::1", "is not a valid URL: invalid IPv6 address"),
            ("ftp://x", "must start with http:// or https://"),
            ("x", "must start with http:// or https://"),
            ("http://x:99999", "is not a valid URL: invalid port number"),
            (
                "http://ex ample",
                "has whitespace or a control character at byte 9",
            ),
            (
                "http://x\n",
                "has whitespace or a control character at byte 8",
            ),
            ("http://u:p@x", "must not hold credentials"),
            ("http://x/?a=b", "must not have a query or a fragment"),
            ("http://x/#f", "must not have a query or a fragment"),
        ] {
            let e = parse(&format!("apiUrl: {url:?}\ntokenEnv: T\n")).unwrap_err();
            assert!(
                e.starts_with(&format!(
                    "invalid cloud-config file /c.yaml: field `apiUrl`: {why}"
                )),
                "{url:?}: {e}"
            );
        }
        for url in [
            "http://127.0.0.1:8080",
            "https://api.example.com",
            "https://api.example.com/",
            "http://[::1]:8080/api",
        ] {
            parse(&format!("apiUrl: {url:?}\ntokenEnv: T\n")).unwrap();
        }
    }

    #[test]
    fn token_sources() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        std::fs::write(&file, "s3cr3t\n").unwrap();
        let c = parse(&format!(
            "apiUrl: http://x\ntokenFile: {}\n",
            file.display()
        ))
        .unwrap();
        assert_eq!(c.token().unwrap(), ApiToken::new("s3cr3t"));
        assert_eq!(format!("{:?}", c.token().unwrap()), "ApiToken(<redacted>)");

        std::fs::write(&file, "\n").unwrap();
        let e = c.token().unwrap_err().to_string();
        assert_eq!(
            e,
            format!("tokenFile {}: the API token is empty", file.display())
        );
        // A line break inside, a second newline, spaces: refused, not trimmed; the message
        // never shows the token.
        for bad in [
            "s3cr\n3t",
            "s3cr3t\n\n",
            "  s3cr3t",
            "s3cr3t \n",
            "s3\tcr3t",
            "s3cr3\u{e9}t",
        ] {
            std::fs::write(&file, bad).unwrap();
            let e = c.token().unwrap_err().to_string();
            assert!(
                e.starts_with(&format!(
                    "tokenFile {}: the API token has a space",
                    file.display()
                )),
                "{bad:?}: {e}"
            );
            assert!(!e.contains("s3"), "{e}");
        }
        std::fs::write(&file, "s3cr3t\r\n").unwrap();
        assert_eq!(c.token().unwrap(), ApiToken::new("s3cr3t"));
        // Not a regular file, or too large: an error at once.
        let fifo = dir.path().join("fifo");
        assert!(
            std::process::Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .unwrap()
                .success()
        );
        for (path, why) in [
            (fifo, "is a named pipe (FIFO), not a regular file"),
            (dir.path().to_owned(), "is a directory, not a regular file"),
            (
                dir.path().join("missing"),
                "No such file or directory (os error 2)",
            ),
        ] {
            let c = parse(&format!(
                "apiUrl: http://x\ntokenFile: {}\n",
                path.display()
            ))
            .unwrap();
            let e = c.token().unwrap_err().to_string();
            assert_eq!(e, format!("tokenFile {}: {why}", path.display()));
        }
        let c = parse("apiUrl: http://x\ntokenFile: /dev/zero\n").unwrap();
        let e = c.token().unwrap_err().to_string();
        assert_eq!(
            e,
            "tokenFile /dev/zero: is a character device, not a regular file"
        );
        std::fs::write(&file, "x".repeat(64 * 1024 + 1)).unwrap();
        let c = parse(&format!(
            "apiUrl: http://x\ntokenFile: {}\n",
            file.display()
        ))
        .unwrap();
        let e = c.token().unwrap_err().to_string();
        assert!(
            e.ends_with("is larger than 64 KiB, the limit for this file"),
            "{e}"
        );

        let c = parse("apiUrl: http://x\ntokenEnv: CCM_DO_LIKE_SURELY_UNSET\n").unwrap();
        let e = c.token().unwrap_err().to_string();
        assert!(e.contains("CCM_DO_LIKE_SURELY_UNSET"), "{e}");
        // PATH is always set: the value is read (and trimmed).
        let c = parse("apiUrl: http://x\ntokenEnv: PATH\n").unwrap();
        assert!(c.token().is_ok());
    }
}
