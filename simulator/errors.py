"""Errors raised for user mistakes; the CLI turns them into one line and exit code 2."""


class ClusterSimError(Exception):
    """Base class of every error a user can cause with bad input."""


class ConfigError(ClusterSimError):
    """A configuration value is wrong.

    The message always names where: ``source`` (a file or "--option") and ``field``
    (a dotted key path) when they are known.
    """

    def __init__(self, message: str, *, source: str | None = None, field: str | None = None):
        self.source = source
        self.field = field
        self.reason = message
        super().__init__(self._format())

    def _format(self) -> str:
        where = ": ".join(part for part in (self.source, self.field) if part)
        return f"{where}: {self.reason}" if where else self.reason

    def located(self, source: str) -> "ConfigError":
        """The same error, attributed to ``source`` when it has no source yet."""
        if self.source:
            return self
        return ConfigError(self.reason, source=source, field=self.field)


class TopologyError(ClusterSimError):
    """The cluster graph is unusable (disconnected, no GPUs, a missing route...)."""
