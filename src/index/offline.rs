//! What offline resolution (`kartograf resolve -f`, the engine tests) asks of the index
//! beyond what the server does: any object found by kind and name, resolution on demand
//! (also of an object another workload owns), and owner cycles.

use super::settle::Gathered;
use super::{Index, Uid};
use crate::model::ObjectMeta;
use crate::model::ownership::{self, Root};
use crate::resolve::{self, Resolution};
use std::time::Instant;

/// Why an object could not be resolved on demand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OnDemand {
    /// The object is not cached.
    NotCached,
    /// No definition covers its kind (`group/version/kind`).
    NoDefinition(String),
}

impl Index {
    /// Metadata of every cached object (pods included) `keep` accepts, in no particular order.
    pub fn objects_where(&self, keep: impl Fn(&ObjectMeta) -> bool) -> Vec<ObjectMeta> {
        self.objects()
            .iter()
            .map(|(_, e)| e)
            .map(|e| e.cached.meta())
            .filter(|m| keep(m))
            .cloned()
            .collect()
    }

    /// Metadata of every root workload: a cached object whose kind has a definition and
    /// whose controller chain holds no kind that has one.
    pub fn roots(&self) -> Vec<ObjectMeta> {
        let catalog = self.catalog();
        let objects = self.objects();
        let graph = objects.graph();
        objects
            .iter()
            .map(|(_, e)| e)
            .map(|e| e.cached.meta())
            .filter(|m| ownership::root_of(m, &graph, &catalog) == Root::Itself)
            .cloned()
            .collect()
    }

    /// Resolves the cached object with this identity as a workload, with the pods whose
    /// controller chain reaches it, without publishing anything. Works for any object with
    /// a definition, also one another workload owns.
    pub fn resolve_now(
        &self,
        identity: &str,
        deadline: Option<Instant>,
    ) -> Result<Resolution, OnDemand> {
        let catalog = self.catalog();
        let uid: Uid = self.objects().uid(identity);
        let Gathered::Root {
            root,
            mut pods,
            gangs,
            ..
        } = self.gather_as(&uid, &catalog, false)
        else {
            return Err(OnDemand::NotCached);
        };
        let lookup = catalog
            .lookup(&root.meta.api_version, &root.meta.kind)
            .ok_or_else(|| OnDemand::NoDefinition(root.meta.gvk().to_string()))?;
        pods.sort_by(|(_, a), (_, b)| a.meta.name.cmp(&b.meta.name));
        let refs: Vec<&crate::model::Pod> = pods.iter().map(|(_, p)| p.as_ref()).collect();
        let input = resolve::Input {
            definition: &lookup.definition,
            generation: lookup.definition.generation(),
            root: &root,
            pods: &refs,
            fallback_from: lookup.fallback_from.as_deref(),
            deadline,
            prepared: None,
        };
        let mut resolution = resolve::resolve(&input);
        crate::gangs::live::check(&mut resolution.workload, &gangs, &refs);
        Ok(resolution)
    }

    /// A line for every cached object whose controller chain runs into an owner cycle.
    pub fn owner_cycles(&self) -> Vec<String> {
        let objects = self.objects();
        let graph = objects.graph();
        let mut out: Vec<String> = objects
            .iter()
            .map(|(_, e)| e)
            .map(|e| e.cached.meta())
            .filter_map(|meta| {
                ownership::cycle_above(meta, &graph).map(|names| {
                    format!(
                        "owner cycle above {}/{}: {}; it belongs to no workload",
                        meta.kind,
                        meta.key(),
                        names.join(" -> ")
                    )
                })
            })
            .collect();
        out.sort();
        out
    }
}
