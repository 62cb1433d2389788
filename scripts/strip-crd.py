#!/usr/bin/env python3
"""Shrinks CustomResourceDefinition YAML for tests/crds/: keeps every schema node, type, enum,
items, properties, additionalProperties, anyOf/oneOf/allOf and x-kubernetes-* marker the drift
check reads (`kartograf check --crds`), and drops what it never reads: descriptions, CEL and
other validation keywords (pattern, lengths, bounds, defaults, required, list/map types),
printer columns, examples, the CRD's status and metadata other than its name.

Usage: strip-crd.py --source 'owner/repo@commit:path' [--license L] [--kind KIND ...] FILE > OUT.json

FILE may hold several YAML documents; only CustomResourceDefinitions are kept (with --kind,
only those whose spec.names.kind is listed). The output is compact JSON (nested CRD schemas
are mostly indentation as YAML): one CRD, or a `v1` `List` of them. The source and license
are recorded as annotations `kartograf.test/source` and `kartograf.test/license`.
"""

import argparse
import json
import sys

import yaml

# Schema keywords dropped from every schema node below openAPIV3Schema (the names of
# properties are never dropped: a field *named* `description` stays).
DROPPED = {
    "description", "x-kubernetes-validations", "example", "externalDocs", "pattern", "format",
    "maxLength", "minLength", "maximum", "minimum", "exclusiveMaximum", "exclusiveMinimum",
    "multipleOf", "maxItems", "minItems", "uniqueItems", "maxProperties", "minProperties",
    "default", "required", "nullable", "x-kubernetes-list-type", "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
}
# Version-level fields dropped.
DROPPED_VERSION = {"additionalPrinterColumns"}


def strip_schema(node):
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key in DROPPED:
                continue
            if key == "properties" and isinstance(value, dict):
                out[key] = {k: strip_schema(v) for k, v in value.items()}
            else:
                out[key] = strip_schema(value)
        return out
    if isinstance(node, list):
        return [strip_schema(v) for v in node]
    return node


def strip_crd(doc, source, license):
    meta = doc.get("metadata", {})
    doc["metadata"] = {
        "name": meta.get("name"),
        "annotations": {"kartograf.test/source": source, "kartograf.test/license": license},
    }
    doc.pop("status", None)
    spec = doc.get("spec", {})
    for version in spec.get("versions", []) or []:
        for key in DROPPED_VERSION:
            version.pop(key, None)
        schema = version.get("schema", {})
        if "openAPIV3Schema" in schema:
            schema["openAPIV3Schema"] = strip_schema(schema["openAPIV3Schema"])
    # apiextensions.k8s.io/v1beta1: one schema for every version.
    validation = spec.get("validation", {})
    if "openAPIV3Schema" in validation:
        validation["openAPIV3Schema"] = strip_schema(validation["openAPIV3Schema"])
    spec.pop("additionalPrinterColumns", None)
    return doc


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", required=True, help="owner/repo@commit:path")
    parser.add_argument("--license", default="Apache-2.0")
    parser.add_argument("--kind", action="append", default=[])
    parser.add_argument("file")
    args = parser.parse_args()
    with open(args.file, encoding="utf-8") as f:
        docs = [d for d in yaml.safe_load_all(f) if isinstance(d, dict)]
    crds = [
        strip_crd(d, args.source, args.license)
        for d in docs
        if d.get("kind") == "CustomResourceDefinition"
        and (not args.kind or d.get("spec", {}).get("names", {}).get("kind") in args.kind)
    ]
    if not crds:
        sys.exit(f"{args.file}: no CustomResourceDefinition found")
    doc = crds[0] if len(crds) == 1 else {"apiVersion": "v1", "kind": "List", "items": crds}
    json.dump(doc, sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
