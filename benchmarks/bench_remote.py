"""Wall time of `ddpdoctor analyze` on the same traces: local (this machine's process pool), on a Dask
LocalCluster (`--scheduler`), from a local S3-compatible server (`s3://` URL), and both at once.

    python benchmarks/bench_remote.py                       # 16 ranks x 25 MB, best and median of 3
    python benchmarks/bench_remote.py --set 2x100 --repeat 5

Needs the test extra (distributed, s3fs, moto[server]).  Both servers listen on 127.0.0.1 only and
stop with the script: a distributed.LocalCluster of --workers processes with one thread each, and
moto's ThreadedMotoServer holding a copy of the traces (in its memory, on the same cores as
everything else, so the S3 rows include the server's own work).  Traces come from
bench_analyze.py's generator (reused from --work).  Each run is a fresh `python -m ddpdoctor analyze`
process; peak RSS is that client process's only (Dask workers are not its children).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_analyze import generate, measure


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--set", default="16x25", help="RANKSxMB (default 16x25)")
    ap.add_argument("--work", default="/tmp/ddpdoctor-bench")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    args = ap.parse_args()

    import s3fs
    from distributed import LocalCluster
    from moto.server import ThreadedMotoServer

    ranks, mb = args.set.lower().split("x")
    traces = generate(Path(args.work), int(ranks), float(mb), gz=False)
    files = sorted(p for p in traces.iterdir() if p.is_file())
    size_mb = sum(p.stat().st_size for p in files) / 1e6

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    _, port = server.get_host_and_port()
    os.environ.update(
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}",
    )
    fs = s3fs.S3FileSystem()
    fs.mkdir("bench")
    for p in files:
        fs.put_file(str(p), f"bench/run/{p.name}")
    url = "s3://bench/run/"

    cluster = LocalCluster(
        n_workers=args.workers,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,
        worker_dashboard_address=None,
    )
    base = [sys.executable, "-m", "ddpdoctor", "analyze", "--hta", "off", "-q"]
    modes = {
        "local (process pool)": base + ["-j", str(args.workers), str(traces)],
        "Dask LocalCluster": base + ["--scheduler", cluster.scheduler_address, str(traces)],
        "S3 URL (moto), local pool": base + ["-j", str(args.workers), url],
        "S3 URL on the Dask cluster": base + ["--scheduler", cluster.scheduler_address, url],
    }
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=Path(__file__).parent
    ).stdout.strip()
    print(
        f"bench_remote: {ranks} ranks x {mb} MB ({size_mb:.0f} MB of JSON), {os.cpu_count()} CPUs, "
        f"{args.workers} Dask workers x 1 thread, commit {commit}, best / median of {args.repeat}"
    )
    print("| mode | best s | median s | MB/s (best) | client peak RSS MB |")
    print("|---|---|---|---|---|")
    try:
        for mode, cmd in modes.items():
            runs = [measure(cmd) for _ in range(args.repeat)]
            bad = [r for r in runs if r["rc"] != 0]
            if bad:
                raise SystemExit(f"{mode}: exit code {bad[0]['rc']}: {' '.join(cmd)}")
            secs = [r["seconds"] for r in runs]
            print(
                f"| {mode} | {min(secs):.2f} | {statistics.median(secs):.2f} | {size_mb / min(secs):.0f} | "
                f"{max(r['peak_mb'] for r in runs):.0f} |",
                flush=True,
            )
    finally:
        cluster.close()
        server.stop()


if __name__ == "__main__":
    main()
