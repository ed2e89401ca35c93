//! The clusters the service keeps state for, named by the webhook's path `/audit/{cluster}` or a
//! Kafka header: anyone who can send can name a new one, and each costs a reorder buffer, its
//! interned name and its objects. They are bounded: past `options.max_clusters` a body of a new
//! cluster is refused (counted invalid as `cluster`; the webhook answers 400).

use std::collections::HashMap;
use std::sync::Mutex;

use crate::decode::{Invalid, InvalidReason, Location};
use crate::state::{FastBuild, Interner, Sym};

/// Most clusters unless configured.
pub const DEFAULT_MAX_CLUSTERS: usize = 1_000;

/// Longest cluster name, as a DNS name (the webhook checks its paths the same way; a Kafka
/// header is not checked before).
pub const MAX_CLUSTER_NAME_BYTES: usize = 253;

/// The clusters admitted so far, by name. Looked up once per body, not per event.
#[derive(Debug)]
pub struct Clusters {
    max: usize,
    names: Mutex<HashMap<Box<str>, Sym, FastBuild>>,
}

impl Clusters {
    /// At most `max` clusters.
    pub fn new(max: usize) -> Self {
        Clusters { max: max.max(1), names: Mutex::new(HashMap::default()) }
    }

    /// The handle of cluster `name`, admitting it when there is room; the name is interned
    /// only then. `Err`: a body of this cluster is refused, with why.
    pub fn admit(&self, name: &str, interner: &Interner) -> Result<Sym, Invalid> {
        let mut names = self.names.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(&sym) = names.get(name) {
            return Ok(sym);
        }
        if name.len() > MAX_CLUSTER_NAME_BYTES {
            let msg =
                format!("cluster name of {} bytes is over {MAX_CLUSTER_NAME_BYTES}: the body is refused", name.len());
            return Err(Invalid::new(Location::Body, InvalidReason::Cluster, msg));
        }
        if names.len() >= self.max {
            let msg = format!(
                "cluster {name:?} is new and {} clusters are known already (options.max_clusters): the body is refused; raise max_clusters if this service serves more clusters",
                self.max
            );
            return Err(Invalid::new(Location::Body, InvalidReason::Cluster, msg));
        }
        let sym = interner.intern(name);
        names.insert(Box::from(name), sym);
        Ok(sym)
    }

    /// Clusters admitted.
    pub fn len(&self) -> usize {
        self.names.lock().unwrap_or_else(std::sync::PoisonError::into_inner).len()
    }

    /// Whether no cluster was admitted.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The handles of the clusters admitted.
    pub fn syms(&self) -> Vec<Sym> {
        self.names.lock().unwrap_or_else(std::sync::PoisonError::into_inner).values().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_clusters_past_the_bound_are_refused_and_not_interned() {
        let i = Interner::new();
        let c = Clusters::new(2);
        let a = c.admit("a", &i).unwrap();
        assert_eq!(c.admit("a", &i).unwrap(), a);
        let b = c.admit("b", &i).unwrap();
        assert_ne!(a, b);
        let before = i.len();
        let refused = c.admit("c", &i).unwrap_err();
        assert_eq!((refused.reason, refused.location), (InvalidReason::Cluster, Location::Body));
        assert!(refused.message.contains("max_clusters"), "{}", refused.message);
        assert_eq!(i.len(), before, "a refused name is not interned");
        assert_eq!(c.admit("b", &i).unwrap(), b, "known clusters stay admitted");
        let long = "x".repeat(254);
        assert!(Clusters::new(10).admit(&long, &i).unwrap_err().message.contains("254 bytes"));
        assert_eq!(c.len(), 2);
    }
}
