"""Where the schedule document and the Redis URL come from: files, S3, SSM, AppConfig, Secrets.

A `Sources` object owns what warm Lambda invocations and the `run` loop reuse: remote
values for `max_age_s`, so they do not call AWS every minute; files until they change;
the AWS clients. Once that age has passed a refresh must succeed:
a failed refresh raises ConfigError instead of running on an arbitrarily old document.
A stale schedule table would keep pushing jobs someone has removed, and would do so
silently; a failed invocation instead fires the Errors alarm, and the next successful one
catches up every tick inside `missed_jobs_window`, so failing loudly loses nothing.

boto3 and Powertools Parameters cost ~280 ms to import, so they are imported only when a
remote source is in use: a file source and a plain Redis URL never load them.

Every AWS call is bounded. Inside `Sources.until(deadline)` (the Lambda handler's invocation
deadline) a call gets botocore timeouts and attempts small enough to end by the deadline,
or is not started at all; outside, the defaults below apply.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from kiqbeat.core.schedule import Config
from kiqbeat.document import load_config_text
from kiqbeat.document.aws import (
    BotoConfig,
    CallLimits,
    aws_errors,
    boto_config,
    call_limits,
)
from kiqbeat.document.imported import ImportOptions
from kiqbeat.document.read import MAX_DOCUMENT_BYTES, read_file
from kiqbeat.errors import ConfigError

DEFAULT_MAX_AGE_S = 60.0
SECRET_VARIABLE = "KIQBEAT_REDIS_SECRET"
REMOTE_PREFIXES = ("s3://", "ssm:", "appconfig:")
_REDIS_SCHEMES = ("redis://", "rediss://", "redis+sentinel://", "rediss+sentinel://", "unix://")


def is_remote(source: str) -> bool:
    """True when `source` names an AWS location rather than a file."""
    return source.startswith(REMOTE_PREFIXES)


@dataclass
class _Entry:
    fetched_at_s: float  # time.monotonic() of the fetch
    value: Any = field(repr=False)  # a secret's Redis URL holds its password


@dataclass(frozen=True)
class DocumentBytes:
    """A schedule document as read, before anything parses it: its bytes and their SHA-256
    (what a cold invocation compares with the record of the document last applied)."""

    source: str
    data: bytes = field(repr=False)
    digest: str


def document_bytes(source: str, data: bytes) -> DocumentBytes:
    """A document's bytes with their digest."""
    return DocumentBytes(source, data, hashlib.sha256(data).hexdigest())


