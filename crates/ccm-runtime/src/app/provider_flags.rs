//! A provider's own flags on the controller manager's command line (Go's `additionalFlags`
//! of `app.NewCloudControllerManagerCommand`), and the defaults of ours a binary changes.
//!
//! [`ProviderFlags`] is the handle a binary gives both to
//! [`CloudControllerManager::with_flags`](super::CloudControllerManager::with_flags) and to
//! its provider's factory: the manager adds the flags to its command (`--help` lists them),
//! parses them with its own and fills the handle before the provider is built; the factory
//! reads it. Names are checked when the binary starts: a provider flag named as one of ours
//! is an error naming it, not a clap panic.

use std::sync::Arc;

use clap::{Arg, ArgMatches, Args, Command};
use parking_lot::RwLock;

use super::options::Options;
use crate::flags::FlagError;

/// The help heading of provider flags whose type names none
/// (`#[command(next_help_heading = "…")]` names one).
pub(crate) const PROVIDER_FLAGS_HEADING: &str = "Provider flags";

/// A provider's own flags: a `clap::Args` type whose values the controller manager parses
/// from its command line, next to its own flags.
///
/// Cloning gives another handle on the same value: give one to
/// [`CloudControllerManager::with_flags`](super::CloudControllerManager::with_flags) and
/// move one into the provider's factory, which runs after the command line is parsed and
/// reads the values with [`get`](Self::get). A flag is named with `--long` (positional
/// arguments are refused), takes clap's syntax as its type declares it, and is listed in
/// `--help` under the type's `next_help_heading`, else under "Provider flags". A
/// flag `required` by the type is not required with `--help` or `--version`.
///
/// ```no_run
/// use std::sync::Arc;
/// use ccm_core::app::{clap, CloudControllerManager, ProviderFlags};
/// use ccm_core::provider::{CloudProvider, ProviderRegistry};
///
/// #[derive(Clone, Debug, Default, clap::Args)]
/// #[command(next_help_heading = "My cloud")]
/// struct MyFlags {
///     /// The API endpoint; overrides the cloud-config's.
///     #[arg(long = "my-cloud-endpoint", value_name = "URL")]
///     endpoint: Option<String>,
/// }
///
/// struct MyCloud(String);
/// impl CloudProvider for MyCloud {
///     fn provider_name(&self) -> &str { "my-cloud" }
///     fn has_cluster_id(&self) -> bool { true }
/// }
///
/// let flags = ProviderFlags::<MyFlags>::new();
/// let mut registry = ProviderRegistry::new();
/// let parsed = flags.clone();
/// registry.register("my-cloud", move |_config| {
///     // Parsed by now: the factory runs after the command line is.
///     let endpoint = parsed.get().unwrap_or_default().endpoint;
///     let endpoint = endpoint.unwrap_or_else(|| "https://api.my-cloud.example".into());
///     Ok(Arc::new(MyCloud(endpoint)) as Arc<dyn CloudProvider>)
/// }).unwrap();
/// CloudControllerManager::new("my-cloud-controller-manager", registry)
///     .with_flags(flags)
///     .run();
/// ```
pub struct ProviderFlags<T> {
    value: Arc<RwLock<Option<T>>>,
}

impl<T: Args + Clone + Send + Sync + 'static> ProviderFlags<T> {
    /// A handle with no value yet.
    pub fn new() -> Self {
        Self {
            value: Arc::new(RwLock::new(None)),
        }
    }

    /// The parsed values: `None` until the controller manager parsed its command line (or
    /// [`set`](Self::set) was called), as when a test builds the provider itself or runs
    /// the manager with
    /// [`run_with_options`](super::CloudControllerManager::run_with_options).
    pub fn get(&self) -> Option<T> {
        self.value.read().clone()
    }

    /// Sets the values, for a binary or a test that parses its own command line and runs
    /// the manager with
    /// [`run_with_options`](super::CloudControllerManager::run_with_options).
    pub fn set(&self, value: T) {
        *self.value.write() = Some(value);
    }
}

impl<T: Args + Clone + Send + Sync + 'static> Default for ProviderFlags<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Clone for ProviderFlags<T> {
    fn clone(&self) -> Self {
        Self {
            value: self.value.clone(),
        }
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for ProviderFlags<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ProviderFlags")
            .field(&*self.value.read())
            .finish()
    }
}

/// One provider's flags, whatever their type.
trait FlagSet: Send + Sync {
    /// The flags alone, on a command of their own.
    fn command(&self) -> Command;
    /// Fills the handle from the parsed command line.
    fn fill(&self, matches: &ArgMatches) -> Result<(), clap::Error>;
}

