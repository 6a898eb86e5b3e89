"""The route a run takes through packtool: files entered and hand-overs between them.

    python benchmarks/route.py [packtool args ...]       default: pack identity.json --len 4096 --no-cache

Every Python call in this process (all threads) is recorded with sys.setprofile and
threading.setprofile. A call counts when its code lives in packtool/, except cli.py, report/,
progress.py and commands/output.py (the terminal's wording). It prints the distinct files entered,
their lines, and the distinct hand-overs: ordered pairs (file of one counted call, file of the next
counted call) where the two differ. Worker processes are not followed (a small input runs in one).
A module imported during the run counts as entered (its body runs); the files entered for nothing
else (a package __init__.py, say) are listed apart, on the line before the totals.
"""

from __future__ import annotations

import itertools
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG = str(ROOT / "packtool") + "/"
LEFT_OUT = ("cli.py", "report/", "progress.py", "commands/output.py")


def main(argv: list[str]) -> int:
    shared = ROOT.parent / "shared" / "data" / "identity.json"
    out = tempfile.mkdtemp(prefix="route-")
    args = argv or ["pack", str(shared), "--len", "4096", "--no-cache", "--out", f"{out}/packed"]
    calls: list[str] = []
    called: set[str] = set()  # files where something other than the module body ran

    def profile(frame, event, arg):
        if event == "call":
            f = frame.f_code.co_filename
            if f.startswith(PKG):
                rel = f[len(PKG) :]
                if not rel.startswith(LEFT_OUT):
                    calls.append(rel)
                    if frame.f_code.co_name != "<module>":
                        called.add(rel)

    from packtool.cli import app

    threading.setprofile(profile)
    sys.setprofile(profile)
    try:
        rc = app(args)
    except SystemExit as e:
        rc = e.code
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    files = sorted(set(calls))
    lines = sum(len((ROOT / "packtool" / f).read_text().splitlines()) for f in files)
    pairs = {(a, b) for a, b in itertools.pairwise(calls) if a != b}
    for f in files:
        print(f"  {f}")
    imported_only = [f for f in files if f not in called]
    print(f"entered only to import them: {len(imported_only)} ({', '.join(imported_only)})")
    print(f"exit {rc}: {len(files)} files, {lines} lines, {len(pairs)} distinct hand-overs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
