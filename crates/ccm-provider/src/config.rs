//! The `--cloud-config` file: read once at startup and handed to the provider's factory.

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

/// The contents of a `--cloud-config` file, with the path it came from so every error can
/// name it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CloudConfig {
    path: PathBuf,
    contents: String,
}

/// Why a cloud-config file could not be used. The message names the file, and the field
/// when one is at fault.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read cloud-config file {}: {error}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// The file was read but a field is missing, malformed or out of range.
    #[error("invalid cloud-config file {}: {}{message}", path.display(), field_prefix(field))]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The path of the field at fault, like `instances[2].zone`; empty for the file as
        /// a whole (a syntax error).
        field: String,
        /// What is wrong with it.
        message: String,
    },
}

fn field_prefix(field: &str) -> String {
    if field.is_empty() || field == "." {
        String::new()
    } else {
        format!("field `{field}`: ")
    }
}

impl CloudConfig {
    /// Reads the file at `path`.
    pub fn read(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let path = path.as_ref().to_path_buf();
        match std::fs::read_to_string(&path) {
            Ok(contents) => Ok(Self { path, contents }),
            Err(error) => Err(ConfigError::Read { path, error }),
        }
    }

    /// A config from text already in memory; `path` is only used in error messages.
    pub fn from_string(path: impl Into<PathBuf>, contents: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            contents: contents.into(),
        }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's text.
    pub fn contents(&self) -> &str {
        &self.contents
    }

    /// Parses the file as YAML (which includes JSON) into `T`. An error names the field at
    /// fault, so `#[serde(deny_unknown_fields)]` on `T` turns a typo into a clear message.
    ///
    /// ```
    /// use ccm_core::provider::CloudConfig;
    /// #[derive(serde::Deserialize, Debug)]
    /// #[serde(deny_unknown_fields)]
    /// struct Config { region: String, api: Api }
    /// #[derive(serde::Deserialize, Debug)]
    /// #[serde(deny_unknown_fields)]
    /// struct Api { url: String, timeout_seconds: u32 }
    ///
    /// let cfg = CloudConfig::from_string("/etc/cloud.yaml",
    ///     "region: eu-1\napi:\n  url: http://x\n  timeout_seconds: soon\n");
    /// let err = cfg.parse_yaml::<Config>().unwrap_err().to_string();
    /// assert!(err.starts_with("invalid cloud-config file /etc/cloud.yaml: field `api.timeout_seconds`: "), "{err}");
    /// ```
    pub fn parse_yaml<T: DeserializeOwned>(&self) -> Result<T, ConfigError> {
        let de = serde_yaml_ng::Deserializer::from_str(&self.contents);
        serde_path_to_error::deserialize(de).map_err(|e| {
            let field = e.path().to_string();
            let mut message = e.into_inner().to_string();
            // serde_yaml_ng starts some messages with the path of the enclosing mapping
            // ("machines.web-1: unknown field ..."): the field says it already. Its
            // " at line L column C" suffix stays: it helps find the field.
            if let Some((prefix, rest)) = message.split_once(": ")
                && !prefix.contains(' ')
                && field.starts_with(prefix)
            {
                message = rest.to_owned();
            }
            if message.is_empty() {
                message = "invalid value".to_owned();
            }
            self.invalid(field, message)
        })
    }

    /// A [`ConfigError::Invalid`] for this file, for checks a factory makes after parsing.
    ///
    /// ```
    /// use ccm_core::provider::CloudConfig;
    /// let cfg = CloudConfig::from_string("/etc/cloud.yaml", "");
    /// assert_eq!(cfg.invalid("region", "must not be empty").to_string(),
    ///            "invalid cloud-config file /etc/cloud.yaml: field `region`: must not be empty");
    /// ```
    pub fn invalid(&self, field: impl Into<String>, message: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            path: self.path.clone(),
            field: field.into(),
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Cfg {
        name: String,
        #[serde(default)]
        items: Vec<Item>,
    }

    #[derive(serde::Deserialize, Debug, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Item {
        id: u32,
    }

    #[test]
    fn parses_yaml_and_json() {
        let y = CloudConfig::from_string("c.yaml", "name: a\nitems:\n- id: 1\n");
        assert_eq!(
            y.parse_yaml::<Cfg>().unwrap(),
            Cfg {
                name: "a".into(),
                items: vec![Item { id: 1 }]
            }
        );
        let j = CloudConfig::from_string("c.json", r#"{"name": "b"}"#);
        assert_eq!(j.parse_yaml::<Cfg>().unwrap().name, "b");
    }

    #[test]
    fn names_the_field_at_fault() {
        let c = CloudConfig::from_string("/x/c.yaml", "name: a\nitems:\n- id: 1\n- id: two\n");
        let err = c.parse_yaml::<Cfg>().unwrap_err();
        let ConfigError::Invalid { field, path, .. } = &err else {
            panic!("{err:?}")
        };
        assert_eq!(field, "items[1].id");
        assert_eq!(path, Path::new("/x/c.yaml"));
        assert!(err.to_string().contains("field `items[1].id`"), "{err}");
    }

    #[test]
    fn names_an_unknown_field() {
        let c = CloudConfig::from_string("c.yaml", "name: a\nnmae: b\n");
        let err = c.parse_yaml::<Cfg>().unwrap_err().to_string();
        assert!(err.contains("field `nmae`: unknown field `nmae`"), "{err}");

        let c = CloudConfig::from_string("c.yaml", "name: a\nitems:\n- id: 1\n  idd: 2\n");
        let err = c.parse_yaml::<Cfg>().unwrap_err().to_string();
        assert!(
            err.starts_with(
                "invalid cloud-config file c.yaml: field `items[0].idd`: unknown field `idd`"
            ),
            "{err}"
        );
    }

    #[test]
    fn syntax_error_names_the_file() {
        let c = CloudConfig::from_string("c.yaml", "name: [\n");
        let err = c.parse_yaml::<Cfg>().unwrap_err().to_string();
        assert!(
            err.starts_with("invalid cloud-config file c.yaml: "),
            "{err}"
        );
    }

    #[test]
    fn unreadable_file_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope.yaml");
        let err = CloudConfig::read(&missing).unwrap_err();
        assert!(matches!(err, ConfigError::Read { .. }));
        assert!(err.to_string().contains("nope.yaml"), "{err}");
    }
}
