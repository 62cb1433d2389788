//! The known, deliberate differences from Workload Map's reading of the recorded runs. Each
//! one is also listed, with the same reason, in docs/catalog.md ("Conformance with Workload
//! Map"). The suite fails when a listed difference disappears (the list must shrink with it)
//! or a new one appears.

/// A recorded state whose status kartograf's catalog reads differently on purpose.
pub struct StatusDifference {
    /// Flow id (path below `fixtures/karta`, without `.yaml`).
    pub flow: &'static str,
    /// Step index in the flow.
    pub step: usize,
    /// The state upstream recorded.
    pub state: &'static str,
    /// What kartograf's catalog matches instead (exactly).
    pub matched: &'static [&'static str],
    /// Why.
    pub reason: &'static str,
}

/// Status differences of the embedded catalog.
pub const STATUS: &[StatusDifference] = &[StatusDifference {
    flow: "batch-job/v1.34.0/batch-job-v1/degraded",
    step: 2,
    state: "Degraded",
    matched: &["Running"],
    reason: "an Indexed Job whose finished index leaves fewer pods running than parallelism is \
             progressing, not degraded; kartograf reads Degraded for a Job only when pods failed",
}];

/// A recorded extraction field that kartograf reads differently on purpose, in every state of
/// every flow of one recorded definition where it differs.
pub struct ExtractionDifference {
    /// The recorded definition: flow id without the flow (`kuberay/1.6.2/ray-io-rayjob-v1`).
    pub definition: &'static str,
    /// Workload Map's component name.
    pub component: &'static str,
    /// `instance`, `replicas`, `minReplicas`, `maxReplicas` or `perPod`.
    pub field: &'static str,
    /// Why.
    pub reason: &'static str,
}

const SUSPENDED_RUNS_NOTHING: &str = "kartograf's replicas are the pods that should run now: \
                                      0 while suspended (Workload Map reports the spec's count)";

/// Extraction differences of the embedded catalog. Per-pod requests agree everywhere.
pub const EXTRACTION: &[ExtractionDifference] = &[
    ExtractionDifference {
        definition: "batch-job/v1.34.0/batch-job-v1",
        component: "job",
        field: "replicas",
        reason: SUSPENDED_RUNS_NOTHING,
    },
    ExtractionDifference {
        definition: "cronjob/v1.34.0/batch-cronjob-v1",
        component: "cronjob",
        field: "replicas",
        reason: "a CronJob runs pods only while a Job it created is active: kartograf counts \
                 active Jobs x pods per Job (0 between runs); Workload Map reports the \
                 template's parallelism",
    },
    ExtractionDifference {
        definition: "grove/v0.1.0-alpha.10-rc1/grove-io-podcliqueset-v1alpha1",
        component: "clique",
        field: "minReplicas",
        reason: "kartograf's minReplicas is the clique's minAvailable (the gang minimum); \
                 Workload Map reads autoScalingConfig.minReplicas (unset here)",
    },
    ExtractionDifference {
        definition: "jobset/v0.10.1/jobset-x-k8s-io-v1alpha2-jobset",
        component: "replicatedjob",
        field: "replicas",
        reason: SUSPENDED_RUNS_NOTHING,
    },
    ExtractionDifference {
        definition: "knative/knative-v1.15.2/serving-knative-dev-service-v1",
        component: "revision",
        field: "minReplicas",
        reason: "kartograf reads the min-scale annotation as the routed revision's replicas \
                 (the pods kept running); Workload Map as minReplicas with no replicas",
    },
    ExtractionDifference {
        definition: "knative/knative-v1.15.2/serving-knative-dev-service-v1",
        component: "revision",
        field: "replicas",
        reason: "as minReplicas above: the same number, in replicas",
    },
    ExtractionDifference {
        definition: "kserve/v0.13.1/serving-kserve-io-inferenceservice-v1beta1",
        component: "predictor",
        field: "replicas",
        reason: "kartograf counts the predictor's pods (minReplicas, default 1); Workload \
                 Map reads only spec minReplicas/maxReplicas (unset here)",
    },
    ExtractionDifference {
        definition: "kubeflow/v1.9.0/kubeflow-org-pytorchjob-v1",
        component: "master",
        field: "replicas",
        reason: SUSPENDED_RUNS_NOTHING,
    },
    ExtractionDifference {
        definition: "kubeflow/v1.9.0/kubeflow-org-pytorchjob-v1",
        component: "worker",
        field: "replicas",
        reason: "a PyTorchJob without a Worker replica spec has no workers; Workload Map's \
                 `.Worker.replicas // 1` reads 1; and 0 while suspended",
    },
    ExtractionDifference {
        definition: "kuberay/1.6.2/ray-io-raycluster-v1",
        component: "head",
        field: "replicas",
        reason: SUSPENDED_RUNS_NOTHING,
    },
    ExtractionDifference {
        definition: "kuberay/1.6.2/ray-io-rayjob-v1",
        component: "head",
        field: "replicas",
        reason: SUSPENDED_RUNS_NOTHING,
    },
    ExtractionDifference {
        definition: "kuberay/1.6.2/ray-io-rayjob-v1",
        component: "worker",
        field: "minReplicas",
        reason: "kartograf reads the worker group's minReplicas, as Workload Map's current \
                 definition does; the recording predates upstream reading it",
    },
    ExtractionDifference {
        definition: "kuberay/1.6.2/ray-io-rayjob-v1",
        component: "worker",
        field: "maxReplicas",
        reason: "as minReplicas above",
    },
    ExtractionDifference {
        definition: "lws/v0.7.0/leaderworkerset-x-k8s-io-leaderworkerset-v1",
        component: "group",
        field: "replicas",
        reason: "kartograf's group replicas are the groups (spec.replicas), one replica key \
                 each; Workload Map's are the pods of one group (size)",
    },
    ExtractionDifference {
        definition: "milvus/1.3.7/milvus",
        component: "etcd",
        field: "instance",
        reason: "the in-cluster etcd and MinIO are Helm releases the operator installs \
                 without owner references: separate workloads, not Milvus components",
    },
    ExtractionDifference {
        definition: "milvus/1.3.7/milvus",
        component: "minio",
        field: "instance",
        reason: "as etcd above",
    },
];

