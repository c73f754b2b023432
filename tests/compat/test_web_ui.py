"""Sidekiq's own web UI (Sidekiq::Web on Debian's puma) lists kiqbeat's jobs with a sane latency."""

from __future__ import annotations

import html
import re

from .harness import Sidekiq, WebUI


def queue_row(page: str, name: str) -> tuple[int, float]:
    """(size, latency) of a queue's row on /queues."""
    row = re.search(
        rf'<a href="/queues/{re.escape(name)}">{re.escape(name)}</a>.*?</td>\s*'
        r"<td>\s*([\d,]+)\s*</td>\s*<td>\s*(-?[\d,.]+)",
        page, re.S)
    assert row, f"queue {name!r} is not listed on /queues"
    return int(row.group(1).replace(",", "")), float(row.group(2).replace(",", ""))


def job_cells(page: str, jid: str) -> tuple[str, str]:
    """The text of the Job and Arguments cells of a job's row on /queues/NAME."""
    row = re.search(rf'<tr title="{jid}">(.*?)</tr>', page, re.S)
    assert row, f"job {jid} is not listed"
    cells = re.findall(r"<td>(.*?)</td>", row.group(1), re.S)
    def text(cell: str) -> str:
        return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", cell)).split())
    return text(cells[1]), text(cells[2])


def test_queues_page_and_queue_page_list_kiqbeats_jobs(sidekiq: Sidekiq, web_ui: WebUI) -> None:
    report, minute = sidekiq.push_one_minute("""
schedules:
  web_report:
    cron: "* * * * *"
    class: RecordingWorker
    queue: web_parked
    args: ["daily", {"region": "eu"}]
  web_activejob:
    cron: "* * * * *"
    class: ReportJob
    active_job: legacy
    queue: web_parked
    args: [9]
""")
    assert report.pushed == 2
    now_s = sidekiq.redis_now().timestamp()

    size, latency = queue_row(web_ui.get("/queues"), "web_parked")
    assert size == 2
    # The oldest job's age: pushed at the minute boundary, so between 0 and a minute or so.
    assert 0 <= latency < 120
    assert abs(latency - (now_s - minute.timestamp())) < 5

    page = web_ui.get("/queues/web_parked")
    jobs = {j.schedule: j.jid for j in report.jobs}
    job_cell, args_cell = job_cells(page, jobs["web_report"])
    assert job_cell == "RecordingWorker"
    assert '"daily"' in args_cell and '"region"' in args_cell and '"eu"' in args_cell
    # The ActiveJob envelope is shown as the wrapped class with its own arguments.
    job_cell, args_cell = job_cells(page, jobs["web_activejob"])
    assert job_cell == "ReportJob"
    assert args_cell == "9"
