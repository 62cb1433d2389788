#!/usr/bin/env python3
"""Cold start of two `kartograf` binaries, alternated: time from process start to `/readyz`
200 and the CPU the process used by then (utime+stime from /proc/<pid>/stat).

    python3 benches/cold_start.py OLD_BINARY NEW_BINARY MANIFEST_DIR [ROUNDS]

Each round starts both binaries one after the other (`serve --manifests MANIFEST_DIR`, the
embedded catalog), the order swapped every round. Write a directory with
`KARTOGRAF_E2E_WRITE_MANIFESTS=100000:DIR cargo bench --bench e2e`. Linux only.
"""
import os
import statistics
import subprocess
import sys
import time
import urllib.request

ADMIN = "127.0.0.1:9171"


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start(binary, directory, limit=120.0):
    started = time.monotonic()
    process = subprocess.Popen(
        [binary, "serve", "--manifests", directory, "--listen", "127.0.0.1:50071",
         "--admin-listen", ADMIN, "--log-level", "warn"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while time.monotonic() - started < limit:
            if process.poll() is not None:
                sys.exit(f"{binary} exited with {process.returncode}")
            try:
                with urllib.request.urlopen(f"http://{ADMIN}/readyz", timeout=1) as r:
                    if r.status == 200:
                        return time.monotonic() - started, cpu_seconds(process.pid)
            except OSError:
                pass
            time.sleep(0.01)
        sys.exit(f"{binary} not ready after {limit} s")
    finally:
        process.terminate()
        process.wait()


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    old, new, directory = sys.argv[1:4]
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 8
    results = {old: [], new: []}
    for r in range(rounds):
        for binary in (old, new) if r % 2 == 0 else (new, old):
            wall, cpu = start(binary, directory)
            results[binary].append((wall, cpu))
            print(f"round {r}: {binary}: ready after {wall:.2f} s, {cpu:.2f} s of CPU", flush=True)
            time.sleep(1)
    for binary, runs in results.items():
        print(f"{binary}: median {statistics.median(w for w, _ in runs):.2f} s to ready, "
              f"{statistics.median(c for _, c in runs):.2f} s of CPU ({len(runs)} starts)")


if __name__ == "__main__":
    main()
