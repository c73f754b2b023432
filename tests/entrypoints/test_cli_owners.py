"""`kiqbeat schedules put|update|remove --force-owner`: the way out for a definition whose
`source` names no document the store knows; a known document's schedule warns."""

from __future__ import annotations

import json
from pathlib import Path

import redis

from tests.support.cli import Kiqbeat

HAND_WRITTEN = json.dumps({"cron": "* * * * *", "class": "HandWorker", "source": "/etc/x"})
DEFINITION = '{"cron": "0 9 * * *", "class": "DigestWorker"}'


def test_remove_refuses_a_hand_written_source_naming_the_flag_then_removes_with_it(
    kiqbeat: Kiqbeat, redis_client: redis.Redis,
) -> None:
    redis_client.hset("kiqbeat:schedules", "x", HAND_WRITTEN)
    refused = kiqbeat("schedules", "remove", "x")
    assert refused.code == 1
    assert "knows no document of that name" in refused.err
    assert "kiqbeat schedules remove NAME --force-owner" in refused.err
    assert "Traceback" not in refused.err
    assert redis_client.hexists("kiqbeat:schedules", "x")
    removed = kiqbeat("schedules", "remove", "x", "--force-owner")
    assert removed.code == 0, removed.err
    assert "removed 'x'" in removed.out and removed.err == ""
    assert not redis_client.hexists("kiqbeat:schedules", "x")


def test_put_with_the_flag_replaces_a_hand_written_source(
    kiqbeat: Kiqbeat, redis_client: redis.Redis,
) -> None:
    redis_client.hset("kiqbeat:schedules", "x", HAND_WRITTEN)
    assert kiqbeat("schedules", "put", "x", "--json-definition", DEFINITION).code == 1
    done = kiqbeat("schedules", "put", "x", "--json-definition", DEFINITION, "--force-owner")
    assert done.code == 0, done.err
    assert json.loads(redis_client.hget("kiqbeat:schedules", "x") or "") == json.loads(
        DEFINITION)


def test_forcing_a_known_documents_schedule_warns_that_the_document_still_lists_it(
    kiqbeat: Kiqbeat, redis_client: redis.Redis, tmp_path: Path,
) -> None:
    document = tmp_path / "schedule.yaml"
    document.write_text("schedules:\n  x: {cron: '* * * * *', class: DocX}\n")
    assert kiqbeat("run-once", "--config", str(document)).code == 0
    refused = kiqbeat("schedules", "remove", "x")
    assert refused.code == 1 and f"belongs to {document}; remove it there" in refused.err
    forced = kiqbeat("schedules", "remove", "x", "--force-owner")
    assert forced.code == 0, forced.err
    assert "which the store knows" in forced.err and "still lists it" in forced.err
    assert not redis_client.hexists("kiqbeat:schedules", "x")
