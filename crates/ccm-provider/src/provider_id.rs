//! Provider IDs: `<provider>://<id>`, the key that ties a Node to its cloud instance.

use std::fmt;
use std::str::FromStr;

/// A parsed provider ID, `<provider>://<id>` (for example `digitalocean://12345` or
/// `aws:///eu-west-1a/i-0abc`).
///
/// The ID part is kept as written, including any leading slashes some providers use, so a
/// parsed ID prints back exactly as it was given. Parsing is strict: the provider name is
/// `[A-Za-z0-9._-]+`, and the instance ID is not empty, not only slashes, and has no
/// whitespace or control characters (`"fake://i-1 "` is refused, not trimmed: two spellings
/// must never name one instance). What the instance ID looks like beyond that is the
/// provider's to check: a provider whose IDs are numbers accepts only their canonical
/// spelling.
///
/// ```
/// use ccm_core::provider::ProviderId;
/// let id: ProviderId = "fake://node-1".parse().unwrap();
/// assert_eq!(id.provider(), "fake");
/// assert_eq!(id.id(), "node-1");
/// assert_eq!(id.to_string(), "fake://node-1");
/// assert_eq!(ProviderId::new("fake", "node-1").unwrap(), id);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProviderId {
    provider: String,
    id: String,
}

/// Why a string is not a valid provider ID. Messages quote the string, cut to its first 128
/// characters (a provider ID comes from a Node, and messages end up in logs and Events).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProviderIdError {
    /// The string is empty.
    #[error("provider ID is empty")]
    Empty,
    /// There is no `://` separator.
    #[error("provider ID {} is not of the form <provider>://<id>", shown(.0))]
    MissingSeparator(String),
    /// The part before `://` is empty or has characters a provider name cannot have.
    #[error("provider ID {} has an invalid provider name", shown(.0))]
    InvalidProvider(String),
    /// The part after `://` is empty, or only slashes.
    #[error("provider ID {} has an empty instance ID", shown(.0))]
    EmptyId(String),
    /// The part after `://` has whitespace or a control character.
    #[error(
        "provider ID {} has whitespace or a control character in its instance ID",
        shown(.0)
    )]
    InvalidId(String),
    /// The ID belongs to another provider.
    #[error(
        "provider ID {} belongs to provider {actual:?}, not {expected:?}",
        shown(id)
    )]
    WrongProvider {
        /// The whole provider ID.
        id: String,
        /// The provider that was expected.
        expected: String,
        /// The provider the ID names.
        actual: String,
    },
}

/// How many characters of a provider ID an error message quotes.
const SHOWN_CHARS: usize = 128;

/// `s` quoted, cut to [`SHOWN_CHARS`] characters.
fn shown(s: &str) -> String {
    match s.char_indices().nth(SHOWN_CHARS) {
        None => format!("{s:?}"),
        Some((cut, _)) => format!("{:?}... ({} bytes)", &s[..cut], s.len()),
    }
}

fn valid_provider_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Checks the instance ID part; `whole` is the provider ID the error quotes.
fn check_id(id: &str, whole: impl FnOnce() -> String) -> Result<(), ProviderIdError> {
    if id.chars().all(|c| c == '/') {
        return Err(ProviderIdError::EmptyId(whole()));
    }
    if id.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(ProviderIdError::InvalidId(whole()));
    }
    Ok(())
}

impl ProviderId {
    /// A provider ID from its parts, checked as [`parse`](str::parse) checks a string.
    ///
    /// ```
    /// use ccm_core::provider::ProviderId;
    /// assert!(ProviderId::new("fake", "i-1").is_ok());
    /// assert!(ProviderId::new("fake", "i 1").is_err());
    /// assert!(ProviderId::new("fake", "//").is_err());
    /// ```
    pub fn new(
        provider: impl Into<String>,
        id: impl Into<String>,
    ) -> Result<Self, ProviderIdError> {
        let (provider, id) = (provider.into(), id.into());
        let whole = || format!("{provider}://{id}");
        if !valid_provider_name(&provider) {
            return Err(ProviderIdError::InvalidProvider(whole()));
        }
        check_id(&id, whole)?;
        Ok(Self { provider, id })
    }