impl<T: Args + Clone + Send + Sync + 'static> FlagSet for ProviderFlags<T> {
    fn command(&self) -> Command {
        // A command of their own, so that what the type sets on a command (its doc comment
        // as `about`, a heading) stays off ours; only its arguments and groups are taken.
        T::augment_args(Command::new("provider").next_help_heading(PROVIDER_FLAGS_HEADING))
    }

    fn fill(&self, matches: &ArgMatches) -> Result<(), clap::Error> {
        self.set(T::from_arg_matches(matches)?);
        Ok(())
    }
}

/// What a binary adds to the controller manager's command: its providers' flags and the
/// defaults of ours it changes (see
/// [`CloudControllerManager::with_flags`](super::CloudControllerManager::with_flags) and
/// [`with_flag_default`](super::CloudControllerManager::with_flag_default)).
#[derive(Clone, Default)]
pub(crate) struct CommandExtensions {
    flags: Vec<Arc<dyn FlagSet>>,
    defaults: Vec<(&'static str, String)>,
}

impl CommandExtensions {
    pub(crate) fn add_flags<T: Args + Clone + Send + Sync + 'static>(
        &mut self,
        flags: ProviderFlags<T>,
    ) {
        self.flags.push(Arc::new(flags));
    }

    pub(crate) fn set_default(&mut self, flag: &'static str, value: String) {
        self.defaults.push((flag, value));
    }

    /// `ours` (the controller manager's command) with the changed defaults and the
    /// providers' flags; an error names a flag that is unknown, defined twice, or whose new
    /// default it cannot take.
    pub(crate) fn command(&self, mut ours: Command) -> Result<Command, FlagError> {
        for (flag, value) in &self.defaults {
            ours = with_default(ours, flag, value)?;
        }
        let own_ids: Vec<String> = ours
            .get_arguments()
            .map(|a| a.get_id().to_string())
            .collect();
        let mut command = ours;
        for set in &self.flags {
            let theirs = set.command();
            for group in theirs.get_groups() {
                if command.get_groups().any(|g| g.get_id() == group.get_id()) {
                    return Err(FlagError {
                        flag: "provider flags",
                        message: format!(
                            "the group {:?} (a flag type's name) is taken already; rename the \
                             type or give it #[group(id = \"…\")]",
                            group.get_id().as_str()
                        ),
                    });
                }
            }
            for arg in theirs.get_arguments() {
                check_unique(&command, &own_ids, arg)?;
                let mut arg = arg.clone();
                if arg.is_required_set() {
                    // `--help` and `--version` print without the flags a run needs.
                    arg = arg
                        .required(false)
                        .required_unless_present_any(["help", "version"]);
                }
                command = command.arg(arg);
            }
            for group in theirs.get_groups() {
                command = command.group(group.clone());
            }
        }
        Ok(command)
    }

    /// Fills each provider's handle from the parsed command line.
    pub(crate) fn fill(&self, matches: &ArgMatches) -> Result<(), clap::Error> {
        self.flags.iter().try_for_each(|set| set.fill(matches))
    }
}

/// `command` with the default of its flag `flag` (`--name` or `name`) set to `value`,
/// checked by parsing: a default the flag cannot take would otherwise fail every run that
/// leaves the flag out, as if the operator had given it.
fn with_default(command: Command, flag: &'static str, value: &str) -> Result<Command, FlagError> {
    let long = flag.strip_prefix("--").unwrap_or(flag);
    let error = |message: String| FlagError { flag, message };
    let Some(id) = command
        .get_arguments()
        .find(|a| a.get_long() == Some(long))
        .map(|a| a.get_id().clone())
    else {
        return Err(error(
            "with_flag_default: not a flag of the controller manager (a provider flag's \
             default is set where the flag is defined)"
                .into(),
        ));
    };
    if id == "help" || id == "version" {
        return Err(error(
            "with_flag_default: its default cannot be changed".into(),
        ));
    }
    let value = value.to_owned();
    let command = command.mut_arg(id, |arg| arg.default_value(value.clone()));
    command
        .clone()
        .try_get_matches_from([command.get_name()])
        .and_then(|matches| Options::from_matches(&matches))
        .map_err(|e| {
            error(format!(
                "with_flag_default: the default {value:?} is not valid: {}",
                first_line(&e)
            ))
        })?;
    Ok(command)
}

