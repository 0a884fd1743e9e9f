"""Where the test suite's seconds go: tiers, modules and the slowest tests, from a pytest JUnit XML.

Run the suite with a JUnit report (an empty compilation cache, as on a clean CI machine), then
summarise it::

    SUBSAMPLE_MCMC_TEST_JAX_CACHE=$(mktemp -d) .venv/bin/python -m pytest -n 2 --junitxml=/tmp/suite.xml
    python benchmarks/test_durations.py /tmp/suite.xml [--wall SECONDS]

Each test's time is the seconds its pytest-xdist worker spent on it ("worker-seconds"); with two
workers on two cores the suite's wall time is about half their sum.  Writes
``benchmarks/results/test_durations.json`` and ``.md``.
"""

import argparse
import collections
import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def summarise(xml_path, wall=None, top=30):
    cases = [(c.get("classname"), c.get("name"), float(c.get("time") or 0.0))
             for c in ET.parse(xml_path).getroot().iter("testcase")]
    total = sum(t for _, _, t in cases)
    tiers, modules = collections.Counter(), collections.Counter()
    for cls, _, t in cases:
        parts = cls.split(".")
        tiers[parts[1] if len(parts) > 1 else parts[0]] += t
        modules[cls] += t
    slowest = sorted(cases, key=lambda c: -c[2])[:top]
    return {
        "tests": len(cases), "worker_seconds": total, "wall_seconds": wall,
        "tiers": {k: {"worker_seconds": v, "share": v / total} for k, v in tiers.most_common()},
        "modules": {k: v for k, v in modules.most_common()},
        "slowest": [{"test": f"{cls}::{name}", "worker_seconds": t} for cls, name, t in slowest],
    }


def markdown(s):
    lines = [f"# Test suite durations ({s['tests']} tests, {s['worker_seconds']:.0f} worker-seconds"
             + (f", {s['wall_seconds']:.0f} s wall" if s["wall_seconds"] else "") + ")", "",
             "| tier | worker-seconds | share |", "|---|---:|---:|"]
    lines += [f"| {k} | {v['worker_seconds']:.0f} | {100 * v['share']:.0f}% |" for k, v in s["tiers"].items()]
    lines += ["", "| module | worker-seconds |", "|---|---:|"]
    lines += [f"| {k} | {v:.0f} |" for k, v in s["modules"].items()]
    lines += ["", "| slowest tests | worker-seconds |", "|---|---:|"]
    lines += [f"| `{c['test']}` | {c['worker_seconds']:.0f} |" for c in s["slowest"]]
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("junit_xml")
    p.add_argument("--wall", type=float, default=None, help="the run's wall seconds (pytest's own total)")
    p.add_argument("--out", default=str(RESULTS / "test_durations"), help="output path without suffix")
    a = p.parse_args(argv)
    s = summarise(a.junit_xml, a.wall)
    Path(a.out + ".json").write_text(json.dumps(s, indent=2) + "\n")
    Path(a.out + ".md").write_text(markdown(s))
    print(markdown(s).split("\n\n")[1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
