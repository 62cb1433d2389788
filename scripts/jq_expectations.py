#!/usr/bin/env python3
"""Regenerate / check the expectations in tests/engine/data/jq_compat.json.

Dev-only tool: the committed Rust tests read the JSON file directly and do not
need Python. This script re-runs every case through the reference jq (the
PyPI `jq` package, which bundles jq 1.8) and reports cases whose stored
`outputs`/`error` differ from what jq computes.

Cases marked `"gojq": true` hold hand-written gojq expectations (gojq is what
kartograf follows); where jq 1.8 disagrees they are reported as "kept" and are
never rewritten. Integral floats are normalised to integers, as gojq prints
them. Compile errors are reported, never written (likely a typo in a filter).

Setup:
    python3 -m venv /tmp/jqvenv && /tmp/jqvenv/bin/pip install jq
Usage:
    /tmp/jqvenv/bin/python scripts/jq_expectations.py [--write] [FILE]
"""

import json
import sys
from pathlib import Path

import jq

DEFAULT = Path(__file__).resolve().parent.parent / "tests/engine/data/jq_compat.json"
KEY_ORDER = ["name", "filter", "input", "outputs", "error", "gojq", "refused", "divergence", "note"]


def normalise(v):
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, list):
        return [normalise(x) for x in v]
    if isinstance(v, dict):
        return {k: normalise(x) for k, x in v.items()}
    return v


def run(case):
    """Return (outputs before the first error, whether an error was raised)."""
    program = jq.compile(case["filter"])  # ValueError here = compile error
    results = iter(program.input_value(case["input"]))
    outputs = []
    while True:
        try:
            outputs.append(normalise(next(results)))
        except StopIteration:
            return outputs, False
        except ValueError:
            return outputs, True


def dump(cases):
    """One case per object, one field per line, values compact."""
    def field(k, v):
        return f'    {json.dumps(k)}: {json.dumps(v, ensure_ascii=False)}'

    blocks = []
    for case in cases:
        keys = [k for k in KEY_ORDER if k in case] + [k for k in case if k not in KEY_ORDER]
        blocks.append("  {\n" + ",\n".join(field(k, case[k]) for k in keys) + "\n  }")
    return "[\n" + ",\n".join(blocks) + "\n]\n"


def main(argv):
    write = "--write" in argv
    paths = [a for a in argv if a != "--write"]
    path = Path(paths[0]) if paths else DEFAULT
    cases = json.loads(path.read_text())
    names = [c["name"] for c in cases]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        print(f"duplicate names: {dupes}")

    changed = problems = 0
    for case in cases:
        try:
            outputs, error = run(case)
        except ValueError as e:
            problems += 1
            print(f"COMPILE ERROR {case['name']}: {str(e).splitlines()[0]}")
            continue
        if (outputs, error) == (case["outputs"], case["error"]):
            continue
        kept = case.get("gojq", False)
        tag = "kept (gojq)" if kept else "DIFF"
        print(f"{tag} {case['name']}: {case['filter']}")
        print(f"    stored: outputs={json.dumps(case['outputs'])} error={case['error']}")
        print(f"    jq 1.8: outputs={json.dumps(outputs)} error={error}")
        if not kept:
            changed += 1
            case["outputs"], case["error"] = outputs, error

    if write and changed:
        path.write_text(dump(cases))
        print(f"rewrote {changed} case(s) in {path}")
    print(f"{len(cases)} cases, {changed} differing, {problems} compile errors")
    return 1 if (changed and not write) or problems or dupes else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
