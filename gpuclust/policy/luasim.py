"""Run a rendered job_submit.lua the way 22.05's slurmctld does, under one of lupa's Lua runtimes (5.1, the one
Debian's slurmctld links, by default; 5.2, 5.3, 5.4 and LuaJIT as other builds link them).

The `slurm` table mirrors 22.05 exactly (probed; see ../shared/slurm-lab-notes.md): only the constants that
exist there, the log functions with string.format semantics, and nothing else; any other name reads as nil,
so a script that relies on a missing constant fails here as it would in slurmctld. job_desc is an empty
table whose metatable serves only the real field names (unknown names read nil, pairs() sees nothing).
Numbers are passed as doubles, as slurmctld's lua_pushnumber does: from Lua 5.3 on they are floats (math.type
'float'), which tostring writes as 16.0.

lupa is a test/bench dependency (setup.cfg extra `test`), imported only when this module is used.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# lupa's module for each runtime ([policy] lua names them the same way)
RUNTIMES = {"5.1": "lua51", "5.2": "lua52", "5.3": "lua53", "5.4": "lua54", "luajit": "luajit21"}


def runtime_module(version: str) -> Any:
    """lupa's module for a Lua version; ImportError when the installed lupa wheel lacks it."""
    import importlib

    return importlib.import_module("lupa." + RUNTIMES[version])

# job_desc fields readable from job_submit.lua in 22.05 (src/plugins/job_submit/lua/job_submit_lua.c).
JOB_DESC_FIELDS = frozenset({
    "account", "acctg_freq", "admin_comment", "alloc_node", "array_inx", "batch_features", "begin_time",
    "bitflags", "boards_per_node", "burst_buffer", "clusters", "comment", "contiguous", "container",
    "cores_per_socket", "cpu_freq_min", "cpu_freq_max", "cpu_freq_gov", "cpus_per_task", "cpus_per_tres",
    "cron_entry", "default_account", "default_qos", "delay_boot", "dependency", "end_time", "environment",
    "extra", "exc_nodes", "features", "gres", "group_id", "immediate", "licenses", "mail_type", "mail_user",
    "max_cpus", "max_nodes", "mcs_label", "mem_per_tres", "min_cpus", "min_mem_per_cpu", "min_mem_per_node",
    "min_nodes", "name", "nice", "ntasks_per_board", "ntasks_per_core", "ntasks_per_gpu", "ntasks_per_node",
    "ntasks_per_socket", "ntasks_per_tres", "num_tasks", "partition", "pn_min_cpus", "pn_min_memory",
    "pn_min_tmp_disk", "prefer", "priority", "qos", "reboot", "req_context", "req_nodes", "requeue",
    "reservation", "script", "selinux_context", "shared", "site_factor", "sockets_per_node", "spank_job_env",
    "spank_job_env_size", "std_err", "std_in", "std_out", "threads_per_core", "time_limit", "time_min",
    "tres_per_job", "tres_per_node", "tres_per_socket", "tres_per_task", "user_id", "user_name",
    "wait4switch", "wckey", "work_dir",
})

# job_rec fields slurm_job_modify can read in 22.05 (probed on the lab: the record has no num_tasks,
# ntasks_per_node, sockets_per_node, shared, gres or user_name; those read nil).
JOB_REC_FIELDS = frozenset({
    "account", "comment", "partition", "qos", "time_limit", "user_id", "wckey", "tres_per_node", "tres_per_job",
    "tres_per_socket", "tres_per_task", "min_nodes", "max_nodes", "min_cpus", "job_id", "job_state", "name",
})

