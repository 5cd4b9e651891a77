"""What to do about a fault: NVIDIA's action per Xid, and gpuclust's per finding class, site-overridable.

The Xid table is NVIDIA's Xid catalog, column "Resolution Bucket (Immediate Action)" of "Xid Catalog
Reference, Table 1" (Ampere and newer GPUs, A100/H100/B100/GB200):
https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html . The page states no version of its
own; the table was read in its machine-readable form from NVIDIA's NVSentinel (NVIDIA/NVSentinel,
distros/kubernetes/nvsentinel/charts/gpu-health-monitor/xiderrorsmapping.csv at commit
6f8b0fcfa8e502bdda78fabf96facef729a9285b, Xids 1-162), which carries that column per Xid. Two spellings
differ from the page and are taken as the page writes them: NVSentinel's UNEXPECTED_ERR_REPORT_ISSUE is the
page's CONTACT_SUPPORT (the unused codes), and Xid 154 ("follow the guidance of the Xid it accompanies") is
XID_154_EVAL. The catalog's own words for each bucket:

    RESTART_APP      the application failed; the GPU is fine (restart the job)
    RESET_GPU        reset the GPU (nvidia-smi -r) or reboot; replace it if the fault persists
    RESTART_BM       the GPU is gone from PCIe: power-cycle the machine (bare-metal restart)
    RESTART_VM       restart the VM
    WORKFLOW_XID_45, WORKFLOW_XID_48, WORKFLOW_NVLINK_ERR, WORKFLOW_NVLINK5_ERR
                     follow NVIDIA's workflow for that Xid (48: reset the GPU; with 63/64, drain and reset)
    CHECK_MECHANICALS, CHECK_UVM, UPDATE_SWFW, CONTACT_SUPPORT, IGNORE   as named

An Xid the table does not list (a newer driver's) is CONTACT_SUPPORT, and its finding says the code is not in
the catalog. The other finding classes get gpuclust's own choice in NVIDIA's vocabulary (CLASS_ACTIONS, with
its reason per line). `[health] actions` overrides either: `xid:79=RESET_GPU, remap:failure=CONTACT_SUPPORT,
pcie=IGNORE` (a class, class:detail, or xid:CODE).
"""

from __future__ import annotations

from collections.abc import Mapping

CATALOG_URL = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"
CATALOG_SOURCE = ("NVIDIA Xid catalog, Resolution Bucket (Immediate Action), via NVIDIA/NVSentinel "
                  "xiderrorsmapping.csv @ 6f8b0fcf")
UNKNOWN_XID_ACTION = "CONTACT_SUPPORT"

_BUCKETS = {
    "CHECK_MECHANICALS": "54",
    "CHECK_UVM": "159",
    "CONTACT_SUPPORT": "1-7, 9-10, 12, 15-24, 26-30, 33-36, 42, 47, 49-53, 55-59, 61, 65, 73, 81, 87, 90-91, 108, "
                       "111-118, 122-125, 138, 142",
    "IGNORE": "14, 37-38, 43-44, 63, 66-67, 92-93, 106-107, 121, 137, 141, 152-153, 157, 161",
    "RESET_GPU": "46, 62, 64, 95, 109-110, 119-120, 136, 140, 143, 155-156, 158, 162",
    "RESTART_APP": "8, 11, 13, 25, 31-32, 39-41, 60, 68-72, 75-77, 80, 82-86, 88-89, 94, 96-105, 126-135, 139",
    "RESTART_BM": "79, 160",
    "RESTART_VM": "151",
    "UPDATE_SWFW": "78",
    "WORKFLOW_NVLINK5_ERR": "144-150",
    "WORKFLOW_NVLINK_ERR": "74",
    "WORKFLOW_XID_45": "45",
    "WORKFLOW_XID_48": "48",
    "XID_154_EVAL": "154",
}


def _expand(spec: str) -> list[int]:
    out: list[int] = []
    for part in spec.split(","):
        low, _, high = part.strip().partition("-")
        out.extend(range(int(low), int(high or low) + 1))
    return out


XID_ACTIONS: dict[int, str] = {code: action for action, spec in _BUCKETS.items() for code in _expand(spec)}

# gpuclust's action for each finding class (class, or class:detail, the more specific first), in NVIDIA's words.
CLASS_ACTIONS: dict[str, str] = {
    "remap:pending": "RESET_GPU",  # a pending row remap takes effect at the next GPU reset
    "remap:retirement-pending": "RESET_GPU",  # likewise a pending page retirement
    "remap:failure": "CONTACT_SUPPORT",  # no spare row left: an RMA
    "ecc": "RESET_GPU",  # uncorrectable ECC: NVIDIA's Xid 48/94/95 buckets reset the GPU
    "vanished": "RESTART_BM",  # a GPU gone from nvidia-smi: Xid 79's bucket
    "gres": "RESTART_BM",  # fewer GPUs than the node's GRES: the same
    "pcie": "CHECK_MECHANICALS",  # a link below its width or generation: seating, riser, cable
    "nvlink": "WORKFLOW_NVLINK_ERR",  # Xid 74's bucket
    "fabric": "RESET_FABRIC",  # Fabric Manager not done training the NVLink fabric
    "link": "CHECK_MECHANICALS",  # an IB/Ethernet port down or erroring: cable, transceiver
    "topology": "CHECK_MECHANICALS",  # an IB port below its rate
    "throttle": "CHECK_MECHANICALS",  # hardware slowdown: cooling, power (Xid 54's bucket)
    "dcgm": "CONTACT_SUPPORT",  # dcgmi diag failed: field diagnostics
    "mig": "RESET_GPU",  # a pending MIG mode change applies at the next GPU reset
}


def action_for(cls: str, detail: str, evidence: Mapping[str, object] | None = None,
               overrides: Mapping[str, str] | None = None) -> str | None:
    """The action for a finding: the site's override (xid:CODE, class:detail, class), else NVIDIA's catalog for
    an Xid (CONTACT_SUPPORT for a code it lacks), else CLASS_ACTIONS; None for a class without one (unavailable,
    reset: nothing to do to the hardware)."""
    over = overrides or {}
    if cls == "xid":
        code = (evidence or {}).get("code")
        key = f"xid:{code}"
        if key in over:
            return over[key]
        if isinstance(code, int) and not isinstance(code, bool):
            return over.get("xid") or XID_ACTIONS.get(code, UNKNOWN_XID_ACTION)
        return over.get("xid") or UNKNOWN_XID_ACTION
    for key in (f"{cls}:{detail}", cls):
        if key in over:
            return over[key]
    for key in (f"{cls}:{detail}", cls):
        if key in CLASS_ACTIONS:
            return CLASS_ACTIONS[key]
    return None


def in_catalog(code: int) -> bool:
    return code in XID_ACTIONS
