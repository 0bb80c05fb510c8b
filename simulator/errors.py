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


# pydantic's loc entries that name a union member or a container type, not a key (an
# entry ending in "[" drops every tag it starts)
TYPE_TAGS = ("int", "bool", "str", "float", "none", "list[", "literal[")


def validation_error(exc, *, source: str | None = None, prefix: str = "", valid=None,
                     depth: int | None = None, skip: tuple[str, ...] = (),
                     style: str = "plain", brackets: bool = False,
                     suggest=None) -> ConfigError:
    """The one-line :class:`ConfigError` for a pydantic ``ValidationError`` ``exc``.

    The field is pydantic's location of the error, dotted: without the entries in ``skip``
    (union-member and container tags such as :data:`TYPE_TAGS`), cut to its first
    ``depth`` keys, under ``prefix`` (list positions as ``[i]`` with ``brackets``, as in
    ``questions[2].per``; else as dotted keys). Unknown keys: with ``valid`` (the schema's key names,
    or a function of the first unknown key's location giving them) every unknown key of
    the input is listed with the valid ones (``unknown key(s) 'a', 'b'; valid: ...``).
    Otherwise the first error, worded by ``style``:

    * ``raw``: pydantic's message;
    * ``keys``: ``unknown key``, ``missing required key``, or pydantic's message;
    * ``plain``: ``unknown key``, or the message without its ``Value error, `` prefix;
    * ``got``: ``missing required key``, or the message lower-cased and ``, got <input>``;
    * ``paren``: ``unknown key``, ``missing required key`` or the message without
      ``Value error, ``, then `` (got <input>)`` unless the message already says what it got.

    ``suggest`` (a function of an unknown key's location giving the valid names there)
    adds ``; did you mean 'micro_batch'?`` to an unknown key close to a valid one.

    ``exc`` is duck-typed (its ``errors()``), so this module needs no pydantic.
    """
    errors = exc.errors()
    extra = [e for e in errors if e["type"] == "extra_forbidden"]
    if extra and valid is not None:
        names = valid(extra[0]["loc"]) if callable(valid) else valid
        keys = ", ".join(shown(str(e["loc"][-1])) for e in extra[:5]) + (
            f" and {len(extra) - 5} more" if len(extra) > 5 else "")
        return ConfigError(f"unknown key(s) {keys}; valid: {', '.join(names)}", source=source,
                           field=_error_field(extra[0]["loc"], prefix, depth, skip, brackets))
    first = errors[0]
    reason = _error_reason(first, style)
    if suggest is not None and first["type"] == "extra_forbidden":
        reason += did_you_mean(str(first["loc"][-1]), suggest(first["loc"]))
    return ConfigError(reason, source=source,
                       field=_error_field(first["loc"], prefix, depth, skip, brackets))


def did_you_mean(name: str, valid) -> str:
    """``; did you mean 'micro_batch'?`` for the valid name closest to ``name`` (difflib's
    ratio at least 0.75: one or two letters off), else ``""``."""
    import difflib
    close = difflib.get_close_matches(name, [str(v) for v in valid or ()], n=1, cutoff=0.75)
    return f"; did you mean {close[0]!r}?" if close else ""


def _error_field(loc, prefix: str, depth: int | None, skip: tuple[str, ...],
                 brackets: bool = False) -> str | None:
    tags = tuple(t for t in skip if t.endswith("["))
    keys = [x for x in loc if not (str(x) in skip or (tags and str(x).startswith(tags)))]
    keys = keys[:depth] if depth is not None else keys
    parts = [f"[{k}]" if brackets and isinstance(k, int) else str(k) for k in keys]
    field = ".".join([prefix, *parts] if prefix else parts)
    return (field.replace(".[", "[") if brackets else field) or None


SHOWN_CHARS = 60            # of a bad value in a refusal: a 1,000-item list is not repeated


def shown(value) -> str:
    """``repr(value)`` as a refusal shows it: at most :data:`SHOWN_CHARS` characters."""
    text = repr(value)
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS - 3] + "..."


def _error_reason(err: dict, style: str) -> str:
    msg, kind = err["msg"], err["type"]
    if style == "raw":
        return msg
    if style == "got":
        if kind == "missing":
            return "missing required key"
        return f"{msg[:1].lower()}{msg[1:]}, got {shown(err.get('input'))}"
    if kind == "extra_forbidden":
        if style != "paren":
            return "unknown key"
        return f"unknown key (got {shown(err.get('input'))})"
    if kind == "missing" and style in ("keys", "paren"):
        return "missing required key"
    if style == "keys":
        return msg
    msg = msg.removeprefix("Value error, ")
    if style == "paren" and ", got " not in msg:
        msg = f"{msg} (got {shown(err.get('input'))})"
    return msg
