//! Feeders of the index: a manifest directory (the cluster as files), the Kubernetes API
//! ([`kube`]: objects, and Karta objects as cluster definitions) and a definitions directory
//! (hot-reloaded; [`definitions`] also owns the layering of all definition sources). Both
//! directory sources watch and scan their directory through [`files`]: a change is found
//! from file metadata, and only changed files are read and parsed. The cluster's CRDs (for
//! live drift) are watched by the Kubernetes source too ([`kube::crds`]).

pub mod definitions;
pub mod files;
pub mod kube;
pub mod manifests;
pub mod offline;
