//! The provider registry: pick a provider by `--cloud-provider` name and build it from the
//! `--cloud-config` file (Go's `RegisterCloudProvider` + `InitCloudProvider`).

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use super::{BoxError, CloudConfig, CloudProvider, ConfigError};

/// Builds a provider from its cloud-config (`None` when no `--cloud-config` was given).
///
/// Return a [`ConfigError`] (from [`CloudConfig::parse_yaml`] or [`CloudConfig::invalid`])
/// for a bad config, so the message names the file and the field.
pub type ProviderFactory =
    Arc<dyn Fn(Option<&CloudConfig>) -> Result<Arc<dyn CloudProvider>, BoxError> + Send + Sync>;

/// Why a provider could not be picked or built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// No `--cloud-provider` was given.
    #[error("--cloud-provider is required (known providers: {})", known.join(", "))]
    NoProvider {
        /// The registered names.
        known: Vec<String>,
    },
    /// No provider of that name is registered.
    #[error("--cloud-provider: unknown cloud provider {name:?} (known providers: {})", known.join(", "))]
    UnknownProvider {
        /// The name asked for.
        name: String,
        /// The registered names.
        known: Vec<String>,
    },
    /// A second factory was registered under one name.
    #[error("cloud provider {0:?} was registered twice")]
    Duplicate(String),
    /// The `--cloud-config` file could not be read.
    #[error("--cloud-config: {0}")]
    Config(ConfigError),
    /// The factory failed, usually on an invalid cloud-config.
    #[error("could not init cloud provider {name:?}")]
    Init {
        /// The provider.
        name: String,
        /// What the factory said.
        #[source]
        source: BoxError,
    },
}

/// Named provider factories.
///
/// ```
/// use std::sync::Arc;
/// use ccm_core::provider::{CloudProvider, ProviderRegistry};
///
/// struct Tiny;
/// impl CloudProvider for Tiny {
///     fn provider_name(&self) -> &str { "tiny" }
///     fn has_cluster_id(&self) -> bool { true }
/// }
///
/// let mut registry = ProviderRegistry::new();
/// registry.register("tiny", |_config| Ok(Arc::new(Tiny) as Arc<dyn CloudProvider>)).unwrap();
/// let provider = registry.init("tiny", None).unwrap();
/// assert_eq!(provider.provider_name(), "tiny");
/// assert!(registry.init("other", None).err().unwrap().to_string().contains("unknown cloud provider \"other\""));
/// ```
#[derive(Clone, Default)]
pub struct ProviderRegistry {
    factories: BTreeMap<String, ProviderFactory>,
}

