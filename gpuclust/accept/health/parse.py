"""The parsers of every health source in one namespace, for callers that read several (tests, benchmark
scripts). Each parser lives in its source's module (gpuclust.accept.health.sources); the value helpers and
HealthParseError in gpuclust.accept.health.kit.
"""

from __future__ import annotations

from gpuclust.accept.health.kit import HealthParseError, parse_iso_time, to_float, to_int, to_yes_no
from gpuclust.accept.health.sources.dcgm import DCGM_STATUSES, DcgmResult, parse_dcgmi_diag_json
from gpuclust.accept.health.sources.infiniband import (
    IB_ERROR_COUNTERS,
    IB_OTHER_ERROR_COUNTERS,
    IbPort,
    parse_ib_port,
    parse_ib_rate,
    parse_ib_state,
    read_infiniband,
)
from gpuclust.accept.health.sources.net import (
    NET_COUNTERS_DROPS,
    NET_COUNTERS_ERRORS,
    QdiscStats,
    parse_net_statistics,
    parse_proc_net_netstat,
    parse_proc_net_snmp,
    parse_tc_qdisc_json,
    parse_tc_qdisc_text,
    read_net_statistics,
)
from gpuclust.accept.health.sources.nvbandwidth import NvbandwidthResult, parse_nvbandwidth
from gpuclust.accept.health.sources.nvidia_smi import (
    NVIDIA_SMI,
    EccCounts,
    GpuHealth,
    NvidiaSmiLog,
    PcieLink,
    parse_nvidia_smi_xml,
)
from gpuclust.accept.health.sources.xid import XID_SOURCE, XidEvent, parse_xid_lines

__all__ = [
    "DCGM_STATUSES", "IB_ERROR_COUNTERS", "IB_OTHER_ERROR_COUNTERS", "NET_COUNTERS_DROPS", "NET_COUNTERS_ERRORS",
    "NVIDIA_SMI", "XID_SOURCE", "DcgmResult", "EccCounts", "GpuHealth", "HealthParseError", "IbPort",
    "NvbandwidthResult", "NvidiaSmiLog", "PcieLink", "QdiscStats", "XidEvent", "parse_dcgmi_diag_json",
    "parse_ib_port", "parse_ib_rate", "parse_ib_state", "parse_iso_time", "parse_net_statistics",
    "parse_nvbandwidth", "parse_nvidia_smi_xml", "parse_proc_net_netstat", "parse_proc_net_snmp",
    "parse_tc_qdisc_json", "parse_tc_qdisc_text", "parse_xid_lines", "read_infiniband", "read_net_statistics",
    "to_float", "to_int", "to_yes_no",
]
