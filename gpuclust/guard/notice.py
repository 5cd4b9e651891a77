"""The text and HTML of a guard notice: the job, its GPUs and nodes, the idle minutes, what they cost at the
site's price per GPU-hour, and what to change."""

from __future__ import annotations

import html
from dataclasses import dataclass

from gpuclust.mail import Notice

STAGE_TITLES = {
    "warn": "idle GPUs",
    "second_warn": "second notice: idle GPUs",
    "cancel": "cancelled: idle GPUs",
}


@dataclass(frozen=True)
class NoticeFacts:
    """What a guard notice says of one job: whose it is, where it runs, how long its GPUs sat idle, the cost."""

    job: str
    user: str
    account: str
    partition: str
    stage: str
    cluster: str
    idle_s: float
    gpus: int
    nodes: tuple[str, ...]
    per_gpu: tuple[tuple[str, str, float], ...]  # (node, gpu, idle seconds)
    threshold_pct: float
    cost: float | None
    currency: str
    warn_after_s: int
    cancel_after_s: int
    action: str


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min"


def _lines(f: NoticeFacts) -> tuple[str, list[str], list[str]]:
    """(headline, facts, advice) shared by both parts."""
    idle = _minutes(f.idle_s)
    if f.stage == "cancel":
        head = (f"Job {f.job} on {f.cluster} was cancelled: all of its {f.gpus} GPU(s) were under "
                f"{f.threshold_pct:g}% utilisation for {idle} (the limit is {_minutes(f.cancel_after_s)}).")
    else:
        head = (f"Job {f.job} on {f.cluster} holds {f.gpus} GPU(s) that have all been under {f.threshold_pct:g}% "
                f"utilisation for the last {idle}.")
    facts = [f"Job: {f.job} (user {f.user}, account {f.account}, partition {f.partition})",
             f"Nodes: {', '.join(f.nodes) or '-'}",
             f"GPUs: {f.gpus}; idle: {idle}"]
    facts += [f"  {node} GPU {gpu}: idle {_minutes(s)}" for node, gpu, s in f.per_gpu]
    if f.cost is not None:
        facts.append(f"Cost of the idle time: {f.cost:.2f} {f.currency}".rstrip()
                     + f" ({f.gpus} GPU(s) x {f.idle_s / 3600:.2f} h at the site's price per GPU-hour)")
    advice = [
        "If the job no longer needs its GPUs, end it: scancel " + f.job,
        "Ask for the GPUs the job uses: fewer GPUs (--gpus / --gres=gpu:N) start sooner and cost less.",
        "For interactive work, use a short session (salloc or srun --pty with a short --time, e.g. "
        "--time=01:00:00) so the GPUs go back when you stop.",
    ]
    if f.stage != "cancel" and f.action == "cancel":
        advice.append(f"Jobs whose GPUs stay idle for {_minutes(f.cancel_after_s)} are cancelled.")
    return head, facts, advice


def build_notice(f: NoticeFacts, to: str) -> Notice:
    head, facts, advice = _lines(f)
    subject = f"[{f.cluster}] job {f.job}: {STAGE_TITLES.get(f.stage, f.stage)} ({_minutes(f.idle_s)})"
    text = "\n".join([head, "", *facts, "", "What to change:", *(f"- {a}" for a in advice), "",
                      "-- gpuclust guard"]) + "\n"
    esc = html.escape
    body = ("<html><body>"
            f"<p>{esc(head)}</p>"
            "<ul>" + "".join(f"<li>{esc(x.strip())}</li>" for x in facts) + "</ul>"
            "<p>What to change:</p><ul>" + "".join(f"<li>{esc(a)}</li>" for a in advice) + "</ul>"
            "<p>-- gpuclust guard</p></body></html>\n")
    return Notice(key=f"guard-{f.job}-{f.stage}", to=to, subject=subject, text=text, html=body)
