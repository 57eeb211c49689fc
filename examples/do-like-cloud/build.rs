//! Sets `CCM_GIT_COMMIT` (the short hash of `HEAD`) for `--version`: the build script the
//! bundled providers share.
include!("../build-git-commit.rs");
