"""A use notice (figures/notices.py) as a mail: its subject from [notify] subject, a text part and an HTML part
that say the same. Names follow the glossary (allocated, busy, held-idle, coverage); every figure is the
notice's, rounded for reading only. Text from users (job names) is escaped in the HTML and made visible in the
text (gpuclust.output.terminal_safe); a subject never carries a line break."""

from __future__ import annotations

import html
from typing import Any

from gpuclust.accounting.figures import catalog
from gpuclust.accounting.figures.notices import UseNotice
from gpuclust.mail import Notice
from gpuclust.output import terminal_safe

GENERAL_ADVICE = (
    "Ask for the GPUs a job uses: fewer GPUs (--gpus / --gres=gpu:N) start sooner and cost less.",
    "Interactive work: a short session (salloc or srun --pty with a short --time) gives the GPUs back when you "
    "stop.",
    "`gpuclust job JOBID` shows one job per GPU and node, with its idle stretches and advice.",
)


def _h(value: float | None) -> str:
    return "unknown" if value is None else f"{value:,.2f}"


def _money(value: float | None, currency: str) -> str:
    if value is None:
        return "n/a (no price configured)"
    return f"{value:,.2f} {currency}".rstrip()


def _pct(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.0f}%"


def _day(iso: str) -> str:
    return iso[:10]


def subject(notice: UseNotice, template: str) -> str:
    text = template.format(cluster=notice.cluster, name=notice.name, kind=notice.kind,
                           start=_day(notice.period_start), end=_day(notice.period_end))
    return " ".join(terminal_safe(text).split())


def _label(name: str) -> str:
    """The report's own label of a gpu_use figure (figures.catalog), so a mail says what the page says."""
    figure = catalog.figure(catalog.GPU_USE, name)
    return str(figure.label or figure.title)


ALLOCATED, BUSY, HELD_IDLE = (_label(n) for n in ("allocated_gpu_hours", "busy_gpu_hours", "held_idle_gpu_hours"))


def _figures(n: UseNotice) -> list[tuple[str, str]]:
    use = n.gpu_use or {}
    runs = n.runs or {}
    cov = use.get("coverage")
    rows = [("GPU jobs that ended", str(use.get("jobs", 0))),
            (ALLOCATED, _h(use.get("allocated_gpu_hours"))),
            (BUSY, _h(use.get("busy_gpu_hours"))),
            (HELD_IDLE, _h(use.get("held_idle_gpu_hours"))),
            ("Mean GPU utilisation", _pct(use.get("util_mean_pct"))),
            ("Coverage (share of allocated GPU-hours with utilisation data)",
             "unknown" if cov is None else f"{cov:.0%}")]
    if runs:
        rows += [("Runs (completed / attempts)", f"{runs.get('runs', 0)} ({runs.get('completed', 0)} / "
                                                  f"{runs.get('attempts', 0)})"),
                 ("Cost of the allocated GPU-hours", _money(runs.get("cost"), n.currency))]
    rows.append((f"Cost of the held-idle GPU-hours (under {n.idle_threshold_pct:g}% utilisation)",
                 _money(n.held_idle_cost, n.currency)))
    if n.unpriced_held_idle_gpu_hours:
        rows.append(("Held-idle GPU-hours without a price", _h(n.unpriced_held_idle_gpu_hours)))
    return rows


def _head(n: UseNotice) -> str:
    whose = "Your GPU use" if n.kind == "user" else f"The GPU use of account {n.name}"
    return (f"{whose} on {n.cluster} from {n.period_start} to {n.period_end} (jobs that ended in that time), "
            "at the site's prices.")


def _job_line(j: Any, currency: str) -> list[str]:
    name = terminal_safe(j.job_name or "-")
    cost = "" if j.held_idle_cost is None else f", cost {_money(j.held_idle_cost, currency)}"
    return [f"- job {j.job_id} ({name}): {j.gpus} GPU(s), {j.held_idle_gpu_hours:.2f} held-idle GPU-hours of "
            f"{j.allocated_gpu_hours:.2f} allocated{cost}"] + [f"    {terminal_safe(f['message'])}"
                                                                 for f in j.findings]


