//! The node's external uplinks as its forwarder publishes them (ADR 0054): the
//! `[[uplink.external]]` entries of the forwarder's configuration, read from its status region
//! on the loop's ticks. The compiler checks each static route's next hop against the subnets
//! they give ([`crate::world::World::external_uplinks`]).
//!
//! What was last read stays while the forwarder is down or starting: its tables stay in force
//! meanwhile, and a forwarder restarted with the same configuration changes nothing. A
//! restart with other entries (another region, read once it runs) recompiles.
//!
//! Beside them, at every tick: the uplink's next hops that traffic waits for and that do not
//! answer ([`World::unresolved`](crate::world::World::unresolved)): the static routes through
//! them are down, which the compiler notes.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use lace_shared::status::{ExternalUplink, RunState, StatusReader};

/// The forwarder's status region, watched for its external uplinks.
pub struct ForwarderUplinks {
    path: PathBuf,
    /// The region of the running forwarder whose entries are `current`.
    read: Option<StatusReader>,
    current: Vec<ExternalUplink>,
    unresolved: Vec<(u16, IpAddr)>,
}

impl std::fmt::Debug for ForwarderUplinks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForwarderUplinks")
            .field("path", &self.path)
            .field("current", &self.current)
            .finish()
    }
}

impl ForwarderUplinks {
    /// Watches the status region at `path` (the forwarder's, beside its tables).
    pub fn new(path: &Path) -> ForwarderUplinks {
        ForwarderUplinks {
            path: path.to_path_buf(),
            read: None,
            current: Vec::new(),
            unresolved: Vec::new(),
        }
    }

    /// Looks at the region again: true when the forwarder now publishes other entries or other
    /// unresolved next hops. Each forwarder's entries are read once, when it runs (it writes
    /// them before it says so).
    pub fn refresh(&mut self) -> bool {
        if let Some(r) = self.read.as_ref().filter(|r| r.alive()) {
            let mut unresolved = r.unresolved();
            unresolved.sort();
            if unresolved == self.unresolved {
                return false;
            }
            if !unresolved.is_empty() {
                tracing::warn!(
                    "next hops on the uplink that do not answer: {}",
                    unresolved
                        .iter()
                        .map(|&(vlan, a)| on_vlan(a, vlan))
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
            self.unresolved = unresolved;
            return true;
        }
        self.read = None;
        let Ok(reader) = StatusReader::open(&self.path) else {
            return false;
        };
        if !reader.alive() || reader.state() != RunState::Running {
            return false;
        }
        let entries = reader.external();
        self.read = Some(reader);
        if entries == self.current {
            return false;
        }
        tracing::info!(
            "the forwarder's external uplinks: {}",
            if entries.is_empty() {
                "none".to_owned()
            } else {
                describe(&entries)
            }
        );
        self.current = entries;
        true
    }

    /// The entries last read.
    pub fn current(&self) -> &[ExternalUplink] {
        &self.current
    }

    /// The next hops traffic waits for that do not answer, each with its VLAN (0: untagged),
    /// as last read (sorted).
    pub fn unresolved(&self) -> &[(u16, IpAddr)] {
        &self.unresolved
    }
}

/// `addr`, with its VLAN when tagged.
fn on_vlan(addr: impl std::fmt::Display, vlan: u16) -> String {
    match vlan {
        0 => addr.to_string(),
        v => format!("{addr} (VLAN {v})"),
    }
}

fn describe(entries: &[ExternalUplink]) -> String {
    entries
        .iter()
        .map(|e| {
            let addrs: Vec<String> = e
                .addresses
                .iter()
                .map(|(a, l)| format!("{a}/{l}"))
                .collect();
            let name = if e.interface.is_empty() {
                "(unnamed)"
            } else {
                &e.interface
            };
            format!("{} {}", on_vlan(name, e.vlan), addrs.join(" "))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use lace_shared::status::{status_path, StatusWriter};

    struct Dir(PathBuf);

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn entry(name: &str, addr: &str, len: u8) -> ExternalUplink {
        ExternalUplink {
            interface: name.into(),
            vlan: 0,
            addresses: vec![(addr.parse().unwrap(), len)],
        }
    }

    #[test]
    fn entries_are_read_once_the_forwarder_runs_and_kept_while_it_is_down() {
        let dir = Dir(std::env::temp_dir().join(format!("lace-uplinks-{}", std::process::id())));
        std::fs::create_dir_all(&dir.0).unwrap();
        let path = status_path(&dir.0, "n");
        let mut u = ForwarderUplinks::new(&path);
        // No forwarder yet.
        assert!(!u.refresh());
        assert!(u.current().is_empty());

        let w = StatusWriter::create(&path, 1, &["port-input"]).unwrap();
        let first = vec![entry("eth1", "192.0.2.10", 24)];
        w.set_external(&first).unwrap();
        // Starting: not read yet.
        assert!(!u.refresh());
        w.set_state(RunState::Running);
        assert!(u.refresh());
        assert_eq!(u.current(), first);
        assert!(!u.refresh(), "the same region is read once");

        // The forwarder stops: what it published stays.
        drop(w);
        assert!(!u.refresh());
        assert_eq!(u.current(), first);

        // Restarted with the same entries: nothing changed.
        let w = StatusWriter::create(&path, 1, &["port-input"]).unwrap();
        w.set_external(&first).unwrap();
        w.set_state(RunState::Running);
        assert!(!u.refresh());
        drop(w);

        // Restarted with other entries.
        let w = StatusWriter::create(&path, 1, &["port-input"]).unwrap();
        let tagged = ExternalUplink {
            vlan: 100,
            ..entry("eth1", "198.51.100.10", 24)
        };
        let second = vec![first[0].clone(), entry("", "2001:db8::10", 64), tagged];
        w.set_external(&second).unwrap();
        w.set_state(RunState::Running);
        assert!(u.refresh());
        assert_eq!(u.current(), second);

        // Next hops that do not answer are read at every look.
        let gw = (100, "192.0.2.1".parse().unwrap());
        w.set_unresolved(&[gw]);
        assert!(u.refresh());
        assert_eq!(u.unresolved(), [gw]);
        assert!(!u.refresh());
        w.set_unresolved(&[]);
        assert!(u.refresh());
        assert!(u.unresolved().is_empty());
    }
}