class Sources:
    """Schedule documents and Redis URLs, with the caches warm invocations reuse."""

    def __init__(self, max_age_s: float = DEFAULT_MAX_AGE_S) -> None:
        self.max_age_s = max_age_s
        self._lock = threading.Lock()
        self._documents: dict[str, _Entry] = {}
        self._secrets: dict[str, _Entry] = {}
        self._files: dict[str, tuple[tuple[int, int], DocumentBytes]] = {}
        # The last parse of each source: (digest of its bytes, options, config).
        self._parsed: dict[str, tuple[str, ImportOptions | None, Config]] = {}
        self._aws: dict[tuple[str, CallLimits], Any] = {}  # boto3 clients, Powertools providers
        self._deadline: float | None = None  # time.monotonic() instant AWS calls must end by

    @contextmanager
    def until(self, deadline: float | None) -> Iterator[None]:
        """AWS calls made inside end by `deadline` (a time.monotonic() instant) or do not start.

        A call that cannot start raises ConfigError naming the source, as a failed one does.
        """
        previous, self._deadline = self._deadline, deadline
        try:
            yield
        finally:
            self._deadline = previous

    def _limits(self, source: str, calls: int = 1) -> CallLimits:
        """The limits for the next `calls` AWS calls, given the deadline."""
        left_s = None if self._deadline is None else self._deadline - time.monotonic()
        limits = call_limits(left_s, calls)
        if limits is None:
            raise ConfigError(f"not calling AWS with {max(0.0, left_s or 0.0):.1f} s left before "
                              "the invocation deadline; the next invocation tries again",
                              source=source)
        return limits

    def load_config(self, source: str, *, max_age_s: float | None = None,
                    options: ImportOptions | None = None,
                    now: datetime | None = None) -> Config:
        """The validated document from a file, s3://bucket/key, ssm:NAME or appconfig:A/E/P
        (`options`: how to import another tool's file).

        Its bytes come from `read_document`; they are parsed again only when they (or the
        options) changed since the last parse of this source. Invocations pass no `now`;
        with one (`kiqbeat validate`, `next`, `schedules import`), another tool's file is
        also compared with it for daylight saving in the 12 months after `now`
        (`document.parse_config`), parsed afresh and not cached.
        """
        raw = self.read_document(source, max_age_s=max_age_s)
        if now is not None:
            return load_config_text(raw.data, source=raw.source, options=options, now=now)
        with self._lock:
            parsed = self._parsed.get(raw.source)
        if parsed is not None and parsed[:2] == (raw.digest, options):
            return parsed[2]
        config = load_config_text(raw.data, source=raw.source, options=options)
        with self._lock:
            self._parsed[raw.source] = (raw.digest, options, config)
        return config

    def parsed(self, source: str) -> tuple[str, Config] | None:
        """The digest of the bytes `load_config` last parsed for `source`, and their config
        (None before any parse)."""
        with self._lock:
            parsed = self._parsed.get(source.strip())
        return None if parsed is None else (parsed[0], parsed[2])

    def read_document(self, source: str, *, max_age_s: float | None = None) -> DocumentBytes:
        """The bytes of a file, s3://bucket/key, ssm:NAME or appconfig:A/E/P, unparsed.

        A file is read again only when its size or modification time changes; a remote
        document is fetched again after `max_age_s` seconds (default: the sources').
        """
        source = source.strip()
        if is_remote(source):
            return self._remote_bytes(source, self._age(max_age_s))
        scheme = re.match(r"([A-Za-z][A-Za-z0-9+.-]*):(//)?", source)
        if scheme and (scheme.group(2) or len(scheme.group(1)) > 1) and not Path(
                source).exists():
            raise ConfigError(f"unsupported schedule source scheme {scheme.group(1)!r}; use a "
                              "file path, s3://BUCKET/KEY, ssm:/PARAMETER or "
                              "appconfig:APP/ENV/PROFILE", source=source)
        return self._file_bytes(source)

    def _age(self, max_age_s: float | None) -> float:
        return self.max_age_s if max_age_s is None else max_age_s

    def _file_bytes(self, path: str) -> DocumentBytes:
        try:
            stat = Path(path).stat()
        except FileNotFoundError:
            raise ConfigError("schedule file not found", source=path) from None
        except OSError as exc:
            raise ConfigError(f"cannot read the schedule file: {exc.strerror or exc}",
                              source=path) from exc
        stamp = (stat.st_mtime_ns, stat.st_size)
        with self._lock:
            cached = self._files.get(path)
        if cached and cached[0] == stamp:
            return cached[1]
        raw = document_bytes(path, read_file(path))
        with self._lock:
            self._files[path] = (stamp, raw)
        return raw

    def _remote_bytes(self, source: str, max_age_s: float) -> DocumentBytes:
        with self._lock:
            entry = self._documents.get(source)
        if entry and time.monotonic() - entry.fetched_at_s < max_age_s:
            return entry.value  # type: ignore[no-any-return]
        raw = document_bytes(source, self.fetch_document(source))
        with self._lock:
            self._documents[source] = _Entry(time.monotonic(), raw)
        return raw

    def fetch_document(self, source: str) -> bytes:
        """The bytes of a remote schedule document, fetched now (no cache); ConfigError."""
        fetchers: dict[str, Callable[[str, CallLimits], bytes | str]] = {
            "s3://": self._fetch_s3, "ssm:": self._fetch_ssm,
            "appconfig:": self._fetch_appconfig}
        prefix = next(p for p in fetchers if source.startswith(p))
        # AppConfig may take two calls: a new session, then the configuration.
        limits = self._limits(source, calls=2 if prefix == "appconfig:" else 1)
        with aws_errors(source):
            raw = fetchers[prefix](source[len(prefix):], limits)
        # Decoded (BOM, UTF-8) by the document reader, as a file's bytes are.
        return raw if isinstance(raw, bytes) else raw.encode("utf-8", "surrogatepass")

    def _client(self, name: str, limits: CallLimits, make: Callable[[BotoConfig], Any]) -> Any:
        """The client or provider `make` builds for these limits, built once and kept."""
        with self._lock:
            if (name, limits) not in self._aws:
                self._aws[name, limits] = make(boto_config(limits))
            return self._aws[name, limits]

    def _fetch_s3(self, location: str, limits: CallLimits) -> bytes:
        bucket, _, key = location.partition("/")
        if not bucket or not key:
            raise ConfigError("expected s3://BUCKET/KEY", source=f"s3://{location}")

        def make(config: BotoConfig) -> Any:
            import boto3  # type: ignore[import-untyped, unused-ignore]

            return boto3.session.Session().client("s3", config=config)

        body = self._client("s3", limits, make).get_object(Bucket=bucket, Key=key)["Body"]
        # At most one byte past the limit: the reader refuses it by size, and a huge object
        # never fills the function's memory.
        return body.read(MAX_DOCUMENT_BYTES + 1)  # type: ignore[no-any-return]

    def _fetch_ssm(self, name: str, limits: CallLimits) -> str:
        if not name:
            raise ConfigError("expected ssm:/PARAMETER/NAME", source="ssm:")

        def make(config: BotoConfig) -> Any:
            from aws_lambda_powertools.utilities.parameters import SSMProvider

            return SSMProvider(boto_config=config)

        # force_fetch: kiqbeat keeps its own cache (of the parsed document).
        return str(self._client("ssm", limits, make).get(name, decrypt=True, force_fetch=True))

    def _fetch_appconfig(self, location: str, limits: CallLimits) -> bytes:
        parts = location.split("/")
        if len(parts) != 3 or not all(parts):
            raise ConfigError("expected appconfig:APPLICATION/ENVIRONMENT/PROFILE",
                              source=f"appconfig:{location}")
        application, environment, profile = parts

        def make(config: BotoConfig) -> Any:
            from aws_lambda_powertools.utilities.parameters import AppConfigProvider

            return AppConfigProvider(environment=environment, application=application,
                                     boto_config=config)

        # The provider holds the AppConfig session token, so it must live across invocations;
        # after a failure it is dropped, so the next call starts a fresh session.
        key = f"appconfig:{application}/{environment}"
        provider = self._client(key, limits, make)
        try:
            return provider.get(profile, force_fetch=True)  # type: ignore[no-any-return]
        except Exception:
            with self._lock:
                self._aws.pop((key, limits), None)
            raise

    def redis_url(self, environ: Mapping[str, str], *,
                  max_age_s: float | None = None) -> str:
        """The Redis URL: KIQBEAT_REDIS_URL, KIQBEAT_REDIS_SECRET (Secrets Manager), REDIS_URL.

        Empty variables count as unset. The secret (SecretString) holds one of:
        a Redis URL; JSON `{"url": ...}`; JSON `{"host", "port", "username", "password",
        "tls", "db"}` (tls defaults to true: ElastiCache requires TLS for AUTH); or only a
        password (plain text, or JSON with `password` and optionally `username`), which is
        then put into KIQBEAT_REDIS_URL. REDIS_URL is a last resort, since it often names the
        application's own Redis rather than the one its Sidekiq uses.
        """
        url = environ.get("KIQBEAT_REDIS_URL") or ""
        secret_id = environ.get(SECRET_VARIABLE) or ""
        if secret_id:
            return self._url_from_secret(secret_id, url, self._age(max_age_s))
        url = url or environ.get("REDIS_URL") or ""
        if not url:
            raise ConfigError("no Redis URL: set KIQBEAT_REDIS_URL (or REDIS_URL), or name a "
                              "Secrets Manager secret in KIQBEAT_REDIS_SECRET")
        return url

    def _url_from_secret(self, secret_id: str, base_url: str, max_age_s: float) -> str:
        source = f"secret {secret_id}"
        with self._lock:
            entry = self._secrets.get(secret_id)
        if entry and time.monotonic() - entry.fetched_at_s < max_age_s:
            text = str(entry.value)
        else:
            def make(config: BotoConfig) -> Any:
                from aws_lambda_powertools.utilities.parameters import SecretsProvider

                return SecretsProvider(boto_config=config)

            limits = self._limits(source)
            with aws_errors(source):
                value = self._client("secretsmanager", limits, make).get(secret_id,
                                                                         force_fetch=True)
            text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
            with self._lock:
                self._secrets[secret_id] = _Entry(time.monotonic(), text)
        return _secret_to_url(text.strip(), base_url, source)