def render(n: UseNotice, *, key: str, to: str, subject_template: str) -> Notice:
    """The mail of one notice (gpuclust.mail.Notice: queued by the outbox or written as .eml)."""
    rows = _figures(n)
    width = max(len(k) for k, _ in rows)
    text = [_head(n), ""] + [f"{k.ljust(width)}  {val}" for k, val in rows]
    if n.worst_jobs:
        text += ["", "The jobs with the most held-idle GPU-hours:"]
        for j in n.worst_jobs:
            text += _job_line(j, n.currency)
    if n.users:
        text += ["", "Its users (allocated / busy / held-idle GPU-hours):"]
        text += [f"- {terminal_safe(u['user'])}: {_h(u['allocated_gpu_hours'])} / {_h(u['busy_gpu_hours'])} / "
                 f"{_h(u['held_idle_gpu_hours'])}" for u in n.users]
    held = (n.gpu_use or {}).get("held_idle_gpu_hours")
    if held:
        text += ["", "What to change:", *(f"- {a}" for a in GENERAL_ADVICE)]
    if n.notes:
        text += ["", *(f"Note: {terminal_safe(x)}" for x in n.notes)]
    text += ["", "Held-idle: allocated GPU-hours under the idle threshold; busy: allocated x measured utilisation; "
             "both only where there is utilisation data (coverage).", "-- gpuclust report notify"]

    esc = html.escape
    body = [f"<html><body><p>{esc(_head(n))}</p>", "<table>"]
    body += [f"<tr><th align='left'>{esc(k)}</th><td align='right'>{esc(val)}</td></tr>" for k, val in rows]
    body.append("</table>")
    if n.worst_jobs:
        body.append("<h3>The jobs with the most held-idle GPU-hours</h3><table><tr><th>Job</th><th>Name</th>"
                    f"<th>GPUs</th><th>{HELD_IDLE}</th><th>{ALLOCATED}</th><th>Cost of the "
                    "held-idle GPU-hours</th><th>Advice</th></tr>")
        for j in n.worst_jobs:
            advice = "<br>".join(esc(f["message"]) for f in j.findings)
            body.append(f"<tr><td>{esc(j.job_id)}</td><td>{esc(j.job_name or '-')}</td><td>{j.gpus}</td>"
                        f"<td>{j.held_idle_gpu_hours:.2f}</td><td>{j.allocated_gpu_hours:.2f}</td>"
                        f"<td>{esc(_money(j.held_idle_cost, n.currency))}</td><td>{advice}</td></tr>")
        body.append("</table>")
    if n.users:
        body.append(f"<h3>Its users</h3><table><tr><th>User</th><th>{ALLOCATED}</th><th>{BUSY}</th>"
                    f"<th>{HELD_IDLE}</th></tr>")
        body += [f"<tr><td>{esc(u['user'])}</td><td>{_h(u['allocated_gpu_hours'])}</td>"
                 f"<td>{_h(u['busy_gpu_hours'])}</td><td>{_h(u['held_idle_gpu_hours'])}</td></tr>" for u in n.users]
        body.append("</table>")
    if held:
        body.append("<p>What to change:</p><ul>" + "".join(f"<li>{esc(a)}</li>" for a in GENERAL_ADVICE) + "</ul>")
    body += [f"<p><em>Note: {esc(x)}</em></p>" for x in n.notes]
    body.append("<p>Held-idle: allocated GPU-hours under the idle threshold; busy: allocated x measured "
                "utilisation; both only where there is utilisation data (coverage).</p><p>-- gpuclust report "
                "notify</p></body></html>")
    return Notice(key=key, to=to, subject=subject(n, subject_template), text="\n".join(text) + "\n",
                  html="\n".join(body) + "\n")
