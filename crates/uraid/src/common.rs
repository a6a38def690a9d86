//! Helpers every subcommand shares: reading member names from the command
//! line, or an array's name in their place.

use anyhow::Result;
use uraid_core::MemberSpec;

/// Parses member names (paths or `mem:` specs) as given on the command line,
/// or one array NAME or UUID in their place ([`crate::scan::member_args`]:
/// the configuration file, else a scan of the machine).
/// Errors: an array name not found (or found twice), the first name that is
/// not a valid member spec, with why.
pub(crate) fn specs(names: &[String]) -> Result<Vec<MemberSpec>> {
    crate::scan::member_args(names)?.iter().map(|n| n.parse::<MemberSpec>().map_err(Into::into)).collect()
}

