//! The `interpreterDefinition` extension of each component, compiled once per definition
//! version (definitions are immutable; a reload makes new ones with new ids).

use crate::definition::Definition;
use crate::definition::assign::{AssignPath, AssignPathError};
use crate::definition::model::ComponentDefinition;
use crate::expr::{CompileError, Expr};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

/// Compiled extension expressions, by component index (`None`: not declared; `Err`: the
/// expression does not compile, and why).
#[derive(Debug, Default)]
pub struct Extras {
    /// `componentNamePath`.
    pub names: Vec<Option<Result<Expr, ExtensionError>>>,
    /// `replicasAssignPath`.
    pub assign: Vec<Option<Result<AssignPath, ExtensionError>>>,
}

/// Why an extension expression of a component does not compile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExtensionError {
    /// `componentNamePath` is not a valid expression.
    #[error("componentNamePath `{expression}` does not compile: {source}")]
    ComponentNamePath {
        /// The expression.
        expression: String,
        /// Why.
        #[source]
        source: CompileError,
    },
    /// `replicasAssignPath` is not a plain path.
    #[error("replicasAssignPath: {0}")]
    ReplicasAssignPath(#[source] AssignPathError),
}

/// Definitions whose extras are kept; the table is emptied when it is full.
const MAX_KEPT: usize = 256;

static KEPT: LazyLock<Mutex<HashMap<u64, Arc<Extras>>>> = LazyLock::new(Mutex::default);

/// The extras of `def`.
pub fn of(def: &Definition) -> Arc<Extras> {
    if let Some(e) = KEPT.lock().get(&def.id()) {
        return e.clone();
    }
    let compiled = Arc::new(compile(def));
    let mut kept = KEPT.lock();
    if kept.len() >= MAX_KEPT {
        kept.clear();
    }
    kept.insert(def.id(), compiled.clone());
    compiled
}

/// Compiles every component's extension (also used to validate definitions).
pub fn compile(def: &Definition) -> Extras {
    let structure = &def.karta.spec.structure_definition;
    let written = |name: &str| -> Option<&ComponentDefinition> {
        std::iter::once(&structure.root_component)
            .chain(&structure.child_components)
            .find(|c| c.name == name)
    };
    let mut extras = Extras::default();
    for comp in &def.components {
        let ext = written(&comp.name).and_then(|c| c.interpreter_definition.as_ref());
        extras
            .names
            .push(ext.and_then(|e| e.component_name_path.as_ref()).map(|s| {
                Expr::compile(s).map_err(|source| ExtensionError::ComponentNamePath {
                    expression: s.clone(),
                    source,
                })
            }));
        extras.assign.push(
            ext.and_then(|e| e.replicas_assign_path.as_ref())
                .map(|s| AssignPath::parse(s).map_err(ExtensionError::ReplicasAssignPath)),
        );
    }
    extras
}
