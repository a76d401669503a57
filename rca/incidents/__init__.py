"""The incident lifecycle room: the one owner of an incident's life, so that a new trigger or
channel (fleet incidents, Slack actions) changes it in one place.

Intake, the scan, the backtest and the API call it; none of them writes incident rows itself.
It imports only the store and the domain (pyproject.toml's contracts hold it there).

- `opened.open_incidents`: the one place an incident is opened (an Alertmanager group's, a warning's).
- `alerts.record`: a notification joins (or opens) its group's incident, or the early warning's.
- `status.resolve`: the one place an incident resolves ("unless another alert still fires").
- `queue.queue`: the one place an investigation is queued, with its one guard.
- `notices`: the Slack notice owed about an incident (the bookkeeping; notify does the sending).
- `search.reindex`: the incident's search digest brought up to date.
- `feedback.record`: an engineer's verdict on the incident's causes.
- `warnings`: the scan's early-warning incidents (open, fire, clear) on top of the above.
- `locks`: the order in which all of these lock rows.
"""
