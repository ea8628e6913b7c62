"""Errors that stop start-up with a message naming the file, line or variable."""


class ConfigError(ValueError):
    """A setting, tuned table or layer file is wrong; the message says where."""
