#!/usr/bin/env python3
"""classify.py ROOT TAG: outcome class of each case under ROOT (dirs with cmd, expect)."""
import sys, pathlib, collections, json
root, tag = pathlib.Path(sys.argv[1]), sys.argv[2]
out = collections.Counter(); rows = []
for d in sorted(p for p in root.iterdir() if (p / "cmd").exists()):
    if not (d / f"rc.{tag}").exists():
        continue
    rc = int((d / f"rc.{tag}").read_text().split()[0])
    err = (d / f"stderr.{tag}").read_text(errors="replace")
    expect = (d / "expect").read_text().strip() if (d / "expect").exists() else "either"
    t = (d / f"time.{tag}").read_text().split()
    try:
        kb, secs = int(t[-2]), float(t[-1])
    except Exception:
        kb, secs = 0, 60.0
    lines = [l for l in err.splitlines() if l.strip()]
    if rc in (124, 137, -9) or "Command terminated by signal 9" in err:
        cls = "hang/killed"
    elif "MemoryError" in err:
        cls = "MemoryError"
    elif "Traceback" in err:
        cls = "traceback"
    elif rc == 2 and len(lines) == 1:
        cls = "clean error"
    elif rc == 2:
        cls = "multi-line error"
    elif rc == 0 and expect == "refuse":
        cls = "silent acceptance"
    elif rc == 0:
        cls = "ok run"
    else:
        cls = f"rc={rc}"
    out[cls] += 1
    rows.append((d.name, cls, rc, kb // 1024, secs, lines[0][:150] if lines else ""))
for r in rows:
    print("%-40s %-18s rc=%-4s %5d MiB %6.1f s  %s" % r)
print(json.dumps(out, indent=1))