impl fmt::Debug for ProviderRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProviderRegistry")
            .field("providers", &self.factories.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl ProviderRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `factory` under `name`; a name may be registered once.
    pub fn register<F>(
        &mut self,
        name: impl Into<String>,
        factory: F,
    ) -> Result<&mut Self, RegistryError>
    where
        F: Fn(Option<&CloudConfig>) -> Result<Arc<dyn CloudProvider>, BoxError>
            + Send
            + Sync
            + 'static,
    {
        let name = name.into();
        if self.factories.contains_key(&name) {
            return Err(RegistryError::Duplicate(name));
        }
        self.factories.insert(name, Arc::new(factory));
        Ok(self)
    }

    /// The registered names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.factories.keys().map(String::as_str)
    }

    /// Whether `name` is registered.
    pub fn contains(&self, name: &str) -> bool {
        self.factories.contains_key(name)
    }

    /// Builds the provider `name`, reading `config_path` first when given (with
    /// [`CloudConfig::read`]: a regular file of at most [`CloudConfig::MAX_BYTES`]).
    ///
    /// This blocks while the file is read and the factory runs; the controller manager calls
    /// it on a thread of its own, so that a shutdown signal meanwhile still ends the process.
    pub fn init(
        &self,
        name: &str,
        config_path: Option<&Path>,
    ) -> Result<Arc<dyn CloudProvider>, RegistryError> {
        let known = || self.names().map(str::to_owned).collect();
        if name.is_empty() {
            return Err(RegistryError::NoProvider { known: known() });
        }
        let Some(factory) = self.factories.get(name) else {
            return Err(RegistryError::UnknownProvider {
                name: name.to_owned(),
                known: known(),
            });
        };
        let config = config_path
            .filter(|p| !p.as_os_str().is_empty())
            .map(CloudConfig::read)
            .transpose()
            .map_err(RegistryError::Config)?;
        factory(config.as_ref()).map_err(|source| RegistryError::Init {
            name: name.to_owned(),
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::display_chain;

    struct Named(String);
    impl CloudProvider for Named {
        fn provider_name(&self) -> &str {
            &self.0
        }

        fn has_cluster_id(&self) -> bool {
            true
        }
    }

    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Cfg {
        region: String,
    }

    fn registry() -> ProviderRegistry {
        let mut r = ProviderRegistry::new();
        r.register("plain", |_| {
            Ok(Arc::new(Named("plain".into())) as Arc<dyn CloudProvider>)
        })
        .unwrap();
        r.register("configured", |cfg| {
            let cfg = cfg.ok_or("--cloud-config is required for this provider")?;
            let parsed: Cfg = cfg.parse_yaml()?;
            if parsed.region.is_empty() {
                return Err(cfg.invalid("region", "must not be empty").into());
            }
            Ok(Arc::new(Named(parsed.region)) as Arc<dyn CloudProvider>)
        })
        .unwrap();
        r
    }

    #[test]
    fn duplicate_names_are_refused() {
        let mut r = registry();
        let err = r
            .register("plain", |_| {
                Ok(Arc::new(Named("x".into())) as Arc<dyn CloudProvider>)
            })
            .err()
            .unwrap();
        assert!(matches!(err, RegistryError::Duplicate(n) if n == "plain"));
    }

    #[test]
    fn unknown_and_missing_names_list_the_known_ones() {
        let r = registry();
        assert_eq!(
            r.init("nope", None).err().unwrap().to_string(),
            r#"--cloud-provider: unknown cloud provider "nope" (known providers: configured, plain)"#
        );
        assert_eq!(
            r.init("", None).err().unwrap().to_string(),
            "--cloud-provider is required (known providers: configured, plain)"
        );
    }

    #[test]
    fn config_is_read_and_passed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cloud.yaml");
        std::fs::write(&path, "region: eu-9\n").unwrap();
        let p = registry().init("configured", Some(&path)).unwrap();
        assert_eq!(p.provider_name(), "eu-9");
    }

    #[test]
    fn config_errors_name_file_and_field() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cloud.yaml");
        std::fs::write(&path, "region: \"\"\n").unwrap();
        let err = registry().init("configured", Some(&path)).err().unwrap();
        let msg = display_chain(&err);
        assert!(
            msg.starts_with(
                "could not init cloud provider \"configured\": invalid cloud-config file "
            ),
            "{msg}"
        );
        assert!(
            msg.ends_with("cloud.yaml: field `region`: must not be empty"),
            "{msg}"
        );

        std::fs::write(&path, "regoin: x\n").unwrap();
        let msg = display_chain(&registry().init("configured", Some(&path)).err().unwrap());
        assert!(msg.contains("unknown field `regoin`"), "{msg}");

        let missing = dir.path().join("missing.yaml");
        let msg = display_chain(&registry().init("configured", Some(&missing)).err().unwrap());
        assert!(
            msg.starts_with("--cloud-config: cannot read cloud-config file "),
            "{msg}"
        );
        assert!(msg.contains("missing.yaml"), "{msg}");
    }

    #[test]
    fn factory_errors_without_config() {
        let msg = display_chain(&registry().init("configured", None).err().unwrap());
        assert_eq!(
            msg,
            "could not init cloud provider \"configured\": --cloud-config is required for this provider"
        );
    }
}