def _secret_to_url(text: str, base_url: str, source: str) -> str:
    # Messages here never quote the secret's content.
    fields: dict[str, Any] = {}
    if text.startswith(("{", "[")):
        try:
            fields = json.loads(text)
        except ValueError:
            raise ConfigError("the secret looks like JSON but does not parse",
                              source=source) from None
        if not isinstance(fields, dict):
            raise ConfigError("the secret's JSON is not an object", source=source)
    address = text if text.startswith(_REDIS_SCHEMES) else fields.get("url") or fields.get("host")
    if address and base_url:
        raise ConfigError("both KIQBEAT_REDIS_URL and the secret give the Redis address; keep "
                          "the address in one place (the secret may hold only the password)",
                          source=source)
    if text.startswith(_REDIS_SCHEMES):
        return text
    if "url" in fields:
        if not str(fields["url"]).startswith(_REDIS_SCHEMES):
            raise ConfigError("the secret's 'url' is not a redis://, rediss:// or "
                              "redis+sentinel:// URL", source=source)
        return str(fields["url"])
    if "host" in fields:
        return _url_from_fields(fields, source)
    password = fields.get("password") if fields else text
    if not password or "://" in text:
        raise ConfigError("the secret is neither a Redis URL, nor JSON with 'url', 'host' or "
                          "'password', nor a plain password", source=source)
    if not base_url:
        raise ConfigError("the secret holds only a password: set KIQBEAT_REDIS_URL to the "
                          "address without it (e.g. rediss://kiqbeat@HOST:6379/0)", source=source)
    return _with_credentials(base_url, fields.get("username"), str(password), source)


def _url_from_fields(fields: Mapping[str, Any], source: str) -> str:
    tls = fields.get("tls", True)
    if not isinstance(tls, bool):
        raise ConfigError("the secret's 'tls' must be true or false", source=source)
    try:
        port = int(fields.get("port", 6379))
        db = int(fields.get("db", 0))
    except (TypeError, ValueError):
        raise ConfigError("the secret's 'port' and 'db' must be integers", source=source) from None
    url = f"{'rediss' if tls else 'redis'}://{fields['host']}:{port}/{db}"
    if fields.get("password"):
        return _with_credentials(url, fields.get("username"), str(fields["password"]), source)
    return url


def _with_credentials(url: str, username: Any, password: str, source: str) -> str:
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise ConfigError("KIQBEAT_REDIS_URL is not a URL", source=source)
    netloc, slash, path = rest.partition("/")
    userinfo, at, hostport = netloc.rpartition("@")
    if ":" in userinfo:
        raise ConfigError("KIQBEAT_REDIS_URL already holds a password; remove it when the "
                          "password comes from the secret", source=source)
    user = quote(str(username), safe="") if username else userinfo
    return f"{scheme}://{user}:{quote(password, safe='')}@{hostport if at else netloc}{slash}{path}"


