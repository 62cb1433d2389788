//! Engine tests: expressions, definitions, resolution and the offline CLI, in one test
//! binary (one link) as the build guide asks.

#[path = "../common/admission.rs"]
mod admission;
#[path = "../common/process.rs"]
mod process;
#[path = "../common/workloads.rs"]
mod workloads;

mod admission_catalog;
mod bounds;
mod budget;
mod budget_holes;
mod catalog;
mod cli;
mod common;
mod definitions;
mod deploy;
mod deploy_shapes;
mod drift;
mod fuzz;
mod gang_objects;
mod gangs;
mod gpu_names;
mod jq_compat;
mod layers;
mod malformed;
mod memo;
mod patch;
mod patch_quickstart;
mod resolution;
mod safety;
