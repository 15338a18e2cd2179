"""The one exception type for a bad configuration: its message is one line that names the fix."""


class ConfigError(ValueError):
    pass
