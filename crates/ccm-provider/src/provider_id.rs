//! Provider IDs: `<provider>://<id>`, the key that ties a Node to its cloud instance.

use std::fmt;
use std::str::FromStr;

/// A parsed provider ID, `<provider>://<id>` (for example `digitalocean://12345` or
/// `aws:///eu-west-1a/i-0abc`).
///
/// The ID part is kept as written, including any leading slashes some providers use.
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

/// Why a string is not a valid provider ID.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProviderIdError {
    /// The string is empty.
    #[error("provider ID is empty")]
    Empty,
    /// There is no `://` separator.
    #[error("provider ID {0:?} is not of the form <provider>://<id>")]
    MissingSeparator(String),
    /// The part before `://` is empty or has characters a provider name cannot have.
    #[error("provider ID {0:?} has an invalid provider name")]
    InvalidProvider(String),
    /// The part after `://` is empty.
    #[error("provider ID {0:?} has an empty instance ID")]
    EmptyId(String),
    /// The ID belongs to another provider.
    #[error("provider ID {id:?} belongs to provider {actual:?}, not {expected:?}")]
    WrongProvider {
        /// The whole provider ID.
        id: String,
        /// The provider that was expected.
        expected: String,
        /// The provider the ID names.
        actual: String,
    },
}

fn valid_provider_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

impl ProviderId {
    /// A provider ID from its parts.
    pub fn new(
        provider: impl Into<String>,
        id: impl Into<String>,
    ) -> Result<Self, ProviderIdError> {
        let (provider, id) = (provider.into(), id.into());
        if !valid_provider_name(&provider) {
            return Err(ProviderIdError::InvalidProvider(format!(
                "{provider}://{id}"
            )));
        }
        if id.is_empty() {
            return Err(ProviderIdError::EmptyId(format!("{provider}://")));
        }
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
        if id.is_empty() || id.chars().all(|c| c == '/') {
            return Err(ProviderIdError::EmptyId(s.to_owned()));
        }
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
        assert_eq!("".parse::<ProviderId>(), Err(ProviderIdError::Empty));
        assert!(matches!(
            "node-1".parse::<ProviderId>(),
            Err(ProviderIdError::MissingSeparator(_))
        ));
        assert!(matches!(
            "fake:/x".parse::<ProviderId>(),
            Err(ProviderIdError::MissingSeparator(_))
        ));
        assert!(matches!(
            "://x".parse::<ProviderId>(),
            Err(ProviderIdError::InvalidProvider(_))
        ));
        assert!(matches!(
            "fa ke://x".parse::<ProviderId>(),
            Err(ProviderIdError::InvalidProvider(_))
        ));
        assert!(matches!(
            "fake://".parse::<ProviderId>(),
            Err(ProviderIdError::EmptyId(_))
        ));
        assert!(matches!(
            "fake:///".parse::<ProviderId>(),
            Err(ProviderIdError::EmptyId(_))
        ));
        assert!(ProviderId::new("", "x").is_err());
        assert!(ProviderId::new("fake", "").is_err());
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
