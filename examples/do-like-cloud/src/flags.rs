//! The provider's own flags, on the controller manager's command line.

use ccm_core::app::clap;

use crate::config::{DoLikeConfig, check_api_url};

// ANCHOR: flags
/// The DO-like provider's own flags: listed by the binary's `--help` and parsed with the
/// controller manager's (see [`DoLikeCloud::register_with_flags`](crate::DoLikeCloud::register_with_flags)).
/// A flag given on the command line wins over the cloud-config's field.
#[derive(Clone, Debug, Default, PartialEq, Eq, clap::Args)]
#[command(next_help_heading = "DigitalOcean-like cloud")]
#[non_exhaustive]
pub struct DoLikeFlags {
    /// The API's base URL, e.g. http://127.0.0.1:8080. Overrides the cloud-config's apiUrl.
    #[arg(long = "do-like-api-url", value_name = "URL", value_parser = api_url)]
    pub api_url: Option<String>,
}
// ANCHOR_END: flags

impl DoLikeFlags {
    /// Applies the flags that were given to `config`: each wins over its field.
    pub fn apply(&self, config: &mut DoLikeConfig) {
        if let Some(url) = &self.api_url {
            config.api_url.clone_from(url);
        }
    }
}

/// `--do-like-api-url`, checked as `apiUrl` is; clap's error names the flag.
fn api_url(url: &str) -> Result<String, String> {
    check_api_url(url).map(|()| url.to_owned())
}

#[cfg(test)]
mod tests {
    use ccm_core::app::clap::{Args, Command, FromArgMatches};
    use ccm_core::provider::CloudConfig;

    use super::*;

    fn parse(args: &[&str]) -> Result<DoLikeFlags, String> {
        let command = DoLikeFlags::augment_args(Command::new("ccm"));
        let matches = command
            .try_get_matches_from(args)
            .map_err(|e| e.to_string())?;
        DoLikeFlags::from_arg_matches(&matches).map_err(|e| e.to_string())
    }

    #[test]
    fn the_flag_wins_over_the_cloud_config() {
        let file = CloudConfig::from_string("/c.yaml", "apiUrl: http://file:1\ntokenEnv: T\n");
        let mut config = DoLikeConfig::parse(&file).unwrap();
        parse(&["ccm"]).unwrap().apply(&mut config);
        assert_eq!(config.api_url, "http://file:1");
        let flags = parse(&["ccm", "--do-like-api-url=http://flag:2"]).unwrap();
        flags.apply(&mut config);
        assert_eq!(config.api_url, "http://flag:2");
    }

    #[test]
    fn a_bad_url_is_refused_naming_the_flag() {
        let e = parse(&["ccm", "--do-like-api-url", "ftp://x"]).unwrap_err();
        assert!(
            e.starts_with(
                "error: invalid value 'ftp://x' for '--do-like-api-url <URL>': must start with \
                 http:// or https://"
            ),
            "{e}"
        );
    }
}
