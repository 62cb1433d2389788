//! Normalized status: phase and conditions extracted from the root object, matched against
//! the definition's status mappings.

use super::Resolver;
use super::diagnostics::VALUE_BYTES;
use super::diagnostics::{WARNING, code};
use crate::definition::plan::{MatcherPlan, PhasePrecedence, StatusKind};
use crate::expr::value::{as_str, get, to_text, to_text_bounded};
use crate::proto::v1 as pb;
use jaq_json::Val;
use std::collections::HashMap;

/// The primary phase among those matched, by precedence Failed > Completed > Suspending >
/// Resuming > Suspended > Degraded > Running > Initializing > Undefined. The transitions
/// outrank Suspended: a definition may match Suspended as well while the operator's own
/// suspended marker is still present, as Workload Map reads it (docs/resolution.md §7).
pub fn primary(matched: &[pb::Phase]) -> pb::Phase {
    use pb::Phase::*;
    [
        Failed,
        Completed,
        Suspending,
        Resuming,
        Suspended,
        Degraded,
        Running,
        Initializing,
    ]
    .into_iter()
    .find(|p| matched.contains(p))
    .unwrap_or(Undefined)
}

fn phase_of(kind: StatusKind) -> pb::Phase {
    match kind {
        StatusKind::Resuming => pb::Phase::Resuming,
        StatusKind::Suspending => pb::Phase::Suspending,
        StatusKind::Suspended => pb::Phase::Suspended,
        StatusKind::Running => pb::Phase::Running,
        StatusKind::Failed => pb::Phase::Failed,
        StatusKind::Completed => pb::Phase::Completed,
        StatusKind::Initializing => pb::Phase::Initializing,
        StatusKind::Degraded => pb::Phase::Degraded,
    }
}

impl Resolver<'_> {
    /// Computes the workload status from the root component's status definition.
    pub(super) fn status(&mut self) -> pb::Status {
        let def = self.def;
        let root = def.root();
        let Some(plan) = root.status.as_ref() else {
            return pb::Status {
                phase: pb::Phase::Undefined as i32,
                matched: vec![pb::Phase::Undefined as i32],
                ..Default::default()
            };
        };
        let name = root.name.as_str();

        let raw_phase = plan
            .phase
            .as_ref()
            .and_then(|p| self.eval_root(p, name))
            .and_then(|out| out.into_iter().next())
            .map(|v| {
                if matches!(v, Val::Null) {
                    String::new()
                } else {
                    to_text_bounded(&v, VALUE_BYTES)
                }
            });

        let mut conditions: Vec<pb::Condition> = Vec::new();
        if let Some(c) = &plan.conditions {
            for output in self.eval_root(&c.path, name).unwrap_or_default() {
                let items: Vec<Val> = match &output {
                    Val::Null => Vec::new(),
                    Val::Arr(items) => items.to_vec(),
                    other => {
                        self.diags.push(
                            WARNING,
                            code::BAD_VALUE,
                            format!(
                                "{} should yield an array of conditions, got {}",
                                c.path.path,
                                to_text_bounded(other, VALUE_BYTES)
                            ),
                            name,
                            c.path.source(),
                        );
                        Vec::new()
                    }
                };
                for item in &items {
                    let field =
                        |f: &str| get(item, f).and_then(as_str).unwrap_or_default().to_owned();
                    let type_ = field(&c.type_field);
                    if type_.is_empty() {
                        continue;
                    }
                    conditions.push(pb::Condition {
                        r#type: type_,
                        status: field(&c.status_field),
                        reason: field(&c.reason_field),
                        message: field(&c.message_field),
                    });
                }
            }
        }
        // Duplicate types: the last one wins, as upstream.
        let by_type: HashMap<&str, &pb::Condition> =
            conditions.iter().map(|c| (c.r#type.as_str(), c)).collect();

        let mut matched = Vec::new();
        for (kind, matchers) in &plan.mappings {
            let mut any = false;
            for m in matchers {
                if self.matches(m, raw_phase.as_deref(), &by_type, name) {
                    any = true;
                    break;
                }
            }
            if any {
                matched.push(phase_of(*kind));
            }
        }
        if matched.is_empty() {
            matched.push(pb::Phase::Undefined);
        }
        let phase = match def.phase_precedence {
            PhasePrecedence::Kartograf => primary(&matched),
            // `matched` is in Workload Map's order; it is never empty here.
            PhasePrecedence::WorkloadMap => {
                matched.first().copied().unwrap_or(pb::Phase::Undefined)
            }
        };
        pb::Status {
            phase: phase as i32,
            matched: matched.into_iter().map(|p| p as i32).collect(),
            raw_phase: raw_phase.unwrap_or_default(),
            conditions,
        }
    }

    fn matches(
        &mut self,
        m: &MatcherPlan,
        phase: Option<&str>,
        conditions: &HashMap<&str, &pb::Condition>,
        component: &str,
    ) -> bool {
        if let Some(expected) = &m.by_phase
            && phase != Some(expected.as_str())
        {
            return false;
        }
        for expected in &m.by_conditions {
            let Some(actual) = conditions.get(expected.type_.as_str()) else {
                return false;
            };
            if let Some(s) = expected.status.as_deref().filter(|s| !s.is_empty())
                && actual.status != s
            {
                return false;
            }
            if let Some(r) = expected.reason.as_deref().filter(|r| !r.is_empty())
                && actual.reason != r
            {
                return false;
            }
        }
        if let Some((expr, expected)) = &m.by_expression {
            let first = self
                .eval_root(expr, component)
                .and_then(|out| out.into_iter().next());
            match first {
                None | Some(Val::Null) => return false,
                Some(v) => {
                    if to_text(&v) != *expected {
                        return false;
                    }
                }
            }
        }
        true
    }
}
