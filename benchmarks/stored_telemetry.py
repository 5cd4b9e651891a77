"""One job's stored telemetry summary from a year of days (BENCHMARKS.md "Stored telemetry: one job from a year").

    PYTHONPATH=. python benchmarks/stored_telemetry.py [DIR] [DAYS] [JOBS_PER_DAY]

Writes DAYS day directories of JOBS_PER_DAY 4-GPU summaries each (storedtelemetry.write_day, under DIR, kept for a
rerun), then times load_job_telemetry of one job over every day and with the job's day given (`days=`), warm."""

from __future__ import annotations

import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from gpuclust.accounting.figures import storedtelemetry as st
from gpuclust.accounting.figures.telemetry import GpuTelemetry, JobTelemetry

T0 = datetime(2025, 1, 1, tzinfo=timezone.utc)


def write(root: Path, days: int, per_day: int) -> None:
    snap = root / "snapshots" / "s1"
    job = 1000
    for d in range(days):
        where = snap / "cluster=c" / f"day={(T0 + timedelta(days=d)).date().isoformat()}"
        where.mkdir(parents=True)
        (where / "part.parquet").write_bytes(b"")
        rows = []
        for k in range(per_day):
            job += 1
            gpus = [GpuTelemetry(f"n{k % 50}", str(g), 3600.0, 1800.0, 50.0, 90.0, 0.0, 0.0, 0.0, None, 0.0, 1000.0,
                                 81559.0, 300.0, 350.0, 1e6, 70.0, 0.0, 0.0, tuple([50.0] * 120)) for g in range(4)]
            tel = JobTelemetry(4, 50.0, 90.0, 1000.0, 81559.0, 300.0, 4e6, 70.0, 0.0, 0.0, 0.0, 14400.0, 7200.0, gpus)
            start = T0 + timedelta(days=d, seconds=k)
            rows.append(st.StoredTelemetry(str(job), start, start, start + timedelta(hours=1), False, 4,
                                           {"step_s": 30.0}, tel))
        st.write_day(where, rows)
    (root / "current").symlink_to("snapshots/s1")


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/gpuclust-stored-telemetry")
    days = int(sys.argv[2]) if len(sys.argv) > 2 else 365
    per_day = int(sys.argv[3]) if len(sys.argv) > 3 else 2000
    if not (root / "current").exists():
        write(root, days, per_day)
    middle = days // 2
    job = str(1000 + middle * per_day + 5)
    day = (T0 + timedelta(days=middle)).date()
    st.load_job_telemetry(root, [job], days=[day])  # (warm: pyarrow's first Parquet read)
    for _ in range(3):
        began = time.perf_counter()
        every = st.load_job_telemetry(root, [job])
        a = time.perf_counter() - began
        began = time.perf_counter()
        one = st.load_job_telemetry(root, [job], days=[day])
        b = time.perf_counter() - began
        assert set(every) == set(one) == {job}
        print(f"every day: {a:.3f} s   its day: {b:.3f} s")


if __name__ == "__main__":
    main()
