//! The `--cloud-config` file: read once at startup and handed to the provider's factory.
//!
//! Every input is bounded: the file is read only if it is a regular file of at most
//! [`CloudConfig::MAX_BYTES`], and [`CloudConfig::parse_yaml`] refuses nesting deeper than
//! [`CloudConfig::MAX_DEPTH`] before the YAML is deserialized. A provider reads its own
//! files (a token, a CA bundle) with the same guards through [`CloudConfig::read_file`].

use std::io;
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
    /// The largest cloud-config [`read`](Self::read) accepts: 1 MiB. A cloud-config is a few
    /// kilobytes; the cap keeps a wrong path (a log file, a disk image) from being read whole.
    pub const MAX_BYTES: u64 = 1024 * 1024;

    /// The deepest nesting of mappings and sequences [`parse_yaml`](Self::parse_yaml)
    /// accepts: 64. A cloud-config needs a handful of levels, while the YAML parser's time
    /// grows with the nesting depth times the size (80 kB of nested brackets took 22 s), so
    /// deeper text is refused before it is deserialized.
    pub const MAX_DEPTH: usize = 64;

    /// Reads the file at `path` with the guards of [`read_file`](Self::read_file) and a
    /// limit of [`MAX_BYTES`](Self::MAX_BYTES).
    ///
    /// ```
    /// use ccm_core::provider::CloudConfig;
    /// let err = CloudConfig::read("/dev/zero").unwrap_err();
    /// assert_eq!(err.to_string(),
    ///            "cannot read cloud-config file /dev/zero: is a character device, not a regular file");
    /// ```
    pub fn read(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let path = path.as_ref().to_path_buf();
        match Self::read_file(&path, Self::MAX_BYTES) {
            Ok(contents) => Ok(Self { path, contents }),
            Err(error) => Err(ConfigError::Read { path, error }),
        }
    }

    /// Reads a small text file: a cloud-config, or a file a provider's config points to (a
    /// token, a CA bundle). Symbolic links are followed (a mounted ConfigMap or Secret is
    /// one); the target must be a regular file, so a named pipe nobody writes or a device
    /// like `/dev/zero` is an error at once instead of a hang or an endless read. At most
    /// `max_bytes + 1` bytes are read: a longer file is an error of kind
    /// [`FileTooLarge`](io::ErrorKind::FileTooLarge). The text must be UTF-8.
    ///
    /// The error says what is wrong, not which file: the caller names the file and the flag
    /// or field it came from. This is [`file::read_text`](crate::file::read_text), the
    /// reader of every file the controller manager reads.
    ///
    /// ```
    /// use ccm_core::provider::CloudConfig;
    /// let dir = tempfile::tempdir().unwrap();
    /// let token = dir.path().join("token");
    /// std::fs::write(&token, "s3cr3t\n").unwrap();
    /// assert_eq!(CloudConfig::read_file(&token, 64 * 1024).unwrap(), "s3cr3t\n");
    /// let err = CloudConfig::read_file(&token, 4).unwrap_err();
    /// assert_eq!(err.to_string(), "is larger than 4 bytes, the limit for this file");
    /// let err = CloudConfig::read_file(dir.path(), 4).unwrap_err();
    /// assert_eq!(err.to_string(), "is a directory, not a regular file");
    /// ```
    pub fn read_file(path: impl AsRef<Path>, max_bytes: u64) -> io::Result<String> {
        crate::file::read_text(path, max_bytes)
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
    ///
    /// Text nested deeper than [`MAX_DEPTH`](Self::MAX_DEPTH) is refused before it is
    /// deserialized, with the line and column where it gets too deep. The check streams the
    /// text through a second YAML parser (granit-parser, kube's) that follows the YAML
    /// specification where libyaml is lenient, so a few malformed texts libyaml used to take
    /// are refused too, with that parser's message: a `#` right after a quoted scalar or a
    /// block-scalar indicator (`'a'#b`, `key: |#`), tags like `!!!str`. Ordinary YAML and JSON
    /// read as before.
    ///
    /// ```
    /// use ccm_core::provider::CloudConfig;
    /// let cfg = CloudConfig::from_string("/etc/cloud.yaml", format!("region: {}", "[".repeat(100_000)));
    /// let err = cfg.parse_yaml::<serde_json::Value>().unwrap_err().to_string();
    /// assert_eq!(err, "invalid cloud-config file /etc/cloud.yaml: nested deeper than 64 levels \
    ///                  at line 1 column 73");
    /// ```
    pub fn parse_yaml<T: DeserializeOwned>(&self) -> Result<T, ConfigError> {
        self.check_structure()?;
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

    /// Streams the text's YAML events (no document is built) and stops at the first that
    /// nests deeper than [`MAX_DEPTH`](Self::MAX_DEPTH), or at a syntax error. This parser
    /// (granit-parser, the one kube reads kubeconfigs with) keeps its work linear in the size
    /// of the text up to that point, so the check costs little and bounds what the
    /// deserializer is given.
    fn check_structure(&self) -> Result<(), ConfigError> {
        use granit_parser::{Event, Parser};
        let options = granit_parser::options! {
            // Comments are skipped, never buffered (no limit on how many follow each other).
            emit_comments: false,
            // A byte-order mark inside a document is text, as libyaml (serde_yaml_ng) reads it.
            bom_inside_document_as_content: true,
            // The scanner looks ahead of the events counted below: its own limits stop it
            // there (reported as the same error).
            flow_nesting_limit: Self::MAX_DEPTH,
            block_nesting_limit: Self::MAX_DEPTH,
        };
        let mut parser = Parser::new_from_str_with_options(&self.contents, options);
        let mut depth = 0usize;
        while let Some(event) = parser.next_event() {
            let (event, span) = event.map_err(|e| {
                let mark = e.marker();
                let message =
                    if matches!(e.kind(), granit_parser::ErrorKind::RecursionLimitExceeded) {
                        format!("nested deeper than {} levels", Self::MAX_DEPTH)
                    } else {
                        e.info()
                    };
                self.invalid(
                    "",
                    format!(
                        "{message} at line {} column {}",
                        mark.line(),
                        mark.col() + 1
                    ),
                )
            })?;
            match event {
                Event::SequenceStart(..) | Event::MappingStart(..) => {
                    depth += 1;
                    if depth > Self::MAX_DEPTH {
                        return Err(self.invalid(
                            "",
                            format!(
                                "nested deeper than {} levels at line {} column {}",
                                Self::MAX_DEPTH,
                                span.start.line(),
                                span.start.col() + 1
                            ),
                        ));
                    }
                }
                Event::SequenceEnd | Event::MappingEnd => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
        Ok(())
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

    fn read_error(path: &Path) -> String {
        CloudConfig::read(path).unwrap_err().to_string()
    }

    #[test]
    fn read_errors_name_the_file() {
        // The guards themselves are `file::read`'s, tested there.
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            read_error(dir.path()),
            format!(
                "cannot read cloud-config file {}: is a directory, not a regular file",
                dir.path().display()
            )
        );
    }

    #[test]
    fn reads_at_most_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.yaml");
        let limit = usize::try_from(CloudConfig::MAX_BYTES).unwrap();
        std::fs::write(&path, "#".repeat(limit)).unwrap();
        assert_eq!(CloudConfig::read(&path).unwrap().contents().len(), limit);
        std::fs::write(&path, "#".repeat(limit + 1)).unwrap();
        let err = CloudConfig::read(&path).unwrap_err();
        let ConfigError::Read { error, .. } = &err else {
            panic!("{err:?}")
        };
        assert_eq!(error.kind(), io::ErrorKind::FileTooLarge);
        assert!(
            err.to_string()
                .ends_with("big.yaml: is larger than 1 MiB, the limit for this file"),
            "{err}"
        );
        std::fs::write(&path, b"name: \xff\n").unwrap();
        assert!(
            read_error(&path).ends_with("is not UTF-8 text (invalid byte at offset 6)"),
            "{}",
            read_error(&path)
        );
    }

    fn nesting_error(text: &str) -> String {
        CloudConfig::from_string("c.yaml", text)
            .parse_yaml::<serde_yaml_ng::Value>()
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn nesting_is_bounded() {
        let max = CloudConfig::MAX_DEPTH;
        // At the limit: parsed. One more level: refused, at the line and column.
        let ok = format!("{}{}", "[".repeat(max), "]".repeat(max));
        CloudConfig::from_string("c.yaml", ok)
            .parse_yaml::<serde_yaml_ng::Value>()
            .unwrap();
        let deep = format!("a: 1\nb: {}{}", "[".repeat(max), "]".repeat(max));
        assert_eq!(
            nesting_error(&deep),
            "invalid cloud-config file c.yaml: nested deeper than 64 levels at line 2 column 67"
        );
        // Flow mappings, compact block sequences, block indentation: all nesting counts.
        for text in [
            "{a: ".repeat(10_000),
            "- ".repeat(10_000),
            "? ".repeat(10_000),
            (0..100).map(|i| format!("{}k:\n", " ".repeat(i))).collect(),
        ] {
            let err = nesting_error(&text);
            assert!(
                err.starts_with(
                    "invalid cloud-config file c.yaml: nested deeper than 64 levels at line "
                ),
                "{err}"
            );
        }
        // Brackets in strings, comments and block scalars are text.
        let text = format!(
            "a: \"{0}\"\nb: '{0}'\n# {0}\nc: |\n  {0}\nd: x{0}\n",
            "[".repeat(200)
        );
        CloudConfig::from_string("c.yaml", text)
            .parse_yaml::<serde_yaml_ng::Value>()
            .unwrap();
    }

    #[test]
    fn syntax_errors_say_where() {
        let err = nesting_error("a: [1, 2\nb: 3\n");
        assert!(
            err.starts_with("invalid cloud-config file c.yaml: "),
            "{err}"
        );
        assert!(err.contains(" at line "), "{err}");
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
