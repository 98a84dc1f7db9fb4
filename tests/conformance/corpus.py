#!/usr/bin/env python3
"""Validate little-loops' own loops with `loopbox validate` and count them.

    tests/conformance/corpus.py --loopbox target/debug/loopbox --min 109
    tests/conformance/corpus.py --loopbox target/debug/loopbox --version 1.156.0 --min 103
    tests/conformance/corpus.py --loopbox target/debug/loopbox --extra ~/little-loops/.loops

Fetches the little-loops wheel (1.167.0 unless `--version` names another) from PyPI with pip (nothing is
installed and nothing of it is kept), lays its `loops/` directory out in a
scratch workspace as it ships (`lib/` fragment libraries beside the loops),
and validates every loop: `loops/*.yaml` and `loops/oracles/*.yaml`, plus the
`*.yaml` of each `--extra` directory (the repository's `.loops/`, which the
wheel does not carry). Prints the count and, for each refused loop, its first
problem. Exits 1 when fewer than `--min` are accepted.
"""

import argparse
import pathlib
import subprocess
import sys
import tempfile
import zipfile

VERSION = "1.167.0"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--loopbox", required=True)
    ap.add_argument("--min", type=int, default=0)
    ap.add_argument("--extra", action="append", default=[])
    ap.add_argument("--version", default=VERSION, help="the little-loops release whose loops are validated")
    args = ap.parse_args()
    version = args.version
    loopbox = str(pathlib.Path(args.loopbox).resolve())
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
             "--disable-pip-version-check", "--dest", str(tmp / "wheel"),
             f"little-loops=={version}"],
            check=True,
        )
        wheel = next((tmp / "wheel").glob("*.whl"))
        work = tmp / "work"
        with zipfile.ZipFile(wheel) as z:
            for name in z.namelist():
                if name.startswith("little_loops/loops/") and name.endswith(".yaml"):
                    rel = name.removeprefix("little_loops/")
                    if "/." in rel:
                        continue  # run records shipped by mistake (.history/, .running/)
                    target = work / rel
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(z.read(name))
        loops = sorted((work / "loops").glob("*.yaml")) + sorted((work / "loops/oracles").glob("*.yaml"))
        for i, extra in enumerate(args.extra):
            dest = work / f"extra{i}"
            dest.mkdir()
            for f in sorted(pathlib.Path(extra).glob("*.yaml")):
                (dest / f.name).write_bytes(f.read_bytes())
                loops.append(dest / f.name)
        accepted, refused = 0, []
        for loop in loops:
            rel = str(loop.relative_to(work))
            o = subprocess.run([loopbox, "validate", rel], cwd=work, capture_output=True, text=True)
            if o.returncode == 0:
                accepted += 1
            else:
                problems = [l for l in o.stderr.splitlines() if not l.startswith(("note:", "error:"))]
                refused.append((rel, problems[0] if problems else o.stderr.strip()))
        print(f"little-loops {version}: loopbox validate accepts {accepted} of {len(loops)} loops")
        for rel, first in refused:
            print(f"  refused {rel}: {first}")
        return 0 if accepted >= args.min else 1


if __name__ == "__main__":
    sys.exit(main())
