"""The all_reduce harness on CPU (gloo, world size 1 in-process): correctness counting and figures."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from gpuclust.accept import allreduce as A  # noqa: E402
from gpuclust.accept import stats  # noqa: E402


@pytest.fixture(scope="module")
def gloo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    store = tmp_path_factory.mktemp("store") / "file"
    torch.distributed.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    yield torch
    torch.distributed.destroy_process_group()


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
@pytest.mark.parametrize("count", [1, 7, 8, 1000])
def test_pattern_and_check(dtype: str, count: int) -> None:
    n = 3
    bufs = []
    for r in range(n):
        b = torch.empty(count, dtype=A.torch_dtype(torch, dtype))
        A.fill_pattern(torch, b, r)
        bufs.append(b)
    total = sum(bufs[1:], bufs[0].clone())
    assert A.count_wrong(torch, total, n) == 0
    if count >= 8:
        total[3] += 1
        total[-1] = -5
        assert A.count_wrong(torch, total, n) == 2


def test_run_size_world_one(gloo: Any) -> None:
    res = A.run_size(torch, torch.device("cpu"), 4096, "float32", iters=3, warmup=1, rank=0, nranks=1)
    assert (res.size, res.count, res.wrong) == (4096, 1024, 0)
    assert res.seconds_per_iter > 0
    [rec] = A.gather_figures(torch, torch.device("cpu"), [res], 1, "float32", 3, 1, "5")
    assert rec.busbw_gbps == 0.0  # one rank moves nothing (factor 2(n-1)/n = 0), as nccl-tests prints
    assert rec.algbw_gbps == pytest.approx(stats.algbw_gbps(4096, res.seconds_per_iter))


def test_figures_follow_nccl_tests() -> None:
    rec = A.figures("1", 1 << 30, 1 << 28, "float32", 20, 5, 0.5, 0.6, 0, 4)
    assert rec.algbw_gbps == pytest.approx((1 << 30) / 1e9 / 0.5)
    assert rec.busbw_gbps == pytest.approx(rec.algbw_gbps * 1.5)
    assert rec.time_us == pytest.approx(5e5) and rec.time_us_max == pytest.approx(6e5)


def test_format_sweep_is_a_table() -> None:
    text = A.format_sweep([A.figures("1", 8, 2, "float32", 1, 0, 1e-3, 1e-3, 0, 2)])
    assert "busbw" in text.splitlines()[0] and text.splitlines()[1].split()[0] == "8"


