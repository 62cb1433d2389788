//! The (kind, namespace, name) -> uid lookup, without a second copy of the names: the table
//! holds only the shared uids (with their key's hash, so growing the table does not look up
//! every cached object again) and reads each one's kind, namespace and name back from the
//! cached object's metadata when comparing.
//!
//! Invariant (kept by the index): every uid in the table is cached, under the metadata it had
//! when it was inserted; a uid leaves the table before its metadata changes or it is removed.

use super::Uid;
use crate::model::ObjectMeta;
use crate::model::ownership::OwnerGraph;
use foldhash::fast::RandomState;
use hashbrown::HashTable;
use std::hash::{BuildHasher, Hasher};

/// Cached objects by (kind, namespace, name).
#[derive(Default)]
pub(super) struct NameIndex {
    /// Each uid with the hash of its key.
    table: HashTable<(u64, Uid)>,
    hasher: RandomState,
}

/// The lookup key; the kind is hashed case-insensitively so case-insensitive lookups find it.
#[derive(Clone, Copy)]
pub(super) struct Name<'a> {
    pub kind: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
}

impl<'a> Name<'a> {
    /// The key of an object.
    pub fn of(meta: &'a ObjectMeta) -> Name<'a> {
        Name {
            kind: &meta.kind,
            namespace: &meta.namespace,
            name: &meta.name,
        }
    }

    fn is(&self, meta: &ObjectMeta) -> bool {
        meta.kind == self.kind && meta.namespace == self.namespace && meta.name == self.name
    }

    fn is_ignoring_kind_case(&self, meta: &ObjectMeta) -> bool {
        meta.kind.eq_ignore_ascii_case(self.kind)
            && meta.namespace == self.namespace
            && meta.name == self.name
    }
}

fn hash(hasher: &RandomState, key: Name<'_>) -> u64 {
    let mut h = hasher.build_hasher();
    for b in key.kind.bytes() {
        h.write_u8(b.to_ascii_lowercase());
    }
    h.write_u8(0xff);
    h.write(key.namespace.as_bytes());
    h.write_u8(0xff);
    h.write(key.name.as_bytes());
    h.finish()
}

impl NameIndex {
    /// Points `key` at `uid` (replacing what it pointed at). `uid` must be cached under `key`.
    pub fn insert(&mut self, objects: &impl OwnerGraph, key: Name<'_>, uid: Uid) {
        let h = hash(&self.hasher, key);
        let entry = self.table.entry(
            h,
            |(_, u)| objects.meta(u).is_some_and(|m| key.is(m)),
            |(h, _)| *h,
        );
        match entry {
            hashbrown::hash_table::Entry::Occupied(mut e) => e.get_mut().1 = uid,
            hashbrown::hash_table::Entry::Vacant(e) => {
                e.insert((h, uid));
            }
        }
    }

    /// Removes `key` if it points at `uid`. Call while `uid` is still cached under `key`.
    pub fn remove_if(&mut self, objects: &impl OwnerGraph, key: Name<'_>, uid: &str) {
        let found = self.table.find_entry(hash(&self.hasher, key), |(_, u)| {
            objects.meta(u).is_some_and(|m| key.is(m))
        });
        if let Ok(e) = found
            && e.get().1.as_ref() == uid
        {
            e.remove();
        }
    }

    /// The uid `key` points at.
    pub fn get(&self, objects: &impl OwnerGraph, key: Name<'_>) -> Option<&Uid> {
        self.table
            .find(hash(&self.hasher, key), |(_, u)| {
                objects.meta(u).is_some_and(|m| key.is(m))
            })
            .map(|(_, u)| u)
    }

    /// A uid whose key equals `key` but for the case of the kind.
    pub fn get_ignoring_kind_case(&self, objects: &impl OwnerGraph, key: Name<'_>) -> Option<&Uid> {
        self.table
            .find(hash(&self.hasher, key), |(_, u)| {
                objects
                    .meta(u)
                    .is_some_and(|m| key.is_ignoring_kind_case(m))
            })
            .map(|(_, u)| u)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::sync::Arc;

    struct Objects(HashMap<Uid, ObjectMeta>);

    impl OwnerGraph for Objects {
        fn meta(&self, uid: &str) -> Option<&ObjectMeta> {
            self.0.get(uid)
        }
    }

    fn meta(kind: &str, namespace: &str, name: &str, uid: &str) -> ObjectMeta {
        ObjectMeta {
            kind: kind.to_owned(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            uid: uid.into(),
            ..ObjectMeta::default()
        }
    }

    fn key<'a>(kind: &'a str, namespace: &'a str, name: &'a str) -> Name<'a> {
        Name {
            kind,
            namespace,
            name,
        }
    }

    #[test]
    fn finds_every_object_by_name_through_growth_and_removal() {
        let mut objects = Objects(HashMap::new());
        let mut index = NameIndex::default();
        // Enough to make the table grow (and rehash from the metadata) several times.
        for i in 0..500 {
            let uid: Uid = Arc::from(format!("u{i}"));
            let (ns, name) = (format!("ns{}", i % 3), format!("p{i}"));
            objects.0.insert(uid.clone(), meta("Pod", &ns, &name, &uid));
            index.insert(&objects, key("Pod", &ns, &name), uid);
        }
        for i in 0..500 {
            let (ns, name) = (format!("ns{}", i % 3), format!("p{i}"));
            let found = index.get(&objects, key("Pod", &ns, &name));
            assert_eq!(found.map(|u| u.as_ref()), Some(format!("u{i}").as_str()));
            let loose = index.get_ignoring_kind_case(&objects, key("pod", &ns, &name));
            assert_eq!(loose, found);
            assert_eq!(index.get(&objects, key("pod", &ns, &name)), None);
            assert_eq!(index.get(&objects, key("Pod", "other", &name)), None);
        }
        // Another uid under an existing name takes it over; removing the old uid then keeps
        // the new one, removing the new one empties the name.
        objects
            .0
            .insert(Arc::from("new"), meta("Pod", "ns0", "p0", "new"));
        index.insert(&objects, key("Pod", "ns0", "p0"), Arc::from("new"));
        index.remove_if(&objects, key("Pod", "ns0", "p0"), "u0");
        assert_eq!(
            index
                .get(&objects, key("Pod", "ns0", "p0"))
                .map(|u| u.as_ref()),
            Some("new")
        );
        index.remove_if(&objects, key("Pod", "ns0", "p0"), "new");
        assert_eq!(index.get(&objects, key("Pod", "ns0", "p0")), None);
        assert_eq!(index.table.len(), 499);
    }
}
