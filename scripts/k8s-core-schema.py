#!/usr/bin/env python3
"""Builds schemas/kubernetes-core.json: the part of the Kubernetes OpenAPI v3 schema that the
drift check (`kartograf check --crds`) needs, i.e. the built-in workload kinds (Pod, Job,
CronJob, Deployment, StatefulSet, ReplicaSet), PodTemplateSpec/PodSpec/Container/
ResourceRequirements/ObjectMeta, and everything they reference, with the keywords the check
never reads removed (descriptions, formats, defaults, required, list/map markers).

Usage: k8s-core-schema.py --source 'what it came from' DIR > schemas/kubernetes-core.json

DIR holds the Kubernetes OpenAPI v3 documents as `api/v1.json`, `apis/apps/v1.json`,
`apis/batch/v1.json` (the layout of kubernetes/kubernetes `api/openapi-spec/v3/`
`api__v1_openapi.json` etc., renamed).
"""

import argparse
import json
import os
import sys

DOCUMENTS = ["api/v1.json", "apis/apps/v1.json", "apis/batch/v1.json"]
ROOTS = [
    "io.k8s.api.core.v1.Pod",
    "io.k8s.api.core.v1.PodTemplateSpec",
    "io.k8s.api.batch.v1.Job",
    "io.k8s.api.batch.v1.CronJob",
    "io.k8s.api.apps.v1.Deployment",
    "io.k8s.api.apps.v1.StatefulSet",
    "io.k8s.api.apps.v1.ReplicaSet",
]
DROPPED = {
    "description", "format", "default", "required", "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys", "x-kubernetes-map-type", "x-kubernetes-patch-strategy",
    "x-kubernetes-patch-merge-key", "x-kubernetes-unions", "uniqueItems",
}
PREFIX = "#/components/schemas/"


def strip(node):
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key in DROPPED:
                continue
            if key == "properties":
                out[key] = {k: strip(v) for k, v in value.items()}
            else:
                out[key] = strip(value)
        return out
    if isinstance(node, list):
        return [strip(v) for v in node]
    return node


def refs(node, found):
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(PREFIX):
            found.add(ref[len(PREFIX):])
        for value in node.values():
            refs(value, found)
    elif isinstance(node, list):
        for value in node:
            refs(value, found)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", required=True)
    parser.add_argument("dir")
    args = parser.parse_args()
    schemas = {}
    for doc in DOCUMENTS:
        with open(os.path.join(args.dir, doc), encoding="utf-8") as f:
            schemas.update(json.load(f)["components"]["schemas"])
    keep, todo = {}, list(ROOTS)
    while todo:
        name = todo.pop()
        if name in keep:
            continue
        if name not in schemas:
            sys.exit(f"missing schema {name}")
        keep[name] = strip(schemas[name])
        found = set()
        refs(keep[name], found)
        todo.extend(sorted(found - keep.keys()))
    out = {
        "info": {"title": "Kubernetes core subset for kartograf drift checks", "source": args.source},
        "components": {"schemas": dict(sorted(keep.items()))},
    }
    json.dump(out, sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
