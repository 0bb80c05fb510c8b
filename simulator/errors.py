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


# pydantic's loc entries that name a union member or a container type, not a key
_TYPE_TAGS = ("int", "bool", "str", "float", "none")
_TYPE_TAG_PREFIXES = ("list[", "literal[")


def validation_error(exc, *, source: str | None = None, prefix: str = "",
                     valid=None, depth: int | None = None, drop_type_tags: bool = False,
                     style: str = "plain") -> ConfigError:
    """The one-line :class:`ConfigError` for a pydantic ``ValidationError`` ``exc``.

    The field is pydantic's location of the error, dotted: without union-member and
    container tags when ``drop_type_tags``, cut to its first ``depth`` keys, under
    ``prefix``. Unknown keys: with ``valid`` (the schema's key names) every unknown key of
    the input is listed with the valid ones (``unknown key(s) 'a', 'b'; valid: ...``),
    else the first is ``unknown key``. Any other error is the first one, worded by
    ``style``:

    * ``plain``: pydantic's message without its ``Value error, `` prefix;
    * ``got``: ``missing required key``, or the message lower-cased and ``, got <input>``;
    * ``paren``: ``missing required key``, or the message without ``Value error, `` and
      `` (got <input>)`` unless the message already says what it got.

    ``exc`` is duck-typed (its ``errors()``), so this module needs no pydantic.
    """
    errors = exc.errors()
    extra = [e for e in errors if e["type"] == "extra_forbidden"]
    if extra and valid is not None:
        keys = ", ".join(repr(str(e["loc"][-1])) for e in extra)
        return ConfigError(f"unknown key(s) {keys}; valid: {', '.join(valid)}", source=source,
                           field=_error_field(extra[0]["loc"], prefix, depth, drop_type_tags))
    first = errors[0]
    field = _error_field(first["loc"], prefix, depth, drop_type_tags)
    return ConfigError(_error_reason(first, style), source=source, field=field)


def _error_field(loc, prefix: str, depth: int | None, drop_type_tags: bool) -> str | None:
    keys = [str(x) for x in loc]
    if drop_type_tags:
        keys = [k for k in keys if not k.startswith(_TYPE_TAG_PREFIXES) and k not in _TYPE_TAGS]
    keys = keys[:depth] if depth is not None else keys
    return ".".join([prefix, *keys] if prefix else keys) or None


def _error_reason(err: dict, style: str) -> str:
    msg, kind = err["msg"], err["type"]
    if style == "got":
        if kind == "missing":
            return "missing required key"
        return f"{msg[:1].lower()}{msg[1:]}, got {err.get('input')!r}"
    if kind == "extra_forbidden":
        msg = "unknown key"
    elif kind == "missing" and style == "paren":
        msg = "missing required key"
    msg = msg.removeprefix("Value error, ")
    if style == "paren" and kind != "missing" and ", got " not in msg:
        msg = f"{msg} (got {err.get('input')!r})"
    return msg
