"""Install a job_submit.lua without ever leaving slurmctld a broken one.

Slurm 24.11's slurmctld EXITS when `scontrol reconfigure` meets a job_submit.lua that fails to load ("failed to
initialize job_submit plugin"); 22.05 kept the previous script. So a new script is validated first, under the Lua
that the site's slurmctld links (Debian: 5.1; RHEL 9 and its rebuilds: 5.4; see lua_of_plugin), exactly the way
slurmctld loads it (job_submit_lua.c: run the chunk, which must return slurm.SUCCESS, then require
slurm_job_submit and slurm_job_modify), plus calls of each on an empty job and on a GPU job whose numbers are
floats as slurmctld pushes them (a runtime error there is refused: the engine would fail on every job), and only
then moved into place:

1. write a temp file in the target's directory, fsync it, give it the old file's mode (else 0644);
2. validate the temp file in a child process (time-limited) under that Lua: its interpreter (`lua5.4`, `lua` when
   `lua -v` says 5.4, `luajit`), else lupa's runtime of that version when lupa is installed, else the shared
   library (liblua5.1, liblua5.4 ...) through ctypes;
3. rename it over the target (atomic on one filesystem), fsync the directory.

Any failure removes the temp file and leaves the target as it was.
"""

from __future__ import annotations

import ctypes.util
import functools
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from gpuclust.atomicfile import write_atomic
from gpuclust.config.site import LUA_VERSIONS
from gpuclust.errors import InputError, Problem
from gpuclust.policy.luastring import lua_string

VALIDATE_TIMEOUT_S = 30.0
DEFAULT_LUA = "5.1"  # Debian's slurmctld (and every lab here)

# Where distributions put Slurm's plugins (PluginDir): Debian/Ubuntu, RHEL/Rocky/Alma (EPEL, SchedMD RPMs), source builds.
PLUGIN_DIRS = (
    "/usr/lib/x86_64-linux-gnu/slurm-wlm", "/usr/lib/aarch64-linux-gnu/slurm-wlm", "/usr/lib/slurm-wlm",
    "/usr/lib64/slurm", "/usr/lib/slurm", "/usr/local/lib/slurm", "/usr/local/lib64/slurm", "/opt/slurm/lib/slurm",
    "/opt/slurm/lib64/slurm",
)
PLUGIN = "job_submit_lua.so"

# The 22.05 `slurm` table (names that exist in every supported version), with silent log functions but
# log_error, which records: the engine logs its internal errors there.
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
                    "error", "log", "user_msg"}) do slurm[n] = nop end
