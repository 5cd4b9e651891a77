"""Config section [health]: the thresholds the hardware-health rules (gpuclust.accept.health.sources) judge a
node's before/after counter snapshots by.

Kept apart from site.py like telemetry.py: site.py lists HEALTH in SECTIONS and calls `health_config` once;
`HealthConfig` is re-exported there. Each default is stated once, on its Key, with the reason it has that
value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuclust.config import values as v
from gpuclust.config.schema import Key, ParsedSection, SectionSpec, field_values

# The sources every health snapshot has: the registry's (gpuclust.accept.health.sources.SNAPSHOT_SOURCES), named
# again here because the config layer may not import the acceptance plane; tests/unit/test_health_sources.py
# fails when the two differ. A new source adds its name here.
HEALTH_SOURCES = ("net", "snmp", "qdisc", "infiniband", "nvidia_smi", "xid")

# Xids that mean the GPU (or its memory, or its link) needs attention before it takes another job. From
# NVIDIA's Xid catalogue (docs.nvidia.com/deploy/xid-errors) and the set AzNHC drains on
# (azurehpc-health-checks customTests/azure_gpu_xid.nhc):
#   48  double-bit (uncorrectable) ECC error
#   63  ECC page retirement or row remap recorded (A100+: row remap event)
#   64  ECC page retirement or row remap failed
#   74  NVLink error
#   79  GPU has fallen off the bus
#   92  high single-bit ECC error rate
#   94  contained ECC error (the application was killed; the GPU needs a reset to clear it)
#   95  uncontained ECC error (all applications on the GPU affected; reset required)
#   119 GSP RPC timeout
#   120 GSP error
#   140 unrecovered ECC error (ECC error on the GPU that was not recovered)
XID_CRITICAL_DEFAULT = (48, 63, 64, 74, 79, 92, 94, 95, 119, 120, 140)


def parse_xid_list(text: str) -> tuple[int, ...]:
    """Xid codes, comma- or space-separated: 48, 63, 79."""
    out: list[int] = []
    for item in v.parse_list(text):
        value = v.parse_int(item)
        if not 0 < value < 100000:
            raise ValueError(f"{item!r} is not an Xid code (a positive integer)")
        out.append(value)
    return tuple(sorted(set(out)))


_ACTION = re.compile(r"[A-Z][A-Z0-9_]{1,47}")
_ACTION_KEY = re.compile(r"xid:[0-9]{1,5}|[a-z]+(?::[a-z0-9][a-z0-9._-]{0,47})?")


def parse_actions(text: str) -> tuple[tuple[str, str], ...]:
    """`xid:79=RESET_GPU, remap:failure=CONTACT_SUPPORT, pcie=IGNORE` -> ((key, ACTION), ...) (the keys: xid:CODE, a
    finding class, or class:detail; the actions: NVIDIA's bucket names or the site's own, upper case)."""
    out: dict[str, str] = {}
    for item in v.parse_list(text):
        key, sep, action = item.partition("=")
        key, action = key.strip(), action.strip()
        if not sep or not _ACTION_KEY.fullmatch(key):
            raise ValueError(f"{item!r}: expected KEY=ACTION with KEY xid:CODE, a class or class:detail")
        if not _ACTION.fullmatch(action):
            raise ValueError(f"{item!r}: the action must be an upper-case word such as RESET_GPU")
        out[key] = action
    return tuple(sorted(out.items()))


def parse_sources(text: str) -> tuple[str, ...]:
    """Health sources, comma- or space-separated (empty: none required)."""
    items = v.parse_list(text)
    for item in items:
        if item not in HEALTH_SOURCES:
            raise ValueError(f"unknown health source {item!r} (expected some of {', '.join(HEALTH_SOURCES)})")
    return tuple(dict.fromkeys(items))


HEALTH = SectionSpec(
    "health",
    "Hardware-health counters snapshotted before and after each acceptance run, and the rules that judge them.",
    (
        Key("xid_critical", parse_xid_list, "Xid codes that are CRITICAL (drain-worthy) when seen during a run; "
            "any other Xid is a WARNING. Default: NVIDIA's catalogue and AzNHC's drain set (48 DBE, 63/64 row "
            "remap/retirement, 74 NVLink, 79 off the bus, 92 SBE rate, 94/95 contained/uncontained ECC, 119/120 "
            "GSP, 140 unrecovered ECC).", default=XID_CRITICAL_DEFAULT),
        Key("ecc_uncorrectable_max", v.parse_nonneg_int, "CRITICAL when a GPU's aggregate (lifetime) uncorrectable "
            "ECC count exceeds this; any uncorrectable volatile error during the run is CRITICAL regardless "
            "(NVIDIA: an uncorrectable error needs a GPU reset; AzNHC fails the node on any).", default=0),
        Key("ecc_correctable_max", v.parse_nonneg_int, "WARNING when a GPU's volatile correctable ECC count grows "
            "by more than this during one run (correctable errors are repaired, but a burst precedes row "
            "remaps and Xid 92).", default=100),
        Key("net_error_max", v.parse_nonneg_int, "A finding (net_severity) when a NIC's error counter (rx_errors, rx_crc_errors, "
            "tx_carrier_errors ...) grows by more than this during a run.", default=0),
        Key("net_drop_max", v.parse_nonneg_int, "A finding (net_severity) when a NIC's rx_dropped or tx_dropped grows by more than "
            "this during a run (Linux counts some benign drops here, hence not 0).", default=100),
        Key("net_drop_ratio_max", v.parse_fraction, "... or when drops / packets over the run exceed this "
            "(judged once the run moved at least 1/ratio packets, so a handful of packets is not judged).",
            default=1e-4),
        Key("tcp_retrans_ratio_max", v.parse_fraction, "A finding (net_severity) when TCP RetransSegs / OutSegs over the run "
            "exceeds this (1% retransmission is already a lossy fabric).", default=0.01),
        Key("tcp_min_segments", v.parse_nonneg_int, "The TCP ratio is judged only when the run sent at least this "
            "many segments (an idle node's handful of retransmits is noise).", default=1000),
        Key("ip_lost_max", v.parse_nonneg_int, "A finding (net_severity) when more than this many IPv4 packets "
            "were lost in the node itself during a run: received but not delivered (InReceives - InDelivers, less "
            "forwarded and reassembled: dropped on the way in by a firewall, bad headers, a full backlog) or "
            "requested but not transmitted (OutRequests - OutTransmits, kernel 6.3+: dropped on the way out).",
            default=10),
        Key("ip_lost_ratio_max", v.parse_fraction, "... and more than this share of the run's packets in that "
            "direction (a stray broadcast a firewall drops is not a lossy link).", default=0.001),
        Key("qdisc_drop_max", v.parse_nonneg_int, "A finding when a qdisc's drop counter grows by more than this "
            "during a run (an AQM such as fq_codel may drop a few packets of a saturating run by design).",
            default=100),
        Key("net_severity", v.parse_choice("warning", "critical"), "Severity of an Ethernet/TCP link finding (NIC "
            "errors or drops, TCP retransmits, qdisc drops over the limits above). Critical by default: on a "
            "healthy fabric an acceptance run loses next to nothing, and a lossy link fails training runs.",
            default="critical"),
        Key("ib_error_max", v.parse_nonneg_int, "CRITICAL when an InfiniBand port's symbol_error, link_downed, "
            "link_error_recovery or port_rcv_errors grows by more than this during a run (AzNHC's IB checks "
            "and NVIDIA's fabric guidance: these do not grow on a healthy link).", default=0),
        Key("ib_rate_gbps", v.parse_positive_float, "The expected rate of each InfiniBand port in Gb/s (e.g. 400 for "
            "NDR); a port below it is a topology finding. Absent: not checked."),
        Key("ib_rate_severity", v.parse_choice("warning", "critical"), "Severity of a port below ib_rate_gbps.",
            default="warning"),
        Key("pcie_severity", v.parse_choice("warning", "critical"), "Severity of a GPU whose PCIe link runs below "
            "its max width (or, while busy, its max generation).", default="warning"),
        Key("nvidia_smi_timeout", v.parse_positive_seconds, "Limit of each `nvidia-smi -q -x` (seconds or 30s): "
            "a hung driver makes it block, and the snapshot must still finish.", default=30.0),
        Key("nvlink_error_max", v.parse_nonneg_int, "A finding when a GPU's NVLink error counter grows by more "
            "than this between two snapshots (CRITICAL for recovery and fatal counters, WARNING for CRC and replay "
            "counters, which a healthy link repairs).", default=0),
        Key("actions", parse_actions, "The site's action per fault, over NVIDIA's Xid catalog and gpuclust's per "
            "class (gpuclust.accept.health.actions): KEY=ACTION items, KEY being xid:CODE, a class or "
            "class:detail, e.g. `xid:79=RESET_GPU, remap:failure=CONTACT_SUPPORT`. The drain reason and "
            "`accept report` say the action.", default=()),
        Key("check_state_dir", v.parse_abs_path, "Where `gpuclust health check` keeps each node's state (the Xid "
            "lines already reported, the last snapshot), one file per node, written atomically. A local "
            "directory of the node (or a shared one: the files are per node).",
            default="/var/lib/gpuclust/health"),
        Key("check_nvidia_smi_timeout", v.parse_positive_seconds, "Limit of `nvidia-smi -q -x` in `gpuclust health "
            "check` (a Prolog must be quick; a hung driver is the check's own `timeout` state, never a drain).",
            default=10.0),
        Key("check_unavailable", v.parse_choice("pass", "fail"), "What `gpuclust health check` exits with when the "
            "check cannot run (no nvidia-smi on a GPU node, a timeout, output it cannot read, no config): pass "
            "(the default: exit as healthy, with the state printed) or fail (the mode's failing exit code, so "
            "Slurm or NHC drains with its own reason). `--drain` never drains for it.", default="pass"),
        Key("require", parse_sources, "Sources whose absence is UNKNOWN rather than a note (some of "
            f"{', '.join(HEALTH_SOURCES)}). Default: none; an absent source is reported at OK level.", default=()),
    ),
)


# key -> HealthConfig field, where they differ
FIELD_OF_KEY = {"nvidia_smi_timeout": "nvidia_smi_timeout_s",
                "check_nvidia_smi_timeout": "check_nvidia_smi_timeout_s"}


@dataclass(frozen=True)
class HealthConfig:
    """[health]: the thresholds and severities the hardware-health rules judge a node's counters by."""

    xid_critical: tuple[int, ...] = HEALTH.default("xid_critical")
    ecc_uncorrectable_max: int = HEALTH.default("ecc_uncorrectable_max")
    ecc_correctable_max: int = HEALTH.default("ecc_correctable_max")
    net_error_max: int = HEALTH.default("net_error_max")
    net_drop_max: int = HEALTH.default("net_drop_max")
    net_drop_ratio_max: float = HEALTH.default("net_drop_ratio_max")
    tcp_retrans_ratio_max: float = HEALTH.default("tcp_retrans_ratio_max")
    tcp_min_segments: int = HEALTH.default("tcp_min_segments")
    qdisc_drop_max: int = HEALTH.default("qdisc_drop_max")
    ip_lost_max: int = HEALTH.default("ip_lost_max")
    ip_lost_ratio_max: float = HEALTH.default("ip_lost_ratio_max")
    net_severity: str = HEALTH.default("net_severity")
    ib_error_max: int = HEALTH.default("ib_error_max")
    ib_rate_gbps: float | None = None  # None: the rate is not checked
    ib_rate_severity: str = HEALTH.default("ib_rate_severity")
    pcie_severity: str = HEALTH.default("pcie_severity")
    nvidia_smi_timeout_s: float = HEALTH.default("nvidia_smi_timeout")
    require: tuple[str, ...] = HEALTH.default("require")
    nvlink_error_max: int = HEALTH.default("nvlink_error_max")
    actions: tuple[tuple[str, str], ...] = HEALTH.default("actions")  # (key, ACTION) pairs
    check_state_dir: str = HEALTH.default("check_state_dir")
    check_nvidia_smi_timeout_s: float = HEALTH.default("check_nvidia_smi_timeout")
    check_unavailable: str = HEALTH.default("check_unavailable")


def health_config(sections: list[ParsedSection]) -> HealthConfig:
    """The typed [health] section (defaults when absent; the schema already reported bad values)."""
    if not sections:
        return HealthConfig()
    values = field_values(sections[0], HealthConfig, FIELD_OF_KEY)
    return HealthConfig(**values)
