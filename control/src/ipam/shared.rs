//! [`SharedIpam`]: one [`Ipam`] for every thread, saved after each change.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use lace_shared::types::NetworkId;

use super::{
    AllocateRequest, AttachmentKey, EndpointLease, Ipam, IpamConfig, IpamError, IpamState,
    NetworkDef, NodeEntry,
};
use crate::store::{Store, StoreError};

#[derive(Debug)]
struct Inner {
    ipam: Ipam,
    /// What the store holds (None without a store): the state to go back to when a save fails.
    saved: Option<IpamState>,
}

/// An [`Ipam`] behind a mutex, optionally persisted.
///
/// Every change runs under the lock and, with a store, is saved before the call returns; if
/// saving fails the change is undone and the call fails with [`IpamError::Persist`], so an
/// answer given to a pod is always on disk. Concurrent callers are serialised: two ADDs never
/// get the same address. [`Ipam`]'s methods do not panic, so a poisoned lock (a panic in a
/// caller's closure passed to [`SharedIpam::read`]) is taken over rather than propagated.
#[derive(Debug, Clone)]
pub struct SharedIpam {
    inner: Arc<Mutex<Inner>>,
    store: Option<Arc<Store>>,
}

impl SharedIpam {
    /// Shares `ipam` without persistence (tests, benches).
    pub fn in_memory(ipam: Ipam) -> SharedIpam {
        SharedIpam {
            inner: Arc::new(Mutex::new(Inner { ipam, saved: None })),
            store: None,
        }
    }

    /// Loads the state from `store` (an empty one when the file does not exist yet) and
    /// persists every later change there.
    pub fn open(store: Store, config: IpamConfig) -> Result<SharedIpam, StoreError> {
        let ipam = store.load_ipam(config)?;
        let saved = ipam.to_state();
        Ok(SharedIpam {
            inner: Arc::new(Mutex::new(Inner {
                ipam,
                saved: Some(saved),
            })),
            store: Some(Arc::new(store)),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f` on the state.
    pub fn read<R>(&self, f: impl FnOnce(&Ipam) -> R) -> R {
        f(&self.lock().ipam)
    }

    /// Runs `f` on the state and saves the result if it changed anything.
    pub fn update<R>(
        &self,
        f: impl FnOnce(&mut Ipam) -> Result<R, IpamError>,
    ) -> Result<R, IpamError> {
        let mut inner = self.lock();
        let before = inner.ipam.generation();
        let out = f(&mut inner.ipam);
        if inner.ipam.generation() == before {
            return out;
        }
        let Some(store) = &self.store else {
            return out;
        };
        let state = inner.ipam.to_state();
        match store.save(&state) {
            Ok(()) => {
                inner.saved = Some(state);
                out
            }
            Err(e) => {
                let config = inner.ipam.config();
                if let Some(saved) = &inner.saved {
                    if let Ok(ipam) = Ipam::from_state(saved, config) {
                        inner.ipam = ipam;
                    }
                }
                Err(IpamError::Persist(format!(
                    "{e}; the change was not made (fix the state directory and retry)"
                )))
            }
        }
    }

    /// [`Ipam::allocate`], saved.
    pub fn allocate(&self, req: &AllocateRequest) -> Result<EndpointLease, IpamError> {
        self.update(|i| i.allocate(req))
    }

    /// [`Ipam::release`], saved.
    pub fn release(&self, key: &AttachmentKey) -> Result<Option<EndpointLease>, IpamError> {
        self.update(|i| Ok(i.release(key)))
    }

    /// [`Ipam::gc`], saved.
    pub fn gc(
        &self,
        node: &str,
        keep: &BTreeSet<AttachmentKey>,
    ) -> Result<Vec<EndpointLease>, IpamError> {
        self.update(|i| Ok(i.gc(node, keep)))
    }

    /// [`Ipam::lease`] (a copy).
    pub fn lease(&self, key: &AttachmentKey) -> Option<EndpointLease> {
        self.read(|i| i.lease(key).cloned())
    }

    /// [`Ipam::ensure_network`], saved.
    pub fn ensure_network(&self, name: &str, def: &NetworkDef) -> Result<NetworkId, IpamError> {
        self.update(|i| i.ensure_network(name, def))
    }

    /// [`Ipam::remove_network`], saved.
    pub fn remove_network(&self, name: &str) -> Result<Vec<EndpointLease>, IpamError> {
        self.update(|i| Ok(i.remove_network(name)))
    }

    /// [`Ipam::ensure_node`], saved.
    pub fn ensure_node(&self, name: &str) -> Result<NodeEntry, IpamError> {
        self.update(|i| i.ensure_node(name))
    }

    /// [`Ipam::remove_node`], saved.
    pub fn remove_node(&self, name: &str) -> Result<Vec<EndpointLease>, IpamError> {
        self.update(|i| Ok(i.remove_node(name)))
    }
}
