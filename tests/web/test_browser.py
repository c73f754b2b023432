"""The console driven in a real browser: Debian's headless Chromium through Playwright, against
a real console over a real Redis holding 100,000 schedules.

Each step is checked outside the browser: `kiqbeat schedules get` for a pause, the queue in
Redis for a manual run, distinct jids in Redis for a backfill. Screenshots of the main
pages go to the test's folder, and to docs/ with KIQBEAT_SCREENSHOTS=docs.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import redis

from kiqbeat.core.payload import jid
from kiqbeat.engine import Engine
from kiqbeat.redis import keys
from kiqbeat.settings import Settings
from tests.support.cli import kiqbeat_cli
from tests.support.clock import minute_floor, redis_now
from tests.support.console import OPERATOR_TOKEN, Served
from tests.support.engine import config, pushed_jobs
from tests.support.tools import missing

playwright = pytest.importorskip("playwright.sync_api")

CHROMIUM = "/usr/bin/chromium"
SCHEDULES = 100_000
DOCS = Path(__file__).resolve().parents[2] / "docs"
OUTAGE = """
missed_jobs_window: 1h
schedules:
  billing/minutely-sync: {cron: "* * * * *", class: BillingSyncWorker, queue: billing}
"""


def name_of(n: int) -> str:
    return f"tenant-{n // 100:04}/report-{n % 100:02}"


def load(client: redis.Redis) -> None:
    """100,000 definitions written as another language would (docs/store.md), pipelined."""
    zones = ("UTC", "Europe/Paris", "America/New_York", "Asia/Kolkata")
    for first in range(0, SCHEDULES, 5000):
        pipe = client.pipeline(transaction=False)
        chunk = range(first, min(first + 5000, SCHEDULES))
        pipe.hset(keys.definitions(""), mapping={name_of(n): json.dumps({
            "cron": f"{n % 60} {n % 24} * * *", "tz": zones[n % 4], "class": "ReportWorker",
            "args": [n], "queue": "reports"}) for n in chunk})
        pipe.zadd(keys.due(""), dict.fromkeys((name_of(n) for n in chunk), 0))
        pipe.zadd(keys.names(""), dict.fromkeys((name_of(n) for n in chunk), 0))
        pipe.execute()


@pytest.fixture
def page(console: Served) -> Iterator[object]:
    if not Path(CHROMIUM).exists():
        missing(f"{CHROMIUM} is missing (scripts/setup installs Debian's chromium)")
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        context = browser.new_context(viewport={"width": 1400, "height": 900})
        yield context.new_page()
        context.close()
        browser.close()


def shot(page: object, tmp_path: Path, name: str) -> None:
    file = tmp_path / f"console-{name}.png"
    page.screenshot(path=str(file), full_page=False)  # type: ignore[attr-defined]
    if os.environ.get("KIQBEAT_SCREENSHOTS") == "docs":
        shutil.copy(file, DOCS / file.name)


@pytest.mark.timeout(300)
def test_an_operator_signs_in_searches_pauses_runs_and_backfills_in_a_real_browser(
    console: Served, page: object, tmp_path: Path
) -> None:
    client = redis.Redis.from_url(console.redis_url)
    cfg = config(OUTAGE)
    t0 = minute_floor(redis_now(client)) - timedelta(hours=5)
    t1 = t0 + timedelta(hours=3)
    engine = Engine(Settings(), client=client)
    engine.run(cfg, now=t0)
    engine.run(cfg, now=t1)  # 120 ticks recorded as missed, the last hour's pushed
    # The 100,000, written with plain commands (docs/store.md's protocol), come after the
    # invocations: the console at that scale is this test's subject; the engine planning them
    # (a minute here on 2 cores) is test_store_protocol's and bench/store.py's. Each is marked
    # for the name index, and listed at once.
    load(client)
    assert client.zcard(keys.names("")) == SCHEDULES
    deadline = time.monotonic() + 120
    with console.api() as api:
        # ... and the history walk, in a pass begun after the invocations, sees their pushes.
        while not api.get("/api/v1/status").json()["recent_pushes"]:
            assert time.monotonic() < deadline, "the recent pushes are missing"
            time.sleep(0.2)
    p = page
    base = console.url

    # Sign in.
    p.goto(base + "/")  # type: ignore[attr-defined]
    assert "/login" in p.url  # type: ignore[attr-defined]
    p.fill("input[name=token]", OPERATOR_TOKEN)  # type: ignore[attr-defined]
    p.click("button[type=submit]")  # type: ignore[attr-defined]
    p.wait_for_selector("section.counts")  # type: ignore[attr-defined]
    assert "100,001" in p.inner_text("section.counts")  # type: ignore[attr-defined]
    shot(p, tmp_path, "overview")

    # Search by prefix.
    p.click("nav >> text=Schedules")  # type: ignore[attr-defined]
    p.fill("input[name=prefix]", "tenant-0420/")  # type: ignore[attr-defined]
    p.click("form.filters button")  # type: ignore[attr-defined]
    links = p.locator("table.schedules tbody tr td:first-child a")  # type: ignore[attr-defined]
    links.first.wait_for()
    names = links.all_inner_texts()
    assert names == [name_of(42000 + n) for n in range(50)]
    shot(p, tmp_path, "schedules")
    p.click("text=Next page")  # type: ignore[attr-defined]
    assert links.all_inner_texts() == [name_of(42000 + n) for n in range(50, 100)]

    # Open one, pause it, and see the command line agree.
    target = name_of(42077)
    p.click(f"text={target}")  # type: ignore[attr-defined]
    p.wait_for_selector("text=Next 20 fire times")  # type: ignore[attr-defined]
    assert p.locator("tr.dst, table tbody tr").count() > 20  # type: ignore[attr-defined]
    shot(p, tmp_path, "schedule")
    p.click("button:has-text('Pause')")  # type: ignore[attr-defined]
    p.wait_for_selector("p.flash:has-text('Paused.')")  # type: ignore[attr-defined]
    got = kiqbeat_cli("schedules", "get", target, "--json", "--redis-url", console.redis_url)
    assert got.returncode == 0 and json.loads(got.stdout)["enabled"] is False

    # Run it now with other args, and find the job in its queue.
    p.fill("input[name=args]", "[7, \"eu\"]")  # type: ignore[attr-defined]
    p.click("button:has-text('Run now')")  # type: ignore[attr-defined]
    p.wait_for_selector("p.flash:has-text('Pushed one job now.')")  # type: ignore[attr-defined]
    queued = [job for j in client.lrange("queue:reports", 0, -1)
              if (job := json.loads(j))["jid"].startswith("manual")]
    assert [(j["class"], j["args"]) for j in queued] == [("ReportWorker", [7, "eu"])]
    assert queued[0]["jid"] in p.inner_text("table:below(h2:has-text('History'))")  # type: ignore[attr-defined]

    # Backfill the recorded range: a dry run's count first, then each tick once.
    p.goto(base + "/schedule?name=billing%2Fminutely-sync")  # type: ignore[attr-defined]
    assert "belongs to the document" in p.inner_text("section.actions")  # type: ignore[attr-defined]
    p.click("text=Backfill…")  # type: ignore[attr-defined]
    p.click("button:has-text('Count the ticks')")  # type: ignore[attr-defined]
    assert p.inner_text("#planned") == "120"  # type: ignore[attr-defined]
    assert len(client.lrange("queue:billing", 0, -1)) == 60  # nothing pushed by the count
    p.click("button:has-text('Push 120 tick(s)')")  # type: ignore[attr-defined]
    assert p.inner_text("#pushed") == "120"  # type: ignore[attr-defined]
    jids = Counter(j["jid"] for j in pushed_jobs(client) if j["class"] == "BillingSyncWorker")
    assert set(jids) == {jid("billing/minutely-sync", t0 + timedelta(minutes=m))
                         for m in range(1, 181)}
    assert max(jids.values()) == 1
    client.close()


def test_a_schedules_page_draws_its_recent_ticks_as_coloured_cells(
        console: Served, page: object, tmp_path: Path) -> None:
    client = redis.Redis.from_url(console.redis_url)
    cfg = config('schedules:\n  strip/demo: {cron: "* * * * *", class: W}\n')
    base_t = minute_floor(redis_now(client)) - timedelta(minutes=12)
    engine = Engine(Settings(), client=client)
    engine.run(cfg, now=base_t + timedelta(seconds=30))
    outcomes = ["succeeded", "succeeded", "failed", "succeeded", "expired", None,
                "succeeded", "failed", "failed", "running"]
    for k in range(1, 11):
        tick = base_t + timedelta(minutes=k)
        engine.run(cfg, now=tick)
        state = outcomes[k - 1]
        if state is None:
            continue  # no report, and its job gone (below): the tick shows as pushed
        entry = {"s": "strip/demo", "t": int(tick.timestamp() * 1000),
                 "j": jid("strip/demo", tick), "e": "started" if state == "running" else state,
                 "a": 1, "at": int(tick.timestamp() * 1000) + 400, "d": 800 + 900 * k}
        if state == "failed":
            entry |= {"x": "Net::ReadTimeout", "m": "upstream slow"}
        client.lpush(keys.outcomes_inbox(""), json.dumps(entry))
    engine.run(cfg, now=base_t + timedelta(minutes=10))  # folds them
    client.delete("queue:default")  # no job waits: the unreported tick's vanished
    # The ticks after the last one pushed up to now's minute are pending: two, or more when
    # the Redis clock passes a minute boundary before the page is drawn.
    def pending_now() -> int:
        return (minute_floor(redis_now(client)) - base_t) // timedelta(minutes=1) - 10

    pending_before = pending_now()
    p = page
    p.goto(console.url + "/")  # type: ignore[attr-defined]
    p.fill("input[name=token]", OPERATOR_TOKEN)  # type: ignore[attr-defined]
    p.click("button[type=submit]")  # type: ignore[attr-defined]
    p.wait_for_selector("section.counts")  # type: ignore[attr-defined]
    p.goto(console.url + "/schedule?name=strip%2Fdemo")  # type: ignore[attr-defined]
    p.wait_for_selector("div.strip")  # type: ignore[attr-defined]
    cells = p.locator("div.strip > span.tick")  # type: ignore[attr-defined]
    classes = [c.split()[-1] for c in cells.evaluate_all("els => els.map(e => e.className)")]
    drawn = ["tick-" + (s or "pushed") for s in outcomes]
    assert classes[:10] == drawn
    assert pending_before >= 2
    assert classes[10:] in [["tick-pending"] * n for n in range(pending_before, pending_now() + 1)]
    colours = cells.evaluate_all("els => els.map(e => getComputedStyle(e).backgroundColor)")
    assert colours[0] != colours[2] != colours[5]  # a picture: each outcome its colour
    assert cells.nth(0).inner_text().strip() == "1.7s"  # 800 + 900 ms
    assert "Net::ReadTimeout: upstream slow" in cells.nth(8).get_attribute("title")
    p.locator("div.strip").screenshot(path=str(tmp_path / "strip.png"))  # type: ignore[attr-defined]
    shot(p, tmp_path, "schedule-strip")