    /// Parses `s` and checks that it belongs to `provider`.
    ///
    /// ```
    /// use ccm_core::provider::ProviderId;
    /// assert_eq!(ProviderId::parse_for("fake", "fake://i-1").unwrap().id(), "i-1");
    /// let err = ProviderId::parse_for("fake", "aws:///i-1").unwrap_err();
    /// assert_eq!(err.to_string(), r#"provider ID "aws:///i-1" belongs to provider "aws", not "fake""#);
    /// ```
    pub fn parse_for(provider: &str, s: &str) -> Result<Self, ProviderIdError> {
        let parsed: Self = s.parse()?;
        if parsed.provider != provider {
            return Err(ProviderIdError::WrongProvider {
                id: s.to_owned(),
                expected: provider.to_owned(),
                actual: parsed.provider,
            });
        }
        Ok(parsed)
    }

    /// The provider name, the part before `://`.
    pub fn provider(&self) -> &str {
        &self.provider
    }

    /// The instance ID, the part after `://`.
    pub fn id(&self) -> &str {
        &self.id
    }
}

impl FromStr for ProviderId {
    type Err = ProviderIdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.is_empty() {
            return Err(ProviderIdError::Empty);
        }
        let Some((provider, id)) = s.split_once("://") else {
            return Err(ProviderIdError::MissingSeparator(s.to_owned()));
        };
        if !valid_provider_name(provider) {
            return Err(ProviderIdError::InvalidProvider(s.to_owned()));
        }
        check_id(id, || s.to_owned())?;
        Ok(Self {
            provider: provider.to_owned(),
            id: id.to_owned(),
        })
    }
}

impl fmt::Display for ProviderId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}", self.provider, self.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        for s in [
            "fake://a",
            "aws:///eu-west-1a/i-0abc",
            "digitalocean://12345",
            "gce://p/z/n",
        ] {
            let id: ProviderId = s.parse().unwrap();
            assert_eq!(id.to_string(), s);
        }
        let aws: ProviderId = "aws:///eu-west-1a/i-0abc".parse().unwrap();
        assert_eq!(aws.id(), "/eu-west-1a/i-0abc");
    }

    #[test]
    fn rejects_malformed() {
        use ProviderIdError::{EmptyId, InvalidProvider, MissingSeparator};
        assert_eq!("".parse::<ProviderId>(), Err(ProviderIdError::Empty));
        // Each error names the whole value.
        let errors = [
            ("node-1", MissingSeparator as fn(String) -> _),
            ("fake:/x", MissingSeparator),
            ("://x", InvalidProvider),
            ("fa ke://x", InvalidProvider),
            ("fake://", EmptyId),
            ("fake:///", EmptyId),
        ];
        for (s, error) in errors {
            assert_eq!(s.parse::<ProviderId>(), Err(error(s.to_owned())), "{s}");
        }
        assert!(ProviderId::new("", "x").is_err());
        assert!(ProviderId::new("fake", "").is_err());
        assert!(ProviderId::new("fake", "///").is_err());
    }

    #[test]
    fn rejects_whitespace_and_control_characters() {
        for s in [
            "fake:// i-1",
            "fake://i-1 ",
            "fake://i-1\n",
            "fake://i\t1",
            "fake://i\u{0}1",
            "fake://i\u{a0}1",
            "digitalocean://100001\r",
        ] {
            assert_eq!(
                s.parse::<ProviderId>(),
                Err(ProviderIdError::InvalidId(s.to_owned())),
                "{s:?}"
            );
        }
        assert_eq!(
            ProviderId::new("fake", "a b"),
            Err(ProviderIdError::InvalidId("fake://a b".into()))
        );
        assert_eq!(
            "fake://a b".parse::<ProviderId>().unwrap_err().to_string(),
            r#"provider ID "fake://a b" has whitespace or a control character in its instance ID"#
        );
        // Leading slashes and empty path segments are some providers' format.
        for s in ["aws:///eu-west-1a/i-0abc", "ibm://acct///cluster/worker"] {
            assert_eq!(s.parse::<ProviderId>().unwrap().to_string(), s);
        }
    }

    #[test]
    fn messages_quote_a_long_id_cut_short() {
        let long = format!("fake://{}", "x ".repeat(50_000));
        let msg = long.parse::<ProviderId>().unwrap_err().to_string();
        assert!(msg.len() < 300, "{msg}");
        assert!(
            msg.starts_with(r#"provider ID "fake://x x"#) && msg.contains("... (100007 bytes)"),
            "{msg}"
        );
    }

    #[test]
    fn error_messages_name_the_input() {
        let err = "node-1".parse::<ProviderId>().unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"provider ID "node-1" is not of the form <provider>://<id>"#
        );
    }
}
