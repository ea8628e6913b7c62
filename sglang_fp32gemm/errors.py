"""Errors that stop start-up with a message naming the file, line or variable."""

from pathlib import Path


class ConfigError(ValueError):
    """A setting, tuned table or layer file is wrong; the message says where."""


def read_config_text(path, what: str) -> str:
    """A configuration file's text, or a ConfigError naming the file."""
    p = Path(path)
    try:
        return p.read_text()
    except FileNotFoundError:
        raise ConfigError(f"{p}: {what} not found") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{p}: {what} unreadable ({e})") from None