_MOCK = r"""
local user_msgs, errors, infos = {}, {}, {}
local function fmt(...) return string.format(...) end
slurm = {
  SUCCESS = 0, ERROR = -1, FAILURE = -1,
  NO_VAL = 4294967294, NO_VAL16 = 65534, NO_VAL8 = 254,
  NO_VAL64 = 18446744073709551614, INFINITE64 = 18446744073709551615, INFINITE = 4294967295,
  ESLURM_ACCESS_DENIED = 2002, ESLURM_ACCOUNTING_POLICY = 2050, ESLURM_INVALID_ACCOUNT = 2045,
  ESLURM_INVALID_LICENSES = 2048, ESLURM_INVALID_NODE_COUNT = 2006, ESLURM_INVALID_TIME_LIMIT = 2051,
  ESLURM_JOB_MISSING_SIZE_SPECIFICATION = 2008, ESLURM_MISSING_TIME_LIMIT = 8000,
  jobs = {}, reservations = {},
}
slurm.user_msg = function(msg) user_msgs[#user_msgs + 1] = msg end
slurm.log = function(level, msg) infos[#infos + 1] = msg end
slurm.error = function(msg) errors[#errors + 1] = msg end
slurm.log_user = function(...) slurm.user_msg(fmt(...)) end
slurm.log_error = function(...) slurm.error(fmt(...)) end
for _, name in ipairs({"log_info", "log_verbose", "log_debug", "log_debug2", "log_debug3", "log_debug4"}) do
  slurm[name] = function(...) slurm.log(0, fmt(...)) end
end
slurm.time_str2mins = function(s) return tonumber(s) end

local function proxy(fields, known, explode_on)
  return setmetatable({}, {
    __index = function(_, k)
      if k == explode_on then error("injected failure reading " .. k) end
      if known[k] then return fields[k] end
      return nil
    end,
    __newindex = function(_, k, v) if known[k] then fields[k] = v end end,
  })
end

function gpuclust_sim_reset() user_msgs, errors, infos = {}, {}, {} end
function gpuclust_sim_messages() return user_msgs[#user_msgs], #user_msgs, errors[#errors], #errors end
function gpuclust_sim_infos() return table.concat(infos, "\n") end
function gpuclust_sim_info_list() return infos end
function gpuclust_sim_submit(fields, known, explode_on)
  return slurm_job_submit(proxy(fields, known, explode_on), {}, 0)
end
function gpuclust_sim_modify(desc, rec, known_desc, known_rec, uid)
  local r = nil
  if rec then r = proxy(rec, known_rec, nil) end
  return slurm_job_modify(proxy(desc, known_desc, nil), r, {}, uid)
end
function gpuclust_sim_bench(fields, known, n, plain)
  local job = fields
  if not plain then job = proxy(fields, known, nil) end
  local rc
  for i = 1, n do rc = slurm_job_submit(job, {}, 0) end
  return rc
end
"""


@dataclass
class LuaResult:
    """What one call of a job_submit.lua gave: its return value and what it logged."""

    rc: Any  # whatever the script returned (a number, or None for nil)
    message: str | None  # the last slurm.log_user message
    n_messages: int
    error: str | None  # the last slurm.log_error message
    n_errors: int
    infos: list[str] = field(default_factory=list)  # every slurm.log_info line, in order

    @property
    def accepted(self) -> bool:
        """slurmctld accepts 0 and also nil or non-numbers (it logs "non-numeric return code")."""
        return not isinstance(self.rc, (int, float)) or self.rc == 0


@dataclass
class LuaPolicy:
    """A job_submit.lua loaded into a fresh state of Lua `version` (RUNTIMES) with the 22.05 `slurm` mock."""

    text: str
    version: str = "5.1"
    _lua: Any = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._lua = runtime_module(self.version).LuaRuntime(unpack_returned_tuples=True, encoding="utf-8")
        self._lua.execute(_MOCK)
        loader = self._lua.eval("function(src) local f, err = (loadstring or load)(src, '=job_submit.lua'); "
                                "if not f then error(err) end; return f() end")
        loader(self.text)
        g = self._lua.globals()
        self._submit, self._modify, self._bench = g.gpuclust_sim_submit, g.gpuclust_sim_modify, g.gpuclust_sim_bench
        self._reset, self._messages, self._infos = g.gpuclust_sim_reset, g.gpuclust_sim_messages, g.gpuclust_sim_info_list
        self._known_desc = self._set(JOB_DESC_FIELDS)
        self._known_rec = self._set(JOB_REC_FIELDS)

    def _set(self, names: frozenset[str]) -> Any:
        return self._lua.table_from({n: True for n in names})

    def _table(self, job: Mapping[str, Any]) -> Any:
        return self._lua.table_from({k: _lua_value(v) for k, v in job.items() if v is not None})

    def _result(self, rc: Any) -> LuaResult:
        msg, n_msg, err, n_err = self._messages()
        infos = self._infos()
        return LuaResult(rc, msg, int(n_msg), err, int(n_err), [infos[i] for i in range(1, len(infos) + 1)])

    def submit(self, job: Mapping[str, Any], *, explode_on: str | None = None) -> LuaResult:
        self._reset()
        return self._result(self._submit(self._table(job), self._known_desc, explode_on))

    def modify(self, desc: Mapping[str, Any], rec: Mapping[str, Any] | None, modify_uid: int) -> LuaResult:
        self._reset()
        rec_t = self._table(rec) if rec is not None else None
        return self._result(self._modify(self._table(desc), rec_t, self._known_desc, self._known_rec, modify_uid))

    def bench(self, job: Mapping[str, Any], n: int, *, plain: bool = False) -> Any:
        """Call slurm_job_submit n times inside Lua (no Python<->Lua crossing per call).

        plain=True passes a plain table (field reads cost nothing) to time the engine alone; otherwise the
        field-restricted proxy, whose __index is a Lua function, as an upper bound on field access.
        """
        return self._bench(self._table(job), self._known_desc, n, plain)

    def eval(self, expr: str) -> Any:
        return self._lua.eval(expr)


def _lua_value(v: Any) -> Any:
    if isinstance(v, bool):
        return v
    if isinstance(v, int):
        return float(v)  # Lua 5.1 numbers are doubles; lupa cannot push ints beyond 64 bits
    return v
