"""Document sync: a deployment's document applied to the store when it changed, and the
record (fingerprint) of the bytes applied, so a new process meeting them does not parse them.

A changed document is applied as a diff before an invocation pushes (one shard, the first,
applies it for all: the diff is the same for every shard). An invocation that parsed the
document records its fingerprint once (one write, after the push). A new process whose
document's bytes are those last applied does not parse them at all (`Sync.unchanged`,
document/fingerprint.py): the invocation's first round trip reads the record of those
bytes (`Probe`), and the due schedules are planned from their stored definitions; when the
record does not hold, the batch read is dropped and the document is parsed (one more
round trip, only on the invocation that meets a changed document).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kiqbeat.core.instants import to_ms
from kiqbeat.core.report import Report
from kiqbeat.core.schedule import Config, Schedule
from kiqbeat.deployment import Deployment
from kiqbeat.devices import Devices
from kiqbeat.document.fingerprint import Applied, fingerprint, namespace_guess
from kiqbeat.errors import RedisRefusedError, StateError, shown, shown_text
from kiqbeat.redis import keys
from kiqbeat.redis.connection import redis_errors, reply_text
from kiqbeat.redis.documents import applied_digest, document_digest
from kiqbeat.redis.side import RedisSide

# The source a document without a location is stored as (a Config built in a test).
UNNAMED_DOCUMENT = "document"


@dataclass(frozen=True)
class Document:
    """A config's schedules in their stored form, and the digest of them all."""

    source: str
    definitions: dict[str, bytes]
    digest: str
    schedules: dict[str, Schedule]

    @classmethod
    def of(cls, config: Config) -> Document:
        """The document form of a config."""
        from kiqbeat.document.validate import encode_definition  # only with a document

        source = config.source or UNNAMED_DOCUMENT
        definitions = {s.name: encode_definition(s.definition, source)
                       for s in config.schedules}
        return cls(source, definitions, document_digest(definitions),
                   {s.name: s for s in config.schedules})


@dataclass
class Probe:
    """An invocation's look for the record of its document's bytes (document/fingerprint.py):
    `mark` is their fingerprint, `namespace` where the record is looked for (`guessed`: from
    the bytes, not from the settings)."""

    source: str
    mark: str
    namespace: str
    guessed: bool
    confirmed: bool = False  # the record held: the invocation runs on it

    def queue(self, pipe: Any) -> None:
        """Queue the read of the record (and of the digest applied) on the first pipeline."""
        pipe.hmget(keys.documents(self.namespace),
                   [keys.document_bytes_field(self.source), self.source])

    def holds(self, reply: Any) -> Applied | None:
        """The record, when it is of these bytes in this namespace and the store still holds
        the definitions it applied; None otherwise (then the document is parsed)."""
        if isinstance(reply, Exception):
            return None
        record, applied = reply
        found = Applied.decode(record)
        if (found is None or found.mark != self.mark or found.namespace != self.namespace
                or applied is None or reply_text(applied) != found.definitions_digest):
            return None
        self.confirmed = True
        return found


class Sync:
    """The deployment's document as the store holds it: its form, its record, its diff."""

    def __init__(self, deployment: Deployment, devices: Devices) -> None:
        self.deployment, self.devices = deployment, devices
        self.document: Document | None = None  # the current config's

    def document_of(self, config: Config) -> Document | None:
        """The config's document form (None when there is no document)."""
        if not config.source and not config.schedules:
            self.document = None
            return None
        document = self.devices.document(config, Document.of)
        if document is not self.document:  # (a new window: Devices.parse drops its parses)
            self.document = document
        return document

    def document_applied(self, config: Config) -> tuple[Document, bool] | None:
        """The settings' document (None without one), and whether the store holds it as it
        is now (False: the next invocation applies its changes); one round trip."""
        document = self.document_of(config)
        if document is None:
            return None
        side = self.deployment.side(config)
        applied = applied_digest(side.client, side.namespace, document.source)
        return document, applied == document.digest

    def mark_of(self, config: Config) -> str | None:
        """The fingerprint of the bytes `config` was parsed from, when it is the settings'
        document as this deployment read it (and may be recorded: no Recurring Jobs tab)."""
        settings = self.deployment.settings
        source = settings.config_source.strip()
        loaded = self.deployment.loaded(config)
        if not source or config.sidekiq_scheduler_ui or loaded is None:
            return None
        parsed = self.deployment.sources.parsed(source)
        if parsed is None or parsed[1] is not loaded:
            return None
        return fingerprint(parsed[0], source, window_s=settings.window_s,
                           namespace=settings.namespace)

    def unchanged(self, invoke: Callable[[Config, Probe], Report | None]) -> Report | None:
        """An invocation (`invoke`) of the settings' document without parsing it, when a new
        process meets the bytes last applied: no validation, no neighbour check, no document
        warnings (`kiqbeat validate` shows them); the due schedules are read from the store
        as any stored one is. None when the document must be parsed: no document, a parse
        of these very bytes at hand (a warm process plans faster with it), or no record that
        holds (then nothing was written)."""
        settings, sources = self.deployment.settings, self.deployment.sources
        source = settings.config_source
        if not source:
            return None
        raw = sources.read_document(source)
        parsed = sources.parsed(raw.source)
        if parsed is not None and parsed[0] == raw.digest:
            return None
        namespace = settings.namespace
        probe = Probe(raw.source, fingerprint(raw.digest, raw.source, window_s=settings.window_s,
                                              namespace=namespace),
                      namespace_guess(raw.data) if namespace is None else namespace,
                      guessed=namespace is None)
        stand_in = Config(schedules=(), namespace=probe.namespace)  # until the record says
        try:
            return invoke(stand_in, probe)
        except (RedisRefusedError, StateError):
            # A guessed namespace may be one this user may not read, or whose keys are not
            # kiqbeat's: the document says which, once parsed.
            if probe.confirmed or not probe.guessed:
                raise
            self.deployment.recheck()  # the next attempt reports startup warnings again
            return None

    def apply(self, side: RedisSide, document: Document, report: Report,
              deadline: float) -> tuple[list[str], bool]:
        """Apply a changed document to the store; warnings for what it may not change, and
        whether it is applied in full."""
        change = side.apply_document(document.source, document.definitions, document.digest,
                                     deadline=deadline, now_ms=to_ms(report.now))
        report.round_trips += change.round_trips
        report.documents_applied += 1
        if not change.finished:
            return [f"the document {document.source} is applied in part (the invocation's "
                    "deadline came first); the next invocation goes on"], False
        return [f"schedule {shown(name)} of the document was not applied: the store's schedule "
                f"of that name belongs to {shown_text(owner) if owner else 'the API'}; remove "
                "it there, or rename this one"
                for name, owner in change.refused], True

    def record(self, applied: Applied, source: str, recorded: Any, report: Report) -> None:
        """Record that the document's bytes are applied, unless the store says so already:
        new processes then run it without parsing it (one write, after the push)."""
        if isinstance(recorded, Exception) or Applied.decode(recorded) == applied:
            return
        key = keys.documents(applied.namespace)
        client = self.deployment.client
        with redis_errors(client, f"writing {key}"):
            client.hset(key, keys.document_bytes_field(source), applied.encode())
        report.round_trips += 1
