//! Random sequences of actions — policies from the generated families created, updated,
//! rebound and deleted under a few names, pod and namespace labels changed, a pod added and
//! removed — checked step by step like the fixed cases: the incremental compilation is where
//! most of its paths get exercised.

use lace_conformance::case::{Action, Case, Step};
use lace_conformance::universe::labels;
use lace_conformance::{check, generated};
use lace_control::world::BoundPolicy;
use proptest::prelude::*;

/// Every policy the generated families apply.
fn pool() -> Vec<BoundPolicy> {
    generated::cases()
        .into_iter()
        .flat_map(|c| c.steps)
        .flat_map(|s| s.actions)
        .filter_map(|a| match a {
            Action::Apply(p) => Some(p),
            _ => None,
        })
        .collect()
}

const NAMES: [&str; 3] = ["r0", "r1", "r2"];
const NAMESPACES: [&str; 3] = ["x", "y", "z"];
const PODS: [&str; 3] = ["a", "b", "c"];

fn action(pool: &[BoundPolicy], kind: u8, a: usize, b: usize) -> Action {
    match kind % 8 {
        0..=2 => {
            let mut p = pool[a % pool.len()].clone();
            p.model.name = NAMES[b % NAMES.len()].to_owned();
            Action::Apply(p)
        }
        3 => Action::Delete {
            ns: NAMESPACES[a % 3],
            name: NAMES[b % NAMES.len()],
        },
        4 => {
            let choices = [
                labels(&[("pod", "a")]),
                labels(&[("pod", "b"), ("pod2", "updated")]),
                labels(&[("pod", "c"), ("new-label", "abc")]),
                labels(&[("pod", "a"), ("target", "isolated")]),
            ];
            Action::PodLabels {
                ns: NAMESPACES[a % 3],
                pod: PODS[(a / 3) % 3],
                labels: choices[b % choices.len()].clone(),
            }
        }
        5 => {
            let choices = [
                labels(&[("ns", "y")]),
                labels(&[("ns", "x")]),
                labels(&[("ns", "y"), ("new-ns", "qrs")]),
                labels(&[]),
            ];
            Action::NamespaceLabels {
                ns: NAMESPACES[a % 3],
                labels: choices[b % choices.len()].clone(),
            }
        }
        6 => {
            if b % 2 == 0 {
                Action::AddPod {
                    ns: NAMESPACES[a % 3],
                    pod: "d",
                    labels: labels(&[("pod", "c")]),
                }
            } else {
                Action::RemovePod {
                    ns: NAMESPACES[a % 3],
                    pod: PODS[b % 3],
                }
            }
        }
        _ => Action::Bind {
            ns: NAMESPACES[a % 3],
            name: NAMES[b % NAMES.len()],
            network: [None, Some("pods"), Some("elsewhere")][a % 3],
        },
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]

    #[test]
    fn random_sequences_agree(steps in proptest::collection::vec(
        proptest::collection::vec((any::<u8>(), any::<usize>(), any::<usize>()), 1..3),
        2..6,
    )) {
        let pool = pool();
        let case = Case {
            name: format!("random {steps:?}"),
            steps: steps
                .iter()
                .map(|s| Step::of(s.iter().map(|&(k, a, b)| action(&pool, k, a, b)).collect()))
                .collect(),
        };
        if let Err(e) = check(&case) {
            prop_assert!(false, "{}", e);
        }
    }
}
