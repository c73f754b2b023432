"""Alerts (DESIGN §12): a schedule's expectations judged by the invocations, each incident
decided once, and its events delivered until acknowledged.

- `events`: an alert event and its forms (the webhook's JSON body, a Slack `text` line, the
  HMAC signature) — pure;
- `incidents`: the decision step an invocation runs after its pushes (incidents.lua: the
  deadlines due and the health that changed, one atomic step), and the reads of what it left
  (open incidents, the delivery backlog);
- `sinks`: where events go (a webhook, an SNS topic), each a consumer group of the outbox;
- `delivery`: the outbox drained into the sinks within a short budget, retried by the next
  invocation;
- `step`: the invocation's alert step, which strings the above together, and the names
  whose health a fold (outcomes/) marked for the decision to judge;
- `gauges`: what Prometheus sees of the schedules with expectations.
"""