/// Checks that `arg` (a provider's) has a long name and that no argument of `command` has
/// its id, long name, short name or an alias of them. `own_ids` are the controller
/// manager's own arguments, to say whose the other one is.
fn check_unique(command: &Command, own_ids: &[String], arg: &Arg) -> Result<(), FlagError> {
    let Some(long) = arg.get_long() else {
        return Err(FlagError {
            flag: leak(format!("<{}>", arg.get_id())),
            message: "a provider flag needs a --long name: positional arguments are not taken"
                .into(),
        });
    };
    let flag = || leak(format!("--{long}"));
    let longs = |a: &Arg| {
        a.get_long()
            .into_iter()
            .chain(a.get_all_aliases().unwrap_or_default())
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let shorts = |a: &Arg| {
        a.get_short()
            .into_iter()
            .chain(a.get_all_short_aliases().unwrap_or_default())
            .collect::<Vec<_>>()
    };
    for other in command.get_arguments() {
        let whose = if own_ids.iter().any(|id| id == other.get_id().as_str()) {
            "a flag of the controller manager"
        } else {
            "a flag of another provider flag type"
        };
        let other_name = other
            .get_long()
            .map_or_else(|| other.get_id().to_string(), |l| format!("--{l}"));
        if let Some(name) = longs(arg).into_iter().find(|n| longs(other).contains(n)) {
            return Err(FlagError {
                flag: flag(),
                message: format!("--{name} is {whose} ({other_name}); rename the provider's"),
            });
        }
        if let Some(short) = shorts(arg).into_iter().find(|s| shorts(other).contains(s)) {
            return Err(FlagError {
                flag: flag(),
                message: format!("-{short} is {whose} ({other_name}); rename the provider's"),
            });
        }
        if other.get_id() == arg.get_id() {
            return Err(FlagError {
                flag: flag(),
                message: format!(
                    "its id {:?} is the id of {whose} ({other_name}); rename the field or give \
                     it #[arg(id = \"…\")]",
                    arg.get_id().as_str()
                ),
            });
        }
    }
    Ok(())
}

/// A flag name for a [`FlagError`], whose `flag` is `&'static str`: only for the error that
/// stops a binary whose provider flags are misdefined, once.
fn leak(name: String) -> &'static str {
    Box::leak(name.into_boxed_str())
}

/// The first line of clap's message, without its `error: ` prefix.
fn first_line(e: &clap::Error) -> String {
    let message = e.to_string();
    message
        .lines()
        .next()
        .unwrap_or_default()
        .trim_start_matches("error: ")
        .to_owned()
}

#[cfg(test)]
mod tests {
    use std::process::ExitCode;

    use super::*;
    use crate::app::CloudControllerManager;
    use crate::app::options::command;

    /// A provider's flags, under a heading of their own.
    #[derive(Clone, Debug, Default, PartialEq, clap::Args)]
    #[command(next_help_heading = "Acme cloud")]
    /// Acme's flags (a doc comment that must not become the command's `about`).
    struct AcmeFlags {
        /// Acme's API endpoint.
        #[arg(long = "acme-endpoint", value_name = "URL")]
        endpoint: Option<String>,
        /// How many retries.
        #[arg(long = "acme-retries", default_value_t = 3)]
        retries: u32,
    }

    /// Flags without a heading, one of them required.
    #[derive(Clone, Debug, PartialEq, clap::Args)]
    struct RegionFlags {
        /// The region.
        #[arg(long = "acme-region", required = true)]
        region: String,
    }

    fn extensions(f: impl FnOnce(&mut CommandExtensions)) -> CommandExtensions {
        let mut extensions = CommandExtensions::default();
        f(&mut extensions);
        extensions
    }

    /// Parses `args` as `run` does: the command, our options, then the providers' handles.
    fn parse(extensions: &CommandExtensions, args: &[&str]) -> Result<Options, String> {
        let command = extensions.command(command()).map_err(|e| e.to_string())?;
        let matches = command
            .try_get_matches_from(args)
            .map_err(|e| first_line(&e))?;
        let options = Options::from_matches(&matches).map_err(|e| first_line(&e))?;
        extensions.fill(&matches).map_err(|e| first_line(&e))?;
        Ok(options)
    }

    fn help(extensions: &CommandExtensions) -> String {
        extensions
            .command(command())
            .unwrap()
            .render_long_help()
            .to_string()
    }