/// Extraction differences of Workload Map's own stored definitions: where the stored file is
/// newer than the one the flow was recorded with.
pub const UPSTREAM_EXTRACTION: &[ExtractionDifference] = &[
    ExtractionDifference {
        definition: "kuberay/1.6.2/ray-io-rayjob-v1",
        component: "worker",
        field: "minReplicas",
        reason: "the stored definition (docs/catalog) reads workerGroupSpecs[].minReplicas; \
                 the flows were recorded with docs/samples/rayjob.yaml of their day, which \
                 did not",
    },
    ExtractionDifference {
        definition: "kuberay/1.6.2/ray-io-rayjob-v1",
        component: "worker",
        field: "maxReplicas",
        reason: "as minReplicas above",
    },
];

/// A recorded state whose phase, read with Workload Map's own definition and kartograf's
/// precedence, is not Workload Map's.
pub struct PrecedenceDifference {
    /// Flow id (path below the fixtures root, without `.yaml`).
    pub flow: &'static str,
    /// Step (state) index in the flow.
    pub step: usize,
    /// Workload Map's phase: its first matched status (`fixtures/karta`), the recorded state
    /// (`fixtures/workload-map`).
    pub workload_map: &'static str,
    /// kartograf's phase.
    pub kartograf: &'static str,
}

/// Listed differences as (flow, step, Workload Map's phase, kartograf's phase), the form the
/// tests collect what they find in.
pub fn precedence_rows(listed: &[PrecedenceDifference]) -> Vec<(String, usize, String, String)> {
    listed
        .iter()
        .map(|k| {
            (
                k.flow.to_owned(),
                k.step,
                k.workload_map.to_owned(),
                k.kartograf.to_owned(),
            )
        })
        .collect()
}

/// The recorded states (`fixtures/karta`) where, with Workload Map's own definitions, kartograf's
/// precedence gives another phase than Workload Map's first matched status (the first entry of
/// what Workload Map lists, and what `kartograf.io/phase-precedence: workload-map` gives).
pub const PRECEDENCE: &[PrecedenceDifference] = &[PrecedenceDifference {
    flow: "batch-job/v1.34.0/batch-job-v1/degraded",
    step: 2,
    workload_map: "Running",
    kartograf: "Degraded",
}];

/// The e2e recorded states (`fixtures/workload-map`) where, with the definition the recording
/// names, kartograf's precedence gives another phase than the recorded state: none; in every
/// stored state exactly one status matches.
pub const E2E_PRECEDENCE: &[PrecedenceDifference] = &[];

/// The e2e recorded states whose status the embedded catalog reads differently.
pub const E2E_STATUS: &[StatusDifference] = &[
    StatusDifference {
        flow: "kserve/v0.20.0/serving-kserve-io-llminferenceservice-v1alpha2/stopped",
        step: 0,
        state: "Undefined",
        matched: &["Initializing"],
        reason: LLMISVC_NO_STATUS,
    },
    StatusDifference {
        flow: "kserve/v1.34.0/serving-kserve-io-llminferenceservice-v1alpha2/failed",
        step: 0,
        state: "Undefined",
        matched: &["Initializing"],
        reason: LLMISVC_NO_STATUS,
    },
    StatusDifference {
        flow: "kserve/v1.34.0/serving-kserve-io-llminferenceservice-v1alpha2/running",
        step: 0,
        state: "Undefined",
        matched: &["Initializing"],
        reason: LLMISVC_NO_STATUS,
    },
];

const LLMISVC_NO_STATUS: &str = "an LLMInferenceService the controller has not written a status \
     for yet (just created) is being set up: kartograf reads Initializing; Workload Map's \
     definition matches nothing (Undefined)";
