//! Where each pod of one workload sits, stored compactly: a workload's pods mostly repeat the
//! same few component, instance, replica and gang names, so each name is kept once per
//! workload and a pod costs its (shared) uid and four indexes into that name table.

use super::Key as Uid;
use crate::proto::v1 as pb;
use std::collections::HashMap;

/// The placements of one workload's pods, by pod uid.
#[derive(Default)]
pub struct Placements {
    /// Distinct names used by this workload's placements.
    names: Vec<Box<str>>,
    /// Pod uid -> indexes into `names` of (component, instance, replica, gang group).
    at: HashMap<Uid, [u32; 4]>,
}

impl Placements {
    /// Packs a resolution's placements; `uid` returns the shared uid for a pod identity.
    pub(crate) fn pack(
        from: HashMap<String, pb::PodPlacement>,
        mut uid: impl FnMut(&str) -> Uid,
    ) -> Placements {
        let mut names: Vec<Box<str>> = Vec::new();
        let mut index: HashMap<String, u32> = HashMap::new();
        let mut name = |s: String| -> u32 {
            if let Some(&i) = index.get(&s) {
                return i;
            }
            let i = u32::try_from(names.len()).unwrap_or(u32::MAX);
            names.push(s.as_str().into());
            index.insert(s, i);
            i
        };
        let mut at = HashMap::with_capacity(from.len());
        for (pod, p) in from {
            let slots = [
                name(p.component),
                name(p.instance),
                name(p.replica),
                name(p.gang_group),
            ];
            at.insert(uid(&pod), slots);
        }
        names.shrink_to_fit();
        Placements { names, at }
    }

    fn name(&self, i: u32) -> &str {
        usize::try_from(i)
            .ok()
            .and_then(|i| self.names.get(i))
            .map_or("", |s| s)
    }

    /// The placement of pod `uid`, if the workload placed it.
    pub(crate) fn get(&self, uid: &str) -> Option<pb::PodPlacement> {
        self.at.get(uid).map(|&[c, i, r, g]| pb::PodPlacement {
            component: self.name(c).to_owned(),
            instance: self.name(i).to_owned(),
            replica: self.name(r).to_owned(),
            gang_group: self.name(g).to_owned(),
        })
    }

    /// Whether the workload placed pod `uid` (no allocation, unlike [`Placements::get`]).
    pub(crate) fn contains(&self, uid: &str) -> bool {
        self.at.contains_key(uid)
    }

    /// Every placed pod's uid with the component it was placed in (`""`: none).
    pub(crate) fn components(&self) -> impl Iterator<Item = (&Uid, &str)> {
        self.at.iter().map(|(uid, &[c, ..])| (uid, self.name(c)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn placement(component: &str, instance: &str, replica: &str, gang: &str) -> pb::PodPlacement {
        pb::PodPlacement {
            component: component.to_owned(),
            instance: instance.to_owned(),
            replica: replica.to_owned(),
            gang_group: gang.to_owned(),
        }
    }

    #[test]
    fn packed_placements_read_back_unchanged_and_share_names() {
        let from: HashMap<String, pb::PodPlacement> = [
            ("a".to_owned(), placement("worker", "w", "0", "g")),
            ("b".to_owned(), placement("worker", "w", "1", "g")),
            ("c".to_owned(), placement("", "", "", "")),
        ]
        .into_iter()
        .collect();
        let packed = Placements::pack(from.clone(), |u: &str| Arc::from(u));
        for (uid, p) in &from {
            assert_eq!(packed.get(uid).as_ref(), Some(p), "{uid}");
        }
        assert_eq!(packed.get("missing"), None);
        // worker, w, 0, g, 1, "" : each distinct name once.
        assert_eq!(packed.names.len(), 6);
        let mut components: Vec<(String, String)> = packed
            .components()
            .map(|(u, c)| (u.to_string(), c.to_owned()))
            .collect();
        components.sort();
        assert_eq!(
            components,
            [("a", "worker"), ("b", "worker"), ("c", "")]
                .map(|(u, c)| (u.to_owned(), c.to_owned()))
        );
    }
}