    #[test]
    fn help_lists_the_provider_flags_under_their_heading() {
        let flags = ProviderFlags::<AcmeFlags>::new();
        let region = ProviderFlags::<RegionFlags>::new();
        let text = help(&extensions(|e| {
            e.add_flags(flags.clone());
            e.add_flags(region.clone());
        }));
        let acme = text.find("\nAcme cloud:\n").expect(&text);
        let endpoint = text.find("--acme-endpoint <URL>").expect(&text);
        assert!(acme < endpoint, "{text}");
        assert!(text.contains("Acme's API endpoint"), "{text}");
        assert!(text.contains("[default: 3]"), "{text}");
        // A type that names no heading: ours.
        let heading = text.find("\nProvider flags:\n").expect(&text);
        assert!(heading < text.find("--acme-region").expect(&text), "{text}");
        // Ours are all still there, and the command is still described as ours.
        assert!(text.contains("--cluster-name <NAME>"), "{text}");
        assert!(
            text.contains("A Kubernetes cloud-controller-manager built on ccm-core"),
            "{text}"
        );
        assert!(!text.contains("must not become"), "{text}");
    }

    #[test]
    fn parsing_fills_the_handle() {
        let flags = ProviderFlags::<AcmeFlags>::new();
        let ext = extensions(|e| e.add_flags(flags.clone()));
        assert_eq!(flags.get(), None);
        let options = parse(
            &ext,
            &[
                "ccm",
                "--cloud-provider=acme",
                "--acme-endpoint",
                "http://127.0.0.1:1",
                "--cluster-name=c1",
                "--acme-retries=5",
            ],
        )
        .unwrap();
        assert_eq!(options.cloud_provider, "acme");
        assert_eq!(options.cluster_name, "c1");
        // Every clone sees the value: the one the factory holds as well.
        let factory_copy = flags.clone();
        assert_eq!(
            factory_copy.get(),
            Some(AcmeFlags {
                endpoint: Some("http://127.0.0.1:1".into()),
                retries: 5
            })
        );
        // Not given: the type's defaults.
        parse(&ext, &["ccm"]).unwrap();
        assert_eq!(flags.get(), Some(AcmeFlags::default().with_retries(3)));
        // A value the type refuses: clap's error, naming the flag.
        let e = parse(&ext, &["ccm", "--acme-retries=many"]).unwrap_err();
        assert!(
            e.starts_with("invalid value 'many' for '--acme-retries <RETRIES>'"),
            "{e}"
        );
        // `set` for a binary that parses its own flags.
        flags.set(AcmeFlags::default());
        assert_eq!(factory_copy.get(), Some(AcmeFlags::default()));
        assert!(format!("{flags:?}").starts_with("ProviderFlags(Some(AcmeFlags"));
    }

    impl AcmeFlags {
        fn with_retries(mut self, retries: u32) -> Self {
            self.retries = retries;
            self
        }
    }

    #[test]
    fn a_required_provider_flag_is_not_required_for_help_or_version() {
        let flags = ProviderFlags::<RegionFlags>::new();
        let ext = extensions(|e| e.add_flags(flags.clone()));
        let e = parse(&ext, &["ccm", "--cloud-provider=acme"]).unwrap_err();
        assert!(
            e.starts_with("the following required arguments were not provided"),
            "{e}"
        );
        let command = ext.command(command()).unwrap();
        for args in [["ccm", "--help"], ["ccm", "-h"], ["ccm", "--version"]] {
            let matches = command.clone().try_get_matches_from(args).unwrap();
            assert!(
                Options::from_matches(&matches)
                    .unwrap()
                    .print_request()
                    .is_some()
            );
        }
        parse(&ext, &["ccm", "--acme-region=eu"]).unwrap();
        assert_eq!(flags.get().unwrap().region, "eu");
    }

    #[derive(Clone, Debug, clap::Args)]
    struct SameLong {
        #[arg(long = "cluster-name")]
        name: Option<String>,
    }
    #[derive(Clone, Debug, clap::Args)]
    struct SameShort {
        #[arg(long = "acme-verbose", short = 'v')]
        verbose: bool,
    }
    #[derive(Clone, Debug, clap::Args)]
    struct SameId {
        #[arg(long = "acme-kubeconfig")]
        kubeconfig: Option<String>,
    }
    #[derive(Clone, Debug, clap::Args)]
    struct SameAlias {
        #[arg(long = "acme-master", alias = "master")]
        master_url: Option<String>,
    }
    #[derive(Clone, Debug, clap::Args)]
    struct Positional {
        zone: Option<String>,
    }
    mod taken {
        /// A flag type named as one of ours: its group has our group's name.
        #[derive(Clone, Debug, clap::Args)]
        pub(super) struct Options {
            #[arg(long = "acme-x")]
            acme_x: Option<String>,
        }
    }