local logged_errors = {}
slurm.log_error = function(...) logged_errors[#logged_errors + 1] = string.format(...) end
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
-- a GPU job as slurmctld pushes it (numbers are floats from Lua 5.3 on)
local job = { user_name = "gpuclust-validate", account = "gpuclust-validate", partition = "gpuclust-validate",
  tres_per_node = "gres:gpu:2", gres = "gres:gpu:2", tres_per_job = "gres/gpu:h100=1", comment = "k=v",
  min_nodes = 2.0, max_nodes = 2.0, num_tasks = 4.0, min_cpus = 4.0, ntasks_per_node = 2.0, shared = 0.0,
  sockets_per_node = 65534.0, ntasks_per_tres = 65534.0, time_limit = 60.0 }
local ok3, r3 = pcall(slurm_job_submit, job, {}, 1000)
if not ok3 or type(r3) ~= "number" then fail("slurm_job_submit on a GPU job: " .. tostring(r3)) end
if logged_errors[1] then fail("the script logged an error (slurm.log_error): " .. logged_errors[1]) end
os.exit(0)
"""

_LUPA_CHILD = r"""
import importlib, sys
try:
    lupa = importlib.import_module("lupa." + sys.argv[1])
except ImportError as exc:
    sys.stderr.write(f"lupa has no {sys.argv[1]}: {exc}\n")
    sys.exit(3)
try:
    lupa.LuaRuntime().execute(sys.stdin.buffer.read().decode("utf-8"))
except Exception as exc:
    sys.stderr.write(f"validator failed: {exc}\n")
    sys.exit(1)
"""

_CTYPES_CHILD = r"""
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
lib.luaL_newstate.restype = ctypes.c_void_p
lib.luaL_openlibs.argtypes = [ctypes.c_void_p]
lib.luaL_loadstring.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
lib.lua_tolstring.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
lib.lua_tolstring.restype = ctypes.c_char_p
if hasattr(lib, "lua_pcallk"):  # 5.2+: lua_pcall is a macro over lua_pcallk
    lib.lua_pcallk.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    pcall = lambda L: lib.lua_pcallk(L, 0, 0, 0, None, None)
else:
    lib.lua_pcall.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    pcall = lambda L: lib.lua_pcall(L, 0, 0, 0)
L = lib.luaL_newstate()
lib.luaL_openlibs(L)
src = sys.stdin.buffer.read()
if lib.luaL_loadstring(L, src) != 0 or pcall(L) != 0:
    sys.stderr.write("validator failed: " + (lib.lua_tolstring(L, -1, None) or b"?").decode("utf-8", "replace") + "\n")
    sys.exit(1)
"""

# The names each version's interpreter and shared library go by (Debian, RHEL, upstream).
_BINARIES = {"5.1": ("lua5.1", "lua-5.1"), "5.2": ("lua5.2", "lua-5.2"), "5.3": ("lua5.3", "lua-5.3"),
             "5.4": ("lua5.4", "lua-5.4"), "luajit": ("luajit",)}
_LIBRARIES = {"5.1": ("lua5.1", "lua-5.1"), "5.2": ("lua5.2", "lua-5.2"), "5.3": ("lua5.3", "lua-5.3"),
              "5.4": ("lua5.4", "lua-5.4"), "luajit": ("luajit-5.1",)}
_LUPA = {"5.1": "lua51", "5.2": "lua52", "5.3": "lua53", "5.4": "lua54", "luajit": "luajit21"}


def lua_label(version: str) -> str:
    return "LuaJIT" if version == "luajit" else f"Lua {version}"


@dataclass(frozen=True)
class LuaChoice:
    """The Lua a script is validated under, and how that was decided (for the user)."""

    version: str
    why: str


def lua_of_library(name: str) -> str | None:
    """The Lua version a shared-library name is: liblua5.1.so.0 (Debian), liblua-5.4.so (RHEL), liblua.so.5.4,
    libluajit-5.1.so.2 (LuaJIT, which speaks 5.1); None when it is no Lua."""
    if re.match(r"libluajit", name):
        return "luajit"
    match = re.match(r"liblua[-.]?(5\.[1-4])\b", name) or re.match(r"liblua\.so\.(5\.[1-4])\b", name)
    return match.group(1) if match else None


def needed_libraries(path: str | Path) -> list[str]:
    """The DT_NEEDED entries of an ELF shared object (what `readelf -d` lists as NEEDED), read without readelf."""
    import struct

    data = Path(path).read_bytes()
    if data[:4] != b"\x7fELF":
        raise ValueError("not an ELF file")
    is64, little = data[4] == 2, data[5] == 1
    e = "<" if little else ">"
    if is64:
        shoff, = struct.unpack_from(e + "Q", data, 0x28)
        shentsize, shnum = struct.unpack_from(e + "HH", data, 0x3A)
    else:
        shoff, = struct.unpack_from(e + "I", data, 0x20)
        shentsize, shnum = struct.unpack_from(e + "HH", data, 0x2E)
    sections = []
    for i in range(shnum):
        base = shoff + i * shentsize
        if is64:
            _, stype, _, _, off, size, link, _, _, entsize = struct.unpack_from(e + "IIQQQQIIQQ", data, base)
        else:
            _, stype, _, _, off, size, link, _, _, entsize = struct.unpack_from(e + "IIIIIIIIII", data, base)
        sections.append((stype, off, size, link, entsize))
    out = []
    for stype, off, size, link, entsize in sections:
        if stype != 6:  # SHT_DYNAMIC
            continue
        strtab_off = sections[link][1]
        fmt, step = (e + "qQ", 16) if is64 else (e + "iI", 8)
        for pos in range(off, off + size, entsize or step):
            tag, val = struct.unpack_from(fmt, data, pos)
            if tag == 0:
                break
            if tag == 1:  # DT_NEEDED
                end = data.index(b"\0", strtab_off + val)
                out.append(data[strtab_off + val:end].decode("utf-8", "replace"))
    return out


def find_plugin(plugin_dirs: tuple[str, ...] | list[str] = PLUGIN_DIRS) -> Path | None:
    for d in plugin_dirs:
        p = Path(d) / PLUGIN
        if p.is_file():
            return p
    return None


def lua_of_plugin(plugin: str | Path) -> str | None:
    """The Lua that a job_submit_lua.so links (from its NEEDED libraries); None when none is named."""
    try:
        names = needed_libraries(plugin)
    except Exception:  # noqa: BLE001 - an unreadable or odd plugin file: the Lua is not known
        return None
    for name in names:
        version = lua_of_library(name)
        if version:
            return version
    return None


def choose_lua(configured: str | None, plugin_dirs: tuple[str, ...] | list[str] = PLUGIN_DIRS) -> LuaChoice:
    """[policy] lua when set, else what the site's job_submit_lua.so links, else Lua 5.1."""
    if configured:
        return LuaChoice(configured, "[policy] lua")
    plugin = find_plugin(plugin_dirs)
    if plugin is None:
        return LuaChoice(DEFAULT_LUA, f"the default: no {PLUGIN} found (set [policy] lua)")
    version = lua_of_plugin(plugin)
    if version is None:
        return LuaChoice(DEFAULT_LUA, f"the default: {plugin} names no Lua library (set [policy] lua)")
    return LuaChoice(version, f"{plugin} links it")


def _driver_for(path: Path) -> str:
    return f"GPUCLUST_PATH = {lua_string(str(path))}\n" + _DRIVER


def _interpreter(version: str) -> str | None:
    for name in _BINARIES[version]:
        found = shutil.which(name)
        if found:
            return found
    plain = shutil.which("lua")  # RHEL names its only Lua `lua`
    if plain and version != "luajit":
        try:
            cp = subprocess.run([plain, "-v"], capture_output=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        if re.match(rf"Lua {re.escape(version)}\.", (cp.stdout + cp.stderr).decode("utf-8", "replace")):
            return plain
    return None


def _has_lupa(version: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec("lupa." + _LUPA[version]) is not None
    except ImportError:
        return False


def _library(version: str) -> str | None:
    for name in _LIBRARIES[version]:
        found = ctypes.util.find_library(name)
        if found:
            return found
    return None


def validator_argv(version: str = DEFAULT_LUA) -> list[str] | None:
    """How a script is run under Lua `version` here (the driver on stdin), or None when nothing can."""
    lua = _interpreter(version)
    if lua:
        return [lua, "-"]
    if _has_lupa(version):
        return [sys.executable, "-c", _LUPA_CHILD, _LUPA[version]]
    lib = _library(version)
    if lib:
        return [sys.executable, "-c", _CTYPES_CHILD, lib]
    return None


def lua_validator(version: str = DEFAULT_LUA) -> str:
    """Which Lua validates scripts here: a path to an interpreter, 'lupa ...' or 'LIB (ctypes)'."""
    argv = validator_argv(version)
    if argv is None:
        return "none"
    if argv[0] != sys.executable:
        return argv[0]
    return f"lupa.{argv[3]}" if argv[2] == _LUPA_CHILD else f"{argv[3]} (ctypes)"


def validate_lua_file(path: str | Path, version: str = DEFAULT_LUA) -> None:
    """Raise InputError unless `path` loads and runs under Lua `version` the way slurmctld's job_submit/lua does."""
    path = Path(path)
    label = lua_label(version)
    driver = _driver_for(path.resolve())
    argv = validator_argv(version)
    if argv is None:
        pkg = "luajit" if version == "luajit" else f"lua{version}"
        raise InputError(Problem(str(path), None, f"no {label} to validate with (the Lua slurmctld's {PLUGIN} links): "
                                 f"install its interpreter (Debian: {pkg}; RHEL: lua) or lupa, or set [policy] lua"))
    try:
        cp = subprocess.run(argv, input=driver.encode("utf-8"), capture_output=True, timeout=VALIDATE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise InputError(Problem(str(path), None, f"{label} validation did not finish in {VALIDATE_TIMEOUT_S:g}s")) from None
    except OSError as exc:
        raise InputError(Problem(str(path), None, f"cannot run the {label} validator {argv[0]}: {exc}")) from None
    if cp.returncode != 0:
        detail = cp.stderr.decode("utf-8", "replace").strip() or f"exit {cp.returncode}"
        raise InputError(Problem(str(path), None, f"not a valid job_submit.lua under {label}: {detail}"))


def install_lua(text: str, out: str | Path, version: str = DEFAULT_LUA) -> Path:
    """Validate `text` as a job_submit.lua under Lua `version`, then atomically replace `out` with it; `out` is
    untouched on failure."""
    path = Path(out)
    if path.is_dir():
        raise InputError(Problem(str(path), None, "is a directory; give the job_submit.lua file path"))
    write_atomic(path, text, mode=None, check=functools.partial(validate_lua_file, version=version), input_error=True)
    return path


def main(argv: list[str] | None = None) -> int:
    """`python -m gpuclust.policy.install [--lua VERSION] FILE`: validate FILE (exit 0) or print why not (exit 1).
    Without --lua: the Lua this machine's job_submit_lua.so links, else 5.1."""
    args = sys.argv[1:] if argv is None else list(argv)
    version = None
    if len(args) == 3 and args[0] == "--lua" and args[1] in LUA_VERSIONS:
        version, args = args[1], args[2:]
    if len(args) != 1:
        sys.stderr.write(f"usage: python -m gpuclust.policy.install [--lua {'|'.join(LUA_VERSIONS)}] JOB_SUBMIT_LUA\n")
        return 2
    try:
        validate_lua_file(args[0], choose_lua(version).version)
    except InputError as exc:
        sys.stderr.write(f"{exc}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
