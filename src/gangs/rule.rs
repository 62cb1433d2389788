//! Which rule of a target API a workload's gangs break ([`super::RenderError::Inexpressible`]).

use super::kai::Problem;
use super::workload_api::{MAX_TEMPLATES, MAX_TREE_DEPTH};
use super::{MAX_DEPTH, MAX_GROUPS};

/// A rule of a gang API (or of kartograf's bounds) that a workload's gangs break, and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rule {
    /// More gang groups (all levels) than [`MAX_GROUPS`].
    #[error("more than {MAX_GROUPS} gang groups")]
    TooManyGroups,
    /// A gang tree deeper than [`MAX_DEPTH`].
    #[error("gang {gang} nests deeper than {MAX_DEPTH} levels")]
    TooDeep {
        /// The gang at the excess depth.
        gang: String,
    },
    /// A gang wants more pods than an `int32` holds.
    #[error("gang {gang} wants {pods} pods, beyond int32")]
    PodsBeyondInt32 {
        /// The gang.
        gang: String,
        /// Its minimum.
        pods: u32,
    },
    /// A KAI PodGroup breaks the KAI webhook's rules.
    #[error("PodGroup {pod_group}: {problem}")]
    PodGroup {
        /// The PodGroup's name.
        pod_group: String,
        /// The first rule broken.
        problem: Problem,
    },
    /// The gangs need both template lists in one Workload.
    #[error(
        "a Workload holds either podGroupTemplates or compositePodGroupTemplates, and these gangs need both"
    )]
    MixedTemplateLists,
    /// More templates than a Workload's list holds.
    #[error("{count} gang templates ({names}); a Workload holds at most {MAX_TEMPLATES} per list")]
    TooManyTemplates {
        /// How many templates.
        count: usize,
        /// The first ten names, comma-separated.
        names: String,
    },
    /// A gang name that makes no DNS label.
    #[error("gang {gang:?} makes no DNS-label template name")]
    NoTemplateName {
        /// The gang's name.
        gang: String,
    },
    /// A template deeper than `WorkloadMaxTreeDepth`.
    #[error("template {template} is deeper than {MAX_TREE_DEPTH} levels (WorkloadMaxTreeDepth)")]
    TemplateTooDeep {
        /// The template's name.
        template: String,
    },
    /// A template name used twice.
    #[error("template name {template} is used twice (template names are unique in a Workload)")]
    TemplateNameTwice {
        /// The template's name.
        template: String,
    },
    /// A composite template with too many child templates in one list.
    #[error("template {template} has {count} {list}; at most {MAX_TEMPLATES} are allowed")]
    TooManyChildTemplates {
        /// The template's name.
        template: String,
        /// How many children in the list.
        count: usize,
        /// The list (`podGroupTemplates` or `compositePodGroupTemplates`).
        list: &'static str,
    },
    /// A gang that wants no pods (`gang.minCount` ≥ 1).
    #[error("gang {gang} wants 0 pods; gang.minCount must be at least 1")]
    ZeroMinCount {
        /// The gang.
        gang: String,
    },
    /// A gang that requires no subgroups (`gang.minGroupCount` ≥ 1).
    #[error("gang {gang} requires 0 subgroups; gang.minGroupCount must be at least 1")]
    ZeroMinGroupCount {
        /// The gang.
        gang: String,
    },
}