    fn error_of<T: Args + Clone + Send + Sync + 'static>() -> String {
        extensions(|e| e.add_flags(ProviderFlags::<T>::new()))
            .command(command())
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn a_taken_name_is_an_error_naming_the_flag() {
        assert_eq!(
            error_of::<SameLong>(),
            "--cluster-name: --cluster-name is a flag of the controller manager \
             (--cluster-name); rename the provider's"
        );
        assert_eq!(
            error_of::<SameShort>(),
            "--acme-verbose: -v is a flag of the controller manager (--v); rename the \
             provider's"
        );
        assert_eq!(
            error_of::<SameId>(),
            "--acme-kubeconfig: its id \"kubeconfig\" is the id of a flag of the controller \
             manager (--kubeconfig); rename the field or give it #[arg(id = \"…\")]"
        );
        assert_eq!(
            error_of::<SameAlias>(),
            "--acme-master: --master is a flag of the controller manager (--master); rename \
             the provider's"
        );
        assert_eq!(
            error_of::<Positional>(),
            "<zone>: a provider flag needs a --long name: positional arguments are not taken"
        );
        assert_eq!(
            error_of::<taken::Options>(),
            "provider flags: the group \"Options\" (a flag type's name) is taken already; \
             rename the type or give it #[group(id = \"…\")]"
        );
        // Two provider flag types with one name.
        let e = extensions(|e| {
            e.add_flags(ProviderFlags::<AcmeFlags>::new());
            e.add_flags(ProviderFlags::<AcmeFlags>::new());
        })
        .command(command())
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("provider flags: the group \"AcmeFlags\""),
            "{e}"
        );
    }

    #[test]
    fn a_default_of_ours_changes() {
        let ext = extensions(|e| {
            e.set_default("--cluster-name", "prod".into());
            e.set_default("leader-elect", "false".into());
            e.set_default("--controllers", "*,-route".into());
        });
        let text = help(&ext);
        assert!(text.contains("[default: prod]"), "{text}");
        let options = parse(&ext, &["ccm"]).unwrap();
        assert_eq!(options.cluster_name, "prod");
        assert!(!options.leader_election.leader_elect);
        assert_eq!(options.controllers, ["*", "-route"]);
        // Given on the command line, the flag still wins.
        let options = parse(&ext, &["ccm", "--cluster-name=other", "--leader-elect"]).unwrap();
        assert_eq!(options.cluster_name, "other");
        assert!(options.leader_election.leader_elect);
        // Go's defaults where nothing changed them.
        assert_eq!(options.kube_api_burst, 30);
    }

    #[test]
    fn a_default_for_an_unknown_flag_or_a_bad_value_is_an_error() {
        let error = |flag: &'static str, value: &str| {
            extensions(|e| e.set_default(flag, value.into()))
                .command(command())
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            error("--no-such-flag", "x"),
            "--no-such-flag: with_flag_default: not a flag of the controller manager (a \
             provider flag's default is set where the flag is defined)"
        );
        assert_eq!(
            error("--help", "true"),
            "--help: with_flag_default: its default cannot be changed"
        );
        assert_eq!(
            error("--kube-api-qps", "fast"),
            "--kube-api-qps: with_flag_default: the default \"fast\" is not valid: invalid \
             value 'fast' for '--kube-api-qps <QPS>': invalid number \"fast\": expected e.g. 20 or 0.5"
        );
        let e = error("--leader-elect", "maybe");
        assert!(
            e.starts_with("--leader-elect: with_flag_default: the default \"maybe\" is not valid"),
            "{e}"
        );
    }

    #[test]
    fn run_parses_with_the_provider_flags() {
        let manager = || CloudControllerManager::new("ccm", ccm_provider::ProviderRegistry::new());
        let flags = ProviderFlags::<AcmeFlags>::new();
        // `--help` lists them (and exits 0); a bad value is a usage error (2); a taken
        // name stops the binary (1) before anything runs.
        let code = manager()
            .with_flags(flags.clone())
            .run_with_args(["ccm", "--help"]);
        assert_eq!(code, ExitCode::SUCCESS);
        let code = manager()
            .with_flags(flags.clone())
            .run_with_args(["ccm", "--acme-retries=many"]);
        assert_eq!(code, ExitCode::from(2));
        assert_eq!(flags.get(), None);
        let code = manager()
            .with_flags(flags.clone())
            .with_flags(ProviderFlags::<SameLong>::new())
            .run_with_args(["ccm", "--help"]);
        assert_eq!(code, ExitCode::FAILURE);
        let code = manager()
            .with_flag_default("--no-such-flag", "x")
            .run_with_args(["ccm", "--help"]);
        assert_eq!(code, ExitCode::FAILURE);
    }
}
