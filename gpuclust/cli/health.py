"""`gpuclust health`: the node check for Slurm's Prolog, Epilog and HealthCheckProgram, and for NHC. Thin: the
library is gpuclust.accept.health.node (the check) and gpuclust.accept.drain (the drain taxonomy)."""

from __future__ import annotations

import os
import socket
import sys
from typing import Any

import click

from gpuclust.cli.context import AppContext, pass_app
from gpuclust.cli.params import HintChoice, HintIntRange
from gpuclust.exitcodes import HEALTH_CHECK_MODES, health_check_exit


@click.group("health")
def group() -> None:
    """Node health at every job boundary: a fast check of this node's GPUs, kernel log and fabric ports."""


def _float_seconds(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    if value is not None and not 0 < value <= 600:
        raise click.BadParameter("expected seconds in (0, 600]")
    return value


@group.command("check")
@click.option("--mode", type=HintChoice(list(HEALTH_CHECK_MODES)), default=None,
              help="Who runs the check, which sets its exit codes (gpuclust/exitcodes.py): prolog (1 on a failure: "
                   "Slurm requeues the job and drains), epilog (1 on a failure it did not drain itself), "
                   "healthcheck (HealthCheckProgram; slurmd ignores the code, use --drain), nhc (1 on a failure, "
                   "for examples/nhc/gpuclust_health.nhc). Default: Nagios codes 0/1/2/3.")
@click.option("--node", default=None, help="This node's Slurm name (default: $SLURMD_NODENAME, else the short "
                                           "hostname).")
@click.option("--drain", "do_drain", is_flag=True,
              help="On a failure, drain this node (scontrol) with the reason 'gpuclust:CLASS:DETAIL ACTION ...'. "
                   "Never for a check that could not run; never over another's drain.")
@click.option("--retest-drained", is_flag=True,
              help="Resume this node when gpuclust drained it for a fault this check judges and this check "
                   "passes (an Xid drain only after a reboot: a GPU reset leaves the kernel log as it was).")
@click.option("--gres-gpus", type=HintIntRange(min=0), default=None, envvar="GPUCLUST_HEALTH_GRES_GPUS",
              help="The GPUs this node's GRES declares (default: `scontrol show node`; unknown: not compared). "
                   "Env: GPUCLUST_HEALTH_GRES_GPUS.")
@click.option("--state-dir", default=None, type=click.Path(file_okay=False),
              help="Where the per-node state is kept (default: [health] check_state_dir).")
@click.option("--nvidia-smi-timeout", type=float, default=None, callback=_float_seconds,
              help="Seconds nvidia-smi may take (default: [health] check_nvidia_smi_timeout, 10); past it the "
                   "check is `unchecked` (nvidia-smi-timeout), never a drain.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON (state, findings, actions, "
                                                         "what was done).")
@pass_app
def check(app: AppContext, mode: str | None, node: str | None, do_drain: bool, retest_drained: bool,
          gres_gpus: int | None, state_dir: str | None, nvidia_smi_timeout: float | None, as_json: bool) -> None:
    """Check this node now: its GPUs against its GRES, nvidia-smi answering within its bound, new Xid lines
    since the last check (with NVIDIA's action for each), pending row remaps and page retirements,
    uncorrectable ECC, PCIe below max, NVLink errors, InfiniBand port state and rate, Fabric Manager's state.

    \b
    States: pass, fail (a CRITICAL finding), unchecked (the check could not run: no nvidia-smi,
    a timeout, unreadable output, no config; never drained, [health] check_unavailable decides
    its exit code), no-gpu (a node whose GRES has no GPU and no nvidia-smi).
    The first line is `STATE: NODE: ...`; the exit code follows --mode (gpuclust/exitcodes.py).
    """
    from dataclasses import replace

    from gpuclust.accept.health import node as N
    from gpuclust.errors import GpuclustError

    name = node or os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    try:
        N.valid_node(name)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--node") from None
    try:
        cfg = app.config.health
    except GpuclustError as exc:  # no or bad site config: the check cannot run; never a drain
        _finish(mode, {"node": name, "state": "unchecked", "unchecked": [{"reason": "no-config",
                                                                            "detail": str(exc)}]},
                f"UNCHECKED: {name}: no-config: {str(exc).splitlines()[0] if str(exc) else 'no site config'}",
                as_json, unavailable_fails=False)
        return
    if nvidia_smi_timeout is not None:
        cfg = replace(cfg, check_nvidia_smi_timeout_s=nvidia_smi_timeout)
    record = None
    slurm_note = None
    if gres_gpus is None or do_drain or retest_drained:
        try:
            record = _node_record(app, name)
        except GpuclustError as exc:
            slurm_note = f"scontrol show node {name}: {str(exc).splitlines()[0] if str(exc) else exc}"
    if gres_gpus is None and record is not None:
        gres_gpus = record.gpu_count
    directory = state_dir or cfg.check_state_dir
    result = N.check_node(name, cfg, state_dir=directory, gres_gpus=gres_gpus)
    if slurm_note:
        result.notes.append(f"{slurm_note} (GRES not compared, no drain or resume)")
    done: dict[str, Any] = {"drained": None, "resumed": False, "errors": []}
    drained_ok = True
    if result.state == "fail":
        reason = _reason(result, cfg)
        done["reason"] = reason
        if do_drain:
            drained_ok = _drain(app, name, record, reason, done)
    elif result.state == "pass" and retest_drained and record is not None:
        _retest(app, name, record, result, done)
    try:
        N.save_state(directory, name, N.commit_xid(result) if drained_ok else result.next_state)
    except OSError as exc:  # the node's own disk: the verdict stands, the next check may repeat an Xid
        result.notes.append(f"state not saved: {exc.filename or directory}: {exc.strerror or exc}")
    payload = {**result.as_dict(cfg), **done}
    line = _status_line(result, done)
    _finish(mode, payload, line, as_json, unavailable_fails=cfg.check_unavailable == "fail",
            state=result.state, drained=bool(done.get("drained")) or done.get("kept", False),
            warning=result.warning, detail=_detail_lines(result, cfg))


def _node_record(app: AppContext, name: str) -> Any:
    from gpuclust.slurm.records import parse_nodes_text

    nodes = {n.name: n for n in parse_nodes_text(app.slurm.scontrol(["-o", "show", "node", name]))}
    return nodes.get(name)


def _reason(result: Any, cfg: Any) -> str:
    from gpuclust.accept.drain import make_reason
    from gpuclust.accept.health.kit import finding_action

    cause = result.cause()
    job = os.environ.get("SLURM_JOB_ID", "")
    return make_reason(cause.cls, cause.detail, job if job.isdigit() else None, None, cause.message,
                       finding_action(cause, cfg))


def _drain(app: AppContext, name: str, record: Any, reason: str, done: dict[str, Any]) -> bool:
    """Drain unless the node is drained already (ours: kept; another's: untouched). False when scontrol failed."""
    from gpuclust.accept.drain import drain_args, is_ours
    from gpuclust.errors import SlurmError

    if record is None:
        done["errors"].append("not drained: Slurm did not answer for this node")
        return False
    if record.is_drain:
        done["kept"] = True
        done["drained"] = False
        done["why"] = ("already drained by gpuclust" if is_ours(record)
                       else f"drained by someone else ({record.reason!r}): untouched")
        return True
    try:
        app.slurm.scontrol(drain_args(name, reason))
    except SlurmError as exc:
        done["errors"].append(f"drain failed: {exc}")
        return False
    done["drained"] = True
    return True


def _retest(app: AppContext, name: str, record: Any, result: Any, done: dict[str, Any]) -> None:
    """Resume a node gpuclust drained for a fault this check judges, now that it passes."""
    from gpuclust.accept.drain import is_ours, resume_args
    from gpuclust.accept.health.kit import DRAIN_ORDER
    from gpuclust.errors import SlurmError

    if not record.is_drain or not is_ours(record):
        return
    head = (record.reason or "").split(" ", 1)[0]
    parts = head.split(":")
    cls = parts[1] if len(parts) >= 3 and parts[0] == "gpuclust" else ""
    if cls not in DRAIN_ORDER or cls == "dcgm":
        done["why"] = f"drained for {head or record.reason!r}, which this check does not judge: not resumed"
        return
    if cls == "xid" and not any("new boot" in n for n in result.notes):
        done["why"] = "drained for an Xid: resumed only after a reboot (the kernel log still holds it)"
        return
    try:
        app.slurm.scontrol(resume_args(name))
        done["resumed"] = True
    except SlurmError as exc:
        done["errors"].append(f"resume failed: {exc}")


def _status_line(result: Any, done: dict[str, Any]) -> str:
    state = result.state.upper()
    if result.state == "fail":
        what = done.get("reason", "")
        if done.get("drained"):
            what += " (drained)"
        elif done.get("why"):
            what += f" ({done['why']})"
        return f"{state}: {result.node}: {what}"
    if result.state == "unchecked":
        return f"{state}: {result.node}: " + "; ".join(f"{r}: {d}" for r, d in result.unchecked)
    tail = "resumed (passed re-check)" if done.get("resumed") else \
        f"{sum(1 for f in result.findings if f.severity.name == 'WARNING')} warning(s)" if result.warning else "healthy"
    if result.state == "no-gpu":
        tail = "no GPU in GRES, no nvidia-smi"
    return f"{state}: {result.node}: {tail}"


def _detail_lines(result: Any, cfg: Any) -> list[str]:
    from gpuclust.accept.health.kit import finding_action

    lines = []
    for f in result.findings:
        if f.severity.name in ("OK",):
            continue
        action = finding_action(f, cfg)
        lines.append(f"{f.severity.name}: [{f.cls}:{f.detail}] {f.message}" + (f" -> {action}" if action else ""))
    lines.extend(f"note: {n}" for n in result.notes)
    return lines


def _finish(mode: str | None, payload: dict[str, Any], line: str, as_json: bool, *, unavailable_fails: bool,
            state: str = "unchecked", drained: bool = False, warning: bool = False,
            detail: list[str] | None = None) -> None:
    from gpuclust.cli.output import echo_json
    from gpuclust.output import terminal_lines

    if as_json:
        echo_json(payload)
    else:
        click.echo(terminal_lines([line, *(detail or [])]))
    code = health_check_exit(mode, "pass" if state == "no-gpu" else state, drained, warning, unavailable_fails)
    sys.stdout.flush()
    if code:
        raise click.exceptions.Exit(code)
