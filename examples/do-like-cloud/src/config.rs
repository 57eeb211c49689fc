//! The provider's cloud-config.

use std::path::PathBuf;
use std::time::Duration;

use ccm_core::provider::{BoxError, CloudConfig, ConfigError};
use serde::Deserialize;

use crate::api::{ApiToken, ClientOptions};

/// The cloud-config (YAML, camelCase):
///
/// ```yaml
/// apiUrl: http://127.0.0.1:8080   # required
/// tokenFile: /etc/do-like/token   # or tokenEnv: DO_LIKE_TOKEN (exactly one)
/// region: nyc1                    # the region of new load balancers
/// requestsPerSecond: 10           # client-side rate limit
/// cacheTtlSeconds: 10             # how long one droplet list answers lookups
/// timeoutSeconds: 10
/// maxRetryAfterSeconds: 10        # longer Retry-After waits go back to the controller
/// perPage: 200
/// ```
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[non_exhaustive]
pub struct DoLikeConfig {
    /// The API's base URL.
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
    /// Client-side rate limit.
    #[serde(default = "default_rps")]
    pub requests_per_second: f64,
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

fn default_region() -> String {
    "nyc1".into()
}
fn default_rps() -> f64 {
    10.0
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
    /// Parses and checks the file; errors name the field.
    pub fn parse(config: &CloudConfig) -> Result<Self, ConfigError> {
        let parsed: Self = config.parse_yaml()?;
        if !(parsed.api_url.starts_with("http://") || parsed.api_url.starts_with("https://")) {
            return Err(config.invalid("apiUrl", "must start with http:// or https://"));
        }
        match (&parsed.token_file, &parsed.token_env) {
            (None, None) => {
                return Err(config.invalid("tokenFile", "set tokenFile or tokenEnv"));
            }
            (Some(_), Some(_)) => {
                return Err(config.invalid("tokenEnv", "set tokenFile or tokenEnv, not both"));
            }
            _ => {}
        }
        if !(parsed.requests_per_second > 0.0 && parsed.requests_per_second.is_finite()) {
            return Err(config.invalid("requestsPerSecond", "must be a positive number"));
        }
        if parsed.timeout_seconds == 0 {
            return Err(config.invalid("timeoutSeconds", "must be at least 1"));
        }
        if !(1..=200).contains(&parsed.per_page) {
            return Err(config.invalid("perPage", "must be between 1 and 200"));
        }
        if parsed.region.is_empty() {
            return Err(config.invalid("region", "must not be empty"));
        }
        Ok(parsed)
    }

    /// Reads the token from the file or the environment variable. The error names where it
    /// looked, never the token.
    pub fn token(&self) -> Result<ApiToken, BoxError> {
        let token = match (&self.token_file, &self.token_env) {
            (Some(path), _) => std::fs::read_to_string(path)
                .map_err(|e| format!("tokenFile {}: {e}", path.display()))?,
            (None, Some(var)) => std::env::var(var)
                .map_err(|_| format!("tokenEnv: environment variable {var} is not set"))?,
            (None, None) => return Err("set tokenFile or tokenEnv".into()),
        };
        let token = ApiToken::new(token);
        if token == ApiToken::new("") {
            return Err("the API token is empty".into());
        }
        Ok(token)
    }

    /// The client's options with `token`.
    pub fn client_options(&self, token: ApiToken) -> ClientOptions {
        let mut opts = ClientOptions::new(self.api_url.clone(), token);
        opts.requests_per_second = self.requests_per_second;
        opts.cache_ttl = Duration::from_secs(self.cache_ttl_seconds);
        opts.timeout = Duration::from_secs(self.timeout_seconds);
        opts.max_retry_after = Duration::from_secs(self.max_retry_after_seconds);
        opts.per_page = self.per_page;
        opts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<DoLikeConfig, String> {
        DoLikeConfig::parse(&CloudConfig::from_string("/c.yaml", s)).map_err(|e| e.to_string())
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

        std::fs::write(&file, "  \n").unwrap();
        let e = c.token().unwrap_err().to_string();
        assert!(e.contains("empty"), "{e}");

        let c = parse("apiUrl: http://x\ntokenEnv: CCM_DO_LIKE_SURELY_UNSET\n").unwrap();
        let e = c.token().unwrap_err().to_string();
        assert!(e.contains("CCM_DO_LIKE_SURELY_UNSET"), "{e}");
        // PATH is always set: the value is read (and trimmed).
        let c = parse("apiUrl: http://x\ntokenEnv: PATH\n").unwrap();
        assert!(c.token().is_ok());
    }
}
