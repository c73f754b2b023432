"""A document's fingerprint: what a cold invocation compares instead of parsing the document.

A CronJob pod or a cold Lambda is a new process every minute. Parsing and validating a
document of 100,000 schedules costs seconds, so an invocation that applied a document records,
beside the digest of the definitions it applied (`keys.documents`), an `Applied` record
(`keys.document_bytes_field`): the fingerprint of the bytes it parsed and what an invocation needs
of the document besides its schedules (namespace, window, durability). A new process reads
the bytes, computes the fingerprint and, when the record holds it and the store still holds
those definitions as applied, plans from the store without parsing, validating or checking
neighbours: the store's definitions are the document's, and each due one is read as any
stored definition is.

The rule (docs/store.md, "Cold invocations"): the fingerprint covers everything that can
change what the bytes mean — the bytes, the source's name, the overrides (window, namespace)
and kiqbeat's version with the version of the rules below (`RULES`). Anything else makes the
invocation parse: a document with `sidekiq_scheduler_ui` (its tab needs the parsed schedules)
is never recorded. The record lives under the document's namespace, which is not known
before parsing: it is looked for under KIQBEAT_NAMESPACE when set, else under the namespace a
top-level `namespace:` line of the bytes names (`namespace_guess`, default ""), and trusted
only when the record itself says that namespace, so a wrong guess costs a parse, never a
wrong store.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from kiqbeat import __version__
from kiqbeat.core.schedule import Config

# Raise when the meaning of a document's bytes changes without a new version (how documents
# are read, validated or stored): every recorded fingerprint then stops matching, and the
# next invocation parses and applies the document again.
RULES = 1

_YAML_NAMESPACE = re.compile(
    rb"""^namespace:[ \t]*(?:"([^"\\\n]*)"|'([^'\n]*)'|([^\s#"'{}\[\],]*))[ \t]*(?:#.*)?\r?$""",
    re.MULTILINE)
_JSON_NAMESPACE = re.compile(rb'"namespace"\s*:\s*"([^"\\\n]*)"')


def fingerprint(digest: str, source: str, *, window_s: float | None,
                namespace: str | None) -> str:
    """The fingerprint of a document's bytes (`digest`: their SHA-256) read from `source`
    with these overrides (None: not overridden) by this version of kiqbeat."""
    meaning = json.dumps([__version__, RULES, source, window_s, namespace, digest])
    return hashlib.sha256(meaning.encode()).hexdigest()


def namespace_guess(data: bytes) -> str:
    """The namespace a document's bytes most likely set ("" when none is seen): a guess,
    confirmed by the record found under it."""
    found = _YAML_NAMESPACE.search(data) or _JSON_NAMESPACE.search(data)
    if found is None:
        return ""
    value = next((g for g in found.groups() if g is not None), b"")
    return value.decode("utf-8", "replace")


@dataclass(frozen=True)
class Applied:
    """The record of a document applied from bytes of fingerprint `mark`: the digest of the
    definitions it applied, and the document's settings an invocation needs."""

    mark: str
    definitions_digest: str
    namespace: str
    window_s: float
    time_zone: str = "UTC"
    wait_replicas: int = 0
    wait_timeout_s: float = 1.0

    @classmethod
    def of(cls, config: Config, mark: str, definitions_digest: str) -> Applied:
        """The record of `config`, parsed from bytes of fingerprint `mark`."""
        return cls(mark, definitions_digest, config.namespace, config.missed_jobs_window_s,
                   config.time_zone, config.wait_replicas, config.wait_timeout_s)

    def encode(self) -> str:
        """The stored form (JSON)."""
        return json.dumps({"mark": self.mark, "definitions": self.definitions_digest,
                           "namespace": self.namespace, "window_s": self.window_s,
                           "time_zone": self.time_zone, "wait_replicas": self.wait_replicas,
                           "wait_timeout_s": self.wait_timeout_s}, separators=(",", ":"))

    @classmethod
    def decode(cls, stored: bytes | str | None) -> Applied | None:
        """The record in its stored form; None when absent or not one (then: parse)."""
        if stored is None:
            return None
        try:
            fields: Any = json.loads(stored)
            return cls(str(fields["mark"]), str(fields["definitions"]),
                       str(fields["namespace"]), float(fields["window_s"]),
                       str(fields["time_zone"]), int(fields["wait_replicas"]),
                       float(fields["wait_timeout_s"]))
        except (ValueError, TypeError, KeyError, RecursionError):
            return None

    def config(self) -> Config:
        """The document's settings as a config without schedules and without a source, so
        that nothing can take it for the document itself (its schedules are the store's)."""
        return Config(schedules=(), time_zone=self.time_zone,
                      missed_jobs_window_s=self.window_s, namespace=self.namespace,
                      wait_replicas=self.wait_replicas, wait_timeout_s=self.wait_timeout_s)
