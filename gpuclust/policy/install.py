"""Install a job_submit.lua without ever leaving slurmctld a broken one.

Slurm 24.11's slurmctld EXITS when `scontrol reconfigure` meets a job_submit.lua that fails to load ("failed to
initialize job_submit plugin"); 22.05 kept the previous script. So a new script is validated under Lua 5.1 first,
exactly the way slurmctld loads it (job_submit_lua.c: run the chunk, which must return slurm.SUCCESS, then require
slurm_job_submit and slurm_job_modify), plus one call of each on an empty job, and only then moved into place:

1. write a temp file in the target's directory, fsync it, give it the old file's mode (else 0644);
2. validate the temp file in a child process (time-limited): Debian's `lua5.1`, else liblua5.1 (the library
   job_submit_lua.so links) through ctypes;
3. rename it over the target (atomic on one filesystem), fsync the directory.

Any failure removes the temp file and leaves the target as it was.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from gpuclust.atomicfile import write_atomic
from gpuclust.errors import InputError, Problem
from gpuclust.policy.luastring import lua_string

VALIDATE_TIMEOUT_S = 30.0

# The 22.05 `slurm` table (names that exist in every supported version), with silent log functions.
_DRIVER = r"""
slurm = {
  SUCCESS = 0, ERROR = -1, FAILURE = -1, NO_VAL = 4294967294, NO_VAL16 = 65534, NO_VAL8 = 254,
  NO_VAL64 = 18446744073709551614, INFINITE64 = 18446744073709551615, INFINITE = 4294967295,
  ESLURM_ACCESS_DENIED = 2002, ESLURM_ACCOUNTING_POLICY = 2050, ESLURM_INVALID_ACCOUNT = 2045,
  ESLURM_INVALID_LICENSES = 2048, ESLURM_INVALID_NODE_COUNT = 2006, ESLURM_INVALID_TIME_LIMIT = 2051,
  ESLURM_JOB_MISSING_SIZE_SPECIFICATION = 2008, ESLURM_MISSING_TIME_LIMIT = 8000, jobs = {}, reservations = {},
}
local function nop() end
for _, n in ipairs({"log_user", "log_info", "log_verbose", "log_debug", "log_debug2", "log_debug3", "log_debug4",
                    "log_error", "error", "log", "user_msg"}) do slurm[n] = nop end
slurm.time_str2mins = function(s) return tonumber(s) end
local function fail(msg) io.stderr:write(msg, "\n"); os.exit(1) end
local chunk, err = loadfile(GPUCLUST_PATH)
if not chunk then fail("does not load: " .. tostring(err)) end
local ok, rc = pcall(chunk)
if not ok then fail("error while loading: " .. tostring(rc)) end
if rc ~= 0 then fail("returned " .. tostring(rc) .. " on load (slurmctld needs slurm.SUCCESS)") end
if type(slurm_job_submit) ~= "function" then fail("defines no slurm_job_submit function") end
if type(slurm_job_modify) ~= "function" then fail("defines no slurm_job_modify function") end
local ok1, r1 = pcall(slurm_job_submit, {}, {}, 1000)
if not ok1 or type(r1) ~= "number" then fail("slurm_job_submit on an empty job: " .. tostring(r1)) end
local ok2, r2 = pcall(slurm_job_modify, {}, {}, {}, 1000)
if not ok2 or type(r2) ~= "number" then fail("slurm_job_modify on an empty job: " .. tostring(r2)) end
os.exit(0)
"""

_CTYPES_CHILD = r"""
import ctypes, ctypes.util, sys
name = ctypes.util.find_library("lua5.1") or "liblua5.1.so.0"
try:
    lib = ctypes.CDLL(name)
except OSError as exc:
    sys.stderr.write(f"no Lua 5.1 to validate with: neither lua5.1 nor {name} ({exc}); install Debian's lua5.1\n")
    sys.exit(3)
lib.luaL_newstate.restype = ctypes.c_void_p
lib.luaL_openlibs.argtypes = [ctypes.c_void_p]
lib.luaL_loadstring.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
lib.lua_pcall.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int]
lib.lua_tolstring.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
lib.lua_tolstring.restype = ctypes.c_char_p
L = lib.luaL_newstate()
lib.luaL_openlibs(L)
src = sys.stdin.buffer.read()
if lib.luaL_loadstring(L, src) != 0 or lib.lua_pcall(L, 0, 0, 0) != 0:
    sys.stderr.write("validator failed: " + (lib.lua_tolstring(L, -1, None) or b"?").decode("utf-8", "replace") + "\n")
    sys.exit(1)
"""


def _driver_for(path: Path) -> str:
    return f"GPUCLUST_PATH = {lua_string(str(path))}\n" + _DRIVER


def lua_validator() -> str:
    """Which Lua 5.1 validates scripts here: a path to lua5.1, or 'liblua5.1 (ctypes)'."""
    return shutil.which("lua5.1") or "liblua5.1 (ctypes)"


def validate_lua_file(path: str | Path) -> None:
    """Raise InputError unless `path` loads under Lua 5.1 the way slurmctld's job_submit/lua loads it."""
    path = Path(path)
    driver = _driver_for(path.resolve())
    lua = shutil.which("lua5.1")
    if lua:
        argv = [lua, "-"]
    else:
        argv = [sys.executable, "-c", _CTYPES_CHILD]
    try:
        cp = subprocess.run(argv, input=driver.encode("utf-8"), capture_output=True, timeout=VALIDATE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise InputError(Problem(str(path), None, f"Lua 5.1 validation did not finish in {VALIDATE_TIMEOUT_S:g}s")) from None
    except OSError as exc:
        raise InputError(Problem(str(path), None, f"cannot run the Lua 5.1 validator {argv[0]}: {exc}")) from None
    if cp.returncode != 0:
        detail = cp.stderr.decode("utf-8", "replace").strip() or f"exit {cp.returncode}"
        raise InputError(Problem(str(path), None, f"not a valid job_submit.lua under Lua 5.1: {detail}"))


def install_lua(text: str, out: str | Path) -> Path:
    """Validate `text` as a job_submit.lua, then atomically replace `out` with it; `out` is untouched on failure."""
    path = Path(out)
    if path.is_dir():
        raise InputError(Problem(str(path), None, "is a directory; give the job_submit.lua file path"))
    write_atomic(path, text, mode=None, check=validate_lua_file, input_error=True)
    return path


def main(argv: list[str] | None = None) -> int:
    """`python -m gpuclust.policy.install FILE`: validate FILE (exit 0) or print why not (exit 1)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.stderr.write("usage: python -m gpuclust.policy.install JOB_SUBMIT_LUA\n")
        return 2
    try:
        validate_lua_file(args[0])
    except InputError as exc:
        sys.stderr.write(f"{exc}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
