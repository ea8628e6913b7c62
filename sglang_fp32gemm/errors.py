"""Errors that stop start-up with a message naming the file, line or variable."""

import os
import re
import stat
from pathlib import Path

#: A quoted value longer than this is cut in the message (a 100 KB kernelName
#: must not make a 200,000-character "one line" error).
MAX_VALUE_CHARS = 200
MAX_MESSAGE_CHARS = 1000
_LONG_RUN = re.compile(r"\S{%d,}" % (MAX_VALUE_CHARS + 1))


def shorten(msg: str) -> str:
    """``msg`` with every run of more than MAX_VALUE_CHARS non-space characters cut in its middle,
    and the whole kept under MAX_MESSAGE_CHARS; the file:line at its start always stays."""
    keep = MAX_VALUE_CHARS // 2

    def cut(m: "re.Match[str]") -> str:
        v = m.group(0)
        return f"{v[:keep]}...[{len(v) - 2 * keep} chars]...{v[-keep:]}"

    msg = _LONG_RUN.sub(cut, msg)
    if len(msg) > MAX_MESSAGE_CHARS:
        half = MAX_MESSAGE_CHARS // 2
        msg = f"{msg[:half]}...[{len(msg) - 2 * half} chars]...{msg[-half:]}"
    return msg


def one_line(text: object) -> str:
    """``text`` as one line: its non-blank lines, stripped, joined by spaces."""
    return " ".join(line.strip() for line in str(text).splitlines() if line.strip())


class ConfigError(ValueError):
    """A setting, tuned table or layer file is wrong; the message says where (and stays readable)."""

    def __init__(self, msg: str = "") -> None:
        super().__init__(shorten(str(msg)))


#: Configuration files are small; a larger one is a wrong path, not a table.
MAX_CONFIG_BYTES = 64 << 20

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def _check_regular(p: Path, what: str, st: os.stat_result) -> None:
    if not stat.S_ISREG(st.st_mode):
        kind = next((name for test, name in _KINDS if test(st.st_mode)), "not a regular file")
        raise ConfigError(f"{p}: {what} is {kind}, not a regular file")
    if st.st_size > MAX_CONFIG_BYTES:
        raise ConfigError(f"{p}: {what} is {st.st_size} bytes, more than a configuration file can be "
                          f"({MAX_CONFIG_BYTES} bytes)")


def read_config_text(path, what: str) -> str:
    """A configuration file's UTF-8 text (BOM or not), or a ConfigError naming the file.

    Only regular files: checked before opening (a FIFO never blocks) and again after a non-blocking open.
    """
    p = Path(path)
    try:
        _check_regular(p, what, os.stat(p))
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
                     | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        raise ConfigError(f"{p}: {what} not found") from None
    except OSError as e:
        raise ConfigError(f"{p}: {what} unreadable ({e.strerror or e})") from None
    try:
        with os.fdopen(fd, "rb") as f:
            _check_regular(p, what, os.fstat(f.fileno()))  # swapped after the stat above
            data = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as e:
        raise ConfigError(f"{p}: {what} unreadable ({e.strerror or e})") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{p}: {what} is larger than a configuration file can be ({MAX_CONFIG_BYTES} bytes)")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise ConfigError(f"{p}:{line}: {what} is not UTF-8 text (byte 0x{data[e.start]:02x} at offset "
                          f"{e.start})") from None
