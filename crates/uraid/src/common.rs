//! Helpers every subcommand shares: reading member names from the command
//! line.

use anyhow::Result;
use uraid_core::MemberSpec;

/// Parses member names (paths or `mem:` specs) as given on the command line.
/// Errors: the first name that is not a valid member spec, with why.
pub(crate) fn specs(names: &[String]) -> Result<Vec<MemberSpec>> {
    names.iter().map(|n| n.parse::<MemberSpec>().map_err(Into::into)).collect()
}

