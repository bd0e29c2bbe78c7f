"""Credentials out of everything a job writes: ``<redacted sha256:…>`` in place of the value.

A job folder is read by people and tools that should not get the credentials a pipeline was
given (``storage_options`` account keys, SAS tokens, connection strings, passphrases): the
saved configuration, ``resolved_config.json``, ``dag_execution_plan.json``, ``events.jsonl``,
``job_summary.json``, the driver log and the report built from them. Every writer passes what
it writes through :func:`redact` (the driver log through :class:`ScrubbingFormatter`), and the
configuration fingerprint applies the same name rule while it normalizes a pipeline.

- **By name** (:func:`is_secret_name`), at any depth of a mapping (or of a held object's
  attributes): every value under a name with a word ``secret``, ``password``, ``passwd``,
  ``pwd``, ``passphrase``, ``credential(s)``, ``creds``, ``auth``, ``authorization``,
  ``cookie``, ``sig``, ``signature`` or ``sas``, a word containing ``secret``, ``passw``,
  ``passphrase`` or ``credential``, the words ``connection string`` / ``conn str``, or a word
  ``key`` or ``token`` (or ending so: ``apikey``) unless the name's last word says it is about
  a key (:data:`_ABOUT`: ``key_prefix``, ``key_field``, ``token_count``, ``key_file``). Words
  are split at ``_``, ``-``, ``.``, other punctuation and camelCase (``AccessKeyId``: access,
  key, id), case ignored. So ``account_key``, ``aws_secret_access_key``, ``AccessKeyId``,
  ``sas_token``, ``connectionString`` and ``Authorization`` match; ``keep_outputs``,
  ``keys``, ``tokens``, ``max_tokens`` and ``tokenizer`` do not. ``sort_key`` or
  ``pad_token`` match too: a redacted non-secret only costs readability, and it still
  compares by digest.
- **In text**: ``name=value`` and ``name: value`` with such a name (a dict's repr, JSON, a
  connection string's ``AccountKey=…``, a URL's ``sig=…``), in every string; and in free text
  (``error``, ``message``, ``command``, ``resume_command``, log lines) every secret value of the
  job's configuration of at least :data:`MIN_SCRUBBED` characters, wherever it appears.

``None`` and booleans stay (they hold no secret and say what was set). Any other value under a
secret name becomes ``<redacted sha256:XXXXXXXXXXXX>`` (containers: each of their values), where
``XXXXXXXXXXXX`` is the first 12 hex digits of PBKDF2-HMAC-SHA256 of the value with a fixed salt
and :data:`ROUNDS` rounds. Not keyed per user or per job: a strict resume must compare the same
value to the same digest on any host and for any user, and a stage checkpoint's chain
fingerprint must not depend on the job. Not a plain sha256 either: a weak passphrase could then
be guessed from a job folder at billions of tries a second; each try now costs 100,000 HMACs.
A long random credential (an account key, a SAS signature) cannot be recovered either way.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import json
import logging
import re
from collections.abc import Collection, Iterator, Mapping
from typing import Any

ROUNDS = 100_000
MIN_SCRUBBED = 4  # shorter secret values are not searched for in free text (too many hits)
FREE_TEXT = frozenset({"error", "message", "command", "resume_command", "traceback"})
_SALT = b"curator_dask.utils.redact/v1"
_TOKEN = re.compile(r"^<redacted sha256:[0-9a-f]+>$")
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_EXACT = frozenset({
    "secret", "secrets", "password", "passwords", "passwd", "pwd", "passphrase", "credential",
    "credentials", "creds", "auth", "authorization", "cookie", "cookies", "sig", "signature",
    "sas", "connstr", "connectionstring",
})
_INSIDE = ("secret", "passw", "passphrase", "credential")
_PAIRS = frozenset({("connection", "string"), ("conn", "str")})
# A ``key`` or ``token`` name ending in one of these words names something about a key, not
# a key: ``key_prefix`` (the plan's Dask key prefix), ``key_field``, ``token_count``.
_ABOUT = frozenset({
    "prefix", "suffix", "field", "fields", "column", "columns", "name", "names", "count",
    "length", "size", "type", "index", "file", "filename", "path",
})
# Fields curator_dask itself writes whose names match the rule but hold no secret:
# ``run_key_token`` (job_summary.json) is the run token in Dask keys, which `stop --force` reads.
_OWN = frozenset({"run_key_token"})
# ``name=value`` / ``name: value`` in text. The value is read only after a secret name, and
# the scan goes on after a name that is not one (``headers: Authorization: Bearer …`` finds
# ``Authorization``). A name starts only where a word starts and every part is bounded, so a
# long string costs linear time (no backtracking blow-up).
_ASSIGNMENT = re.compile(
    r"(?<![\w.-])(?P<name>[A-Za-z_][\w.-]{0,63})[\"']?[ \t]{0,8}[:=][ \t]{0,8}")
_VALUE = re.compile(  # quotes may be escaped once (JSON inside a JSON string)
    r"(?P<token><redacted sha256:[0-9a-f]{1,64}>)|\\?\"(?P<dq>[^\"\\\n]{1,4096})\\?\""
    r"|\\?'(?P<sq>[^'\\\n]{1,4096})\\?'"
    r"|(?P<bare>(?:(?:Bearer|Basic|Token|Digest)[ \t]+)?[^\s\"'\\,;&{}()\[\]]{1,4096})")
_FOUND: contextvars.ContextVar[set[str] | None] = contextvars.ContextVar(
    "curator_dask_redact_found", default=None)


def is_secret_name(name: object) -> bool:
    """Whether a value under ``name`` is treated as a credential (the rule: module docstring).

    Example:
        >>> [is_secret_name(n) for n in ("account_key", "AccessKeyId", "sas_token",
        ...                              "connectionString", "keep_outputs", "keys",
        ...                              "run_key_token")]
        [True, True, True, True, False, False, False]
    """
    return isinstance(name, str) and name not in _OWN and _secret_words(name)


@functools.lru_cache(maxsize=4096)
def _secret_words(name: str) -> bool:
    words = [w.lower() for w in _WORD.findall(name)]
    if any(w in _EXACT or any(s in w for s in _INSIDE) for w in words) or any(
            pair in _PAIRS for pair in zip(words, words[1:], strict=False)):
        return True
    return any(w.endswith(("key", "token")) for w in words) and words[-1] not in _ABOUT


@functools.lru_cache(maxsize=4096)
def _digest(data: bytes) -> str:
    return hashlib.pbkdf2_hmac("sha256", data, _SALT, ROUNDS).hex()[:12]


def redacted(value: Any) -> str:
    """The token that replaces one value: the same value always gives the same token.

    Example:
        >>> redacted("s3cr3t") == redacted("s3cr3t") != redacted("s3cr3T")
        True
        >>> redacted("s3cr3t")[:17]
        '<redacted sha256:'
    """
    if isinstance(value, str):
        data = value.encode("utf-8", "surrogatepass")
        found = _FOUND.get()
        if found is not None and len(value) >= MIN_SCRUBBED:
            found.add(value)
    elif isinstance(value, bytes | bytearray):
        data = bytes(value)
    else:  # a number (or anything else): typed, so 123 and "123" differ
        data = ("json:" + json.dumps(value, sort_keys=True, default=str)).encode()
    return f"<redacted sha256:{_digest(data)}>"


def redact_secret(value: Any) -> Any:
    """A value held under a secret name: each of its leaves redacted (keys, ``None`` and
    booleans kept; tokens already there kept, so redacting twice changes nothing)."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str) and _TOKEN.match(value):
        return value
    if isinstance(value, Mapping):
        return {k: redact_secret(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [redact_secret(v) for v in value]
    return redacted(value)


def _scrub_assignments(text: str) -> str:
    if "=" not in text and ":" not in text:
        return text
    out, pos = [], 0
    while (m := _ASSIGNMENT.search(text, pos)) is not None:
        value = _VALUE.match(text, m.end()) if is_secret_name(m["name"]) else None
        group = (
            None if value is None
            else next(g for g in ("token", "dq", "sq", "bare") if value[g] is not None)
        )
        if value is None or group is None or group == "token" or _TOKEN.match(value[group]):
            out.append(text[pos:m.end()])
            pos = m.end()  # go on from the value: it may hold pairs of its own
            continue
        out.append(text[pos:value.start(group)] + redacted(value[group]))
        pos = value.end(group)
    out.append(text[pos:])
    return "".join(out)


def scrub_text(text: str, secrets: Collection[str] = ()) -> str:
    """Free text without the job's secret values and without ``secret_name=value`` pairs.

    Example:
        >>> scrub_text("open failed: {'account_key': 'abc123', 'anon': False}")[:39]
        "open failed: {'account_key': '<redacted"
        >>> "hunter22" in scrub_text("login as bob with hunter22", secrets={"hunter22"})
        False
    """
    for secret in sorted((s for s in secrets if len(s) >= MIN_SCRUBBED), key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, redacted(secret))
    return _scrub_assignments(text)


def redact(value: Any, secrets: Collection[str] = ()) -> Any:
    """What a job writes, without credentials: the one function every writer uses.

    Mappings are walked at any depth; a value under a secret name is redacted whole
    (:func:`redact_secret`); every other string loses its ``secret_name=value`` pairs, and a
    string under a free-text name (:data:`FREE_TEXT`) also every value in ``secrets``. Returns
    a new structure (lists for tuples and sets); other objects are returned as they are.

    Example:
        >>> redact({"storage_options": {"account_key": "abc123", "anon": False},
        ...         "error": "denied for abc123"}, secrets={"abc123"}) == {
        ...     "storage_options": {"account_key": redacted("abc123"), "anon": False},
        ...     "error": f"denied for {redacted('abc123')}"}
        True
    """
    return _redact(value, secrets, free=False)


def _redact(value: Any, secrets: Collection[str], free: bool) -> Any:
    if isinstance(value, str):
        return scrub_text(value, secrets if free else ())
    if isinstance(value, Mapping):
        return {k: redact_secret(v) if is_secret_name(k)
                else _redact(v, secrets, free or k in FREE_TEXT) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_redact(v, secrets, free) for v in value]
    return value


@contextlib.contextmanager
def collect_secrets() -> Iterator[set[str]]:
    """Collect the string values redacted inside the block (those of at least
    :data:`MIN_SCRUBBED` characters), so free text written later can be scrubbed of them.

    Example:
        >>> with collect_secrets() as found:
        ...     _ = redact({"password": "hunter22", "user": "bob"})
        >>> found
        {'hunter22'}
    """
    found: set[str] = set()
    reset = _FOUND.set(found)
    try:
        yield found
    finally:
        _FOUND.reset(reset)


class ScrubbingFormatter(logging.Formatter):
    """A log formatter whose lines (message and traceback) go through :func:`scrub_text`.

    Example:
        >>> formatter = ScrubbingFormatter("%(message)s", secrets={"hunter22"})
        >>> record = logging.LogRecord("x", logging.INFO, "", 0, "pw hunter22", None, None)
        >>> formatter.format(record).startswith("pw <redacted sha256:")
        True
    """

    def __init__(self, fmt: str | None = None, *, secrets: Collection[str] = ()) -> None:
        super().__init__(fmt)
        self.secrets = secrets  # the job's set: values added later are scrubbed too

    def format(self, record: logging.LogRecord) -> str:
        return scrub_text(super().format(record), self.secrets)
