//! Errors of the contract crate. Every message names the object and, where there is one, the fix.

use std::path::PathBuf;

/// What went wrong creating, attaching or changing shared tables.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A system call on a region file failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done ("create", "map", …).
        op: &'static str,
        /// The region file.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The file exists but is not a lace region (wrong magic).
    #[error(
        "{path} is not a lace region (magic {found:02x?}); remove it or point at the right file"
    )]
    BadMagic {
        /// The region file.
        path: PathBuf,
        /// The first bytes found.
        found: [u8; 8],
    },
    /// The region was written by a build with another ABI version or layout.
    #[error(
        "{path} has ABI version {found_abi} layout {found_layout:#018x}, this build expects ABI \
         {want_abi} layout {want_layout:#018x}: run control and forwarder from the same release, \
         or remove the region so control recreates it"
    )]
    AbiMismatch {
        /// The region file.
        path: PathBuf,
        /// ABI version in the region header.
        found_abi: u32,
        /// ABI version of this build.
        want_abi: u32,
        /// Layout hash in the region header.
        found_layout: u64,
        /// Layout hash of this build.
        want_layout: u64,
    },
    /// The region header is inconsistent with the file (truncated file, bad offsets).
    #[error("{path}: corrupt region header: {what}; remove the region so control recreates it")]
    Corrupt {
        /// The region file.
        path: PathBuf,
        /// What was inconsistent.
        what: String,
    },
    /// Another writer holds the region.
    #[error("{path} is already open for writing by another process (pid {pid}); only one lace-control may write a node's tables")]
    WriterBusy {
        /// The region file.
        path: PathBuf,
        /// The holder's pid as reported by the lock, 0 if unknown.
        pid: i32,
    },
    /// Every reader slot of the QSBR region is held by a live reader.
    #[error(
        "{path}: all {slots} reader slots are in use; create the tables with more reader slots"
    )]
    NoReaderSlot {
        /// The QSBR region file.
        path: PathBuf,
        /// The number of slots.
        slots: u32,
    },
    /// The region has no room left for an allocation.
    #[error(
        "table region full: {requested} bytes requested, {free} bytes free of {capacity}; \
         create the tables with a larger region (nothing was changed)"
    )]
    RegionFull {
        /// Bytes requested.
        requested: u64,
        /// Bytes currently free (possibly fragmented, or awaiting reclamation).
        free: u64,
        /// Arena capacity.
        capacity: u64,
    },
    /// A fixed-capacity table has no room for another entry.
    #[error("{table} is full ({capacity} entries); nothing was changed")]
    TableFull {
        /// The table.
        table: &'static str,
        /// Its capacity.
        capacity: u64,
    },
    /// An argument is outside what the table accepts.
    #[error("{what}")]
    Invalid {
        /// What is wrong, naming the object and the fix.
        what: String,
    },
}

/// Result alias of the contract crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
