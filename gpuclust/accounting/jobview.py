"""`gpuclust job JOBID ...`: a few jobs' figures, per node and GPU, with the waste detectors' findings
(figures/jobview.py says what each figure is and where it comes from; output/jobview_render.py the shapes).

It reads sacct as the calling user (or a dump: --input), Prometheus once for all the jobs asked (when
[telemetry] is set), the store's telemetry summaries for the jobs Prometheus lacks, and the nodes' records
(`scontrol show node`, for the partitions' CPUs and memory per GPU). No pandas: one job answers fast.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gpuclust.accounting.figures import jobview as jv
from gpuclust.accounting.figures import waste
from gpuclust.accounting.output.jobview_render import job_document
from gpuclust.config import SiteConfig
from gpuclust.errors import SlurmError
from gpuclust.slurm import sacct_jobs
from gpuclust.slurm.client import SlurmClient
from gpuclust.slurm.gpushare import node_layout


@dataclass
class JobsAnswer:
    """What `gpuclust job` answers: a document per job found, an error per id no row names, and warnings."""

    jobs: list[dict[str, Any]] = field(default_factory=list)  # job_document per job, in the order asked
    errors: list[dict[str, str]] = field(default_factory=list)  # {"job_id", "error"} per id no row names
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"jobs": self.jobs, "errors": self.errors, "warnings": self.warnings}


def _node_records(client: SlurmClient | None, nodes_text: str | None, warnings: list[str]) -> list[Any]:
    from gpuclust.slurm.records import parse_nodes_text

    try:
        if nodes_text is not None:
            return parse_nodes_text(nodes_text)
        if client is None:
            return []
        return parse_nodes_text(client.scontrol(["show", "node", "-o"]))
    except SlurmError as exc:
        warnings.append(f"nodes: {exc}: the partitions' CPU and memory shares per GPU are unknown")
        return []


def _sacct_version(client: SlurmClient | None) -> str | None:
    version = getattr(client, "sacct_version", None)
    if version is None:
        return None
    try:
        return str(version())
    except SlurmError:
        return None


def _gpu_facts(fig: jv.JobFigures) -> tuple[waste.GpuFacts, ...]:
    return tuple(waste.GpuFacts(g.node, g.name, g.covered_s, g.util_mean_pct, g.idle_s, g.longest_idle_s,
                                g.longest_idle_start, g.fb_used_max_mib, g.fb_total_mib) for g in fig.gpus)


def _node_during(config: SiteConfig, fig: jv.JobFigures, now: datetime,
                 warnings: list[str]) -> tuple[waste.NodeDuring, ...]:
    """Per node: its figures over the longest idle stretch of its GPUs that the detectors look at, and over the
    whole job (Prometheus only)."""
    from gpuclust.accounting.figures.telemetry import node_figures

    tel = config.telemetry
    r = fig.record
    if fig.source != "prometheus" or r.start is None:
        return ()
    longest: dict[str, tuple[float, float]] = {}
    for g in fig.gpus:
        if g.longest_idle_start is None or g.longest_idle_s < tel.idle_min_s:
            continue
        if g.longest_idle_s > longest.get(g.node, (0.0, 0.0))[1]:
            longest[g.node] = (g.longest_idle_start, g.longest_idle_s)
    out = []
    end = r.end or now
    for node, (start, length) in sorted(longest.items()):
        during, w1 = node_figures(tel, node, jv.as_utc(start), jv.as_utc(start + length))
        whole, w2 = node_figures(tel, node, r.start, end)
        warnings.extend(w1 + w2)
        if during is not None:
            out.append(waste.NodeDuring(node, start, start + length, during, whole or {}))
    return tuple(out)


def _may_share(record: jv.JobRecord) -> bool:
    """Whether the job's AllocTRES holds shards or MPS (their share needs the node's layout)."""
    return "gres/shard=" in record.alloc_tres or "gres/mps=" in record.alloc_tres


def show_jobs(config: SiteConfig, job_ids: Sequence[str], *, client: SlurmClient | None = None,
              input_text: str | None = None, input_name: str = "--input", delimiter: str | None = None,
              slurm_version: str | None = None, nodes_text: str | None = None,
              now: datetime | None = None) -> JobsAnswer:
    """The answer for these ids (checked with sacct_jobs.check_job_id): from `input_text` (a sacct dump) when
    given, else sacct through `client`."""
    now = now or datetime.now(timezone.utc)
    answer = JobsAnswer()
    ids = [sacct_jobs.check_job_id(j) for j in job_ids]
    if input_text is not None:
        rows = sacct_jobs.read_rows(input_text, delimiter, input_name, answer.warnings)
        source = input_name
    else:
        assert client is not None
        rows = sacct_jobs.fetch_rows(client, ids)
        source = "sacct"
    rule = jv.rule_for_version(slurm_version)
    records, unknown = jv.select_jobs(rows, ids, rule=rule, source=source, now=now)
    if input_text is None and any(r.usage.problem and "--slurm-version" in r.usage.problem for r in records):
        version = _sacct_version(client)  # the local sacct wrote what it printed
        if version:
            records, unknown = jv.select_jobs(rows, ids, rule=jv.rule_for_version(version), source=source, now=now)
    for r in records:  # (values the rollup could not read: counted as none, as the report counts them)
        answer.warnings.extend(r.usage.unread)
    for req in unknown:
        answer.errors.append({"job_id": req, "error": f"job {req}: sacct knows no such job"
                              + (f" in {input_name}" if input_text is not None else
                                 " (or it is not yours: sacct shows a user their own jobs)")})
    tel = config.telemetry
    prometheus: dict[int, Any] | None = None
    note: str | None = None
    if not tel.prometheus_url:
        note = "[telemetry] prometheus_url is not set"
    elif records:
        from gpuclust.accounting.figures.telemetry import fetch_telemetry

        windows = [w for i, r in enumerate(records) if (w := jv.window_of(r, i, now, tel.join)) is not None]
        period = jv.whole_window(records, now)
        if windows and period is not None:
            result = fetch_telemetry(tel, windows, period[0], period[1])
            answer.warnings.extend(result.warnings)
            prometheus = {int(k): v for k, v in result.jobs.items()}  # type: ignore[call-overload]
        else:
            note = "no job with GPUs and a start time"
    store_root = Path(config.state_dir) / "accounting"
    node_records = _node_records(client if input_text is None else None, nodes_text, answer.warnings) \
        if any(r.gpus or _may_share(r) for r in records) else []
    # (a job of MIG slices, shards or MPS: its GPU-equivalents, by its nodes' layouts where they matter)
    jv.apply_shares(records, {n.name: node_layout(list(n.gres), config.gpu_type_shares) for n in node_records},
                    {name: p.shards_per_gpu for name, p in config.partitions.items() if p.shards_per_gpu},
                    config.gpu_type_shares)
    figs = jv.job_figures(records, tel, prometheus=prometheus, prometheus_note=note, store_root=store_root, now=now,
                          cluster=config.cluster_name)
    shares: dict[str, Any] = {}
    for fig in figs:
        r = fig.record
        if r.partition not in shares:
            shares[r.partition] = jv.share_of(r.partition, node_records) if node_records else None
        price = config.price_per_gpu_hour(r.gpu_type, r.partition) if r.gpus else None
        facts = waste.JobFacts(
            job_id=r.job_id, running=r.running, elapsed_s=r.elapsed_s, timelimit_s=r.timelimit_s, gpus=r.gpus,
            nodes=r.nnodes, alloc_cpus=r.alloc_cpus, mem_mb=r.mem_mb, gpu_type=r.gpu_type,
            idle_threshold_pct=tel.idle_threshold_pct, idle_min_s=tel.idle_min_s, gpu_facts=_gpu_facts(fig),
            gpu_mem_max_mib=fig.gpu_mem_max_mib, gpu_mem_total_mib=fig.gpu_mem_total_mib,
            share=shares[r.partition], price_per_gpu_hour=price, currency=config.currency,
            node_during=_node_during(config, fig, now, answer.warnings))
        if r.share is not None:  # (its GPU-hours are GPU-equivalent hours: priced per one, as the report prices)
            from gpuclust.accounting.figures.prices import card_price

            price = card_price(config, r.gpu_type, r.partition) if r.gpus else None
        answer.jobs.append(job_document(fig, waste.findings(facts) if r.gpus else [], price, config.currency))
    return answer
