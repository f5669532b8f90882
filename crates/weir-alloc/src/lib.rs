//! The allocator of Weir's binaries (`weir`, `weir-bench`): mimalloc, built without
//! transparent huge pages, with one option changed from its default ([`reset_on_purge`]).
//! A program embedding the `weir` library chooses its own allocator; this crate is for the
//! binaries.
//!
//! It holds the workspace's only `unsafe` code: mimalloc's options have no safe wrapper, so
//! the option is set through mimalloc's C API (`mi_option_set`).

use std::os::raw::{c_int, c_long};

pub use mimalloc::MiMalloc;

/// The environment variable through which mimalloc itself reads the option.
pub const PURGE_DECOMMITS_VAR: &str = "MIMALLOC_PURGE_DECOMMITS";

/// `mi_option_purge_decommits` in mimalloc's `mi_option_t` (`mimalloc.h`): position 5, in
/// both its v2 and v3 (the crate builds v3). mimalloc keeps a retired option in its place
/// (`mi_option_deprecated_...`), so positions do not move between its versions.
const PURGE_DECOMMITS: c_int = 5;

extern "C" {
    fn mi_option_set(option: c_int, value: c_long);
}

/// Makes mimalloc *reset* the memory it purges instead of decommitting it, unless the
/// environment sets [`PURGE_DECOMMITS_VAR`] (which mimalloc has read, and which then wins).
///
/// mimalloc gives freed pages back to the system a while after they were last used. By
/// default it decommits them (`madvise(MADV_DONTNEED)` on Linux), so the next use of each
/// page faults and is zeroed again; a window's close frees a window's worth of state and
/// the next window takes it again, and about a quarter of a tumbling window's close was that
/// `madvise` and those faults (docs/benchmarks.md, "Allocator"). Reset (`MADV_FREE`) leaves
/// the pages mapped: the kernel takes them only when it needs memory, and a page used again
/// before that costs nothing. Memory still goes back to the system under pressure; until
/// then the process's RSS counts it.
#[allow(unsafe_code)]
pub fn reset_on_purge() {
    if std::env::var_os(PURGE_DECOMMITS_VAR).is_some() {
        return;
    }
    // SAFETY: mimalloc documents its options as settable at run time (each is one word it
    // reads when it needs it; this one when memory is next purged); the binaries call this
    // first thing in `main`, before they start any thread.
    unsafe { mi_option_set(PURGE_DECOMMITS, 0) }
}

#[cfg(test)]
mod tests {
    use super::*;

    extern "C" {
        fn mi_option_get(option: c_int) -> c_long;
    }

    /// The option's value: 1 (mimalloc's default) to decommit purged memory, 0 to reset it.
    #[allow(unsafe_code)]
    fn purge_decommits_value() -> c_long {
        // SAFETY: reads one of mimalloc's options (see `reset_on_purge`).
        unsafe { mi_option_get(PURGE_DECOMMITS) }
    }

    #[test]
    fn purged_memory_is_reset_unless_the_environment_says() {
        let from_env = std::env::var_os(PURGE_DECOMMITS_VAR);
        // mimalloc's default, or what the environment asked for.
        let before = purge_decommits_value() != 0;
        if from_env.is_none() {
            // Exactly 1, the option's default: the neighbouring options' defaults differ
            // (2 and 0), so a wrong position reads another value.
            assert_eq!(purge_decommits_value(), 1, "mimalloc decommits by default");
        }
        reset_on_purge();
        assert_eq!(purge_decommits_value() != 0, from_env.is_some() && before);
    }
}
