"""A stand-in kernel tool for engine tests: prints one JSON document (plans/0001 §2).

``--metric summary.n=3`` sets a nested value (the value is parsed as JSON); ``--blocked R``
prints ``blocked`` and exits 75; ``--exit N`` forces the exit code; ``--touch F`` appends a
line to F (a visible side effect on the "host"); ``--started F`` creates F before sleeping;
``--sleep-once M S`` sleeps S seconds only if marker M does not exist yet (and creates it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--ok", default="true")
    p.add_argument("--metric", action="append", default=[])
    p.add_argument("--exit", type=int, default=None)
    p.add_argument("--blocked")
    p.add_argument("--sleep", type=float, default=0.0)
    p.add_argument("--sleep-once", nargs=2, metavar=("MARKER", "SECONDS"))
    p.add_argument("--touch")
    p.add_argument("--started")
    p.add_argument("--raw")
    a = p.parse_args()
    if a.started:  # written then renamed, so a reader never sees an empty file
        with open(a.started + ".tmp", "w") as fh:
            fh.write(str(os.getpid()))
        os.replace(a.started + ".tmp", a.started)
    if a.sleep_once:
        marker, seconds = a.sleep_once
        if not os.path.exists(marker):
            with open(marker, "w") as fh:
                fh.write("slept")
            time.sleep(float(seconds))
    if a.sleep:
        time.sleep(a.sleep)
    if a.touch:
        with open(a.touch, "a") as fh:
            fh.write(" ".join(sys.argv[1:]) + "\n")
    if a.raw is not None:
        sys.stdout.write(a.raw)
        return a.exit or 0
    doc: dict = {"ok": a.ok == "true"}
    for m in a.metric:
        key, _, val = m.partition("=")
        node = doc
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = json.loads(val)
    if a.blocked:
        doc.update(ok=False, blocked=a.blocked)
        print(json.dumps(doc))
        return 75
    print(json.dumps(doc))
    return a.exit if a.exit is not None else (0 if doc["ok"] else 1)


if __name__ == "__main__":
    sys.exit(main())
