"""The one way data enters rendered Lua: lua_string. A leaf module, so the renderer (gpuclust.policy.render)
and the validator (gpuclust.policy.install) both use it without importing each other."""

from __future__ import annotations

# The first byte of each of these words is escaped inside a literal, so no config value can spell one of the
# patterns gpuclust.policy.render.FORBIDDEN lints the rendered file for.
FORBIDDEN_WORDS = (b"io.", b"os.execute", b"popen", b"require", b"dofile", b"load", b"module", b"package")


def lua_string(value: str | bytes) -> str:
    """The one way any data enters the rendered Lua: a double-quoted Lua 5.1 literal. Quotes and backslashes are
    escaped; everything outside printable ASCII (newlines, NUL, UTF-8 bytes) becomes a \\ddd escape, so a value
    can never end the literal, open a comment or a long bracket, or span lines; the first byte of a FORBIDDEN_WORDS
    occurrence is escaped too."""
    data = value.encode("utf-8") if isinstance(value, str) else value
    out = ['"']
    for i, byte in enumerate(data):
        ch = chr(byte)
        if ch in '"\\':
            out.append("\\" + ch)
        elif 32 <= byte < 127 and not any(data.startswith(w, i) for w in FORBIDDEN_WORDS):
            out.append(ch)
        else:
            out.append(f"\\{byte:03d}")
    out.append('"')
    return "".join(out)
