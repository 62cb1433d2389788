#!/usr/bin/env python3
"""Measures how many single-field typos in catalog expressions the schema drift check
catches: picks N random occurrences of `.spec.<field>` / `.status.<field>` outside comments
(seeded), prefixes the field name with `zzq`, and runs
`kartograf check <mutated file> --crds tests/crds -o json` on each.

Usage: scripts/drift-mutations.py [N] [SEED]   (from the repository root, after cargo build)
"""

import glob
import json
import os
import random
import re
import subprocess
import sys
import tempfile

n = int(sys.argv[1]) if len(sys.argv) > 1 else 150
random.seed(int(sys.argv[2]) if len(sys.argv) > 2 else 7)
binary = os.environ.get("KARTOGRAF_BIN", "target/debug/kartograf")
candidates = []
for path in sorted(glob.glob("catalog/*.yaml")):
    text = open(path, encoding="utf-8").read()
    for m in re.finditer(r"\.(spec|status)\.([a-zA-Z][a-zA-Z0-9]*)", text):
        line = text[text.rfind("\n", 0, m.start()) + 1 : m.start()]
        if not line.lstrip().startswith("#"):
            candidates.append((path, m.start(2), m.group(0)))
sample = random.sample(candidates, min(n, len(candidates)))
counts = {"error": 0, "warning": 0, "no schema": 0, "not caught": 0}
missed = []
with tempfile.TemporaryDirectory() as tmp:
    for i, (path, at, field) in enumerate(sample):
        text = open(path, encoding="utf-8").read()
        target = os.path.join(tmp, f"{i}.yaml")
        with open(target, "w", encoding="utf-8") as f:
            f.write(text[:at] + "zzq" + text[at:])
        out = subprocess.run(
            [binary, "check", target, "--crds", "tests/crds", "-o", "json"],
            capture_output=True, text=True, check=False,
        )
        defs = json.loads(out.stdout)["drift"]["definitions"]
        findings = [f for d in defs for f in d["findings"]]
        if all(d.get("schema") is None for d in defs):
            counts["no schema"] += 1
        elif any(f["severity"] == "error" for f in findings):
            counts["error"] += 1
        elif any(f["code"] == "undeclared_field" for f in findings):
            counts["warning"] += 1
        else:
            counts["not caught"] += 1
            missed.append(f"{path}: {field}")
print(f"{len(candidates)} candidates, {len(sample)} mutated: {counts}")
for m in missed:
    print("  not caught:", m)
