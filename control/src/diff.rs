//! The one map diff control uses: a merge join of two ordered maps, calling back for every key
//! whose value differs (added, removed or changed). The compiler's apply step and the world
//! diff both use it.

use std::collections::BTreeMap;

/// Calls `f(key, old, new)` for every key whose value differs between `old` and `new`, in key
/// order; stops at the first error `f` returns.
pub fn merge_diff<K: Ord, V: PartialEq, E>(
    old: &BTreeMap<K, V>,
    new: &BTreeMap<K, V>,
    mut f: impl FnMut(&K, Option<&V>, Option<&V>) -> Result<(), E>,
) -> Result<(), E> {
    let mut a = old.iter().peekable();
    let mut b = new.iter().peekable();
    loop {
        match (a.peek(), b.peek()) {
            (None, None) => return Ok(()),
            (Some(&(k, v)), None) => {
                f(k, Some(v), None)?;
                a.next();
            }
            (None, Some(&(k, v))) => {
                f(k, None, Some(v))?;
                b.next();
            }
            (Some(&(ka, va)), Some(&(kb, vb))) => match ka.cmp(kb) {
                std::cmp::Ordering::Less => {
                    f(ka, Some(va), None)?;
                    a.next();
                }
                std::cmp::Ordering::Greater => {
                    f(kb, None, Some(vb))?;
                    b.next();
                }
                std::cmp::Ordering::Equal => {
                    if va != vb {
                        f(ka, Some(va), Some(vb))?;
                    }
                    a.next();
                    b.next();
                }
            },
        }
    }
}

/// The keys whose value differs between `old` and `new`, in key order.
pub fn changed_keys<K: Ord + Clone, V: PartialEq>(
    old: &BTreeMap<K, V>,
    new: &BTreeMap<K, V>,
) -> Vec<K> {
    let mut out = Vec::new();
    let _ = merge_diff(old, new, |k, _, _| {
        out.push(k.clone());
        Ok::<(), std::convert::Infallible>(())
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_added_removed_and_changed_keys_in_order() {
        let a: BTreeMap<u8, &str> = [(1, "a"), (2, "b"), (4, "d")].into();
        let b: BTreeMap<u8, &str> = [(2, "b"), (3, "c"), (4, "D")].into();
        let mut seen = Vec::new();
        merge_diff(&a, &b, |k, o, n| {
            seen.push((*k, o.copied(), n.copied()));
            Ok::<(), ()>(())
        })
        .unwrap();
        assert_eq!(
            seen,
            [
                (1, Some("a"), None),
                (3, None, Some("c")),
                (4, Some("d"), Some("D"))
            ]
        );
        assert_eq!(changed_keys(&a, &b), [1, 3, 4]);
        assert!(changed_keys(&a, &a).is_empty());
        assert_eq!(merge_diff(&a, &b, |_, _, _| Err("stop")), Err("stop"));
    }
}
